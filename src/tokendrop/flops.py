"""Analytic FLOPs of a training step (docs/design.md §2.6, the paper's appendix).

Counted: matrix multiplications (2 FLOPs per multiply-add) of the encoder layers, the attention
score/value products, and the MLM head on the prediction slots; backward = 2 x forward.
LayerNorm, GELU, softmax, embeddings and the optimizer are ignored (a few percent at most).

A layer with n query rows and N key/value rows costs, per sequence,
    Q + O projections:   2 * 2 n d^2
    K, V projections:    2 * 2 N d^2
    FFN (d -> f -> d):   2 * 2 n d f
    scores + weighted V: 2 * 2 n N d
which for n = N = T and f = 4d is the familiar 24 T d^2 + 4 T^2 d.
Half layers (inside the drop span): the first has n = M, N = T; the others n = N = M, except the
``pass`` variant (N = T: dropped rows stay keys/values) ; ``avg`` uses M = ceil(T/2).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import DropConfig, ModelConfig


def layer_flops(n: int, kv_rows: int, d: int, f: int) -> int:
    """Forward FLOPs of one encoder layer for one sequence."""
    return 4 * n * d * d + 4 * kv_rows * d * d + 4 * n * d * f + 4 * n * kv_rows * d


@dataclass
class StepFlops:
    encoder: int  # forward, per sequence
    head: int  # forward, per sequence (MLM head on P slots)
    batch_size: int

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


def step_flops(
    model: ModelConfig,
    seq_len: int,
    batch_size: int = 1,
    drop: DropConfig | None = None,
    num_predictions: int | None = None,
    dropping: bool = True,
) -> StepFlops:
    """FLOPs of one optimizer step (forward + backward) with or without dropping."""
    d, f, t, layers = model.hidden_size, model.intermediate_size, seq_len, model.num_layers
    p = round(0.15 * t) if num_predictions is None else num_predictions
    enc = 0
    if drop is None or not drop.enabled or not dropping:
        enc = layers * layer_flops(t, t, d, f)
    else:
        start, end = drop.span(layers)
        m = drop.num_kept(t)
        for i in range(layers):
            if i < start or i >= end:
                enc += layer_flops(t, t, d, f)
            elif i == start or drop.variant == "pass":
                enc += layer_flops(m, t, d, f)
            else:
                enc += layer_flops(m, m, d, f)
    head = 2 * p * d * d + 2 * p * d * model.vocab_size
    return StepFlops(encoder=enc, head=head, batch_size=batch_size)


def flop_ratio(model: ModelConfig, seq_len: int, drop: DropConfig, encoder_only: bool = False) -> float:
    """FLOPs with dropping / FLOPs of the dense model (1 / the best possible speedup)."""
    a = step_flops(model, seq_len, 1, drop)
    b = step_flops(model, seq_len, 1, None)
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
