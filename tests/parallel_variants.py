"""Run under torchrun (2 ranks, gloo) by tests/test_parallel.py: every dropping method and variant,
random-LTD and ScTD's consistency term, both encoder families, 2 optimizer steps of 2 micro-batches each, once with the model under DDP and
once under FSDP2; rank 0 writes the losses and gradient norms of both as JSON to argv[1]."""

import json
import sys

import numpy as np
import torch

from tokendrop.config import Config, DropConfig, ModelConfig, TrainConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.importance import build_selector
from tokendrop.families import build_model
from tokendrop.parallel import close_distributed, init_distributed, wrap
from tokendrop.runtime import param_groups
from tokendrop.train import MLMStep

V, T, P = 120, 32, 5
COMBOS = [("cumulative", "drop"), ("half_random", "drop"), ("random", "drop"), ("frequency", "drop"),
          ("cumulative", "pass"), ("cumulative", "layer_rearranged"), ("none", "avg"), ("random_ltd", "drop"),
          ("cumulative", "drop+sctd")]  # drop+sctd: ScTD's consistency term (its dense pass) on every step


def batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, V, (2, T), generator=g)
    ids[:, 0], ids[:, 15], ids[:, -1] = SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["sep"]
    pos = torch.stack([torch.randperm(T - 2, generator=g)[:P] + 1 for _ in range(2)]).sort(-1).values
    labels = torch.gather(ids, 1, pos)
    return {"input_ids": ids.scatter(1, pos, SPECIAL_IDS["mask"]), "mlm_positions": pos, "mlm_labels": labels,
            "mlm_weights": torch.ones(2, P), "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}


def run(family: str, method: str, variant: str, kind: str, dd) -> list[list[float]]:
    kw = dict(vocab_size=V, sep_token_id=SPECIAL_IDS["sep"], hidden_dropout=0.0, attention_dropout=0.0)
    if family == "bert":
        kw.update(num_layers=4, hidden_size=32, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    else:  # the preset sets the family
        kw.update(preset="modern-tiny", local_attention=16, max_position_embeddings=64)
    mc = ModelConfig(**kw)
    sctd = variant.endswith("+sctd")
    extra = dict(consistency_weight=0.5, consistency_every=1) if sctd else {}
    extra.update(ltd_step=4) if method == "random_ltd" else None
    drop = DropConfig(method=method, variant=variant.removesuffix("+sctd"), rate=0.5, **extra)
    cfg = Config(model=mc, drop=drop, train=TrainConfig(steps=2, batch_size=8, lr=1e-3, warmup_steps=0)).validate()
    torch.manual_seed(0)
    model = build_model(mc, drop)
    if family == "bert":
        model.bert.pooler.requires_grad_(False)  # as in pretraining (no NSP)
    par = wrap(model, kind, dd, torch.device("cpu"), None)
    counts = np.arange(V, dtype=np.float64)
    selector = build_selector(drop, V, SPECIAL_IDS, T, counts=counts, seed=dd.rank) if drop.enabled else None
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, fused=True)
    step = MLMStep(model, selector, opt, cfg, None, par, use_attention_mask=False)
    out = []
    for s in range(2):
        micro = [batch(1000 * s + 10 * dd.rank + i) for i in range(2)]
        r = step(micro, 1e-3, dropping=drop.enabled, step=s)
        out.append([r["loss"].item(), float(r["grad_norm"])])
    return out


def main() -> None:
    dd = init_distributed("cpu", "fsdp")
    res = {}
    for family in ("bert", "modernbert"):
        for method, variant in COMBOS:
            key = f"{family}/{method}/{variant}"
            res[key] = {kind: run(family, method, variant, kind, dd) for kind in ("ddp", "fsdp")}
    if dd.main:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f)
    close_distributed(dd, clean=True)  # the models' DDP/FSDP state collected before the group goes


if __name__ == "__main__":
    main()
