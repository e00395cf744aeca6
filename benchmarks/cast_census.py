"""Casts per sequence under bf16 autocast: fp32 LayerNorm (PyTorch's autocast policy) vs the
low-precision one (tokendrop.models.norm), both families (docs/design.md "bf16 residual stream").

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cast_census.py          # ~1 min on the 2-core VM

One training forward + backward of one sequence (bert-base at T=128 and modern-base at T=512, real
vocabulary sizes, dense and 50% token dropping) under ``torch.autocast("cpu",
dtype=torch.bfloat16)``, counted by ``tokendrop.lab.bench.casts.CastCensus``: every dtype-changing
copy, its bytes read + written, and the share of them that are activations (tensors with a row per
token).  CPU autocast runs ``scaled_dot_product_attention`` in fp32, CUDA's in bf16: the attention's
q / k / v / output casts are reported apart (``sdpa``) because CUDA does not run them.

Writes ``benchmarks/results/cast_census.json`` and ``.md`` with the command and machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.lab.bench.casts import CastCensus
from tokendrop.lab.bench.environment import environment
from tokendrop.models import norm
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.modernbert.model import ModernBertForMaskedLM

OUT = Path(__file__).resolve().parent / "results"
SETTINGS = [  # family, model fields, T, prediction slots
    ("bert", dict(preset="bert-base", vocab_size=30522, max_position_embeddings=512), 128, 20),
    (
        "modernbert",
        dict(family="modernbert", preset="modern-base", vocab_size=50368, document_attention="off"),
        512,
        154,
    ),
]


class _Split(CastCensus):
    """Also splits the casts into activations (a dimension of T or M rows), SDPA's (4-d) and the
    rest."""

    def __init__(self, rows: set[int]):
        super().__init__()
        self.rows = rows
        self.kinds = {"activation": [0, 0], "sdpa": [0, 0], "parameter": [0, 0]}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        n, b = self.casts, self.bytes
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.casts > n:
            shape = tuple(args[0].shape)
            kind = (
                "sdpa"
                if len(shape) == 4
                else "activation"
                if set(shape) & self.rows
                else "parameter"
            )
            self.kinds[kind][0] += 1
            self.kinds[kind][1] += self.bytes - b
        return out


def census(family: str, fields: dict, t: int, p: int, drop: bool, low_precision: bool) -> dict:
    cfg = ModelConfig(hidden_dropout=0.0, attention_dropout=0.0, **fields)
    cls = BertForMaskedLM if family == "bert" else ModernBertForMaskedLM
    torch.manual_seed(0)
    model = cls(cfg, DropConfig(method="cumulative") if drop else None).train()
    ids = torch.randint(5, cfg.vocab_size, (1, t))
    pos = torch.randperm(t)[:p].sort().values[None]
    labels = torch.randint(5, cfg.vocab_size, (1, p))
    keep = torch.randperm(t)[: t // 2].sort().values[None] if drop else None
    forward = norm.LayerNorm.forward
    if not low_precision:
        norm.LayerNorm.forward = torch.nn.LayerNorm.forward
    try:
        with _Split({t, t // 2, p}) as c:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(ids, pos, keep_idx=keep)
            model.mlm_nll(logits, labels).sum().backward()
    finally:
        norm.LayerNorm.forward = forward
    return {
        "family": family,
        "seq_len": t,
        "drop": drop,
        "layernorm": "bf16" if low_precision else "fp32",
        "casts": c.casts,
        "mb": round(c.bytes / 2**20, 1),
        **{f"{k}_casts": v[0] for k, v in c.kinds.items()},
        **{f"{k}_mb": round(v[1] / 2**20, 1) for k, v in c.kinds.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT / "cast_census"), help="output path without suffix")
    args = ap.parse_args(argv)
    env = environment(torch.device("cpu"))
    t0 = time.time()
    rows = []
    for family, fields, t, p in SETTINGS:
        for drop in (False, True):
            for lp in (False, True):
                rows.append(census(family, fields, t, p, drop, lp))
                print(rows[-1], flush=True)
    command = "OMP_NUM_THREADS=1 python benchmarks/cast_census.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    out = {
        "command": command.strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(time.time() - t0, 1),
        "environment": env.__dict__,
        "rows": rows,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    md = [
        f"# Casts per sequence under bf16 autocast: fp32 vs bf16 LayerNorm ({env.cpu_model})",
        "",
        f"- command: `{out['command']}`",
        f"- date: {out['date']}; torch {env.torch}",
        "",
        "One training forward + backward of one sequence (batch 1), bert-base / modern-base "
        "shapes. MB = bytes read + written by the casts. `sdpa`: CPU autocast runs attention in "
        "fp32 (CUDA's in bf16, without these casts). `parameter`: the weights cast to bf16 for "
        "their op and their gradients back.",
        "",
        "| family | T | step | LayerNorm | casts | MB | activation casts | activation MB | sdpa "
        "casts | sdpa MB |"
        " parameter casts | parameter MB |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    md += [
        f"| {r['family']} | {r['seq_len']} | {'50% drop' if r['drop'] else 'dense'} | "
        f"{r['layernorm']} | "
        f"{r['casts']} | {r['mb']} | {r['activation_casts']} | {r['activation_mb']} | "
        f"{r['sdpa_casts']} | "
        f"{r['sdpa_mb']} | {r['parameter_casts']} | {r['parameter_mb']} |"
        for r in rows
    ]
    path.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {path.with_suffix('.json')} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
