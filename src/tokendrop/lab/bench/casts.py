"""Cast census: the dtype-changing copies a piece of code runs, and their bytes.

Under autocast every matmul casts its inputs to the autocast dtype; whatever runs in fp32 between
them (LayerNorm, a residual add of an fp32 stream) makes the next matmul cast again.
:class:`CastCensus` is a ``TorchDispatchMode`` that counts the ``aten._to_copy`` / ``aten.to`` calls
whose output dtype differs from their input's, with the bytes they read and write; on CPU under
``torch.autocast("cpu", dtype=torch.bfloat16)`` it sees the same casts autocast inserts on CUDA
(each a kernel launch and a memory round trip there).  ``benchmarks/cast_census.py`` reports it per
sequence for both families, with the low-precision LayerNorm (``tokendrop.models.norm``) on and off.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CastCensus"]

_CASTS = {
    torch.ops.aten._to_copy.default,
    torch.ops.aten.to.dtype,
    torch.ops.aten.to.dtype_layout,
    torch.ops.aten.to.device,
    torch.ops.aten.to.other,
}


class CastCensus(TorchDispatchMode):
    """Counts dtype-changing copies (``casts``), the bytes they read and write (``bytes``) and the
    (from, to) dtype pairs (``pairs``) of everything dispatched inside ``with CastCensus() as
    c:``."""

    def __init__(self) -> None:
        super().__init__()
        self.casts = 0
        self.bytes = 0
        self.pairs: Counter[tuple[str, str]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _CASTS and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
            src = args[0]
            if out.dtype != src.dtype and src.is_floating_point():
                self.casts += 1
                self.bytes += src.numel() * src.element_size() + out.numel() * out.element_size()
                self.pairs[
                    (str(src.dtype).removeprefix("torch."), str(out.dtype).removeprefix("torch."))
                ] += 1
        return out
