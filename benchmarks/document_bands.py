"""Per-document attention as bands vs as the dense block-diagonal bias, side by side
(docs/design.md §2.9).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/document_bands.py   # ~5 min on the 2-core VM

Both families' dense training step (forward + backward, fp32, train mode, no dropping) on packed
rows of equal-length documents, ``model.document_attention = "on"``, timed with documents as the
(B, 1, T, T) additive bias (``tokendrop.models.attention.BAND_DOCUMENTS`` off: every layer attends
all T keys) and as bands forced on (each block of 128 queries attends only the key rows of the
documents it touches; ``BAND_MAX_FRACTION_DOCUMENTS`` lifted), interleaved round by round; speedup =
median of the per-round paired ratios.  ``key share`` is the band's key slots over n * N; the
default uses the band only where it is at most ``BAND_MAX_FRACTION_DOCUMENTS`` (the table's last
column), which this benchmark is how that limit was chosen.  Sliding-window layers use bands either
way.  Shapes: the 12 x 256 models of ``bench --preset cpu-quick`` (BERT, T=512, B=4) and ``bench
--preset modern-cpu`` (ModernBERT, T=1024 with B=2 and T=2048 with B=1).  The two forms' losses must
agree to 1e-5.

Writes ``benchmarks/results/document_bands.json`` and ``.md`` with the command, machine and load.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.lab.bench.environment import environment
from tokendrop.lab.machine import loadavg
from tokendrop.models import attention
from tokendrop.models.families import build_model

OUT = Path(__file__).resolve().parent / "results"
BERT = dict(
    num_layers=12,
    hidden_size=256,
    num_heads=4,
    intermediate_size=1024,
    vocab_size=30522,
    max_position_embeddings=512,
)
MODERN = dict(
    preset="modern-base",
    num_layers=12,
    hidden_size=256,
    num_heads=4,
    intermediate_size=384,
    vocab_size=50368,
)
SETTINGS = [  # (family, model config fields, T, B, document lengths)
    ("bert", BERT, 512, 4, (32, 64, 256)),
    ("modernbert", MODERN, 1024, 2, (64, 256)),
    ("modernbert", MODERN, 2048, 1, (64, 256)),
]


def packed_batch(
    b: int, t: int, doc_len: int, vocab: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Rows of [CLS] and documents of ``doc_len`` tokens each closed by [SEP]; 15% prediction slots
    (on document tokens only: a masked [SEP] would merge two documents)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL_IDS), vocab, (b, t), generator=g)
    ids[:, 0] = SPECIAL_IDS["cls"]
    ids[:, doc_len :: doc_len + 1] = SPECIAL_IDS["sep"]
    ids[:, -1] = SPECIAL_IDS["sep"]
    p = round(0.15 * t)
    # never mask a boundary away
    words = (ids[0] != SPECIAL_IDS["cls"]) & (ids[0] != SPECIAL_IDS["sep"])
    cand = words.nonzero().squeeze(1)
    pos = (
        torch.stack([cand[torch.randperm(len(cand), generator=g)[:p]] for _ in range(b)])
        .sort(-1)
        .values
    )
    labels = torch.gather(ids, 1, pos)
    return {
        "input_ids": ids.scatter(1, pos, SPECIAL_IDS["mask"]),
        "mlm_positions": pos,
        "mlm_labels": labels,
    }


def step(model, batch) -> float:
    loss = model.mlm_nll(
        model(batch["input_ids"], batch["mlm_positions"]), batch["mlm_labels"]
    ).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss.detach())


def key_share(batch, cfg: ModelConfig) -> float:
    """The band's key slots over n * N for these rows (the first layer's band, forced)."""
    from tokendrop.dropping.engine import Rows
    from tokendrop.models.masked_lm import document_ids

    doc = document_ids(batch["input_ids"], cfg.sep_token_id, cfg.pad_token_id)
    rows = Rows(None, doc, None, None)
    band = attention.Band.build(rows, rows, None, torch.float32)
    n = doc.shape[1]
    return 1.0 if band is None else band.slot.shape[1] * band.block * band.slot.shape[2] / (n * n)


def measure(
    family: str, fields: dict, t: int, b: int, doc_len: int, rounds: int, warmup: int
) -> dict:
    cfg = ModelConfig(
        **{**fields, "max_position_embeddings": max(t, fields.get("max_position_embeddings", t))},
        sep_token_id=SPECIAL_IDS["sep"],
        pad_token_id=SPECIAL_IDS["pad"],
        document_attention="on",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_backend="sdpa",
    )
    torch.manual_seed(0)
    model = build_model(cfg).train()
    batch = packed_batch(b, t, doc_len, cfg.vocab_size)
    times: dict[bool, list[float]] = {False: [], True: []}
    losses: dict[bool, float] = {}
    limit = attention.BAND_MAX_FRACTION_DOCUMENTS
    attention.BAND_MAX_FRACTION_DOCUMENTS = 100.0  # bands forced where they apply
    try:
        share = key_share(batch, cfg)
        for r in range(warmup + rounds):
            for on in (False, True):
                attention.BAND_DOCUMENTS = on
                t0 = time.perf_counter()
                losses[on] = step(model, batch)
                if r >= warmup:
                    times[on].append(time.perf_counter() - t0)
    finally:
        attention.BAND_DOCUMENTS, attention.BAND_MAX_FRACTION_DOCUMENTS = True, limit
    if abs(losses[True] - losses[False]) > 1e-5:
        raise SystemExit(
            f"{family} doc_len {doc_len}: losses differ ({losses[False]} vs {losses[True]})"
        )
    ratios = [a / c for a, c in zip(times[False], times[True])]
    return {
        "family": family,
        "seq_len": t,
        "batch_size": b,
        "doc_len": doc_len,
        "key_share": share,
        "default_uses_band": share <= limit,
        "bias_ms": 1e3 * statistics.median(times[False]),
        "band_ms": 1e3 * statistics.median(times[True]),
        "speedup": statistics.median(ratios),
        "speedup_min": min(ratios),
        "speedup_max": max(ratios),
        "loss": losses[True],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=str(OUT / "document_bands"), help="output path without suffix")
    args = ap.parse_args(argv)
    env = environment(torch.device("cpu"))
    t0 = time.time()
    rows = []
    for family, fields, t, b, doc_lens in SETTINGS:
        for doc_len in doc_lens:
            rows.append(measure(family, fields, t, b, doc_len, args.rounds, args.warmup))
            r = rows[-1]
            print(
                f"{family:10s} T={t:5d} docs of {doc_len:4d}: key share {r['key_share']:.2f}, bias "
                f"{r['bias_ms']:6.0f} ms, "
                f"bands {r['band_ms']:6.0f} ms -> {r['speedup']:.2f}x "
                f"({r['speedup_min']:.2f}-{r['speedup_max']:.2f})",
                flush=True,
            )
    env.loadavg_end = loadavg()
    command = "OMP_NUM_THREADS=1 python benchmarks/document_bands.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    out = {
        "command": command.strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(time.time() - t0, 1),
        "environment": env.__dict__,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "band_max_fraction_documents": attention.BAND_MAX_FRACTION_DOCUMENTS,
        "rows": rows,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    md = [
        f"# Per-document attention: bands vs the dense bias ({env.cpu_model}, "
        f"{env.torch_threads} thread(s))",
        "",
        f"- command: `{out['command']}`",
        f"- date: {out['date']}; wall time {out['wall_s']} s",
        f"- torch {env.torch}, Python {env.python}; load average {env.loadavg_start} -> "
        f"{env.loadavg_end}",
        f"- dense training step (forward + backward, fp32), {args.warmup} warm-up + {args.rounds} "
        "interleaved rounds; "
        "speedup = median of paired per-round ratios (min-max)",
        "",
        "- bands forced in the `bands` column; the default uses them where the key share is at "
        f"most {attention.BAND_MAX_FRACTION_DOCUMENTS} "
        "(`BAND_MAX_FRACTION_DOCUMENTS`), else the bias",
        "",
        "| family | T | B | document length | key share | bias ms | bands ms | speedup | "
        "min-max | default |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    md += [
        f"| {r['family']} | {r['seq_len']} | {r['batch_size']} | {r['doc_len']} | "
        f"{r['key_share']:.2f} | {r['bias_ms']:.0f} | {r['band_ms']:.0f} | {r['speedup']:.2f}x | "
        f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f} | "
        f"{'bands' if r['default_uses_band'] else 'bias'} |"
        for r in rows
    ]
    path.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {path.with_suffix('.json')} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
