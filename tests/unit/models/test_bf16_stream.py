"""The bf16 residual stream (tokendrop.models.norm.LayerNorm) and the fused QKV projection: under
bf16 autocast both families match their fp32 forward and gradients within bf16 tolerance, dense and
dropping, and the fused projection equals the separate one.  That the stream between layers stays
bf16 is counted with the benchmark's cast census (tests/unit/lab/test_cast_census.py)."""

import pytest
import torch
import torch.nn.functional as F

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.models import norm
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.modernbert.model import ModernBertForMaskedLM

B, T, P, D = 3, 40, 7, 48
FAMILIES = {
    "bert": (BertForMaskedLM, {}),
    "modernbert": (
        ModernBertForMaskedLM,
        {"family": "modernbert", "local_attention": 16, "document_attention": "off"},
    ),
}


def _model(family: str, drop: bool):
    cls, extra = FAMILIES[family]
    cfg = ModelConfig(
        vocab_size=211,
        hidden_size=D,
        num_layers=4,
        num_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        **extra,
    )
    torch.manual_seed(0)
    return cls(cfg, DropConfig(method="cumulative") if drop else None).train()


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 211, (B, T), generator=g)
    pos = torch.stack([torch.randperm(T, generator=g)[:P].sort().values for _ in range(B)])
    labels = torch.randint(5, 211, (B, P), generator=g)
    keep = torch.stack([torch.randperm(T, generator=g)[: T // 2].sort().values for _ in range(B)])
    return ids, pos, labels, keep


def _loss_and_grads(model, amp: bool, drop: bool):
    ids, pos, labels, keep = _batch()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        logits = model(ids, pos, keep_idx=keep if drop else None)
    loss = model.mlm_nll(logits, labels).mean()
    loss.backward()
    return loss.detach(), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


@pytest.mark.parametrize("drop", [False, True], ids=["dense", "drop"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_stream_matches_fp32(family, drop):
    model = _model(family, drop)
    ref_loss, ref_grads = _loss_and_grads(model, False, drop)
    loss, grads = _loss_and_grads(model, True, drop)
    assert ref_grads.keys() == grads.keys()
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=0)
    for name, g in grads.items():  # bf16 keeps ~3 significant digits: each gradient's direction
        cos = F.cosine_similarity(g.flatten().double(), ref_grads[name].flatten().double(), dim=0)
        assert cos > 0.99, (name, float(cos))


def test_layernorm_is_nn_layernorm_outside_autocast():
    ln = norm.LayerNorm(D, eps=1e-5)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(
        ln(x), F.layer_norm(x, (D,), ln.weight, ln.bias, 1e-5), atol=0, rtol=0
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ln(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.float(), F.layer_norm(x, (D,), ln.weight, ln.bias, 1e-5), atol=3e-2, rtol=2e-2
    )


def test_fused_qkv_equals_separate_projections():
    """A dense BERT layer runs one projection over the concatenated q / kv weights; the first half
    layer's separate path (queries = kept rows, keys/values = all rows) gives the same values when
    its query rows are all rows."""
    model = _model("bert", False).double()
    attn = model.bert.encoder.layers[0].attn
    x = torch.randn(B, T, D, dtype=torch.float64)
    torch.testing.assert_close(attn(x, None, None), attn(x, x, None), atol=1e-12, rtol=1e-12)
