"""``study.md``: what was run, time per method, findings computed from the numbers, how the study
compares with the paper, the tables and the figures; and the copy of the report for ``docs/``."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendrop.dropping.methods import PAPER_METHOD
from tokendrop.lab.study.common import isnum, pct
from tokendrop.lab.study.findings import findings, paper_comparison, spread
from tokendrop.lab.study.records import EvalSummary, StudyResults, results_from_json
from tokendrop.lab.study.spec import StudyConfig, load_study
from tokendrop.lab.study.tables import cell, fmt, time_word
from tokendrop.runs.files import atomic_write_json, atomic_write_text

FINDINGS_HEADING = "## Findings (computed from the tables below)"
CLAIMS_HEADING = "Claim by claim (computed from the tables):"


@dataclass
class ReportInfo:
    """What the report says about the invocation, beyond the results."""

    command: str
    hardware: dict[str, Any]
    generated: str
    data: dict[str, Any]
    evaluation: EvalSummary | None
    inspect: dict[str, Any] | None
    total_elapsed_s: float
    prepare_s: float
    eval_s: float
    source: str | None = None  # the resolved checkpoint dir every run continued from


def command_line(
    config: str | os.PathLike, out: str | os.PathLike, overrides: list[str], only: list[str] | None
) -> str:
    parts = ["tokendrop", "study", "--config", str(config), "--out", str(out)]
    for o in overrides:
        parts += ["--set", o]
    if only is not None:
        parts += ["--only", *only]
    return " ".join(shlex.quote(p) for p in parts)


def _md_table(lines: list[list[str]]) -> list[str]:
    head, *rows = lines
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def _ft_noise(ev: EvalSummary | None) -> str:
    s = ev.suite if ev else {}
    seeds, cells = (
        len(s.get("finetune_seeds") or []),
        len(s.get("glue_epochs") or []) * len(s.get("glue_lrs") or []),
    )
    return (
        f"{seeds} fine-tuning seed(s) and {cells} grid cell(s) per GLUE task and model, so that "
        "spread includes fine-tuning noise"
    )


def _prep_text(info: ReportInfo) -> str:
    """How long data preparation took, saying so when the prepared data was made outside these
    invocations."""
    made = sum((info.data.get(k) or {}).get("seconds", 0.0) for k in ("packed", "unpacked"))
    spent = info.prepare_s
    if spent < 1.0 and made:
        return f"data preparation reused: it took {made:.0f} s when it was made, not counted here"
    return f"data preparation {spent:.0f} s"


def _what_was_run(study: StudyConfig, res: StudyResults, info: ReportInfo) -> list[str]:
    M = res.methods
    hw = info.hardware
    first = next(iter(res.runs.values()), None)
    lines = [
        "## What was run",
        "",
        "```",
        info.command,
        "```",
        "",
        f"- hardware: {hw.get('cpu') or 'unknown CPU'}, {hw.get('cores')} cores"
        + (f", GPU {hw['gpu']}" if hw.get("gpu") else ", no GPU")
        + f"; torch {hw.get('torch')} ("
        + (
            f"{max(1, (hw.get('cores') or 1) // study.parallel)} thread(s) per worker process"
            if study.parallel > 1
            else f"{hw.get('torch_threads')} threads"
        )
        + f"), Python {hw.get('python')}, "
        f"tokendrop {hw.get('tokendrop', '?')} (runs trained at git "
        f"{', '.join(sorted({str(r.git_revision or '?') for r in res.runs.values()})) or '?'}; "
        f"report written at git {hw.get('git_revision') or '?'})"
        + (
            f"; {study.parallel} runs / fine-tuning jobs at a time, each in its own process"
            if study.parallel > 1
            else "; one run at a time"
        ),
    ]
    if info.source:
        src = res.source
        lines.append(
            f"- continued pretraining: every run starts from `{info.source}`"
            + (f" (weights sha256 {src.sha256[:12]}...)" if src and src.sha256 else "")
            + "; the data is tokenized with its tokenizer; the checkpoint itself is the row "
            f"*{study.source_label}*"
        )
    c = info.data.get("corpus", {})
    if c:
        src_names = ", ".join(Path(s).name for s in c.get("sources", [])) or (
            "generated toy corpus" if c.get("generated") else ""
        )
        lines.append(
            f"- corpus: {src_names}"
            + (
                f"; deterministic subset: the first {c['documents']} documents, "
                f"{c['bytes'] / 1e6:.1f} MB"
                if c.get("documents")
                else ""
            )
        )
    pk = info.data.get("packed", {})
    if pk.get("tokens"):
        how = (
            "the source's tokenizer"
            if info.source
            else "given vocab.txt"
            if study.vocab
            else "WordPiece trained on the corpus"
        )
        lines.append(
            f"- prepared: T = {study.seq_len}, vocabulary {pk.get('vocab_size')} ({how}), "
            f"{pk['tokens']} tokens, "
            f"{pk['train_sequences']} packed training sequences, {pk['eval_sequences']} held out"
        )
    if first:
        m = first.model
        lines.append(
            f"- model: {m['num_layers']} layers, hidden {m['hidden_size']}, {m['num_heads']} "
            f"heads, {first.params or '?'} parameters; batch {first.batch_size} x T "
            f"{first.seq_len}; {res.baseline} steps "
            f"{int(M[res.baseline].steps.mean) if res.baseline in M else '?'}"
        )
    lines.append(
        f"- methods: {', '.join(res.order)}; seeds {study.seeds}; drop-rate sweep "
        f"{[pct(r) + '%' for r in study.drop_rates]}"
    )
    ev = info.evaluation
    if ev:
        s = ev.suite
        lines.append(
            f"- evaluation suite: tasks {s.get('tasks')}, grid GLUE epochs {s.get('glue_epochs')} "
            f"x lr {s.get('glue_lrs')}, SQuAD epochs {s.get('squad_epochs')} x lr "
            f"{s.get('squad_lrs')}, fine-tuning seeds {s.get('finetune_seeds')}; train examples "
            f"per task {(s.get('glue') or {}).get('max_train_examples') or 'all'} (GLUE), "
            f"{(s.get('squad') or {}).get('max_train_examples') or 'all'} (SQuAD)"
        )
        if ev.note:
            lines.append(f"- {ev.note}")
    else:
        lines.append("- evaluation suite: not run; the tables show pretraining numbers only")
    lines += ["", "Resolved configs: `study.toml`; each run's `runs/NAME/config.toml`.", ""]
    return lines


def _time_per_method(study: StudyConfig, res: StudyResults, info: ReportInfo) -> list[str]:
    M = res.methods
    lines = ["## Time per method", ""]
    warm = any(isnum(r.init_s) and r.init_s > 0 for r in res.runs.values())
    rows = [
        ["method", "runs", "pretraining wall (s, training steps)"]
        + (["warm-up before step 1 (s)"] if warm else [])
        + ["elapsed incl. eval/checkpoints (s)", "CPU time (s)", "fine-tuning (s)"]
    ]
    tot = [0.0, 0.0, 0.0, 0.0]
    wtot = 0.0

    def ssum(xs: list[Any]) -> str:
        return fmt(sum(x for x in xs if isnum(x)), 0) if any(isnum(x) for x in xs) else "–"

    src = res.source
    if src is not None:
        rows.append(
            [src.label, "0", "–"]
            + (["–"] if warm else [])
            + ["–", "–", fmt(src.finetune_seconds, 0)]
        )
        tot[3] += src.finetune_seconds if isnum(src.finetune_seconds) else 0.0
    for n in res.order:
        d = M[n]
        cols = [
            d.wall_time_s.per_seed,
            d.elapsed_s.per_seed,
            d.cpu_s.per_seed,
            d.finetune_seconds.per_seed,
        ]
        rows.append(
            [d.label, str(len(d.runs)), cell(d.wall_time_s, 1)]
            + ([cell(d.init_s, 1)] if warm else [])
            + [ssum(c) for c in cols[1:]]
        )
        for i, c in enumerate(cols):
            tot[i] += sum(x for x in c if isnum(x))
        wtot += sum(x for x in d.init_s.per_seed if isnum(x))
    rows.append(
        ["**total**", str(len(res.runs)), fmt(tot[0], 0)]
        + ([fmt(wtot, 0)] if warm else [])
        + [fmt(x, 0) for x in tot[1:]]
    )
    lines += _md_table(rows)
    lines += [
        "",
        f"Whole study wall-clock over all invocations so far: {info.total_elapsed_s / 60:.1f} min "
        f"({_prep_text(info)}"
        + (f", evaluation suite {info.eval_s:.0f} s" if info.eval_s else "")
        + "). Elapsed, CPU time (user + system, all threads of the run's process) and fine-tuning "
        "(the suite's cells, wall): summed over seeds, as recorded by this study (a run trained by "
        "an earlier invocation keeps its record)."
        + (
            " Warm-up before step 1 (continued pretraining): loading the source, training a new "
            "MLM head alone and the importance vector's dense pass; part of the elapsed time, not "
            "of the training-step wall time."
            if warm
            else ""
        )
        + (
            f" With {study.parallel} runs at a time the summed elapsed times exceed the wall-clock."
            if study.parallel > 1
            else ""
        ),
        "",
    ]
    return lines


def _paper_section(study: StudyConfig, res: StudyResults, info: ReportInfo) -> list[str]:
    M = res.methods
    first = next(iter(res.runs.values()), None)
    ev = info.evaluation
    lines = [
        "## How this compares with the paper",
        "",
        "The paper (Hou et al., 2022) pretrains BERT-base/large for 1M steps of 512 x 512 tokens "
        "on BooksCorpus + Wikipedia and reports that dropping 50% of the tokens in the middle "
        "layers cuts pretraining time by 25% with equal or slightly better GLUE/SQuAD scores "
        "(Table 3 there: 85.45 vs 85.16 averaged over four settings), that cumulative-loss "
        "selection beats frequency-based and random dropping, that stage-2 is unnecessary and that "
        "about 50% is the best rate (Table 4 there: 62.5% and 75% worse). The findings above "
        "state, number by number, where this study agrees.",
        "",
    ]
    comp = paper_comparison(res, study)
    if comp:
        lines += [CLAIMS_HEADING, ""] + [f"- {s}" for s in comp] + [""]
    lines += ["Caveats, which limit what these numbers can say:", ""]
    if info.source:
        lines.append(
            f"- **Continued, not from scratch**: every run continues `{Path(info.source).name}` "
            f"({first.steps if first else '?'} steps for the baseline), while the paper pretrains "
            "from random initialisation; dropping tokens while adapting a trained encoder is a "
            "different regime (the importance scores start from the source's losses, and the MLM "
            "head may be new: see each run's log)."
        )
    if first:
        paper_tokens = 512 * 512 * 1_000_000
        bsteps = int(M[res.baseline].steps.mean) if res.baseline in M else first.steps
        beta = first.drop.get("beta", 0.995) if first.drop else 0.995
        for r in res.runs.values():
            if r.drop.get("method") == PAPER_METHOD:
                beta = r.drop["beta"]
                break
        scale = (
            f"- **Scale**: each baseline run here saw {first.tokens:.3g} tokens, "
            f"{first.tokens / paper_tokens:.1e} of the paper's {paper_tokens:.2g}; the model has "
            f"{first.model['num_layers']} layers of width {first.model['hidden_size']} "
            "(BERT-base: 12 x 768)."
        )
        if info.source:
            imp = next(
                (
                    r.drop.get("importance_init")
                    for r in res.runs.values()
                    if r.drop.get("method") == PAPER_METHOD
                ),
                None,
            )
            lines.append(
                scale
                + (
                    f" The importance vector starts from drop.importance_init = {imp!r} (with a "
                    "source, 'auto' = the mean loss of each id over a dense pass of the source) "
                    f"and gets {bsteps} updates (beta = {beta:g})."
                    if imp
                    else ""
                )
            )
        else:
            lines.append(
                scale
                + f" The importance vector (beta = {beta:g}) gets {bsteps} updates: an id that is "
                f"a prediction target in every step still carries {100 * beta**bsteps:.1f}% of its "
                "initial score at the end, rarer ids more, so the ranking mixes loss with how "
                "rarely an id was a target (see the Spearman correlation with rarity "
                "under Figure 3)."
            )
        sp = spread(M[res.baseline].final_eval_loss) if res.baseline in M else None
        if sp is not None:
            dsp = spread(M[res.baseline].eval.get("downstream_avg"))
            lines.append(
                f"- **Noise**: {res.reference()}'s final held-out MLM loss differs by {sp:.4f} "
                "between its seeds"
                + (
                    f", its average downstream score by {dsp:.2f} points ({_ft_noise(ev)})"
                    if dsp is not None
                    else ""
                )
                + "; smaller differences between methods are not distinguishable from "
                "seed noise here."
            )
        else:
            lines.append(
                "- **Noise**: one seed per method, so seed-to-seed noise is not measured; small "
                "differences between methods may be noise."
            )
        lines += _plateau(res)
    tasks = (ev.suite if ev else {}).get("tasks") or []
    lines += [
        "- **Domain**: the pretraining text is the offline stand-in corpus (dictionaries, software "
        "documentation, literature, speeches; not BooksCorpus + Wikipedia), and the fine-tuning "
        "tasks are stand-ins in the GLUE/SQuAD file layouts built from other public data: scores "
        "are not comparable with published GLUE/SQuAD numbers"
        + (
            "; the QQP stand-in (same speaker or not) is not a paraphrase task."
            if "qqp" in tasks
            else "."
        ),
        "- **Protocol**: the fine-tuning grid, task subset and training-set sizes are reduced to "
        "fit the budget "
        "(listed above); the paper takes the best of 4 grid cells on full datasets.",
        (
            _CPU_TIMING
            if time_word(res) == "CPU time"
            else "- **Timing**: wall times are measured on the machine above; FLOPs are analytic. "
            "On CPU the kept-row "
        )
        + "gathers, the MLM head and the optimizer are a larger share of a step than on a TPU, so "
        "the measured time ratio can differ from the FLOP ratio.",
        "",
    ]
    return lines


def _plateau(res: StudyResults) -> list[str]:
    """How far below the unigram entropy (the loss of predicting every masked token from its
    frequency alone) the reference arm's seeds ended: the regime the comparison is made in."""
    b = res.methods.get(res.baseline)
    h = next((r.unigram_entropy for r in res.runs.values() if isnum(r.unigram_entropy)), None)
    if b is None or h is None:
        return []
    below = [h - v for v in b.final_eval_loss.per_seed if isnum(v)]
    return [
        "- **Regime**: the training split's unigram entropy under the study's tokenizer is "
        f"{h:.3f} nats; {res.reference()}'s final held-out MLM loss is "
        + ", ".join(f"{x:.2f}" for x in below)
        + " nats below it (per seed)."
    ]


_CPU_TIMING = (
    "- **Timing**: every run's training time is the CPU time of its own process "
    "(train.budget_clock = process; the columns and figures named 'wall' count these "
    "CPU seconds), so other jobs on a shared machine do not enter it; FLOPs are "
    "analytic. On CPU the kept-row "
)


def _figures(out: Path, info: ReportInfo) -> list[str]:
    lines = [
        "## Figures",
        "",
        "Held-out MLM loss of every run against pretraining wall-clock and against FLOPs:",
        "",
        "![loss vs wall-clock](figures/mlm-loss-vs-wall.png)",
        "",
        "![loss vs FLOPs](figures/mlm-loss-vs-flops.png)",
        "",
    ]
    ins = info.inspect
    if ins and not ins.get("error"):
        st = (ins.get("summary") or {}).get("stats", {})
        lines += [
            f"Figure 3 (ours): importance scores of `{ins['run']}` at its last step.",
            "",
            "![importance histogram](figures/fig3-importance-hist.png)",
            "",
        ]
        if st:
            lines.append(
                f"{st.get('seen')} of {st.get('vocab_size')} ids were prediction targets at least "
                f"once; {st.get('unseen_at_init')} still hold the initial score "
                f"{st.get('init_score')}"
                + (
                    f"; the seen ids cover {100 * st['occurrences_of_seen_ids']:.1f}% of the "
                    "training tokens"
                    if isnum(st.get("occurrences_of_seen_ids"))
                    else ""
                )
                + (
                    "; Spearman correlation of score with rarity: "
                    f"{st['spearman_score_vs_rarity']:.3f}"
                    if isnum(st.get("spearman_score_vs_rarity"))
                    else ""
                )
                + "."
            )
            lines.append("")
        tok = ins.get("tokens") or {}
        if tok.get("top"):
            lines.append(
                "Highest scores: "
                + ", ".join(f"`{r['token']}` {r['score']:.2f}" for r in tok["top"][:10])
                + ". Lowest: "
                + ", ".join(f"`{r['token']}` {r['score']:.2f}" for r in tok["bottom"][:10])
                + "."
            )
            lines.append("")
        lines += [
            f"Figure 1 (ours): held-out excerpts, tokens kept by `{ins['run']}`'s selector in bold "
            "with their scores ([HTML](figures/fig1-examples.html)):",
            "",
            "![examples](figures/fig1-examples.png)",
            "",
        ]
    elif ins:
        lines += [f"Figures 1 and 3 were not produced: {ins['error']}", ""]
    if info.evaluation:
        lines += [
            "The suite's own table (with the best grid cell per model and per-seed rows) is "
            "[`eval/results.md`](eval/results.md).",
            "",
        ]
    return lines


def write_report(study: StudyConfig, out: Path, res: StudyResults, info: ReportInfo) -> Path:
    lines = [
        f"# Token dropping study{f' — {study.name}' if study.name else ''}",
        "",
        f"Generated {info.generated} by `tokendrop study`. Every number below was measured in this "
        "study's runs (files under this directory); the paper's numbers appear only in the prose, "
        "marked as the paper's.",
        "",
    ]
    if study.note:
        lines += [study.note, ""]
    lines += _what_was_run(study, res, info)
    lines += _time_per_method(study, res, info)
    lines += [FINDINGS_HEADING, ""]
    lines += [f"- {s}" for s in findings(res, study)]
    lines += [""] + _paper_section(study, res, info)
    lines += ["## Tables", ""]
    for f in (
        "lr-sweep.md",
        "table1.md",
        "table3.md",
        "table4.md",
        "time-to-quality.md",
        "selection.md",
    ):
        p = out / "tables" / f
        if p.is_file():
            body = p.read_text(encoding="utf-8").splitlines()
            lines += ["##" + body[0]] + body[1:] + [""]
    lines += _figures(out, info)
    p = out / "study.md"
    atomic_write_text(p, "\n".join(lines))
    return p


def export_report(out: Path, dest: Path) -> Path:
    """Copy study.md, study.json, the suite's eval/results.*, tables/ and figures/ (no runs, no
    checkpoints) to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in (
        "study.md",
        "study.json",
        "study.toml",
        "eval/results.md",
        "eval/results.json",
        "eval/suite.toml",
    ):
        if (out / f).is_file():
            (dest / f).parent.mkdir(exist_ok=True)
            shutil.copyfile(out / f, dest / f)
    for sub in ("tables", "figures"):
        if (out / sub).is_dir():
            (dest / sub).mkdir(exist_ok=True)
            for f in (out / sub).iterdir():
                if f.is_file() and not f.name.startswith("."):
                    shutil.copyfile(f, dest / sub / f.name)
    return dest


def refresh_findings(report_dir: Path) -> list[str]:
    """Recompute the findings and the claim-by-claim comparison of a written study report (a study's
    output or its ``docs_dir`` copy) from its ``study.json`` and ``study.toml`` with this version's
    judging rules, and rewrite those two lists in ``study.md`` and ``findings`` in ``study.json``.
    Every other line is kept.  Returns the new findings."""
    d = json.loads((report_dir / "study.json").read_text(encoding="utf-8"))
    res, study = results_from_json(d), load_study(report_dir / "study.toml", recorded=True)
    found, claims = findings(res, study), paper_comparison(res, study)
    lines = (report_dir / "study.md").read_text(encoding="utf-8").split("\n")

    def replace_list(heading: str, items: list[str]) -> None:
        # the heading, a blank line, then "- " items up to the next blank line
        i = lines.index(heading) + 2
        j = i
        while j < len(lines) and lines[j].startswith("- "):
            j += 1
        lines[i:j] = [f"- {x}" for x in items]

    replace_list(FINDINGS_HEADING, found)
    if claims and CLAIMS_HEADING in lines:
        replace_list(CLAIMS_HEADING, claims)
    atomic_write_text(report_dir / "study.md", "\n".join(lines))
    atomic_write_json(report_dir / "study.json", {**d, "findings": found})
    return found
