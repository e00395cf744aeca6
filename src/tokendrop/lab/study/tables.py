"""The study's tables in the layout of the paper's Tables 1, 3 and 4, and time to quality
(Markdown)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tokendrop.finetuning.columns import DOWNSTREAM_KEYS, table_columns
from tokendrop.finetuning.tasks import TASKS
from tokendrop.lab.study.common import isnum, mean, pct
from tokendrop.lab.study.records import MethodResult, SourceResult, Stat, StudyResults
from tokendrop.lab.study.spec import StudyConfig, sweep_method


def fmt(x: Any, nd: int = 2) -> str:
    if not isnum(x):
        return "–"
    return f"{x:.{nd}f}"


def sci(x: Any) -> str:
    return f"{x:.3g}" if isnum(x) else "–"


def cell(
    stat: Stat | None, nd: int = 2, f: Callable[[Any, int], str] = fmt, best: bool = False
) -> str:
    """'mean (seed0 / seed1)'; the mean alone when there is one seed."""
    if not stat or not isnum(stat.mean):
        return "–"
    m = f(stat.mean, nd)
    if best:
        m = f"**{m}**"
    ps = stat.per_seed or []
    if len(ps) > 1:
        m += " (" + " / ".join(f(v, nd) for v in ps) + ")"
    return m


def _best(values: list[Any], lower: bool = False) -> float | None:
    vals = [v for v in values if isnum(v)]
    if len(vals) < 2:
        return None
    return min(vals) if lower else max(vals)


def _is_best(value: Any, best: float | None, tol: float) -> bool:
    return best is not None and isnum(value) and abs(value - best) < tol


def seed_note(res: StudyResults) -> str:
    seeds = res.seeds()
    return (
        f"Cells: mean over pretraining seeds {seeds}, per-seed values in parentheses (seed order)."
        if len(seeds) > 1
        else f"One pretraining seed ({seeds[0] if seeds else '–'}): single values."
    )


def _source_note(src: SourceResult | None) -> list[str]:
    if src is None:
        return []
    return [
        f"Row *{src.label}*: the checkpoint every run continued from, fine-tuned as it is (one "
        "model, no pretraining in this study)" + (f"; {src.mlm_note}" if src.mlm_note else "") + "."
    ]


def table1(res: StudyResults, study: StudyConfig) -> str:
    methods, src = res.methods, res.source
    names = [n for n in res.order if n in set(study.methods) or n in ("baseline", "token-drop")]
    names = [n for n in names if n in methods]
    scored = {k for n in names for k in methods[n].eval} | (set(src.eval) if src else set())
    present = [(k, h) for k, h in table_columns(None, sorted(scored & set(TASKS))) if k in scored]
    head = ["Methods"] + [h for _, h in present] + ["held-out MLM loss ↓"]
    lines = [
        "# Table 1 (ours): pretraining methods, fine-tuned on the stand-in tasks",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    # an arm with fewer finished seeds than the study plans is no mean over the same seeds
    complete = [n for n in names if len(methods[n].runs) >= len(study.seeds)]
    bests = {
        k: _best(
            [methods[n].eval[k].mean for n in complete if k in methods[n].eval]
            + ([src.eval[k]] if src and k in src.eval else [])
        )
        for k, _ in present
    }
    bloss = _best(
        [methods[n].final_eval_loss.mean for n in complete]
        + ([src.final_eval_loss] if src and src.final_eval_loss is not None else []),
        lower=True,
    )
    if src is not None:
        row = [f"{src.label}"]
        for k, _ in present:
            v = src.eval.get(k)
            row.append(
                cell(Stat(v, [v]), best=_is_best(v, bests[k], 1e-9)) if v is not None else "–"
            )
        v = src.final_eval_loss
        row.append(cell(Stat(v, [v]), 3, best=_is_best(v, bloss, 1e-12)) if v is not None else "–")
        lines.append("| " + " | ".join(row) + " |")
    for n in names:
        d = methods[n]
        row = [d.label]
        for k, _ in present:
            st = d.eval.get(k)
            best = n in complete and st is not None and _is_best(st.mean, bests[k], 1e-9)
            row.append(cell(st, best=best))
        st = d.final_eval_loss
        row.append(cell(st, 3, best=n in complete and _is_best(st.mean, bloss, 1e-12)))
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        seed_note(res)
        + " Best mean per column in bold (among the arms with every seed; an arm with fewer says "
        "so in its name). Downstream columns: best dev score over the suite's grid (see the suite "
        "settings in study.md); AX = Matthews corr. of the MNLI model; GLUE-avg / SQuAD-avg as "
        "computed by the suite over the columns shown. Held-out MLM loss: the full (no dropping) "
        "model on the held-out split of the packed pretraining data at the last step, with the "
        "same batches and masks for every run of a seed (the unpacked baseline's model is scored "
        "on that packed split too).",
    ]
    lines += _source_note(src)
    if not present:
        lines += [
            "",
            "No downstream columns: the evaluation suite was not run (study.evaluate = false, or "
            "tokendrop.finetuning unavailable).",
        ]
    return "\n".join(lines) + "\n"


def table3(res: StudyResults) -> str:
    methods, src = res.methods, res.source
    names = [n for n in res.order if n in methods]
    has_eval = any(methods[n].eval.get("downstream_avg") for n in names)
    head = (
        ["Methods"]
        + (["avg. across downstream tasks"] if has_eval else [])
        + [
            "held-out MLM loss ↓",
            "steps",
            "pretraining wall time (s)",
            "rel. wall time",
            "FLOPs",
            "rel. FLOPs",
            "tokens/s",
        ]
    )
    lines = [
        "# Table 3 (ours): average downstream score and pretraining cost",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    if src is not None:
        v = src.eval.get("downstream_avg")
        row = [src.label] + ([fmt(v)] if has_eval else [])
        row += [fmt(src.final_eval_loss, 3), "0", "0.0", "0.000", "0", "0.000", "–"]
        lines.append("| " + " | ".join(row) + " |")
    for n in names:
        d = methods[n]
        row = [d.label]
        if has_eval:
            row.append(cell(d.eval.get("downstream_avg")))
        row += [
            cell(d.final_eval_loss, 3),
            str(int(d.steps.mean)) if isnum(d.steps.mean) else "–",
            cell(d.wall_time_s, 1),
            fmt(d.rel_wall, 3),
            sci(d.total_flops.mean),
            fmt(d.rel_flops, 3),
            fmt(d.tokens_per_s.mean, 0),
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        seed_note(res)
        + " Wall time: the training steps only (evaluation and checkpoints excluded), as logged "
        "by the trainer. FLOPs: the analytic count of tokendrop.dropping.flops (forward + "
        f"backward, stage-2 steps counted dense). 'rel.' = relative to {res.reference()}'s mean."
        + (
            " Average across downstream tasks: mean of a model's task columns ("
            + ", ".join(k for k in DOWNSTREAM_KEYS)
            + "; those evaluated), then over seeds."
            if has_eval
            else ""
        ),
    ]
    lines += _source_note(src)
    return "\n".join(lines) + "\n"


def table4(res: StudyResults, study: StudyConfig) -> str:
    methods = res.methods
    rows = [(r, sweep_method(r)) for r in sorted(study.drop_rates)]
    rows = [(r, m) for r, m in rows if m.name in methods]
    keys = ("glue_avg", "squad_avg", "downstream_avg")
    has = {k: any(k in methods[m.name].eval for _, m in rows) for k in keys}
    head = ["Token dropping rate"] + [
        h
        for k, h in (
            ("glue_avg", "GLUE-avg"),
            ("squad_avg", "SQuAD-avg"),
            ("downstream_avg", "avg. downstream"),
        )
        if has[k]
    ]
    head += ["held-out MLM loss ↓", "wall time (s)", "rel. wall time", "rel. FLOPs"]
    lines = [
        "# Table 4 (ours): token dropping rate",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    ds: list[MethodResult] = [methods[m.name] for _, m in rows]
    bests = {k: _best([d.eval[k].mean for d in ds if k in d.eval]) for k in keys}
    bloss = _best([d.final_eval_loss.mean for d in ds], lower=True)
    for r, m in rows:
        d = methods[m.name]
        tag = " (baseline)" if r == 0 else " (token drop)" if r == 0.5 else ""
        row = [f"drop {pct(r)}%{tag}"]
        for k in keys:
            if has[k]:
                st = d.eval.get(k)
                row.append(cell(st, best=st is not None and _is_best(st.mean, bests[k], 1e-9)))
        row += [
            cell(d.final_eval_loss, 3, best=_is_best(d.final_eval_loss.mean, bloss, 1e-12)),
            cell(d.wall_time_s, 1),
            fmt(d.rel_wall, 3),
            fmt(d.rel_flops, 3),
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        seed_note(res)
        + " Token drop (cumulative-loss selection, no stage-2) at each rate; best mean "
        "per column in bold.",
    ]
    if not rows:
        lines += ["", "No drop-rate sweep in this study (study.drop_rates = [])."]
    return "\n".join(lines) + "\n"


def _sci(x: Any, nd: int = 3) -> str:
    return f"{x:.{nd}g}" if isnum(x) else "–"


def time_word(res: StudyResults) -> str:
    """What the runs' training times count: "CPU time" (train.budget_clock = process: the CPU
    seconds of the run's own process, unaffected by other jobs on a shared machine) or
    "wall time"."""
    cpu = res.runs and all(r.clock == "process" for r in res.runs.values())
    return "CPU time" if cpu else "wall time"


def table_selection(res: StudyResults) -> str:
    """What each selecting arm's selector kept through training: at each kept checkpoint, the [MASK]
    share of the kept rows, the ordinary tokens kept per sequence and the Spearman correlation of
    importance with rarity, mean over seeds (each seed's value in parentheses).  A row is one step:
    a seed without a checkpoint there (one kept from an interrupted invocation) shows "-"."""
    lines = ["# What the selector keeps, through training", ""]
    rows = []
    for n in res.order:
        d = res.methods[n]
        traces = [{p["step"]: p for p in res.runs[r].selection} for r in d.runs]
        if not any(traces):
            continue
        for step in sorted({s for t in traces for s in t}):
            pts = [t.get(step, {}) for t in traces]

            def st(key: str) -> Stat:
                return Stat.of([p.get(key) for p in pts])  # noqa: B023 (called in this iteration)

            row = [
                d.label,
                fmt(st("step").mean, 0),
                fmt(st("mask_prob").mean, 3),
                cell(st("kept_mask_share"), 3),
                cell(st("ordinary_kept_per_sequence"), 1),
                cell(st("spearman_score_vs_rarity"), 3),
            ]
            rows.append("| " + " | ".join(row) + " |")
    if not rows:
        return "\n".join(
            lines + ["No run kept checkpoints to follow (study.selection_checkpoints = 0).", ""]
        )
    lines += [
        "| Methods | step | masking rate | [MASK] share of kept rows | ordinary tokens "
        "kept per sequence | Spearman importance vs rarity |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "At each checkpoint a run kept (study.selection_checkpoints spread over its steps): "
        "held-out sequences masked at the run's rate at that step (BERT's 80/10/10), "
        "selected by the checkpoint's selector "
        "(tokendrop.lab.inspect.selection_diagnostics). [MASK] is always kept (unless "
        "drop.mask_rows = ranked), so at masking rate r and drop rate 0.5 about 1.6 r of the "
        "kept rows are [MASK]; "
        "ordinary tokens are kept rows that are neither a prediction target nor a special "
        "token. Spearman: the importance scores of the ids seen as targets against their "
        "rarity in the training split (1 = frequency selection's ranking); the "
        "loss-learning methods only.",
    ]
    return "\n".join(lines) + "\n"


def table_time_to_quality(res: StudyResults) -> str:
    methods, runs = res.methods, res.runs
    t = res.target_eval_loss
    R, ref = res.reference(), res.baseline
    short = "baseline" if ref == "baseline" else methods[ref].label if ref in methods else ref
    lines = [f"# Time to quality: reaching {R}'s final held-out MLM loss", ""]
    if not isnum(t):
        return "\n".join(lines + [f"No finished {ref} run: no target.", ""])
    lines += [
        f"Target: {t:.4f} ({R}'s final held-out MLM loss, mean over its seeds). Interpolated "
        "linearly between evaluations.",
        "",
        f"| Methods | seeds reaching it | {time_word(res)} to target (s) | "
        f"rel. to {short} time | FLOPs to target | rel. to {short} FLOPs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in res.order:
        d = methods[n]
        hits = [runs[r].to_target for r in d.runs]
        ok = [h for h in hits if h]
        row = [d.label, f"{len(ok)}/{len(hits)}"]
        if any(runs[r].curve_split for r in d.runs):
            row = [d.label, "n/a", "n/a (own eval split)", "–", "–", "–"]
        elif ok:
            row += [
                cell(
                    Stat(
                        mean([h.wall_time for h in ok]), [h.wall_time if h else None for h in hits]
                    ),
                    1,
                ),
                cell(
                    Stat(mean([h.rel_wall for h in ok]), [h.rel_wall if h else None for h in hits]),
                    3,
                ),
                cell(
                    Stat(mean([h.flops for h in ok]), [h.flops if h else None for h in hits]),
                    3,
                    _sci,
                ),
                cell(
                    Stat(
                        mean([h.rel_flops for h in ok]), [h.rel_flops if h else None for h in hits]
                    ),
                    3,
                ),
            ]
        else:
            row += ["not reached", "–", "–", "–"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Means over the seeds that reached the target; per-seed values in parentheses ('–' = not "
        f"reached). {R[0].upper() + R[1:]}'s own seeds reach the mean of their finals at different "
        "times. The unpacked baseline's curve is measured on its own (unpacked) eval split, so it "
        "is not compared here.",
    ]
    return "\n".join(lines) + "\n"
