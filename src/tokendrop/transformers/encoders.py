"""The dropping forward of transformers' BERT and ModernBERT encoders, with their own layer modules.

The layer schedule is tokendrop's (:func:`tokendrop.dropping.engine.run_layers`, docs/design.md
§2.2: full layers, separation, half layers on the kept rows, merge; ``pass``, ``avg``,
``layer_rearranged``, random-LTD's per-layer subsets).  ``run_layers`` hands every layer call to
:func:`bert_encode` / :func:`modern_encode`'s ``call``, which runs it through the layer module
itself:

* a full-length call (all rows as queries and keys/values) is the layer's own forward, with the
  masks and rotary embeddings transformers builds for the dense model -- bit for bit what the
  unpatched encoder computes;
* a call on other rows (kept rows as queries, all rows or the kept rows as keys/values) passes a
  :class:`LayerCall` to the layer's patched forward (:class:`LayerForward`), which runs the layer's
  own submodules (BERT: ``attention.self.query/key/value``, ``attention.output``, the feed-forward
  chunk; ModernBERT: norms, ``Wqkv``, rotary embedding, ``Wo``, ``mlp``) with queries and
  keys/values from different rows, and the attention function of the model's
  ``attn_implementation`` (``eager``, ``sdpa``, ``flex_attention``; FlashAttention's varlen path
  reads query validity from the last rows, so those calls use ``sdpa`` there).  Going through the
  layer's ``__call__`` keeps hooks working: FSDP's parameter gathering, gradient checkpointing.

Masks of such calls come from transformers' own mask functions (``ALL_MASK_ATTENTION_FUNCTIONS``)
with the rows' padding and, for ModernBERT's sliding-window layers, a window measured in the rows'
original indices (``Rows.at``), so a kept token sees exactly the kept keys it would see densely;
rotary positions are gathered with the rows (a kept row keeps its position).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokendrop.dropping.engine import DropSpan, Rows, run_layers
from tokendrop.models.rotary import RowRopes
from tokendrop.transformers.options import TokenDroppingError

LAYER_KW = "_token_dropping_call"  # the private keyword a patched layer forward recognises
ROW_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")  # run as they are on gathered rows


@dataclass
class LayerCall:
    """One layer call on rows other than the full sequence: keys/values ``kv`` (None: the query rows
    themselves), the attention mask, the attention function, and (ModernBERT) the rotary cos/sin of
    the query and key rows."""

    kv: Tensor | None
    mask: Any
    attention: Callable
    rope_q: tuple[Tensor, Tensor] | None = None
    rope_k: tuple[Tensor, Tensor] | None = None


class LayerForward:
    """An encoder layer's instance ``forward``: the layer's own forward (or the one it had before
    the patch) unless a :class:`LayerCall` is passed, then ``runner(layer, hidden, kv, call)`` --
    checkpointed when the layer has gradient checkpointing on.  A plain object (not a bound method),
    so a patched model pickles and deep-copies."""

    def __init__(self, layer: nn.Module, runner: Callable, previous: Callable | None):
        self.layer = layer
        self.runner = runner
        self.previous = previous

    def __call__(self, *args, **kwargs):
        call = kwargs.pop(LAYER_KW, None)
        if call is None:
            if self.previous is not None:
                return self.previous(*args, **kwargs)
            return type(self.layer).forward(self.layer, *args, **kwargs)
        layer, h = self.layer, args[0]
        if (
            getattr(layer, "gradient_checkpointing", False)
            and layer.training
            and torch.is_grad_enabled()
        ):
            fn = functools.partial(_checkpointed, self.runner, layer, call)
            return layer._gradient_checkpointing_func(fn, h, call.kv)
        return self.runner(layer, h, call.kv, call)


def _checkpointed(
    runner: Callable, layer: nn.Module, call: LayerCall, h: Tensor, kv: Tensor | None
) -> Tensor:
    return runner(layer, h, kv, call)


# ----------------------------------------------------------------------------------------------
# attention functions and masks for gathered rows


def row_attention(config: Any, eager: Callable) -> tuple[str, Callable]:
    """(implementation name, attention function) for calls on gathered rows."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    impl = config._attn_implementation or "eager"
    name = impl if impl in ROW_IMPLEMENTATIONS else "sdpa"
    return name, (eager if name == "eager" else ALL_ATTENTION_FUNCTIONS[name])


def _window(q_at: Tensor, k_at: Tensor, window: int) -> Callable:
    """Mask function: |original index of the query row - that of the key row| <= window."""

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        return (q_at[batch_idx, q_idx] - k_at[batch_idx, kv_idx]).abs() <= window

    return inner


class RowMasks:
    """The masks of one forward's calls on gathered rows, in the format of the row attention
    implementation, built once per (query rows, key rows, window) with transformers' mask
    functions."""

    def __init__(
        self, config: Any, impl: str, batch: int, dtype: torch.dtype, device: torch.device
    ):
        self.config, self.impl, self.batch, self.dtype, self.device = (
            config,
            impl,
            batch,
            dtype,
            device,
        )
        self._cache: dict[tuple, tuple] = {}

    def __call__(self, q: Rows, k: Rows, n: int, N: int, window: int | None = None):
        key = (id(q), id(k), n, N, window)
        if key not in self._cache:  # the Rows are kept alive with their mask, so ids stay unique
            self._cache[key] = (q, k, self._build(q, k, n, N, window))
        return self._cache[key][2]

    def _build(self, q: Rows, k: Rows, n: int, N: int, window: int | None):
        from transformers.masking_utils import (
            ALL_MASK_ATTENTION_FUNCTIONS,
            and_masks,
            bidirectional_mask_function,
        )

        b = self.batch
        fn = bidirectional_mask_function
        if window is not None:
            fn = and_masks(fn, _window(q.at.expand(b, -1), k.at.expand(b, -1), window))
        valid = None if k.valid is None else k.valid.expand(b, -1).to(torch.bool)
        return ALL_MASK_ATTENTION_FUNCTIONS[self.impl](
            batch_size=b,
            q_length=n,
            kv_length=N,
            q_offset=0,
            kv_offset=0,
            mask_function=fn,
            attention_mask=valid,
            allow_is_causal_skip=False,
            allow_is_bidirectional_skip=window is None,
            dtype=self.dtype,
            config=self.config,
            use_vmap=False,
            device=self.device,
        )


def _valid_rows(attention_mask: Tensor | None) -> Tensor | None:
    """A 2D 1/0 padding mask as the rows' key validity (long: avg pooling takes its minimum)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise TokenDroppingError(
            f"token dropping: attention_mask must be the 2D (batch, length) padding mask, got "
            f"shape {tuple(attention_mask.shape)}"
        )
    return attention_mask.to(torch.long)


# ----------------------------------------------------------------------------------------------
# BERT


def bert_layer(layer: nn.Module, h: Tensor, kv: Tensor | None, call: LayerCall) -> Tensor:
    """transformers' BertLayer with queries ``h`` (B, n, d) and keys/values ``kv`` (B, N, d) (None:
    ``h``), through its own submodules, as ``BertLayer.forward`` composes them."""
    from transformers.pytorch_utils import apply_chunking_to_forward

    sa = layer.attention.self
    src = h if kv is None else kv
    b, n = h.shape[:2]
    dh = sa.attention_head_size
    q = sa.query(h).view(b, n, -1, dh).transpose(1, 2)
    k = sa.key(src).view(b, src.shape[1], -1, dh).transpose(1, 2)
    v = sa.value(src).view(b, src.shape[1], -1, dh).transpose(1, 2)
    out, _ = call.attention(
        sa, q, k, v, call.mask, dropout=0.0 if not sa.training else sa.dropout.p, scaling=sa.scaling
    )
    out = out.reshape(b, n, -1).contiguous()
    a = layer.attention.output(out, h)
    return apply_chunking_to_forward(
        layer.feed_forward_chunk, layer.chunk_size_feed_forward, layer.seq_len_dim, a
    )


def bert_encode(
    base: nn.Module,
    span: DropSpan,
    keep: Tensor | None,
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    token_type_ids: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
) -> Tensor:
    """BertModel's embeddings and encoder with dropping -> last hidden states (B, T, d)."""
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.bert.modeling_bert import eager_attention_forward

    x = base.embeddings(
        input_ids=input_ids,
        position_ids=position_ids,
        token_type_ids=token_type_ids,
        inputs_embeds=inputs_embeds,
    )
    full_mask = create_bidirectional_mask(
        config=base.config, inputs_embeds=x, attention_mask=attention_mask
    )
    rows = Rows(valid=_valid_rows(attention_mask))
    impl, attention = row_attention(base.config, eager_attention_forward)
    masks = RowMasks(base.config, impl, x.shape[0], x.dtype, x.device)
    dense_kw = {} if position_ids is None else {"position_ids": position_ids}

    def call(layer, h, kv, q, k):
        if kv is None and q is rows:
            return layer(h, full_mask, **dense_kw)
        n = h.shape[1]
        return layer(
            h,
            **{
                LAYER_KW: LayerCall(kv, masks(q, k, n, n if kv is None else kv.shape[1]), attention)
            },
        )

    return run_layers(base.encoder.layer, x, rows, span, keep, call)


# ----------------------------------------------------------------------------------------------
# ModernBERT


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """transformers' apply_rotary_pos_emb for one of q/k (fp32, cast back)."""
    from transformers.models.modernbert.modeling_modernbert import rotate_half

    xf = x.float()
    return ((xf * cos.unsqueeze(1)) + (rotate_half(xf) * sin.unsqueeze(1))).to(x.dtype)


def modern_layer(layer: nn.Module, h: Tensor, kv: Tensor | None, call: LayerCall) -> Tensor:
    """transformers' ModernBertEncoderLayer with queries ``h`` and keys/values ``kv`` (None: ``h``),
    through its own submodules, as ``ModernBertEncoderLayer.forward`` composes them; the rotary
    embedding of the query rows and of the key rows each at their own (original) positions."""
    attn = layer.attn
    xq = layer.attn_norm(h)
    b, n, d = xq.shape
    dh = attn.head_dim
    if kv is None:
        q, k, v = attn.Wqkv(xq).view(b, n, 3, -1, dh).unbind(dim=-3)
    else:
        xk = layer.attn_norm(kv)
        N = xk.shape[1]
        w, bias = attn.Wqkv.weight, attn.Wqkv.bias
        # project only what is used: Q of the query rows, K/V of the key rows
        if type(attn.Wqkv) is nn.Linear:
            q = F.linear(xq, w[:d], None if bias is None else bias[:d]).view(b, n, -1, dh)
            k, v = (
                F.linear(xk, w[d:], None if bias is None else bias[d:])
                .view(b, N, 2, -1, dh)
                .unbind(dim=-3)
            )
        else:  # an adapted projection (e.g. LoRA): run the module itself on both
            q = attn.Wqkv(xq).view(b, n, 3, -1, dh)[:, :, 0]
            k, v = attn.Wqkv(xk).view(b, N, 3, -1, dh)[:, :, 1:].unbind(dim=-3)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q = _rotate(q, *call.rope_q)
    k = _rotate(k, *call.rope_k)
    out, _ = call.attention(
        attn,
        q,
        k,
        v,
        call.mask,
        dropout=attn.attention_dropout if attn.training else 0.0,
        scaling=dh**-0.5,
        deterministic=attn.deterministic_flash_attn,
    )
    out = attn.out_drop(attn.Wo(out.reshape(b, n, -1).contiguous()))
    h = h + out
    return h + layer.mlp(layer.mlp_norm(h))


def modern_encode(
    base: nn.Module,
    span: DropSpan,
    keep: Tensor | None,
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
) -> Tensor:
    """ModernBertModel's embeddings, layers and final norm with dropping -> (B, T, d)."""
    from transformers.masking_utils import (
        create_bidirectional_mask,
        create_bidirectional_sliding_window_mask,
    )
    from transformers.models.modernbert.modeling_modernbert import eager_attention_forward

    cfg = base.config
    x = base.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)
    t = x.shape[1]
    at = torch.arange(t, device=x.device)[None]  # (1, T) index in the row: what windows measure
    if position_ids is None:
        position_ids = at
    mask_kw = {"config": cfg, "inputs_embeds": x, "attention_mask": attention_mask}
    full_masks = {
        "full_attention": create_bidirectional_mask(**mask_kw),
        "sliding_attention": create_bidirectional_sliding_window_mask(**mask_kw),
    }
    rows = Rows(valid=_valid_rows(attention_mask), pos=position_ids, at=at)
    rope = RowRopes(lambda r, lt: base.rotary_emb(x, r.pos, lt))

    impl, attention = row_attention(cfg, eager_attention_forward)
    masks = RowMasks(cfg, impl, x.shape[0], x.dtype, x.device)

    def call(layer, h, kv, q, k):
        lt = layer.attention_type
        if kv is None and q is rows:
            return layer(h, attention_mask=full_masks[lt], position_embeddings=rope(rows, lt))
        n = h.shape[1]
        window = cfg.sliding_window if lt == "sliding_attention" else None
        mask = masks(q, k, n, n if kv is None else kv.shape[1], window)
        return layer(h, **{LAYER_KW: LayerCall(kv, mask, attention, rope(q, lt), rope(k, lt))})

    x = run_layers(base.layers, x, rows, span, keep, call)
    return base.final_norm(x)


# how a family's transformers layers run with dropping, by its HFIntegration.layout: (encode,
# layer). ``encode(base, span, keep, input_ids=, attention_mask=, position_ids=, inputs_embeds=)``
# (and ``token_type_ids=`` for a family with token types) -> the last hidden states (B, T, d)
LAYOUTS: dict[str, tuple[Callable, Callable]] = {
    "bert": (bert_encode, bert_layer),
    "modernbert": (modern_encode, modern_layer),
}


__all__ = [
    "LAYER_KW",
    "LAYOUTS",
    "LayerCall",
    "LayerForward",
    "bert_encode",
    "bert_layer",
    "modern_encode",
    "modern_layer",
]
