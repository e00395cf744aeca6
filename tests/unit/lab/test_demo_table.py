"""The demo's summary table (lab/demo.py) never claims a wall-clock ratio that a moving load on the
machine made meaningless."""


def test_the_demo_marks_a_wall_clock_ratio_unreliable_when_the_load_moved():
    from tokendrop.lab.demo import format_table, load_moved

    rows = [
        {
            "name": n,
            "steps": 16,
            "cpu_time_s": c,
            "wall_time_s": w,
            "tokens_per_s": t,
            "eval_loss": 3.0,
            "accuracy": [],
        }
        for n, c, w, t in (("baseline", 100.0, 200.0, 300.0), ("token-drop", 80.0, 50.0, 1200.0))
    ]
    s = {
        "rows": rows,
        "flop_bound_speedup": 1.3,
        "measured_speedup": 4.0,
        "fraction_of_bound": 4.0 / 1.3,
        "cpu_time_ratio": 0.8,
        "cpu_speedup": 1.25,
        "cpu_fraction_of_bound": 1.25 / 1.3,
        "wall_time_ratio": 0.25,
        "load_average": {"baseline": [6.0, 7.5], "token-drop": [1.0, 1.2]},
    }
    assert load_moved(s["load_average"]) == "load average 1.0 to 7.5"
    table = format_table(s)
    assert (
        "UNRELIABLE, the machine's load changed between the arms (load average 1.0 to 7.5)" in table
    )
    assert "308% of the bound" not in table and "96% of the FLOP-bound" in table
    s["load_average"] = {"baseline": [1.0, 1.2], "token-drop": [1.1, 1.3]}
    assert "UNRELIABLE" not in format_table(s) and "308% of the bound" in format_table(s)
