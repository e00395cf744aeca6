"""scripts/study_summary.py: the arms, the sweep, the depth trend's gaps and time to quality,
computed from the studies' own study.json; a study not run yet is listed as missing."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "study_summary.py"


@pytest.fixture(scope="module")
def summary_mod():
    spec = importlib.util.spec_from_file_location("study_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _study(tmp_path: Path, layers: int, losses: dict[str, list[float]], flops: dict[str, float]):
    runs, methods = {}, {}
    for arm, per_seed in losses.items():
        names = []
        for s, loss in enumerate(per_seed):
            n = f"{arm}-lr2e-3-seed{s}"
            names.append(n)
            runs[n] = {
                "model": {"num_layers": layers},
                "seq_len": 128,
                "steps": 1000,
                "final_eval_loss": loss,
                "clock": "process",
                "wall_time_s": 100.0 * flops[arm],
                "eval": {"downstream_avg": 70.0 - loss},
                "to_target": {"rel_wall": 0.8, "rel_flops": 0.7} if loss <= 3.0 else None,
            }
        methods[arm] = {
            "runs": names,
            "seeds": list(range(len(per_seed))),
            "final_eval_loss": {"per_seed": per_seed},
            "rel_flops": flops[arm],
        }
    d = {
        "study": {"name": f"l{layers}", "seq_len": 128, "base_overrides": []},
        "runs": runs,
        "methods": methods,
        "chosen_lr": dict.fromkeys(losses, 2e-3),
        "lr_sweep": [{"arm": "baseline", "lr": 2e-3, "run": "x", "final_eval_loss": 3.0}],
        "target_eval_loss": 3.0,
    }
    out = tmp_path / f"l{layers}"
    out.mkdir()
    (out / "study.json").write_text(json.dumps(d))
    return out


def test_the_summary_measures_each_gap_against_its_own_control(summary_mod, tmp_path):
    l4 = _study(
        tmp_path,
        4,
        {"baseline": [3.0, 3.2], "token-drop": [3.3, 3.5], "baseline-equal-flops": [3.1, 3.3]},
        {"baseline": 1.0, "token-drop": 0.8, "baseline-equal-flops": 0.8},
    )
    l12 = _study(
        tmp_path,
        12,
        {"baseline": [2.9, 3.0], "token-drop": [2.95, 3.0], "baseline-75": [3.1, 3.1]},
        {"baseline": 1.0, "token-drop": 0.75, "baseline-75": 0.75},
    )
    s = summary_mod.summarize([l12, tmp_path / "not-run", l4])
    assert s["missing"] == [str(tmp_path / "not-run")]
    g = {x["num_layers"]: x for x in s["depth_trend"]}
    assert [x["num_layers"] for x in s["depth_trend"]] == [4, 12]
    assert g[4]["gap_equal_steps"] == pytest.approx(0.3)
    assert g[4]["gap_equal_flops"] == pytest.approx(0.2)
    assert g[4]["equal_flops_control"] == "baseline-equal-flops"
    assert g[12]["equal_flops_control"] == "baseline-75"
    assert g[12]["gap_equal_steps"] == pytest.approx(0.025)
    assert g[12]["gap_equal_flops"] == pytest.approx(-0.125)
    assert g[12]["gap_equal_steps_per_seed"] == pytest.approx([0.05, 0.0])
    td12 = next(a for a in s["arms"] if a["num_layers"] == 12 and a["name"] == "token-drop")
    assert td12["rel_cpu_time"] == pytest.approx(0.75) and td12["lr"] == 2e-3
    assert td12["downstream_avg"] == pytest.approx([67.05, 67.0])
    assert td12["cpu_s_per_step"] == pytest.approx([0.075, 0.075])
    ttq = next(
        x for x in s["time_to_quality"] if x["num_layers"] == 12 and x["arm"] == "token-drop"
    )
    assert ttq["rel_flops_to_loss"] == [0.7, 0.7]  # both seeds reach 3.0
    assert ttq["reaches_reference_downstream"] is False  # 67.025 < dense's 67.05
    md = summary_mod.markdown(s)
    assert "| 4 | 128 | 2 | 0.300 | 0.200 (baseline-equal-flops)" in md
    assert summary_mod.main([str(l4), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["depth_trend"]
