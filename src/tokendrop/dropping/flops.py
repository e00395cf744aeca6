"""Analytic FLOPs of a training step (docs/design.md §2.6, the paper's appendix), for both encoder
families (``model.family``: ``bert`` and ``modernbert``).

Counted: matrix multiplications (2 FLOPs per multiply-add) of the encoder layers, the attention
score/value products, and the MLM head on the prediction slots; backward = 2 x forward.
Element-wise work is ignored (a few percent at most): LayerNorm, GELU/GeGLU's product, softmax,
the embeddings (BERT's position/token-type additions; ModernBERT has neither), ModernBERT's final
norm and its rotary embedding (~3 FLOPs per element of q and k, i.e. ~6 T d per layer, under 0.1%
of a layer at the base shape), and the optimizer.

A layer with n query rows, N key/value rows and k keys per query costs, per sequence,
    Q + O projections:   2 * 2 n d^2
    K, V projections:    2 * 2 N d^2
    FFN, BERT (d -> f -> d):              2 * 2 n d f
    FFN, ModernBERT GeGLU (d -> 2f, f -> d): 2 * 3 n d f
    scores + weighted V: 2 * 2 n k d
which for BERT with n = N = k = T and f = 4d is the familiar 24 T d^2 + 4 T^2 d.

Keys per query: a full-attention layer attends to all N rows (k = N).  A ModernBERT sliding-window
layer (``local_attention`` = w: keys within w//2 positions on each side, as Hugging Face's mask)
lets a query see at most W = 2 (w//2) + 1 positions; when the N rows are N of the sequence's T
positions (kept rows inside the drop span; the window is measured in original positions) a query
sees on average W N / T of them, so k = min(N, ceil(W N / T)) -- min(T, W) for a dense layer.  The
sequence's ends (where a window is cut short) and per-document attention in packed rows (which
depends on the data) are not subtracted: the count is per full window.  ``masked_dense_local=True``
counts sliding-window layers as full attention instead: what a kernel that applies the window as a
mask on dense T x T scores executes (SDPA with a mask, as on CPU).

Half layers (inside the drop span): the first has n = M, N = T; the others n = N = M, except the
``pass`` variant (N = T: dropped rows stay keys/values) ; ``avg`` uses M = ceil(T/2).  random-LTD
(``drop.method = "random_ltd"``): every half layer has n = N = M_k, the scheduled count of the step
(``kept``; default the schedule's start M_0), and M_k = T costs a dense layer.

ScTD's consistency term (``drop.consistency_weight > 0``, docs/design.md §2.11) adds, on every
``consistency_every``-th step, a dense encoder pass whose backward is taken too (the KL term's
gradient flows into both passes); no MLM head runs on it.  :func:`consistency_flops` is that pass
for one batch; ``step_flops`` leaves it out (it is not every step) and the mean per step is
``consistency_flops / consistency_every``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from tokendrop.dropping.config import DropConfig
from tokendrop.errors import check_arg

FULL, SLIDING = "full_attention", "sliding_attention"


class ModelConfig(Protocol):
    """What the FLOP model reads of an encoder's configuration: ``tokendrop.config.ModelConfig``
    (this module imports no config or model code: ``dropping`` sits below both).  ``schema`` is the
    family's row of ``tokendrop.config.model.MODEL_FAMILIES``: ``glu_ffn`` (GeGLU FFN, d -> 2f,
    f -> d, rather than d -> f -> d) and ``sliding_windows`` (layers may attend within a window,
    ``layer_types``)."""

    family: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    local_attention: int

    @property
    def schema(self) -> Any: ...

    def resolved_layer_types(self) -> list[str]: ...


def layer_flops(
    n: int, kv_rows: int, d: int, f: int, keys: int | None = None, glu: bool = False
) -> int:
    """Forward FLOPs of one encoder layer for one sequence: ``n`` query rows, ``kv_rows`` key/value
    rows, ``keys`` keys per query (default: all ``kv_rows``), FFN width ``f`` (GeGLU when
    ``glu``)."""
    k = kv_rows if keys is None else keys
    ffn = (6 if glu else 4) * n * d * f
    return 4 * n * d * d + 4 * kv_rows * d * d + ffn + 4 * n * k * d


def layer_types(model: ModelConfig) -> list[str]:
    """Each layer's attention: ``full_attention`` or ``sliding_attention`` (a family with sliding
    windows, ModernBERT: ``ModelConfig.resolved_layer_types``; else all full)."""
    if not model.schema.sliding_windows:
        return [FULL] * model.num_layers
    return model.resolved_layer_types()


def window_positions(model: ModelConfig) -> int:
    """W: the positions a sliding-window query may see (itself and local_attention//2 on each
    side)."""
    return 2 * (model.local_attention // 2) + 1


def keys_per_query(
    model: ModelConfig,
    layer_type: str,
    kv_rows: int,
    seq_len: int,
    masked_dense_local: bool = False,
) -> int:
    """k for one layer whose ``kv_rows`` key/value rows are that many of the ``seq_len``
    positions."""
    if layer_type != SLIDING or masked_dense_local:
        return kv_rows
    return min(kv_rows, math.ceil(window_positions(model) * kv_rows / seq_len))


def describe_model(model: ModelConfig) -> str:
    """One line naming what the FLOP model counts for ``model``, e.g. for ``tokendrop flops``."""
    d, f, layers = model.hidden_size, model.intermediate_size, model.num_layers
    schema = model.schema
    ffn = f"GeGLU f={f}" if schema.glu_ffn else f"FFN f={f}"
    if not schema.sliding_windows:
        return f"{model.family}: {layers} layers, d={d}, {ffn}"
    local = layer_types(model).count(SLIDING)
    return (
        f"{model.family}: {layers} layers ({layers - local} global, {local} sliding-window "
        f"{model.local_attention}: <= {window_positions(model)} keys per query), d={d}, {ffn}"
    )


@dataclass
class StepFlops:
    encoder: int  # forward, per sequence
    head: int  # forward, per sequence (MLM head on P slots)
    batch_size: int
    # forward, per sequence: the encoder's score and weighted-value products (in ``encoder``)
    attention: int = 0

    @property
    def forward(self) -> int:
        return (self.encoder + self.head) * self.batch_size

    @property
    def total(self) -> int:
        """Forward + backward for the whole batch."""
        return 3 * self.forward

    @property
    def encoder_total(self) -> int:
        return 3 * self.encoder * self.batch_size

    @property
    def attention_share(self) -> float:
        """The attention products' share of the step's FLOPs (forward and backward alike)."""
        return self.attention / (self.encoder + self.head)


def _is_model(model: object) -> bool:
    """``model`` reads as a :class:`ModelConfig` (the protocol is structural: checked by its
    fields)."""
    return all(
        hasattr(model, a) for a in ("hidden_size", "intermediate_size", "num_layers", "num_heads")
    )


def step_flops(
    model: ModelConfig,
    seq_len: int,
    batch_size: int = 1,
    drop: DropConfig | None = None,
    num_predictions: int | None = None,
    dropping: bool = True,
    masked_dense_local: bool = False,
    kept: int | None = None,
) -> StepFlops:
    """FLOPs of one optimizer step (forward + backward) with or without dropping, either family.

    ``num_predictions``: P, the MLM head's rows (default round(0.15 T)); ``masked_dense_local``:
    count sliding-window layers as full attention (module docstring); ``kept``: M, the rows kept
    in the span (default: the first step's, ``DropConfig.kept_rows``)."""
    check_arg(
        "step_flops",
        "model",
        model,
        (),
        "a tokendrop.ModelConfig",
        "a Config's .model",
        valid=_is_model(model),
    )
    check_arg("step_flops", "seq_len", seq_len, int, "an int")
    for name, v in (("seq_len", seq_len), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"step_flops: {name} must be a positive integer, got {v!r}")
    check_arg(
        "step_flops", "drop", drop, (DropConfig, type(None)), "a tokendrop.DropConfig or None"
    )
    d, f, t, layers = model.hidden_size, model.intermediate_size, seq_len, model.num_layers
    glu = model.schema.glu_ffn
    types = layer_types(model)
    p = round(0.15 * t) if num_predictions is None else num_predictions

    attn = 0

    def cost(i: int, n: int, kv: int) -> int:
        nonlocal attn
        k = keys_per_query(model, types[i], kv, t, masked_dense_local)
        attn += 4 * n * k * d
        return layer_flops(n, kv, d, f, k, glu)

    enc = 0
    if drop is None or not drop.enabled or not dropping:
        enc = sum(cost(i, t, t) for i in range(layers))
    else:
        start, end = drop.span(layers)
        m = kept if kept is not None else drop.kept_rows(t)
        for i in range(layers):
            if i < start or i >= end:
                enc += cost(i, t, t)
            elif drop.per_layer:  # random_ltd: its own M rows as queries and keys/values
                enc += cost(i, m, m)
            elif i == start or drop.variant_row.frozen_kv:
                enc += cost(i, m, t)
            else:
                enc += cost(i, m, m)
    head = 2 * p * d * d + 2 * p * d * model.vocab_size  # dense d -> d, then the decoder d -> V
    return StepFlops(encoder=enc, head=head, batch_size=batch_size, attention=attn)


def consistency_flops(
    model: ModelConfig, seq_len: int, batch_size: int = 1, masked_dense_local: bool = False
) -> int:
    """ScTD's extra dense pass on a consistency step: the encoder forward + backward, no MLM head
    (module docstring)."""
    return step_flops(
        model, seq_len, batch_size, None, masked_dense_local=masked_dense_local
    ).encoder_total


def dropping_step_flops(
    model: ModelConfig, seq_len: int, batch_size: int, drop: DropConfig, train_steps: int
) -> list[int]:
    """FLOPs of each optimizer step 0..train_steps-1 of a run with dropping on: random_ltd at the
    count its schedule gives that step, plus ScTD's dense pass on every ``consistency_every``-th
    step (the dense phases -- a dense start, stage 2 -- are the caller's: those steps cost
    ``step_flops(..., None)``; ``DropConfig.dropping_at`` says which)."""
    cache: dict[int, int] = {}

    def at(m: int) -> int:
        if m not in cache:
            cache[m] = step_flops(model, seq_len, batch_size, drop, kept=m).total
        return cache[m]

    extra = consistency_flops(model, seq_len, batch_size) if drop.consistency_weight > 0 else 0
    return [
        at(drop.kept_rows(seq_len, k, train_steps)) + (extra if drop.consistency_at(k) else 0)
        for k in range(train_steps)
    ]


def flop_ratio(
    model: ModelConfig,
    seq_len: int,
    drop: DropConfig,
    encoder_only: bool = False,
    masked_dense_local: bool = False,
) -> float:
    """FLOPs with dropping / FLOPs of the dense model (1 / the best possible speedup)."""
    check_arg(
        "flop_ratio",
        "model",
        model,
        (),
        "a tokendrop.ModelConfig",
        "a Config's .model",
        valid=_is_model(model),
    )
    check_arg("flop_ratio", "drop", drop, DropConfig, "a tokendrop.DropConfig", "a Config's .drop")
    a = step_flops(model, seq_len, 1, drop, masked_dense_local=masked_dense_local)
    b = step_flops(model, seq_len, 1, None, masked_dense_local=masked_dense_local)
    if encoder_only:
        return a.encoder / b.encoder
    return a.total / b.total


# ----------------------------------------------------------------------------------------------
# device peaks (for MFU = achieved FLOP/s / peak)

# dense bf16 tensor-core peak (FLOP/s) by GPU name; first match wins, so specific names come first
GPU_PEAK_BF16: list[tuple[str, float]] = [
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("A6000", 155e12),
]


def gpu_peak_flops(name: str) -> float | None:
    """Dense bf16 peak FLOP/s for a CUDA device name, or None when the name is not in the table."""
    for key, peak in GPU_PEAK_BF16:
        if key.lower() in name.lower():
            return peak
    return None
