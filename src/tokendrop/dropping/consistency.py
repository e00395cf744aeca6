"""ScTD's semantic-consistency term on top of token dropping (Zhong et al., ACL 2023, "Revisiting
Token Dropping Strategy in Efficient BERT Pretraining"; docs/design.md §2.11).

What is computed follows the authors' released code (github.com/WHU-ZQH/ScTD: the ``align`` branch
of ``criterions/cross_entropy.py``, switched on by ``tasks/fairseq_task.py`` every 10th update): on
a consistency step the batch also runs through the dense model (training mode, gradients flowing),
and the loss gains, for the [CLS] state h (row 0) at the output of each of the last two layers,

    KL(softmax(h_dense) || softmax(h_drop)) = sum_j p_j (log p_j - log q_j),
        p = softmax(h_dense),  q = softmax(h_drop)

taken over the d hidden features, summed over the sequences and the two layers, times
``drop.consistency_weight`` (the code's 0.05), and normalised like the MLM loss (by the number of
real prediction slots, as fairseq divides the summed loss by its sample size).  Neither side is
detached. The MLM loss stays the token-dropping pass's: the code's second MLM term (``loss_ref``) is
computed from the token-dropping output again, so 0.5 loss + 0.5 loss_ref is the dropping loss
itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def cls_kl(dense: Tensor, dropped: Tensor) -> Tensor:
    """sum_b KL(softmax(dense_b) || softmax(dropped_b)) over the last dimension, in fp32 (float64
    stays float64; a 0-dim tensor); dense/dropped: (B, d) [CLS] states.  The ScTD code's
    ``F.kl_div(log q, p, "sum")``, with p passed as log-probabilities (the same value; a probability
    that underflows to 0 then gives no NaN gradient through the target)."""
    dtype = torch.promote_types(dropped.dtype, torch.float32)
    return F.kl_div(
        F.log_softmax(dropped.to(dtype), dim=-1),
        F.log_softmax(dense.to(dtype), dim=-1),
        reduction="sum",
        log_target=True,
    )


class ClsTaps:
    """Forward hooks on the last two encoder layers that record row 0 ([CLS], always kept: every
    selecting method pins it) of each layer's output while :meth:`record` is open."""

    def __init__(self, layers: nn.ModuleList):
        self._states: list[Tensor] | None = None
        self.handles = [layer.register_forward_hook(self._hook) for layer in list(layers)[-2:]]

    def _hook(self, module: nn.Module, args, out: Tensor) -> None:
        if self._states is not None:
            self._states.append(out[:, 0])

    @contextlib.contextmanager
    def record(self) -> Iterator[list[Tensor]]:
        self._states = states = []
        try:
            yield states
        finally:
            self._states = None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def consistency_term(dropped: list[Tensor], dense: list[Tensor]) -> Tensor:
    """The summed KL over the tapped layers (module docstring), unweighted."""
    if len(dropped) != 2 or len(dense) != 2:
        raise RuntimeError(
            f"ScTD: expected the [CLS] state of the last two layers from each pass, got "
            f"{len(dropped)} and {len(dense)}"
        )
    return sum(cls_kl(b, a) for a, b in zip(dropped, dense))


__all__ = ["ClsTaps", "cls_kl", "consistency_term"]
