"""Each arm at its own best learning rate (``study.lr_sweep``): the sweep's runs (every arm at every
rate, the study's first seed, the full schedule), the rate each arm keeps (the lowest final
held-out MLM loss; a run that ended non-finite loses), the runs that make up each arm once its rate
is chosen, and the sweep's table."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from tokendrop.lab.study.spec import RunSpec, StudyConfig, lr_method, lr_tag, method_spec
from tokendrop.runs.metrics import read_metrics


@dataclass(frozen=True)
class SweepRow:
    arm: str
    lr: float
    run: str  # the run's directory name under OUT/runs
    final_eval_loss: float | None  # None: not finished yet

    @property
    def finished(self) -> bool:
        return self.final_eval_loss is not None


def final_eval_loss(run_dir: Path) -> float | None:
    """The last held-out MLM loss of a finished run (its ``report.md`` written); ``nan`` when the
    run finished without a finite one; None while it is not finished."""
    if not (run_dir / "report.md").is_file():
        return None
    evals = [r["eval_loss"] for r in read_metrics(run_dir) if "eval_loss" in r]
    loss = evals[-1] if evals else math.nan
    return float(loss) if loss is not None else math.nan


def sweep_rows(study: StudyConfig, out: Path) -> list[SweepRow]:
    """One row per (arm, rate) of the sweep, in the study's order."""
    first = study.seeds[0]
    rows = []
    for arm in study.all_methods():
        for lr in study.lr_sweep:
            m = lr_method(method_spec(arm, study), lr)
            name = f"{m.name}-seed{first}"
            rows.append(SweepRow(arm, lr, name, final_eval_loss(out / "runs" / name)))
    return rows


def choose_lrs(rows: list[SweepRow]) -> dict[str, float]:
    """arm -> its rate, for every arm whose sweep runs have all finished: the lowest final loss (a
    non-finite one counts as worst; a tie keeps the rate listed first)."""
    by_arm: dict[str, list[SweepRow]] = {}
    for r in rows:
        by_arm.setdefault(r.arm, []).append(r)
    chosen = {}
    for arm, rs in by_arm.items():
        if all(r.finished for r in rs):
            chosen[arm] = min(rs, key=_loss_key).lr
    return chosen


def _loss_key(r: SweepRow) -> float:
    v = r.final_eval_loss
    return v if v is not None and math.isfinite(v) else math.inf


def arm_runs(runs: list[RunSpec], chosen: dict[str, float], study: StudyConfig) -> list[RunSpec]:
    """The runs that make up each arm: those at its chosen rate, each under the arm's own name (its
    label says the rate), so the tables, findings and time-to-quality compare arms."""
    out = []
    for r in runs:
        arm = r.method.arm_name
        if r.method.lr is None:  # an arm trained at the base config's rate
            out.append(r)
            continue
        if chosen.get(arm) != r.method.lr:
            continue
        spec = method_spec(arm, study)
        label = f"{spec.label} (lr {lr_tag(r.method.lr)})"
        out.append(dataclasses.replace(r, method=dataclasses.replace(spec, label=label)))
    return out


def table_lr_sweep(rows: list[SweepRow], chosen: dict[str, float], reference: str) -> str:
    """Markdown: final held-out MLM loss per arm (rows) and rate (columns), each arm's rate in bold,
    and the arm at its own rate against the reference arm's rate."""
    lrs = sorted({r.lr for r in rows})
    loss = {(r.arm, r.lr): r.final_eval_loss for r in rows}
    arms = list(dict.fromkeys(r.arm for r in rows))
    ref_lr = chosen.get(reference)
    head = ["arm", *[f"lr {lr_tag(lr)}" for lr in lrs], "chosen", f"at {reference}'s rate"]
    lines = [
        "# Learning-rate sweep",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for arm in arms:
        cells = []
        for lr in lrs:
            v = loss.get((arm, lr))
            txt = "–" if (arm, lr) not in loss else ("running" if v is None else f"{v:.3f}")
            cells.append(f"**{txt}**" if chosen.get(arm) == lr else txt)
        own = chosen.get(arm)
        at_ref = loss.get((arm, ref_lr)) if ref_lr is not None else None
        cells.append(lr_tag(own) if own is not None else "not yet")
        cells.append(f"{at_ref:.3f}" if at_ref is not None else "–")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    note = (
        "\nFinal held-out MLM loss of each arm at each learning rate (the study's first seed, "
        "the full schedule); in bold the rate the arm keeps, the lowest loss, "
        "at which its other seeds run.\n"
    )
    return "\n".join(lines) + "\n" + note
