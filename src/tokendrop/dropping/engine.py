"""The dropping engine: which rows each layer sees (docs/design.md §2.2), shared by every encoder
family.

A family's encoder hands :func:`run_layers` its layers and a ``call(layer, h, kv_in, q_rows,
k_rows)`` that runs one of them; the engine decides, per layer, which rows are queries and which
are keys/values: full layers see all T rows, the first half layer uses the kept rows as queries and
all rows as keys/values (separation), later half layers see the kept rows only (``drop``), the kept
rows plus the dropped rows frozen at span entry (``pass``), 2:1 pooled rows (``avg``) or a subset of
their own (random-LTD, ``per_layer``), and the merge scatters the kept rows back before the layers
after the span.  Index machinery is a handful of ``index_select`` / ``index_copy`` calls whose
backward autograd derives (as MosaicBERT's ``bert_padding.py``).

Shapes: B batch, T sequence, M kept rows, S half layers (random-LTD), d hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.methods import DropVariant


def flat_index(keep_idx: Tensor, seq_len: int) -> Tensor:
    """(B, M) positions -> (B*M,) row indices into a (B*T, ...) flattened tensor."""
    offsets = torch.arange(keep_idx.shape[0], device=keep_idx.device).unsqueeze(1) * seq_len
    return (keep_idx + offsets).reshape(-1)


def gather_rows(x: Tensor, keep_idx: Tensor) -> Tensor:
    """x (B, T, ...) , keep_idx (B, M) -> (B, M, ...): x[b, keep_idx[b, j]]."""
    b, t = x.shape[:2]
    rows = x.reshape(b * t, *x.shape[2:]).index_select(0, flat_index(keep_idx, t))
    return rows.reshape(b, keep_idx.shape[1], *x.shape[2:])


def scatter_rows(base: Tensor, rows: Tensor, keep_idx: Tensor) -> Tensor:
    """Out-of-place merge: a copy of base (B, T, ...) with base[b, keep_idx[b, j]] = rows[b, j].

    Gradient w.r.t. ``base`` is zero on the overwritten rows; w.r.t. ``rows`` it is gathered.
    """
    b, t = base.shape[:2]
    flat = base.reshape(b * t, *base.shape[2:])
    src = rows.reshape(-1, *rows.shape[2:])
    return flat.index_copy(0, flat_index(keep_idx, t), src).reshape(base.shape)


def _pairs(t: Tensor) -> Tensor:
    """(B, T, ...) -> (B, ceil(T/2), 2, ...): rows (2i, 2i+1); an odd last row paired with
    itself."""
    if t.shape[1] % 2:
        t = torch.cat([t, t[:, -1:]], dim=1)
    return t.reshape(t.shape[0], -1, 2, *t.shape[2:])


def avg_pool_rows(x: Tensor, valid: Tensor | None = None) -> Tensor:
    """(B, T, d) -> (B, ceil(T/2), d): mean of rows (2i, 2i+1); an odd last row stays as is.

    ``valid`` (B, T) 1/0 (padding): the mean of a pair's *valid* rows -- a (real, [PAD]) pair pools
    to its real row alone, exactly as that row would pool at the end of an unpadded odd-length row,
    so padding never enters a real row (docs/design.md §2.2); a pair of two [PAD] rows is their
    mean."""
    pairs = _pairs(x)  # (B, T', 2, d)
    mean = pairs.mean(dim=2)
    if valid is None:
        return mean
    v = _pairs(valid).to(torch.bool)  # (B, T', 2)
    # the pair's valid row (when one is)
    one = torch.where(v[:, :, :1], pairs[:, :, 0], pairs[:, :, 1])
    return torch.where((v[:, :, 0] == v[:, :, 1])[:, :, None], mean, one)


def avg_pool_mask(mask: Tensor) -> Tensor:
    """(B, T) 1/0 attention mask -> (B, ceil(T/2)): a pooled row is valid if either of its rows is
    (max pooling: with :func:`avg_pool_rows`'s validity weights such a row is a real row's state;
    docs/design.md §2.2)."""
    return _pairs(mask).amax(dim=2)


def first_valid_row(t: Tensor, valid: Tensor | None) -> Tensor:
    """(B or 1, T) per-row values -> (B or 1, ceil(T/2)): each pair's first row's value, or its
    second's when only that one is valid (``valid`` (B, T) 1/0 or None)."""
    if valid is None:
        return t[:, ::2]
    v = _pairs(valid).to(torch.bool)
    p = _pairs(t.expand(valid.shape[0], -1))
    return torch.where(v[:, :, 0] | ~v[:, :, 1], p[:, :, 0], p[:, :, 1])


def upsample_rows(x: Tensor, seq_len: int) -> Tensor:
    """(B, ceil(T/2), d) -> (B, T, d): each row repeated twice."""
    return x.repeat_interleave(2, dim=1)[:, :seq_len]


@dataclass
class Rows:
    """What travels with a set of rows through dropping: key validity (B, n) 1/0, document ids
    (B, n), rotary positions (B or 1, n) and ``at``, the row's index in the packed row (B or 1, n;
    ascending, what sliding windows and ``tokendrop.models.attention.Band`` measure); None where
    unused.  ``gather`` / ``pooled`` follow :func:`gather_rows` / :func:`avg_pool_rows`."""

    valid: Tensor | None = None
    doc: Tensor | None = None
    pos: Tensor | None = None
    at: Tensor | None = None

    def gather(self, keep_idx: Tensor) -> Rows:
        b = keep_idx.shape[0]

        def g(t: Tensor | None) -> Tensor | None:
            return None if t is None else gather_rows(t.expand(b, -1), keep_idx)

        return Rows(g(self.valid), g(self.doc), g(self.pos), g(self.at))

    def pooled(self) -> Rows:
        """avg variant (:func:`avg_pool_rows`): a pooled row is valid if either of its rows is; its
        document, position and index are its first valid row's (its first row's when none is)."""

        def first(t: Tensor | None) -> Tensor | None:
            return None if t is None else first_valid_row(t, self.valid)

        return Rows(
            None if self.valid is None else avg_pool_mask(self.valid),
            first(self.doc),
            first(self.pos),
            first(self.at),
        )


@dataclass(frozen=True)
class DropSpan:
    """The resolved dropping layout the encoder follows when dropping is active."""

    start: int
    end: int
    variant: DropVariant  # the ``drop.variant``'s row (tokendrop.dropping.methods.VARIANTS)
    per_layer: bool = False  # random_ltd: keep_idx (S, B, M), a subset of its own per half layer

    @classmethod
    def from_config(cls, drop: DropConfig, num_layers: int) -> DropSpan:
        drop.validate(num_layers)
        start, end = drop.span(num_layers)
        return cls(start, end, drop.variant_row, drop.per_layer)


def run_layers(
    layers, x: Tensor, rows: Rows, span: DropSpan | None, keep_idx: Tensor | None, call
) -> Tensor:
    """The layer schedule of docs/design.md §2.2, shared by both families.

    ``call(layer, h, kv_in, q_rows, k_rows) -> h``: run one layer on query rows ``h`` (described by
    ``q_rows``) with keys/values ``kv_in`` (None = ``h`` itself; described by ``k_rows``).
    x: (B, T, d); keep_idx: (B, M) ascending positions (drop/pass/layer_rearranged), or (S, B, M)
    with ``span.per_layer`` (random_ltd: half layer j runs on its own kept rows keep_idx[j] only, as
    queries and keys/values, and scatters them back; the other rows pass it unchanged; None: the
    schedule is at full length, a dense pass)."""
    if span is None or (span.per_layer and keep_idx is None):
        for layer in layers:
            x = call(layer, x, None, rows, rows)
        return x
    for layer in layers[: span.start]:
        x = call(layer, x, None, rows, rows)
    x_in = x  # (B, T, d) span-entry states; dropped rows leave the span with these
    half = layers[span.start : span.end]
    if span.per_layer:
        assert keep_idx is not None and keep_idx.dim() == 3 and keep_idx.shape[0] == len(half), (
            "random_ltd: keep_idx (S, B, M), one (B, M) per half layer"
        )
        for layer, keep in zip(half, keep_idx):
            kept = rows.gather(keep)
            x = scatter_rows(x, call(layer, gather_rows(x, keep), None, kept, kept), keep)
    elif span.variant.pools:
        # (B, T', d), T' = ceil(T/2); padding never pooled into a real row
        h = avg_pool_rows(x_in, rows.valid)
        pooled = rows.pooled()
        h = call(half[0], h, x_in, pooled, rows)
        for layer in half[1:]:
            h = call(layer, h, None, pooled, pooled)
        x = upsample_rows(h, x_in.shape[1]) + x_in
    else:
        assert keep_idx is not None, f"variant {span.variant.name!r} selects rows: keep_idx needed"
        h = gather_rows(x_in, keep_idx)  # (B, M, d)
        kept = rows.gather(keep_idx)
        h = call(half[0], h, x_in, kept, rows)  # first half layer: all T rows as keys/values
        for layer in half[1:]:
            if span.variant.frozen_kv:  # K/V: kept rows now + dropped rows frozen at entry (pass)
                h = call(layer, h, scatter_rows(x_in, h, keep_idx), kept, rows)
            else:
                h = call(layer, h, None, kept, kept)
        x = scatter_rows(x_in, h, keep_idx)  # (B, T, d), order preserved
    for layer in layers[span.end :]:
        x = call(layer, x, None, rows, rows)
    return x
