"""The demo's summary table (lab/demo.py) never claims a wall-clock ratio that the arms' unequal
shares of the machine made meaningless, and does not call one unreliable for the load the demo
itself adds."""


def _summary(baseline: tuple[float, float], drop: tuple[float, float], loads) -> dict:
    rows = [
        {
            "name": n,
            "steps": 16,
            "cpu_time_s": c,
            "wall_time_s": w,
            "tokens_per_s": 16 * 4096 / w,
            "eval_loss": 3.0,
            "accuracy": [],
        }
        for n, (c, w) in (("baseline", baseline), ("token-drop", drop))
    ]
    untrained = dict.fromkeys(rows[0], None)  # the source model's row: nothing trained
    rows.insert(0, {**untrained, "name": "MiniLM (not continued)", "accuracy": []})
    measured = baseline[1] / drop[1]
    return {
        "rows": rows,
        "flop_bound_speedup": 1.3,
        "measured_speedup": measured,
        "fraction_of_bound": measured / 1.3,
        "cpu_time_ratio": drop[0] / baseline[0],
        "cpu_speedup": baseline[0] / drop[0],
        "cpu_fraction_of_bound": baseline[0] / drop[0] / 1.3,
        "wall_time_ratio": drop[1] / baseline[1],
        "load_average": loads,
    }


def test_the_demo_marks_a_wall_clock_ratio_unreliable_when_the_arms_shares_differ():
    from tokendrop.lab.demo import format_table, share_moved

    # the baseline waited for a core half of its time: its wall clock doubled, its CPU time did not
    s = _summary((100.0, 200.0), (80.0, 50.0), {"baseline": [6.0, 7.5], "token-drop": [1.0, 1.2]})
    assert share_moved(s["rows"]) == "CPU time / wall time: baseline 0.50, token-drop 1.60"
    table = format_table(s)
    assert (
        "UNRELIABLE, the arms got different shares of the machine (CPU time / wall time: "
        "baseline 0.50, token-drop 1.60); compare by CPU time" in table
    )
    assert "308% of the bound" not in table and "96% of the FLOP-bound" in table
    assert (
        "load average (1 min) before/after each arm: baseline 6.0/7.5; token-drop 1.0/1.2" in table
    )


def test_the_demos_own_load_does_not_make_the_wall_clock_unreliable():
    from tokendrop.lab.demo import format_table

    # an idle machine: the demo's one thread raises the 1-minute load average from 0.2 to 1.0
    # while each arm has a core to itself (tokendrop demo --quick, 2026-11-29)
    s = _summary((80.6, 80.7), (57.4, 57.4), {"baseline": [0.2, 0.9], "token-drop": [0.9, 1.0]})
    table = format_table(s)
    assert "UNRELIABLE" not in table
    assert (
        "wall time 0.711x, tokens/s (tokens / training wall time) 1.406x = 108% of the bound"
        in (table)
    )
    # within SHARE_CHANGE: how well each arm's step uses two threads
    s = _summary((150.0, 80.0), (105.0, 60.0), {"baseline": [2.0, 2.1], "token-drop": [2.1, 2.1]})
    assert "UNRELIABLE" not in format_table(s)


def test_each_demo_preset_names_the_demo_it_belongs_to():
    """The from-scratch demo's presets say so; only the main job's call themselves the README's
    main job (tokendrop demo runs MiniLM's continued pretraining by default)."""
    import inspect
    from pathlib import Path

    from tokendrop.lab import demo

    src = inspect.getsource(demo)
    configs = Path(__file__).resolve().parents[3] / "configs"
    for name, which in (
        ("demo", "from-scratch demo (tokendrop demo --from-scratch"),
        ("finetune-demo", "from-scratch demo (tokendrop demo --from-scratch"),
        ("demo-continue", "the README's main job (tokendrop demo)"),
        ("finetune-demo-continue", "the README's main job (tokendrop demo)"),
    ):
        assert f'load_config("{name}"' in src, name
        head = " ".join(
            ln.lstrip("# ") for ln in (configs / f"{name}.toml").read_text().splitlines()[:3]
        )
        assert which.lower() in head.lower(), (name, head)
        assert "README's CPU demo" not in head, name
