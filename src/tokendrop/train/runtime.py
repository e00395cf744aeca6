"""Where and how a model trains, shared by pretraining, fine-tuning and the benchmark: the device,
the autocast precision, seeding, AdamW's parameter groups and the optimizer itself.

    device = resolve_device("auto")                      # cuda (this rank's GPU) when there is one
    amp = autocast_dtype("auto", device)                 # bf16 on CUDA, None (fp32) on CPU
    opt = adamw(model, lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6)

Learning-rate schedules live in :mod:`tokendrop.train.schedules`; process groups and wrapping in
:mod:`tokendrop.train.parallel`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn

from tokendrop.errors import TokendropError


def resolve_device(
    name: str,
    local_rank: int = 0,
    field: str = "train.device",
    error: type[TokendropError] = TokendropError,
) -> torch.device:
    """``auto`` -> this process's GPU if CUDA is available, else the CPU; ``cuda`` -> GPU
    ``local_rank`` (torchrun's LOCAL_RANK) made current; ``cuda:N`` as given; ``cpu``.  CUDA asked
    for but missing: ``error`` naming ``field``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise error(
                f"{field}: {name!r} requested but CUDA is not available on this machine; use "
                f"{field} = cpu (or auto)"
            )
        dev = torch.device("cuda", local_rank) if name == "cuda" else torch.device(name)
        torch.cuda.set_device(dev)
        return dev
    return torch.device(name)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``precision``: ``auto`` = bf16 on CUDA and fp32 (None) on CPU;
    ``bf16``; ``fp32``."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    return torch.bfloat16


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's generators (every device) from one seed."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups as BERT: decay on weight matrices and embeddings, none on 1-D tensors (biases,
    LayerNorm, the MLM output bias); frozen parameters left out."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW over :func:`param_groups` (decoupled weight decay); ``fused=None``: torch's default."""
    kw: dict[str, Any] = {"lr": lr, "betas": betas, "eps": eps}
    if fused is not None:
        kw["fused"] = fused
    return torch.optim.AdamW(param_groups(model, weight_decay), **kw)
