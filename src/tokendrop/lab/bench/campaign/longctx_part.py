"""Part ``bench-longctx``: the long-context rows on the GPU (``tokendrop.lab.bench.longctx``).

Both families (the campaign's [longctx] table: bert-base and modern-base shapes, bf16, 64k tokens
per step) at T = 512 ... 8192, our dense step vs 50% token dropping, per-document attention on: per
row the speed-up -- its median and range over at least ``longctx.min_rounds`` interleaved rounds
(5 on the GPU), whatever the budget -- next to its FLOP bound, the step times' medians and ranges,
the attention share of the FLOPs, the peak memory, and where a family stops fitting (a T that runs
out of memory at its batch is recorded as such).  Rows are run in order, the whole run within the
part's budget by leaving rows out rather than rounds (``tokendrop.lab.bench.longctx``: a row starts
only when what is left covers 1.5x the last row's wall time); a row left out is recorded as skipped
(rerun it with ``--set longctx.seq_lens=[T]`` or ``--set longctx.modern.enabled=false``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult
from tokendrop.lab.bench.campaign.config import CampaignConfig
from tokendrop.lab.bench.longctx import GOAL_FRACTION, LongContextResult, run_longctx, write_longctx

END_RESERVE_S = 20.0

HEADER = [
    "family",
    "T",
    "B",
    "rounds",
    "dense ms",
    "dense ms min-max",
    "drop ms",
    "drop ms min-max",
    "speed-up (median)",
    "speed-up min-max",
    "FLOP bound",
    "% of bound",
    "attention share dense / drop",
    "peak GiB dense / drop",
    "status",
]


def _range(lo: float | None, hi: float | None, spec: str) -> str | None:
    return None if lo is None or hi is None else f"{lo:{spec}}-{hi:{spec}}"


def _rows(res: LongContextResult) -> list[list[object]]:
    out = []
    for r in res.rows:
        peak = [None if f is None else f.peak_bytes / 2**30 for f in (r.dense_fit, r.drop_fit)]
        out.append(
            [
                r.family,
                r.seq_len,
                r.batch_size,
                r.rounds_done,
                r.dense_ms,
                _range(r.dense_ms_min, r.dense_ms_max, ".0f"),
                r.drop_ms,
                _range(r.drop_ms_min, r.drop_ms_max, ".0f"),
                r.speedup,
                _range(r.speedup_min, r.speedup_max, ".3f"),
                r.flop_bound,
                None if r.fraction_of_bound is None else 100 * r.fraction_of_bound,
                None
                if r.attention_share_dense is None
                else f"{100 * r.attention_share_dense:.0f}% / {100 * r.attention_share_drop:.0f}%",
                None if peak[0] is None else f"{peak[0]:.2f} / {peak[1]:.2f}",
                r.status,
            ]
        )
    return out


def run_longctx_part(
    cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log
) -> None:
    gpu = cfg.device == "cuda" and not cfg.dry_run
    lc = dataclasses.replace(
        cfg.longctx, device=cfg.device, time_budget_s=max(1.0, budget.left() - END_RESERVE_S)
    )
    files: list[str] = []

    def saved(res: LongContextResult) -> None:
        j, md = write_longctx(res, out / "bench-longctx-rows.json")
        if not files:
            files.extend([j.name, md.name])
            r.files += files
        r.tables = [("long context: dense vs token drop per family and T", HEADER, _rows(res))]
        r.data["goal"], r.data["fits"] = res.goal, res.fits
        save()

    res = run_longctx(lc, log=log, command="tokendrop bench --campaign bench-longctx", on_row=saved)
    saved(res)
    measured = [x for x in res.rows if x.status == "measured"]
    for x in res.rows:
        if x.status.startswith("skipped"):
            r.skip(
                f"{x.family} T={x.seq_len} (rerun with --set longctx.seq_lens=[{x.seq_len}])", log
            )
        elif x.status == "measured":
            r.summary.append(
                f"{x.family} T={x.seq_len} B={x.batch_size}: 50% drop {x.speedup:.2f}x (median of "
                f"{x.rounds_done} rounds, range {x.speedup_min:.2f}-{x.speedup_max:.2f}; FLOP "
                f"bound {x.flop_bound:.2f}x, {100 * x.fraction_of_bound:.0f}%), attention "
                f"{100 * x.attention_share_dense:.0f}% of the dense FLOPs"
            )
            r.check(
                f"{x.family} T={x.seq_len}: 50% drop faster than dense",
                (x.speedup > 1.0) if gpu else None,
                f"{x.speedup:.3f}x",
            )
        else:
            r.summary.append(f"{x.family} T={x.seq_len} B={x.batch_size}: {x.status}")
    for f in res.fits:
        r.summary.append(
            f"{f.family} {f.setting} stops fitting at "
            + (f"T={f.first_t_not_fitting}" if f.first_t_not_fitting else "no T found")
            + f" ({f.method})"
        )
    for fam, g in res.goal.items():  # a goal, not a check: not meeting it is a result
        if isinstance(g, dict):
            r.summary.append(
                f"{fam}: at >= {GOAL_FRACTION:.2f} of the FLOP bound at {g['met_wall']} "
                f"of {g['rows']} T"
            )
    few = [
        f"{x.family} T={x.seq_len}: {x.rounds_done}"
        for x in measured
        if x.rounds_done < lc.min_rounds
    ]
    r.check(
        f"every measured row timed over at least {lc.min_rounds} rounds (a median and a range)",
        bool(measured) and not few,
        "; ".join(few) or f"{len(measured)} rows",
    )
    want = {(s.family, min(lc.seq_lens)) for s in lc.shapes()}
    r.check(
        "every family measured at its shortest T", want <= {(x.family, x.seq_len) for x in measured}
    )
    save()
