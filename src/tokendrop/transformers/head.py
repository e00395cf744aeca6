"""A transformers MLM model whose checkpoint had no MLM head (a sentence-transformers model such as
all-MiniLM-L6-v2, or any ``BertModel`` / ``ModernBertModel`` checkpoint) starts that head at random;
its random gradients reach the encoder in the first steps.  ``pretrain`` trains such a head alone
first (``train.head_warmup_steps``); :func:`warm_up_mlm_head` does the same for a transformers model
before ``Trainer.train``, and :func:`mlm_head_is_fresh` tells whether a model needs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from tokendrop.transformers.options import TokenDroppingError


def _head_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The MLM head's own parameters: every parameter outside the encoder (``base_model_prefix``);
    the decoder weight tied to the word embeddings is the encoder's (``named_parameters`` names a
    shared tensor once, under the embeddings)."""
    prefix = getattr(model, "base_model_prefix", "")
    if not prefix or not hasattr(model, prefix):
        what = type(model).__name__
        raise TokenDroppingError(
            "warm_up_mlm_head: expected a transformers MLM model "
            f"(BertForMaskedLM, ModernBertForMaskedLM), got {what}"
        )
    return [(n, p) for n, p in model.named_parameters() if not n.startswith(prefix + ".")]


def _untouched(norms: list[nn.Module]) -> bool:
    return bool(norms) and all(
        bool((m.weight == 1).all()) and (m.bias is None or bool((m.bias == 0).all())) for m in norms
    )


def mlm_head_is_fresh(model: nn.Module) -> bool:
    """Whether ``model``'s MLM head is as transformers initialises a missing one (every LayerNorm
    of the head exactly 1 and 0, which training never leaves exactly) while its encoder is trained
    (some encoder LayerNorm is not): a checkpoint loaded without its MLM head.  A model built from
    scratch is fresh everywhere: False."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.LayerNorm) and n]
    head = [m for n, m in norms if not n.startswith(prefix)]
    encoder = [m for n, m in norms if n.startswith(prefix)]
    return _untouched(head) and bool(encoder) and not _untouched(encoder)


FRESH_HEAD_NOTE = (
    "tokendrop: this model's MLM head is untrained (its checkpoint had none, e.g. "
    "a sentence-transformers model; transformers' MISSING keys are that head) and "
    "its random gradients reach the encoder in the first steps: warm it up alone "
    "first with tokendrop.transformers.warm_up_mlm_head(model, "
    "trainer.get_train_dataloader(), steps=100), as tokendrop pretrain does "
    "(docs/transformers.md)"
)


def warm_up_mlm_head(
    model: nn.Module, batches: Iterable[Mapping[str, Any]], steps: int = 100, lr: float = 1e-3
) -> list[float]:
    """Train ``model``'s MLM head alone (the encoder and the tied decoder weight frozen) for
    ``steps`` batches of ``batches`` (dicts a data collator yields: ``input_ids``, ``labels``, ...;
    cycled when shorter); AdamW, a linear warm-up over the first 10% then linear decay to 0, as
    ``pretrain``'s MLM-head warm-up.  -> the per-step losses.  ``requires_grad`` and the training
    mode are restored.  Call it before ``apply_token_dropping``: a patched model in training mode
    drops tokens in the warm-up too."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise TokenDroppingError(
            f"warm_up_mlm_head: steps must be a positive integer, got {steps!r}"
        )
    head = [p for _, p in _head_parameters(model)]
    head_ids = {id(p) for p in head}
    frozen = [p for p in model.parameters() if id(p) not in head_ids and p.requires_grad]
    opt = torch.optim.AdamW(head, lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    warm = max(1, steps // 10)
    was_training = model.training
    losses: list[float] = []
    model.train()
    try:
        for p in frozen:
            p.requires_grad_(False)
        it = iter(batches)
        while len(losses) < steps:
            try:
                batch = next(it)
            except StopIteration:
                it = iter(batches)
                batch = next(it)
            k = len(losses)  # linear warm-up to lr over ``warm`` steps, then linear decay to 0
            rate = (k + 1) / warm if k < warm else max(0.0, (steps - k) / max(1, steps - warm))
            for g in opt.param_groups:
                g["lr"] = lr * rate
            out = model(
                **{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            )
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(out.loss.detach()))
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.train(was_training)
    return losses


__all__ = ["FRESH_HEAD_NOTE", "mlm_head_is_fresh", "warm_up_mlm_head"]
