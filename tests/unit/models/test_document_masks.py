"""Per-document attention over rows that each hold one document masks nothing, so it builds nothing
(``tokendrop.models.attention.MaskCache.documents``): the same losses and gradients as with the
document mask off, and no document mask of any form -- for every family, dense and dropping."""

from __future__ import annotations

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.models import attention
from tokendrop.models.attention import MaskCache
from tokendrop.models.families import FAMILIES, build_model

V, T, B = 64, 40, 2
CLS, SEP, PAD = (SPECIAL_IDS[k] for k in ("cls", "sep", "pad"))


def _cfg(family: str, documents: str) -> ModelConfig:
    common = dict(
        vocab_size=V,
        hidden_size=32,
        num_layers=4,
        num_heads=2,
        intermediate_size=48,
        max_position_embeddings=64,
        sep_token_id=SEP,
        pad_token_id=PAD,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        document_attention=documents,
        attention_backend="sdpa",
    )
    # a window shorter than the row, so the window layers keep a mask of their own
    if family == "modernbert":
        return ModelConfig(family=family, local_attention=8, global_attn_every_n_layers=2, **common)
    return ModelConfig(family=family, **common)


def _ids(documents_per_row: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = CLS
    ids[:, -1] = SEP  # the closing [SEP] belongs to the document it closes
    for k in range(1, documents_per_row):
        ids[:, k * T // documents_per_row] = SEP
    return ids


def _loss_and_grads(family: str, documents: str, ids: torch.Tensor, drop: bool):
    torch.manual_seed(0)
    model = (
        build_model(_cfg(family, documents), DropConfig(method="random", rate=0.5)).double().train()
    )
    keep = torch.sort(
        torch.randperm(T, generator=torch.Generator().manual_seed(1))[: T // 2]
    ).values.expand(B, -1)
    logits = model(ids, keep_idx=keep if drop else None, drop_active=drop)
    loss = logits.pow(2).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_documents_rule():
    cache = MaskCache(torch.float32)
    one = torch.zeros(B, T, dtype=torch.long)
    assert cache.documents(one) is None and cache.documents(None) is None
    two = torch.cat(
        [torch.zeros(B, T // 2, dtype=torch.long), torch.ones(B, T - T // 2, dtype=torch.long)], 1
    )
    assert cache.documents(two) is two
    padded = one.clone()
    # [PAD] rows: their document id is -1, so the ids must stay (padding rows attend nothing)
    padded[:, -3:] = -1
    assert cache.documents(padded) is padded
    # FlexAttention skips full blocks itself
    assert MaskCache(torch.float32, flex=True).documents(one) is one


@pytest.mark.parametrize("drop", [False, True], ids=["dense", "drop"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_document_per_row_builds_no_document_mask(family, drop, monkeypatch):
    ids = _ids(1)
    built: list[tuple] = []
    real = attention.allowed_pairs
    monkeypatch.setattr(
        attention, "allowed_pairs", lambda *a, **k: built.append(a) or real(*a, **k)
    )
    real_band = attention.Band.build
    monkeypatch.setattr(
        attention.Band,
        "build",
        classmethod(
            lambda cls, q, k, *a, **kw: (
                built.append(("band", q.doc, k.doc)),
                real_band.__func__(cls, q, k, *a, **kw),
            )[1]
        ),
    )
    on = _loss_and_grads(family, "on", ids, drop)
    assert all(a[3] is None and a[4] is None for a in built if a[0] != "band"), (
        "a document mask was built"
    )
    assert all(a[1] is None and a[2] is None for a in built if a[0] == "band"), (
        "a band carried documents"
    )
    off = _loss_and_grads(family, "off", ids, drop)
    torch.testing.assert_close(on[0], off[0], rtol=0, atol=1e-12)
    for a, b in zip(on[1], off[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_documents_per_row_keep_their_mask(family):
    """The control: with a [SEP] inside the rows, per-document attention changes the result."""
    ids = _ids(2)
    on, off = _loss_and_grads(family, "on", ids, True), _loss_and_grads(family, "off", ids, True)
    assert not torch.allclose(on[0], off[0], rtol=0, atol=1e-9)
