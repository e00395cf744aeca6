"""How both sides of a benchmark train: the same AdamW and the same ``torch.compile`` settings for
our model (:mod:`.steps`) and for transformers' (:mod:`.hf_baseline`)."""

from __future__ import annotations

import torch
from torch import nn

from tokendrop.lab.bench.presets import BenchConfig
from tokendrop.train.runtime import adamw


def make_optimizer(model: nn.Module, cfg: BenchConfig) -> torch.optim.Optimizer:
    return adamw(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, fused=True if cfg.fused_adamw else None)


def compile_model(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """``torch.compile(model, dynamic=False)`` with room for one graph per (shape, dropping)
    pair."""
    import torch._dynamo

    dc = torch._dynamo.config
    if hasattr(dc, "recompile_limit"):
        dc.recompile_limit = max(dc.recompile_limit, 64)
    else:  # older torch
        dc.cache_size_limit = max(dc.cache_size_limit, 64)
    return torch.compile(model, dynamic=False, backend=backend)
