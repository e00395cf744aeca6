"""Studies side by side, from each study's ``study.json``: study-paper's 12-layer studies at T = 128
and T = 512 with its depth trend (4, 8, 12 layers at T = 128), or study-long alone.

    python scripts/study_summary.py runs/study-paper runs/study-paper-512 \
        runs/study-paper-l4 runs/study-paper-l8 --out docs/study-paper
    python scripts/study_summary.py runs/study-long --out docs/study-long

writes OUT/summary.json (``arms``, ``lr_sweep``, ``depth_trend``, ``time_to_quality``),
OUT/summary.md and OUT/depth-trend.png.  A study dir that does not exist yet, or has no study.json,
is listed as missing; every number comes from the studies' own records."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from tokendrop.runs.files import atomic_write_json, atomic_write_text

REFERENCE = "baseline"
DROP = "token-drop"
# the equal-FLOPs control of token drop, in order of preference: dense for the steps that spend
# token drop's FLOPs, else the paper's dense for 75% of the steps (0.75 of the FLOPs)
CONTROLS = ("baseline-equal-flops", "baseline-75")


def _finite(xs: list[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]


def _mean(xs: list[Any]) -> float | None:
    f = _finite(xs)
    return statistics.fmean(f) if f else None


def _half_range(xs: list[Any]) -> float | None:
    f = _finite(xs)
    return (max(f) - min(f)) / 2 if len(f) > 1 else None


def _process_time(run: dict[str, Any]) -> float | None:
    """The run's time on its own process clock (train.budget_clock = "process": the metrics' wall
    time is the process's CPU time), else its recorded CPU seconds."""
    if run.get("clock") == "process":
        return run.get("wall_time_s")
    return run.get("cpu_s")


def load(study_dir: Path) -> dict[str, Any] | None:
    p = study_dir / "study.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _shape(d: dict[str, Any]) -> tuple[int, int]:
    run = next(iter(d["runs"].values()), None) if d["runs"] else None
    if run is not None:
        return int(run["model"]["num_layers"]), int(run["seq_len"])
    layers = next(
        int(o.split("=", 1)[1]) for o in d["study"]["base_overrides"] if "num_layers" in o
    )
    return layers, int(d["study"]["seq_len"])


def arms(d: dict[str, Any]) -> list[dict[str, Any]]:
    layers, T = _shape(d)
    ref = d["methods"].get(REFERENCE)
    ref_time = _mean([_process_time(d["runs"][r]) for r in ref["runs"]]) if ref else None
    out = []
    for name, m in d["methods"].items():
        runs = [d["runs"][r] for r in m["runs"]]
        t = _mean([_process_time(r) for r in runs])
        out.append(
            {
                "name": name,
                "num_layers": layers,
                "seq_len": T,
                "lr": d.get("chosen_lr", {}).get(name),
                "seeds": m["seeds"],
                "final_eval_loss": [r["final_eval_loss"] for r in runs],
                "rel_flops": m.get("rel_flops"),
                "rel_cpu_time": t / ref_time if t is not None and ref_time else None,
                "downstream_avg": [r.get("eval", {}).get("downstream_avg") for r in runs],
                "steps": [r.get("steps") for r in runs],
                # training + evaluation time per step on the process clock, per seed: the speed-up
                # per step measured in the runs themselves
                "cpu_s_per_step": [
                    _process_time(r) / r["steps"] if r.get("steps") and _process_time(r) else None
                    for r in runs
                ],
                # every column of the suite, per seed (SQuAD v1 F1, SST-2 accuracy, ...)
                "downstream": [r.get("eval", {}) for r in runs],
            }
        )
    return out


def lr_sweep(d: dict[str, Any]) -> list[dict[str, Any]]:
    layers, T = _shape(d)
    return [
        {
            "arm": r["arm"],
            "num_layers": layers,
            "seq_len": T,
            "lr": r["lr"],
            "final_eval_loss": r["final_eval_loss"],
        }
        for r in d.get("lr_sweep", [])
    ]


def gap(d: dict[str, Any]) -> dict[str, Any] | None:
    """Token drop's final held-out loss minus dense's (equal steps) and minus its equal-FLOPs
    control's (each at its own rate; positive: token drop is behind), with the seeds' pairs."""
    ms = d["methods"]
    if DROP not in ms or REFERENCE not in ms:
        return None
    layers, T = _shape(d)
    loss = {n: ms[n]["final_eval_loss"]["per_seed"] for n in ms}
    td, base = loss[DROP], loss[REFERENCE]
    control = next((c for c in CONTROLS if c in ms), None)
    pairs = [a - b for a, b in zip(td, base, strict=False)]
    row: dict[str, Any] = {
        "num_layers": layers,
        "seq_len": T,
        "seeds": min(len(td), len(base)),
        "gap_equal_steps": _mean(td) - _mean(base) if _mean(td) is not None else None,
        "gap_equal_steps_per_seed": pairs,
        "spread_token_drop": _half_range(td),
        "spread_dense": _half_range(base),
        "equal_flops_control": control,
        "gap_equal_flops": None,
    }
    if control:
        c = loss[control]
        row["gap_equal_flops"] = _mean(td) - _mean(c) if _mean(c) is not None else None
        row["gap_equal_flops_per_seed"] = [a - b for a, b in zip(td, c, strict=False)]
        row["control_rel_flops"] = ms[control].get("rel_flops")
        row["token_drop_rel_flops"] = ms[DROP].get("rel_flops")
    return row


def time_to_quality(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Each arm's process time and FLOPs (shares of dense's) to reach dense's final held-out loss,
    per seed (None: not reached), and whether its final downstream average reaches dense's."""
    layers, T = _shape(d)
    ms = d["methods"]
    ref = ms.get(REFERENCE)
    ref_down = (
        _mean([d["runs"][r].get("eval", {}).get("downstream_avg") for r in ref["runs"]])
        if ref
        else None
    )
    out = []
    for name, m in ms.items():
        runs = [d["runs"][r] for r in m["runs"]]
        hits = [r.get("to_target") for r in runs]
        down = _mean([r.get("eval", {}).get("downstream_avg") for r in runs])
        out.append(
            {
                "arm": name,
                "num_layers": layers,
                "seq_len": T,
                "target_eval_loss": d.get("target_eval_loss"),
                "rel_cpu_time_to_loss": [h["rel_wall"] if h else None for h in hits],
                "rel_flops_to_loss": [h["rel_flops"] if h else None for h in hits],
                "downstream_avg": down,
                "reference_downstream_avg": ref_down,
                "reaches_reference_downstream": (
                    None if down is None or ref_down is None else down >= ref_down
                ),
            }
        )
    return out


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if not math.isfinite(x) else f"{x:.{nd}f}"
    return str(x)


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# study-paper: summary", ""]
    lines += [f"Studies read: {', '.join(summary['studies']) or 'none'}."]
    if summary["missing"]:
        lines += [f"Not run yet (no study.json): {', '.join(summary['missing'])}."]
    lines += ["", "## Arms at their own learning rates", ""]
    lines += ["| L | T | arm | lr | seeds | final held-out loss (per seed) | FLOPs | CPU time |"]
    lines += ["|---:|---:|---|---:|---:|---|---:|---:|"]
    for a in summary["arms"]:
        per = ", ".join(_fmt(x) for x in a["final_eval_loss"])
        lines.append(
            f"| {a['num_layers']} | {a['seq_len']} | {a['name']} | {_fmt(a['lr'])} | "
            f"{len(a['seeds'])} | {_fmt(_mean(a['final_eval_loss']))} ({per}) | "
            f"{_fmt(a['rel_flops'], 2)} | {_fmt(a['rel_cpu_time'], 2)} |"
        )
    lines += ["", "## Learning-rate sweep (first seed, full schedule)", ""]
    lines += ["| L | T | arm | lr | final held-out loss |", "|---:|---:|---|---:|---:|"]
    for r in summary["lr_sweep"]:
        lines.append(
            f"| {r['num_layers']} | {r['seq_len']} | {r['arm']} | {r['lr']:g} | "
            f"{_fmt(r['final_eval_loss']) if r['final_eval_loss'] is not None else 'running'} |"
        )
    lines += ["", "## Depth trend: token drop minus dense (positive: behind)", ""]
    lines += ["| L | T | seeds | equal steps | equal FLOPs (control) | spreads (drop / dense) |"]
    lines += ["|---:|---:|---:|---:|---|---|"]
    for g in summary["depth_trend"]:
        lines.append(
            f"| {g['num_layers']} | {g['seq_len']} | {g['seeds']} | {_fmt(g['gap_equal_steps'])} | "
            f"{_fmt(g['gap_equal_flops'])} ({g['equal_flops_control'] or 'none'}) | "
            f"{_fmt(g['spread_token_drop'])} / {_fmt(g['spread_dense'])} |"
        )
    lines += [""]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> bool:
    rows = sorted(
        (g for g in summary["depth_trend"] if g["seq_len"] == 128),
        key=lambda g: g["num_layers"],
    )
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    L = [g["num_layers"] for g in rows]
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.plot(L, [g["gap_equal_steps"] for g in rows], "o-", label="at equal steps (vs dense)")
    eq = [(g["num_layers"], g["gap_equal_flops"]) for g in rows if g["gap_equal_flops"] is not None]
    if eq:
        ax.plot(*zip(*eq, strict=True), "s--", label="at equal FLOPs (vs its control)")
    for g in rows:
        for k, mk in (("gap_equal_steps_per_seed", "."), ("gap_equal_flops_per_seed", "x")):
            ys = _finite(g.get(k) or [])
            ax.plot([g["num_layers"]] * len(ys), ys, mk, color="black", alpha=0.5)
    ax.set_xlabel("layers (T = 128)")
    ax.set_ylabel("token drop - dense, held-out MLM loss")
    ax.set_xticks(L)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def summarize(study_dirs: list[Path]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "studies": [],
        "missing": [],
        "arms": [],
        "lr_sweep": [],
        "depth_trend": [],
        "time_to_quality": [],
    }
    for sd in study_dirs:
        d = load(sd)
        if d is None:
            summary["missing"].append(str(sd))
            continue
        summary["studies"].append(d["study"]["name"] or str(sd))
        summary["arms"] += arms(d)
        summary["lr_sweep"] += lr_sweep(d)
        g = gap(d)
        if g:
            summary["depth_trend"].append(g)
        summary["time_to_quality"] += time_to_quality(d)
    summary["depth_trend"].sort(key=lambda g: (g["seq_len"], g["num_layers"]))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", type=Path, help="study output (or docs) dirs")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    s = summarize(a.studies)
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.out / "summary.json", s)
    atomic_write_text(a.out / "summary.md", markdown(s))
    plot(s, a.out / "depth-trend.png")
    print(f"{a.out / 'summary.json'}: {len(s['arms'])} arms, {len(s['depth_trend'])} depths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
