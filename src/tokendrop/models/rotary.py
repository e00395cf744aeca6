"""Rotary positions for the families that have them (``rotary = true`` in their ``family.toml``):
the cos/sin of one base (:class:`Rotary`), their application to queries or keys
(:func:`apply_rotary`), positions restarting in every document of a packed row
(:func:`document_positions`), and the cos/sin of one forward per rows and base (:class:`RowRopes`),
what :class:`tokendrop.models.encoder.EncoderModel` and the transformers integration
(``tokendrop.transformers.encoders``) hand each layer for the rows it sees.

Shapes: B batch, T sequence, n rows, h heads, dh head size.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor, nn


def document_positions(doc: Tensor) -> Tensor:
    """(B, T) document ids -> (B, T) position of each token within its document (0 at its start)."""
    t = torch.arange(doc.shape[1], device=doc.device).expand_as(doc)
    new = torch.ones_like(doc, dtype=torch.bool)
    new[:, 1:] = doc[:, 1:] != doc[:, :-1]
    start = torch.where(new, t, torch.zeros_like(t)).cummax(dim=1).values
    return t - start


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """cos/sin of one rotary base for given positions (computed as ``transformers`` does, in
    fp32)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        # pos (B or 1, n) -> cos, sin (B or 1, 1, n, dh)
        freqs = pos[..., None].float() * self.inv_freq.to(device=pos.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """(B, h, n, dh) rotated in fp32 (float64 stays float64) and cast back (as transformers'
    apply_rotary_pos_emb)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return ((xf * cos) + (rotate_half(xf) * sin)).to(x.dtype)


class RowRopes:
    """The cos/sin of one forward: ``compute(rows, base)`` runs once per (rows, base) -- rows a
    ``tokendrop.dropping.engine.Rows`` (its ``pos``), base what picks the rotary base -- and is
    reused by every layer that asks again.  Keyed by the rows' identity; the rows are kept alive
    with their cos/sin, so ids stay unique."""

    def __init__(self, compute: Callable[[Any, Hashable], tuple[Tensor, Tensor]]):
        self.compute = compute
        self._cache: dict[tuple[int, Hashable], tuple] = {}

    def __call__(self, rows: Any, base: Hashable) -> tuple[Tensor, Tensor]:
        key = (id(rows), base)
        if key not in self._cache:
            self._cache[key] = (rows, self.compute(rows, base))
        return self._cache[key][1]


__all__ = ["Rotary", "RowRopes", "apply_rotary", "document_positions", "rotate_half"]
