"""The settings a benchmark times and the synthetic packed MLM batch they run on."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.lab.bench.presets import BENCH_VARIANTS, BenchConfig
from tokendrop.lab.sizes import DOCUMENT_ROW


@dataclass
class Setting:
    # tokendrop | hf | hf_td (transformers' model patched by tokendrop.transformers) | hf_released
    # (transformers' model as released: its head on all T positions)
    impl: str
    variant: str  # dense | drop | pass | avg | random_ltd
    rate: float
    seq_len: int
    batch_size: int

    @property
    def name(self) -> str:
        if self.impl == "hf":
            return f"T{self.seq_len}/hf"
        if self.impl == "hf_released":
            return f"T{self.seq_len}/hf-released"
        if self.variant == "dense":
            return f"T{self.seq_len}/dense"
        prefix = "hf-" if self.impl == "hf_td" else ""
        return f"T{self.seq_len}/{prefix}{self.variant}-{self.rate:g}"

    def drop_config(self, method: str) -> DropConfig | None:
        if self.variant == "dense" or self.impl in ("hf", "hf_released"):
            return None
        return BENCH_VARIANTS[self.variant].drop_config(method, self.rate)


def build_settings(cfg: BenchConfig) -> list[Setting]:
    """Per T: our dense step, every variant x rate, then (``hf``) transformers' step and
    (``hf_released``) transformers' model as released, (``hf_token_dropping``) transformers' model
    patched at every variant x rate."""
    out = []
    for t in cfg.seq_lens:
        b = cfg.batch_size(t)
        out.append(Setting("tokendrop", "dense", 0.0, t, b))
        dropping = [
            (v, r) for v in cfg.variants for r in ([0.5] if BENCH_VARIANTS[v].pools else cfg.rates)
        ]
        out += [Setting("tokendrop", v, r, t, b) for v, r in dropping]
        if cfg.hf:
            out.append(Setting("hf", "dense", 0.0, t, b))
        if cfg.hf_released:
            out.append(Setting("hf_released", "dense", 0.0, t, b))
        if cfg.hf_token_dropping:
            out += [Setting("hf_td", v, r, t, b) for v, r in dropping]
    return out


def synthetic_batch(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    device: torch.device,
    seed: int = 0,
    document_tokens: int | str = 64,
) -> dict[str, Tensor]:
    """A packed MLM micro-batch of static shape, as ``tokendrop.data.MLMLoader`` yields it.

    [CLS] at 0, a [SEP] every ``document_tokens`` tokens (``"row"``: one document per row) and at
    the end, random ids elsewhere; P = round(0.15 T) prediction slots at distinct non-special
    positions, their inputs replaced by [MASK].
    """
    g = torch.Generator().manual_seed(seed + 1000 * seq_len + batch_size)
    ids = torch.randint(len(SPECIAL_IDS), vocab_size, (batch_size, seq_len), generator=g)
    ids[:, 0] = SPECIAL_IDS["cls"]
    if document_tokens != DOCUMENT_ROW:
        ids[:, document_tokens - 1 :: document_tokens] = SPECIAL_IDS["sep"]
    ids[:, -1] = SPECIAL_IDS["sep"]
    p = max(1, round(0.15 * seq_len))
    special = (ids == SPECIAL_IDS["cls"]) | (ids == SPECIAL_IDS["sep"])
    noise = torch.rand(batch_size, seq_len, generator=g).masked_fill(special, 2.0)
    pos = noise.argsort(dim=1)[:, :p].sort(dim=1).values  # (B, P)
    labels = ids.gather(1, pos)
    ids = ids.scatter(1, pos, SPECIAL_IDS["mask"])
    mb = {
        "input_ids": ids,
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long),
        "mlm_positions": pos,
        "mlm_labels": labels,
        "mlm_weights": torch.ones(batch_size, p),
    }
    return {k: v.to(device) for k, v in mb.items()}
