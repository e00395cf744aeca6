"""Host syncs and aten ops per training step, counted on CPU by the census (docs/design.md §4.7).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/step_census.py \\
        --data DATA --label after   # ~3 min

Two parts, each one untimed step per setting under ``tokendrop.train.census.Census`` (CUDA's
sync-debug rules applied to the ops; a step after one warm-up step):

* ``bench``: the step ``tokendrop bench`` times (``MLMStep`` on one micro-batch of B = 2 synthetic
  packed rows, T = 128, fp32): bert-base and modern-base, dense and 50% token dropping (cumulative);
  and modern-base with per-document attention at T = 512, B = 1 (64-token documents: bands).
* ``trainer``: real ``pretrain`` steps (the trainer's loop: the loader's batches copied to the
  device, the step, its counters) of a 6 x 384 BERT (study-strong's MiniLM shape, from scratch) on
  the stand-in corpus at T = 128 and batch 16: the plain recipe (batch 16, masking 15%, linear LR)
  and the strong one (study-strong: batch 8 -> 16 over the first quarter, masking 30% -> 15%, WSD),
  dense and 50% token dropping; the census of every non-logging step after the batch warm-up, so
  both recipes run the same batch.

The "before" column is the tree before the sync-free step with this census copied in (the census is
new): ``git archive 2307504 src | tar -x -C /tmp/before``, then ``cp src/tokendrop/host.py
/tmp/before/src/tokendrop/ && cp src/tokendrop/train/census.py /tmp/before/src/tokendrop/train/``
and ``PYTHONPATH=/tmp/before/src python benchmarks/step_census.py --label before``.  Each run
updates its label in ``benchmarks/results/step_census.json`` and rewrites ``step_census.md`` from
every label."""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

from tokendrop.runs.files import atomic_write_text

OUT = Path(__file__).resolve().parent / "results"
CORPUS = "mixed-english-small.txt"  # the stand-in corpus's sample (293 documents)
VOCAB = "bert-base-uncased-vocab.txt"


def bench_part() -> list[dict]:
    from tokendrop.lab.bench.presets import BenchConfig
    from tokendrop.lab.bench.steps import StepBuilder
    from tokendrop.lab.bench.workload import build_settings
    from tokendrop.train.census import Census

    rows = []
    for model, t, docs in (
        ("bert-base", 128, "off"),
        ("modern-base", 128, "off"),
        ("modern-base", 512, "on"),
    ):
        cfg = BenchConfig(
            model=model,
            seq_lens=[t],
            batch_sizes=[2 if t == 128 else 1],
            variants=["drop"],
            rates=[0.5],
            hf=False,
            method="cumulative",
            threads=1,
            document_attention=docs,
        )
        cfg.validate()
        model = model + (" documents" if docs == "on" else "")
        builder = StepBuilder(cfg, torch.device("cpu"))
        for s in build_settings(cfg):
            r = builder.runner(s)
            r.step()  # warm-up: AdamW state, the selector's generator
            with Census() as c:
                r.step()
            rows.append(
                {
                    "part": "bench",
                    "model": model,
                    "setting": s.name,
                    "ops": c.ops,
                    "syncs": len(c.syncs),
                    "where": sorted(Counter(x.where for x in c.syncs).items()),
                }
            )
    return rows


def trainer_part(data_root: Path) -> list[dict]:
    from tokendrop.config import load_config
    from tokendrop.data import prepare
    from tokendrop.train import trainer as trainer_mod
    from tokendrop.train.census import Census

    data = data_root / "packed-128"
    prepare(
        [str(data_root / "corpus.txt")],
        data,
        seq_len=128,
        vocab=data_root / "vocab.txt",
        eval_fraction=0.05,
        workers=1,
        progress=False,
    )
    model = [
        "model.num_layers=6",
        "model.hidden_size=384",
        "model.num_heads=12",
        "model.intermediate_size=1536",
    ]
    common = [
        f'data.path="{data}"',
        "train.steps=8",
        "train.batch_size=16",
        "train.log_every=1000",
        "train.eval_every=1000",
        "train.ckpt_every=1000",
        "train.eval_batches=1",
        "train.threads=1",
        "train.warmup_steps=1",
        "data.num_workers=0",
        *model,
    ]
    strong = [
        "train.lr_schedule='wsd'",
        "train.decay_share=0.2",
        "train.decay_shape='1-sqrt'",
        "train.batch_warmup_start=8",
        "train.batch_warmup_share=0.25",
        "data.mask_prob=[0.3, 0.15]",
        "data.mask_schedule='linear'",
    ]
    rows = []
    for recipe, extra in (("plain", []), ("strong", strong)):
        for method in ("none", "cumulative"):
            per_step: list[tuple[int, Census]] = []
            real = trainer_mod._Trainer.train_step
            open_: list[Census] = []

            def spy(self, real=real, per_step=per_step, open_=open_):
                if open_:
                    open_.pop().__exit__(None, None, None)
                c = Census()
                c.__enter__()
                open_.append(c)
                per_step.append((self.step + 1, c))
                return real(self)

            trainer_mod._Trainer.train_step = spy
            try:
                cfg = load_config("tiny", [*common, *extra, f"drop.method={method}"])
                trainer_mod.pretrain(
                    cfg, Path(tempfile.mkdtemp(dir=data_root)) / "run", progress=False
                )
            finally:
                trainer_mod._Trainer.train_step = real
                if open_:
                    open_.pop().__exit__(None, None, None)
            # after the warm-up (2 of 8 steps), not the last
            after = [(s, c) for s, c in per_step[:-1] if s > 2]
            ops = sorted({c.ops for _, c in after})
            rows.append(
                {
                    "part": "trainer",
                    "model": "bert 6x384",
                    "recipe": recipe,
                    "setting": f"{recipe}/{method}",
                    "ops": ops[len(ops) // 2],
                    "ops_range": [ops[0], ops[-1]],
                    "syncs": max(len(c.syncs) for _, c in after),
                    "steps": [s for s, _ in after],
                    "where": sorted(
                        Counter(x.where for _, c in after[:1] for x in c.syncs).items()
                    ),
                }
            )
    return rows


def render(results: dict) -> str:
    labels = [k for k in ("before", "after") if k in results] + [
        k for k in results if k not in ("before", "after")
    ]
    first = results[labels[0]]
    out = [
        "# Host syncs and aten ops per training step (census on CPU)",
        "",
        "- commands (the script's docstring has the recipe for the tree before the change): "
        + "; ".join(f"{x}: `{results[x]['command']}`" for x in labels),
        f"- machine: {first['machine']}; torch {first['torch']}; fp32",
        "- syncs: ops that would make a CUDA host wait (`tokendrop.train.census`: CUDA's "
        "sync-debug rules on "
        "the ops); ops: aten ops dispatched (forward, backward, AdamW, importance update)",
        "- modern-base documents: per-document attention over 64-token documents at T = 512 "
        "(bands); under the census (an accelerator's view) the document-only masks are the bias "
        "where the CPU builds bands from a host read (on CUDA without attention dropout: "
        "FlexAttention), hence the fewer ops",
        "- before: the tree at 2307504 (main before the sync-free step); after: this branch "
        "rebased onto main, which also carries other work (e.g. BERT's fused QKV projection where "
        "Q and K/V read the same rows): the ops columns compare trees, the syncs and the "
        "strong/plain ratio are this change's",
        "",
    ]
    head = "| part | setting | " + " | ".join(f"{x} syncs | {x} ops" for x in labels) + " |"
    out += [head, "|---|---|" + "---:|---:|" * len(labels)]
    keys = [(r["part"], r["model"], r["setting"]) for r in first["rows"]]
    for key in keys:
        cells = []
        for x in labels:
            r = next(
                (r for r in results[x]["rows"] if (r["part"], r["model"], r["setting"]) == key),
                None,
            )
            cells.append("- | -" if r is None else f"{r['syncs']} | {r['ops']}")
        out.append(f"| {key[0]} | {key[1]} {key[2]} | " + " | ".join(cells) + " |")
    for x in labels:
        tr = {r["setting"]: r["ops"] for r in results[x]["rows"] if r["part"] == "trainer"}
        ratios = [
            f"{m}: {tr[f'strong/{m}'] / tr[f'plain/{m}']:.2f}x"
            for m in ("none", "cumulative")
            if f"strong/{m}" in tr and f"plain/{m}" in tr
        ]
        if ratios:
            out.append(
                f"\n{x}: strong / plain aten ops per step at batch 16 -- " + ", ".join(ratios)
            )
        where = {
            f"{r['part']} {r['model']} {r['setting']}": r["where"]
            for r in results[x]["rows"]
            if r["where"]
        }
        if where:
            out.append(
                f"\n{x}: where the syncs are -- "
                + "; ".join(
                    f"{k}: " + ", ".join(f"{n} x {w}" for w, n in v) for k, v in where.items()
                )
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="after")
    ap.add_argument(
        "--data", default="", help="the offline stand-in data directory (its corpus/ and vocab/)"
    )
    ap.add_argument(
        "--render", action="store_true", help="only rewrite step_census.md from the JSON"
    )
    args = ap.parse_args(argv)
    path = OUT / "step_census.json"
    if args.render:
        atomic_write_text(OUT / "step_census.md", render(json.loads(path.read_text())))
        return 0
    if not args.data:
        ap.error("--data DIR (the stand-in data) is required unless --render")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "corpus.txt").write_bytes((Path(args.data) / "corpus" / CORPUS).read_bytes())
        (root / "vocab.txt").write_bytes((Path(args.data) / "vocab" / VOCAB).read_bytes())
        rows = bench_part() + trainer_part(root)
    results = json.loads(path.read_text()) if path.exists() else {}
    results[args.label] = {
        "command": "OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/step_census.py "
        f"--data DATA --label {shlex.quote(args.label)}",
        "machine": f"{platform.machine()}, {torch.get_num_threads()} thread",
        "torch": torch.__version__,
        "rows": rows,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(results, indent=1) + "\n")
    atomic_write_text(OUT / "step_census.md", render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
