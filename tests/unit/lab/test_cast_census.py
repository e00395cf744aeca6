"""The benchmark's cast census (lab/bench/casts.py) on both families under bf16 autocast: with fp32
LayerNorms every layer casts its residual stream, with the low-precision LayerNorm
(tokendrop.models.norm) only the embeddings' sum is cast."""

import pytest
import torch
from tiny_models import tiny_config

from tokendrop.lab.bench.casts import CastCensus
from tokendrop.models import norm
from tokendrop.models.families import build_model

B, T, P, V = 3, 40, 7, 211


def _stream_casts(model, low_precision: bool, monkeypatch) -> int:
    """Casts of (B, T, d) or (B, M, d) tensors (the residual stream) in one forward + backward."""
    if not low_precision:
        monkeypatch.setattr(norm.LayerNorm, "forward", torch.nn.LayerNorm.forward)
    d = model.config.hidden_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (B, T), generator=g)
    pos = torch.stack([torch.randperm(T, generator=g)[:P].sort().values for _ in range(B)])
    labels = torch.randint(5, V, (B, P), generator=g)
    seen = []

    class Stream(CastCensus):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            n = self.casts
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self.casts > n and args[0].dim() == 3 and args[0].shape[-1] == d:
                seen.append(tuple(args[0].shape))
            return out

    with Stream():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids, pos)
        model.mlm_nll(logits, labels).mean().backward()
    monkeypatch.undo()
    return len(seen)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_residual_stream_stays_bf16(family, monkeypatch):
    """With fp32 LayerNorms every layer casts its stream down for the matmuls and back for the
    gradients; with the low-precision one only the embeddings' sum (fp32 lookups) is cast, once each
    way (forward and its gradient)."""
    torch.manual_seed(0)
    model = build_model(tiny_config(family, V)).train()
    before = _stream_casts(model, False, monkeypatch)
    after = _stream_casts(model, True, monkeypatch)
    assert after == 2 and before >= 4 * model.config.num_layers, (before, after)
