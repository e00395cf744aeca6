"""How attention runs: masks and kernels, for both families (docs/design.md §2.9).

Every attention call of an encoder goes through :func:`attend` with the mask a :class:`MaskCache`
built for its (query rows, key rows, window).  The rows are described by
``tokendrop.dropping.engine.Rows``: key validity (padding), document ids (per-document attention),
rotary positions and ``at``, the row's original index in the packed row (ascending in any set of
kept rows).  Query row i may attend key row j iff j is valid, both are in the same document and, in
a sliding-window layer, ``|pos_i - pos_j| <= window``.  The mask takes one of three forms, all exact
(the same set of allowed pairs, so the same result up to float summation order):

* an additive bias for ``F.scaled_dot_product_attention`` (:func:`attention_bias`) -- None when
  nothing is masked (flash kernels on GPU), (B, 1, 1, N) for padding only, (B, 1, n, N) otherwise;
* a :class:`Band` for sliding-window layers and per-document attention with SDPA: queries in
  blocks of ``BAND_BLOCK`` rows, each attending only the contiguous run of key rows its window and
  its documents can reach (found by binary search on ``at`` and on the document ids), so a window
  layer costs O(n * (block + 2 * window)) instead of O(n * N), and a layer over short packed
  documents O(n * (block + 2 * document length)); eager only (its length depends on the data:
  under ``torch.compile`` the bias is used instead);
* a FlexAttention ``BlockMask`` (``model.attention_backend``: ``flex``, or ``auto`` on CUDA when
  there is no attention dropout): document and window masks become block-sparse, fully masked
  blocks are skipped by the fused kernel.

Within one document the rotary positions and ``at`` differ by the same amount, so the window test
may use either; across documents the pair is masked anyway.

A query row with no allowed key (a [PAD] row under per-document attention) gives 0 in every form:
FlexAttention does so by itself, SDPA would give the mean of V, so with padding among the keys the
bias comes as a :class:`Bias` and a :class:`Band` carries ``live``, both zeroing those rows after
the kernel.  Without padding every query row is one of its own keys: nothing extra is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tokendrop.errors import ConfigError
from tokendrop.host import host_reads_free

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch: FlexAttention unavailable
    BlockMask = create_block_mask = flex_attention = None

BAND_BLOCK = 128  # query rows per block of a banded (sliding-window) SDPA call
# a band whose key slots exceed this share of n * N falls back to the dense bias
BAND_MAX_FRACTION = 0.75
# per-document attention without a window as bands too (False: the bias; benchmarks)
BAND_DOCUMENTS = True
# documents alone need a smaller share to pay for the band's K/V gather
# (benchmarks/document_bands.py, CPU: a key share <= 0.38 gained 1.06-1.39x, 0.5 about even, a band
# as long as the row 0.78x)
BAND_MAX_FRACTION_DOCUMENTS = 0.4


def flex_available() -> bool:
    return flex_attention is not None


def check_flex_available(backend: str) -> None:
    """``flex`` needs FlexAttention (torch >= 2.5).  ConfigError otherwise (a property of the
    installed torch, so checked where a model runs, not when the config is parsed)."""
    if backend == "flex" and not flex_available():
        raise ConfigError(
            f"model.attention_backend: flex needs FlexAttention (torch >= 2.5, this is "
            f"{torch.__version__}); use auto or sdpa"
        )


def use_flex(backend: str, device: torch.device, attention_dropout: float) -> bool:
    """Whether FlexAttention runs the masked layers: ``flex``; or ``auto`` on CUDA when the
    attention dropout in effect is 0 (FlexAttention has no dropout)."""
    if backend == "flex":
        check_flex_available(backend)
        return True
    return (
        backend == "auto"
        and device.type == "cuda"
        and attention_dropout == 0.0
        and flex_available()
    )


def check_training_device(backend: str, device_type: str) -> None:
    """``flex`` trains only on CUDA (FlexAttention has no CPU backward) and needs FlexAttention.
    ConfigError otherwise."""
    check_flex_available(backend)
    if backend == "flex" and device_type != "cuda":
        raise ConfigError(
            "model.attention_backend: flex trains only on CUDA (FlexAttention has no "
            f"{device_type} backward); use auto or sdpa here"
        )


def _neg(dtype: torch.dtype, device: torch.device) -> tuple[torch.dtype, float]:
    """The dtype the attention runs in (the autocast dtype when autocast is on) and its most
    negative finite value: the masked bias (never -inf, so a fully masked row is no NaN)."""
    if torch.is_autocast_enabled(device.type):
        dtype = torch.get_autocast_dtype(device.type)
    return dtype, torch.finfo(dtype).min


def allowed_pairs(
    mask: Tensor | None,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    q_doc: Tensor | None = None,
    k_doc: Tensor | None = None,
    window: int | None = None,
) -> Tensor | None:
    """The mask rule as booleans (True = may attend): None when nothing is masked, (B, 1, 1, N) for
    padding only, else (B or 1, 1, n, N).  Arguments as :func:`attention_bias`."""
    allowed = None
    if q_doc is not None and k_doc is not None:
        allowed = q_doc[:, :, None] == k_doc[:, None, :]  # (B, n, N)
    if window is not None:
        near = (q_pos[:, :, None] - k_pos[:, None, :]).abs() <= window
        allowed = near if allowed is None else allowed & near
    if allowed is None:
        return None if mask is None else mask[:, None, None, :].to(torch.bool)  # (B, 1, 1, N)
    if mask is not None:
        allowed = allowed & mask[:, None, :].to(torch.bool)
    return allowed[:, None]  # (B, 1, n, N)


def attention_bias(
    mask: Tensor | None,
    dtype: torch.dtype,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    q_doc: Tensor | None = None,
    k_doc: Tensor | None = None,
    window: int | None = None,
) -> Tensor | None:
    """The additive-bias form of the mask: None when nothing is masked.

    ``mask`` (B, N) 1 = attend / 0 = padding is the keys' validity.  Without document ids and window
    the bias is (B, 1, 1, N) -- the dense path materialises nothing beyond padding.  With
    ``q_doc``/``k_doc`` (B, n)/(B, N) document ids and/or ``window`` with ``q_pos``/``k_pos``
    (positions of the query and key rows, (B or 1, n)/(B or 1, N)) it is (B or 1, 1, n, N).

    0 where attended and the most negative finite value of the dtype the attention runs in -- the
    autocast dtype when autocast is on (bf16/fp16), else ``dtype`` -- where masked.  Built with
    ``masked_fill`` (no ``0 * min`` products) and in that dtype, so autocast's cast of the mask
    never turns it into -inf (a fully masked row would then give NaN) and no value overflows.  A
    query row with no allowed key at all comes out of SDPA as the plain mean of V: :class:`Bias`
    (what
    :class:`MaskCache` builds) sets such rows to 0."""
    keep = allowed_pairs(mask, q_pos, k_pos, q_doc, k_doc, window)
    return None if keep is None else _bias(keep, dtype)


def _bias(keep: Tensor, dtype: torch.dtype) -> Tensor:
    dtype, neg = _neg(dtype, keep.device)
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, neg)


@dataclass
class Bias:
    """An additive bias whose query rows may have no allowed key (there is padding among the keys):
    ``live`` (B, 1, n or 1, 1) marks the rows with at least one; the others' output is 0, as
    FlexAttention gives for a fully masked row (SDPA would give the mean of V, a value that no
    score moves while autograd differentiates its softmax)."""

    bias: Tensor
    live: Tensor

    @classmethod
    def build(cls, keep: Tensor, dtype: torch.dtype) -> Bias:
        return cls(_bias(keep, dtype), keep.any(dim=-1, keepdim=True))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias, dropout_p=dropout_p)
        return y.masked_fill(~self.live, 0.0)


def _batched(t: Tensor | None, b: int) -> Tensor | None:
    return None if t is None else t.expand(b, -1)


def _batch(*ts: Tensor | None) -> int:
    return max(t.shape[0] for t in ts if t is not None)


@dataclass
class Band:
    """A window and/or document mask computed block by block.  Query block j attends the key rows
    ``slot[:, j]`` (B, nb, L): the contiguous run of key rows its window (``at`` within ``window``)
    and its documents (from the first query row's to the last one's) can reach, L the longest run
    any block needs; ``bias`` (B * nb, 1, C, L) masks the slots outside the window, document,
    validity or run.  The query blocks are either C = ``block`` consecutive query rows (``rows``
    None: block j is rows ``[jC, (j+1)C)``), or, when the query rows are sparser than the key rows
    under a window (kept rows over all rows: the first half layer; pooled rows), the query rows
    whose ``at`` lies in ``[j * block, (j+1) * block)``, padded to C, the most any block holds
    (``rows`` (B, nb, C) the query row of each slot, ``back`` (B, n) each query row's slot): blocks
    of a fixed number of kept rows would span as many positions as the sparsest stretch of the
    selection, and every block's run would be as long as that one's (1,039 key slots instead of ~385
    for 128 kept rows at T = 4,096 with an importance-based selection); blocks of fixed positions
    bound the run by ``block + 2 * window + 1``."""

    slot: Tensor  # (B, nb, L) key row per slot
    bias: Tensor  # (B * nb, 1, C, L) additive
    block: int  # C: query slots per block
    # (B, 1, n, 1): query rows with an allowed key (None: all; else the rest give 0)
    live: Tensor | None = None
    rows: Tensor | None = None  # (B, nb, C) query row per query slot (None: consecutive rows)
    back: Tensor | None = None  # (B, n) each query row's slot among the nb * C

    @classmethod
    def build(
        cls, q, k, window: int | None, dtype: torch.dtype, block: int = 0, extent: int | None = None
    ) -> Band | None:
        """-> the band of query rows ``q`` over key rows ``k`` (``Rows``: ``at`` for a window,
        ``doc`` for documents; both ascending along a row, padding's document -1 at the end), or
        None when it would save too little (short rows, windows or documents about as long as the
        row). ``extent``: a bound on ``at`` (the forward's sequence length; default: the key rows'
        count).

        With a window every size is bounded from the shapes, the window and the block, never read
        from the data (no host synchronisation): blocks of C = min(block, n) query rows, runs of
        L = min(N, C + 2 window) key rows (a block of positions, or the same rows as queries and
        keys, reaches at most that many distinct key positions); other key rows as queries: L = N.
        Documents alone bound nothing shorter than the row, so their band reads its run length
        from the data, and is built only where that read is free (``tokendrop.host``: CPU); an
        accelerator takes the bias or FlexAttention."""
        block = block or BAND_BLOCK
        documents = q.doc is not None and k.doc is not None
        if window is None and not documents:
            return None
        n, N = (
            (q.at.shape[1], k.at.shape[1])
            if window is not None
            else (q.doc.shape[1], k.doc.shape[1])
        )
        if n <= block:
            return None
        device = (q.at if window is not None else q.doc).device
        if window is None and not host_reads_free(device):
            return None
        b = _batch(q.at, k.at, q.doc, k.doc, k.valid)
        qa = _batched(q.at, b).contiguous() if window is not None else None  # (B, n)
        rows = back = counts = None
        if window is not None and n < N:  # sparser queries than keys: blocks of fixed positions
            nb = math.ceil((extent or N) / block)
            edges = (torch.arange(nb + 1, device=device) * block).expand(b, -1).contiguous()
            # (B, nb + 1) first query row at or after each edge
            starts = torch.searchsorted(qa, edges)
            counts = starts[:, 1:] - starts[:, :-1]  # (B, nb) query rows per block
            c = min(block, n)  # distinct positions: at most a block's worth of rows
            # (B, nb, C)
            rows = (starts[:, :-1, None] + torch.arange(c, device=device)).clamp(max=n - 1)
            home = qa // block  # (B, n) each query row's block
            back = home * c + torch.arange(n, device=device) - torch.gather(starts, 1, home)
            # (B, nb) rows
            first, last = (
                starts[:, :-1].clamp(max=n - 1),
                (starts[:, 1:] - 1).clamp(min=0),
            )
        else:
            c, nb = block, math.ceil(n / block)
            first = torch.arange(nb, device=device).expand(b, -1) * block
            last = (first + block - 1).clamp(max=n - 1)

        # (B or 1, n) -> (B, nb, C); a block's unused slots repeat other rows
        def blocks(
            t: Tensor,
        ) -> Tensor:
            t = _batched(t, b)
            if rows is not None:
                return torch.gather(t, 1, rows.view(b, nb * c)).view(b, nb, c)
            if nb * c > n:  # (the padded rows are sliced off the output)
                t = torch.cat([t, t[:, -1:].expand(b, nb * c - n)], 1)
            return t.reshape(b, nb, c)

        # (B or 1, n) -> the first and last query row's value (B, nb)
        def ends(
            t: Tensor,
        ) -> tuple[Tensor, Tensor]:
            t = _batched(t, b)
            return torch.gather(t, 1, first), torch.gather(t, 1, last)

        lo = torch.zeros(b, nb, dtype=torch.long, device=device)
        hi = torch.full_like(lo, N)
        if window is not None:
            ka = _batched(k.at, b).contiguous()
            a0, a1 = ends(qa)
            lo = torch.searchsorted(ka, (a0 - window).contiguous())  # (B, nb)
            hi = torch.searchsorted(ka, (a1 + window).contiguous(), right=True)
        if documents:  # padding (-1) as a last document, so the ids ascend along every row
            qdoc, kd = (
                q.doc.masked_fill(q.doc < 0, N),
                _batched(k.doc.masked_fill(k.doc < 0, N), b).contiguous(),
            )
            d0, d1 = ends(qdoc)
            lo = torch.maximum(lo, torch.searchsorted(kd, d0.contiguous()))
            hi = torch.minimum(hi, torch.searchsorted(kd, d1.contiguous(), right=True))
        if counts is not None:
            hi = torch.where(counts > 0, hi, lo)  # an empty block attends nothing
        if window is None:
            span = int((hi - lo).max())  # a host read: CPU only (above)
        elif rows is not None or q is k or q.at is k.at:
            span = min(N, c + 2 * window)  # a block of positions, or of the keys' own rows
        else:
            span = N
        limit = BAND_MAX_FRACTION if window is not None else BAND_MAX_FRACTION_DOCUMENTS
        if span <= 0 or nb * c * span > limit * n * N:
            return None
        slot = lo[:, :, None] + torch.arange(span, device=device)  # (B, nb, L)
        allowed = (slot < hi[:, :, None])[:, :, None, :]  # (B, nb, 1, L)
        slot = slot.clamp(max=N - 1)
        flat = slot.view(b, nb * span)

        def at_slots(t: Tensor) -> Tensor:  # (B or 1, N) -> (B, nb, 1, L)
            return torch.gather(_batched(t, b), 1, flat).view(b, nb, 1, span)

        if window is not None:
            # (B, nb, C, L)
            allowed = allowed & ((blocks(qa)[:, :, :, None] - at_slots(k.at)).abs() <= window)
        if k.valid is not None:
            allowed = allowed & at_slots(k.valid).to(torch.bool)
        if documents:
            allowed = allowed & (blocks(qdoc)[:, :, :, None] == at_slots(kd))
        allowed = allowed.expand(b, nb, c, span)
        live = None
        if k.valid is not None:
            any_key = allowed.any(dim=-1).view(b, nb * c)
            any_key = any_key[:, :n] if back is None else torch.gather(any_key, 1, back)
            live = any_key.view(b, 1, n, 1)
        return cls(
            slot=slot,
            bias=_bias(allowed, dtype).view(b * nb, 1, c, span),
            block=c,
            live=live,
            rows=rows,
            back=back,
        )

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        # q: (B, h, n, dh); k, v: (B, h, N, dh) -> (B, h, n, dh).  The band may be built for one
        # row shared by the batch (no padding, no documents): then its slots and bias broadcast.
        b, h, n, dh = q.shape
        nb, span = self.slot.shape[1], self.slot.shape[2]
        c = self.block
        if self.rows is None:
            q = F.pad(q, (0, 0, 0, nb * c - n)).view(b, h, nb, c, dh)
        else:
            rows = self.rows.expand(b, -1, -1).reshape(b, 1, nb * c, 1)
            q = torch.gather(q, 2, rows.expand(b, h, nb * c, dh)).view(b, h, nb, c, dh)
        q = q.transpose(1, 2).reshape(b * nb, h, c, dh)
        idx = self.slot.expand(b, -1, -1).reshape(b, 1, nb * span, 1).expand(b, h, nb * span, dh)
        bias = self.bias
        if bias.shape[0] != b * nb:  # (nb, 1, C, L) for every row
            bias = (
                bias.view(1, nb, 1, c, span).expand(b, -1, -1, -1, -1).reshape(b * nb, 1, c, span)
            )

        def slots(t: Tensor) -> Tensor:  # (B, h, N, dh) -> (B * nb, h, L, dh)
            return (
                torch.gather(t, 2, idx)
                .view(b, h, nb, span, dh)
                .transpose(1, 2)
                .reshape(b * nb, h, span, dh)
            )

        y = F.scaled_dot_product_attention(
            q, slots(k), slots(v), attn_mask=bias, dropout_p=dropout_p
        )
        y = y.view(b, nb, h, c, dh).transpose(1, 2).reshape(b, h, nb * c, dh)
        if self.rows is None:
            y = y[:, :, :n]
        else:
            y = torch.gather(y, 2, self.back.expand(b, -1).reshape(b, 1, n, 1).expand(b, h, n, dh))
        return y if self.live is None else y.masked_fill(~self.live, 0.0)


_compiled: dict[str, object] = {}


def _flex_fns(device: torch.device):
    """(create_block_mask, flex_attention): compiled on CUDA (the fused kernel; as they are when the
    model itself is being compiled); eager elsewhere (an unfused reference that materialises the
    scores: for parity checks on CPU)."""
    # inside torch.compile: traced with the model
    if device.type != "cuda" or torch.compiler.is_compiling():
        return create_block_mask, flex_attention
    if not _compiled:
        _compiled["mask"] = torch.compile(create_block_mask)
        _compiled["attn"] = torch.compile(flex_attention)
    return _compiled["mask"], _compiled["attn"]


def flex_block_mask(q, k, window: int | None):
    """The FlexAttention ``BlockMask`` of query rows ``q`` over key rows ``k`` (``Rows``): same
    document, valid key, and ``|at_i - at_j| <= window`` when ``window`` is set."""
    b = _batch(q.at, k.at, q.doc, k.doc, k.valid)
    n = (q.doc if q.doc is not None else q.at).shape[1]
    N = (k.doc if k.doc is not None else k.at).shape[1]
    qd, kd = (
        (_batched(q.doc, b), _batched(k.doc, b))
        if q.doc is not None and k.doc is not None
        else (None, None)
    )
    qa, ka = (_batched(q.at, b), _batched(k.at, b)) if window is not None else (None, None)
    kv = None if k.valid is None else _batched(k.valid, b).to(torch.bool)

    def mask_mod(bi, hi, qi, ki):
        if b == 1:  # rows shared by the whole batch (no padding, no documents): one mask broadcast
            bi = bi * 0
        ok = qi >= 0
        if qd is not None:
            ok = ok & (qd[bi, qi] == kd[bi, ki])
        if qa is not None:
            ok = ok & ((qa[bi, qi] - ka[bi, ki]).abs() <= window)
        if kv is not None:
            ok = ok & kv[bi, ki]
        return ok

    device = (qd if qd is not None else qa).device
    make, _ = _flex_fns(device)
    return make(mask_mod, b, None, n, N, device=device)


def attend(q: Tensor, k: Tensor, v: Tensor, mask, dropout_p: float = 0.0) -> Tensor:
    """Attention of (B, h, n, dh) queries over (B, h, N, dh) keys/values with a :class:`MaskCache`
    mask (None, an additive bias, a :class:`Bias`, a :class:`Band` or a ``BlockMask``) -> (B, h, n,
    dh). A query row with no allowed key gives 0 under a :class:`Bias`, a :class:`Band` and a
    ``BlockMask``."""
    if isinstance(mask, (Band, Bias)):
        return mask.attend(q, k, v, dropout_p)
    if BlockMask is not None and isinstance(mask, BlockMask):
        if dropout_p:
            raise ValueError("FlexAttention has no attention dropout (model.attention_backend)")
        return _flex_fns(q.device)[1](q, k, v, block_mask=mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MaskCache:
    """The masks of one forward pass, built once per (query rows, key rows, window) and reused by
    every layer that needs the same one.  ``flex``: document / window masks as FlexAttention block
    masks; otherwise window / document masks as a :class:`Band` where that saves work (``band``:
    its block size, None = ``BAND_BLOCK``, 0 = never) and additive biases for the rest.
    ``extent``: the forward's sequence length (what bounds a band's blocks of positions)."""

    def __init__(
        self,
        dtype: torch.dtype,
        flex: bool = False,
        band: int | None = None,
        extent: int | None = None,
    ):
        self.dtype = dtype
        self.flex = flex
        self.band = BAND_BLOCK if band is None else band
        self.extent = extent
        self._cache: dict[tuple, tuple] = {}

    def documents(self, doc: Tensor | None) -> Tensor | None:
        """The document ids (B, T) a forward's rows carry, or None when they would mask nothing:
        every row one document without padding (long documents, one per row), where the all-True
        document mask would only cost its construction and a masked kernel (at T = 8,192 a 256 MiB
        bias per distinct (query rows, key rows) pair; the dropping span has three such pairs).
        Decided once per forward by a host read, only where that read is free (``tokendrop.host``:
        CPU); on an accelerator the ids are always kept (no synchronisation: the masked path, exact
        either way), as with FlexAttention (it skips full blocks by itself) and under
        ``torch.compile`` (data-dependent)."""
        if (
            doc is None
            or self.flex
            or torch.compiler.is_compiling()
            or not host_reads_free(doc.device)
        ):
            return doc
        return None if bool((doc == doc[:, :1]).all()) else doc

    def __call__(self, q, k, window: int | None = None):
        key = (id(q), id(k), window)
        if key not in self._cache:  # the Rows are kept alive with their mask, so ids stay unique
            self._cache[key] = (q, k, self._build(q, k, window))
        return self._cache[key][2]

    def _build(self, q, k, window: int | None):
        documents = q.doc is not None and k.doc is not None
        if self.flex and (documents or window is not None):
            return flex_block_mask(q, k, window)
        # not under torch.compile: a band's length is data-dependent (a graph break, and a recompile
        # whenever it changes); the compiled graph takes the bias (or FlexAttention) with static
        # shapes
        if (
            (window is not None or (documents and BAND_DOCUMENTS))
            and self.band
            and not torch.compiler.is_compiling()
        ):
            band = Band.build(q, k, window, self.dtype, self.band, self.extent)
            if band is not None:
                return band
        keep = allowed_pairs(
            k.valid,
            q.at if window is not None else None,
            k.at if window is not None else None,
            q.doc,
            k.doc,
            window,
        )
        if keep is None:
            return None
        # without padding every query row is one of its own keys (kept rows, pooled rows: their
        # first row); with padding a row may have none (a [PAD] row under per-document attention)
        return _bias(keep, self.dtype) if k.valid is None else Bias.build(keep, self.dtype)
