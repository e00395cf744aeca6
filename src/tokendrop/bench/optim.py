"""How both sides of a benchmark train: the same AdamW and the same ``torch.compile`` settings for our
model (:mod:`.steps`) and for transformers' (:mod:`.hf_baseline`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..train import param_groups
from .presets import BenchConfig


def make_optimizer(model: nn.Module, cfg: BenchConfig) -> torch.optim.Optimizer:
    kw: dict[str, Any] = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-6}
    if cfg.fused_adamw:
        kw["fused"] = True
    return torch.optim.AdamW(param_groups(model, 0.01), **kw)


def compile_model(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """``torch.compile(model, dynamic=False)`` with room for one graph per (shape, dropping) pair."""
    import torch._dynamo

    dc = torch._dynamo.config
    if hasattr(dc, "recompile_limit"):
        dc.recompile_limit = max(dc.recompile_limit, 64)
    else:  # older torch
        dc.cache_size_limit = max(dc.cache_size_limit, 64)
    return torch.compile(model, dynamic=False, backend=backend)
