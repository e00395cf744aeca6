"""The LayerNorm both encoder families use: ``nn.LayerNorm`` that keeps autocast's dtype.

Under ``torch.autocast`` PyTorch runs ``layer_norm`` in fp32 and returns fp32, so in a network
whose every sublayer ends in a LayerNorm (post-LN BERT) or whose residual stream starts at one
(pre-LN ModernBERT) the stream between layers stays fp32 and every matmul casts its input down again
(about 456 cast kernels per bert-base forward + backward at T = 128).  :class:`LayerNorm` runs the
kernel in the autocast dtype instead (its input and affine parameters cast down, statistics still
accumulated in fp32 inside the kernel), as MosaicBERT's low-precision LayerNorm does: the stream
between layers stays bf16, the casts go.  Outside autocast it is ``nn.LayerNorm`` exactly; the
parameters stay fp32 (the optimizer's master weights), so state dicts are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LayerNorm"]


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose output under autocast is in the autocast dtype (module docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        device = x.device.type
        if not torch.is_autocast_enabled(device):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(device)
        w = None if self.weight is None else self.weight.to(dtype)
        b = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(device, enabled=False):
            return F.layer_norm(x.to(dtype), self.normalized_shape, w, b, self.eps)
