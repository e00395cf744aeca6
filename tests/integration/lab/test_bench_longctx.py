"""The long-context bench (``tokendrop bench --preset longctx-*``): both families, dense vs dropping
at each T in one run, FLOP bound, attention share, memory and where it stops fitting.  Tiny shapes
and lengths on CPU; nothing here asserts a timing."""

from __future__ import annotations

import json

import pytest

from tokendrop.cli import main
from tokendrop.errors import ConfigError
from tokendrop.lab.bench import PRESETS
from tokendrop.lab.bench.longctx import (
    GOAL_FRACTION,
    family_fit,
    is_longctx_preset,
    longctx_config,
    longctx_from_dict,
    run_longctx,
    write_longctx,
)

TINY = {
    "name": "longctx-tiny",
    "seq_lens": [32, 64, 128],
    "tokens_per_step": 128,
    "threads": 1,
    "warmup": 0,
    "rounds": 2,
    "memory_limit_gib": 0.004,
    "bert": {
        "model": "debug-4x64",
        "num_layers": 4,
        "hidden_size": 64,
        "num_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 256,
    },
    "modern": {"model": "modern-tiny", "vocab_size": 256},
}


def _toml(d: dict) -> str:
    def v(x):
        return json.dumps(x)

    top = [f"{k} = {v(x)}" for k, x in d.items() if not isinstance(x, dict)]
    tables = [
        f"\n[{k}]\n" + "\n".join(f"{kk} = {v(xx)}" for kk, xx in x.items())
        for k, x in d.items()
        if isinstance(x, dict)
    ]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


def test_the_cpu_preset_is_the_issue_grid():
    cfg = longctx_config("longctx-cpu")
    assert cfg.seq_lens == [512, 1024, 2048, 4096, 8192] and cfg.rate == 0.5
    assert cfg.document_attention == "on" and cfg.document_tokens == "row" and cfg.threads == 1
    assert [s.family for s in cfg.shapes()] == ["bert", "modernbert"]
    for shape in cfg.shapes():
        bc = cfg.bench_config(shape, 8192)
        mc = bc.model_config()
        assert (
            mc.uses_document_attention
            and mc.max_position_embeddings == 8192
            and bc.batch_size(8192) == 1
        )
        assert not bc.hf and bc.variants == ["drop"] and bc.memory
    # not a BenchConfig preset
    assert "longctx-cpu" not in PRESETS and is_longctx_preset("longctx-cpu")
    with pytest.raises(ConfigError, match="bench --preset: no long-context preset 'longctx-nope'"):
        longctx_config("longctx-nope")
    with pytest.raises(ConfigError, match="longctx.document_tokens: expected a document length"):
        longctx_from_dict({**TINY, "document_tokens": 1})
    with pytest.raises(ConfigError, match="longctx.batch_sizes"):
        longctx_from_dict({**TINY, "batch_sizes": [1]})


def test_both_families_side_by_side(tmp_path):
    cfg = longctx_from_dict(TINY)
    res = run_longctx(cfg, command="test")
    assert [(r.family, r.seq_len) for r in res.rows] == [
        (f, t) for f in ("bert", "modernbert") for t in (32, 64, 128)
    ]
    for r in res.rows:
        assert (
            r.status == "measured" and r.batch_size == 128 // r.seq_len and r.kept == r.seq_len // 2
        )
        assert r.dense_ms > 0 and r.drop_ms > 0 and r.speedup_min <= r.speedup <= r.speedup_max
        assert r.dense_ms_min <= r.dense_ms <= r.dense_ms_max and r.rounds_done == 2
        assert r.drop_ms_min <= r.drop_ms <= r.drop_ms_max and r.wall_s > 0
        assert r.flop_bound > 1 and r.fraction_of_bound == pytest.approx(r.speedup / r.flop_bound)
        assert r.speedup_cpu is not None and r.fraction_of_bound_cpu == pytest.approx(
            r.speedup_cpu / r.flop_bound
        )
        assert 0 < r.attention_share_drop < 1 and 0 < r.attention_share_dense < 1
        if r.family == "bert":  # dropping removes more attention than the rest (T^2 vs T)
            assert r.attention_share_drop < r.attention_share_dense
        assert r.dense_fit.peak_bytes > r.dense_fit.state_bytes and r.drop_fit.largest_batch >= 0
    for fam in ("bert", "modernbert"):  # attention's share of the FLOPs grows with T
        shares = [res.row(fam, t).attention_share_dense for t in (32, 64, 128)]
        assert shares == sorted(shares)
    assert res.row("modernbert", 128).flop_bound_masked_dense is not None
    assert {(f.family, f.setting) for f in res.fits} == {
        (f, s) for f in ("bert", "modernbert") for s in ("dense", "drop")
    }
    # a 4 MiB limit
    assert all(f.first_t_not_fitting and f.first_t_not_fitting > 128 for f in res.fits)
    assert res.goal["fraction_of_bound_goal"] == GOAL_FRACTION
    g = res.goal["bert"]
    assert (
        g["rows"] == 3
        and 0 <= g["met_wall"] <= 3
        and g["speedup_T128"] == res.row("bert", 128).speedup
    )
    j, md = write_longctx(res, tmp_path / "out.json")
    d = json.loads(j.read_text())
    assert (
        d["kind"] == "longctx"
        and len(d["rows"]) == 6
        and set(d["runs"]) == {f"{f}/T{t}" for f in ("bert", "modernbert") for t in (32, 64, 128)}
    )
    text = md.read_text()
    assert "Command: `test`" in text and "load average" in text and "Where it stops fitting" in text
    assert "| modernbert | 128 | 1 |" in text
    r = res.row("bert", 32)  # the step times' median [range] and the rounds beside the speed-up
    assert f"| {r.dense_ms:.0f} [{r.dense_ms_min:.0f}-{r.dense_ms_max:.0f}] |" in text
    assert f"[{r.speedup_min:.2f}-{r.speedup_max:.2f}] | 2 |" in text


def test_a_time_budget_leaves_rows_out_not_rounds():
    """With ``time_budget_s`` every measured row still runs ``min_rounds`` rounds (a median and a
    range); the rows the budget cannot hold are left out and recorded as skipped."""
    import time

    import torch

    from tokendrop.lab.bench import bench_config
    from tokendrop.lab.bench.steps import build_runners
    from tokendrop.lab.bench.timing import run_rounds

    bc = bench_config(
        {
            "model": "debug-4x64",
            "vocab_size": 128,
            "seq_lens": [16],
            "batch_sizes": [2],
            "threads": 1,
            "rounds": 4,
            "min_rounds": 3,
        }
    )
    runners, _ = build_runners(bc, torch.device("cpu"))
    now = time.perf_counter()  # a deadline already past: the first min_rounds run all the same
    assert run_rounds(runners, bc, torch.device("cpu"), lambda s: None, now, now - 1) == 3
    assert all(len(r.round_median) == 3 for r in runners)
    cfg = longctx_from_dict(
        {
            **TINY,
            "rounds": 3,
            "min_rounds": 2,
            "time_budget_s": 3.0,
            "modern": {**TINY["modern"], "enabled": False},
        }
    )
    # a clock that moves one second per reading: the first row starts with 2 s left and takes 1 s,
    # the next would start with none left, whatever the machine
    ticks = iter(range(1000))
    res = run_longctx(cfg, command="test", clock=lambda: float(next(ticks)))
    first, *rest = res.rows
    assert first.status == "measured" and first.rounds_done >= 2
    assert [r.status for r in rest] == ["skipped (time budget)"] * 2
    with pytest.raises(
        ConfigError, match=r"longctx.min_rounds: expected 1 ... rounds \(2\), got 3"
    ):
        longctx_from_dict({**TINY, "min_rounds": 3})
    with pytest.raises(ConfigError, match=r"bench.min_rounds: expected 1 ... rounds \(5\), got 0"):
        bench_config({"model": "debug-4x64", "min_rounds": 0})


def test_where_it_stops_fitting_is_extrapolated_or_measured():
    from tokendrop.lab.bench.longctx import Fit, Row

    def row(t, per):
        return Row(
            "bert",
            t,
            1,
            "measured",
            drop_fit=Fit(100, 100 + per, per, 0),
            dense_fit=Fit(100, 100 + per, per, 0),
        )

    rows = [row(t, 10 * t + t * t / 64) for t in (512, 1024, 2048)]  # a quadratic per-sequence peak
    f = family_fit("bert", "dense", rows, limit=100 + 10 * 8192 + 8192**2 // 64 - 1)
    assert f.first_t_not_fitting == 8192 and f.method.startswith("extrapolated")
    f = family_fit("bert", "drop", rows + [Row("bert", 4096, 1, "out of memory")], limit=10**12)
    assert f.first_t_not_fitting == 4096 and f.method.startswith("measured")
    assert family_fit("bert", "dense", rows[:2], 10**6).first_t_not_fitting is None


def test_the_cli_runs_a_long_context_preset(tmp_path, capsys):
    preset = tmp_path / "bench-longctx-tiny.toml"
    preset.write_text(
        _toml({**TINY, "seq_lens": [32, 64], "modern": {**TINY["modern"], "enabled": False}})
    )
    out = tmp_path / "res.json"
    assert main(["bench", "--preset", str(preset), "--json", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "Long context" in printed and f"wrote {out}" in printed
    d = json.loads(out.read_text())
    assert [r["family"] for r in d["rows"]] == ["bert", "bert"] and d["config"]["modern"][
        "enabled"
    ] is False
