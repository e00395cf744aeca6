"""Sliding windows over kept rows at T = 8,192 (docs/design.md §2.8): windows are measured in
original positions, so a kept token sees exactly the kept keys it would see densely within
``local_attention // 2`` positions.

The reference is a direct computation, independent of ``tokendrop.models.attention`` and of
``run_layers``: every layer written out from the model's weights in float64, the span's queries
being the kept rows, each attention over an explicit boolean mask (same document, and for a
sliding-window layer ``|original position_i - original position_j| <= local_attention // 2``) built
for the kept subset, chunked over queries so the 8,192-key rows fit in memory (keys the mask
excludes for a whole chunk -- other documents, beyond the window -- are left out of that chunk's
scores).  The model runs with its real masks (the default: sliding windows and documents as bands;
and the additive-bias form), in float32, and must agree to 1e-5.  The same reference with windows
counted over kept rows instead differs by far more, so the test tells the two semantics apart.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.models import attention
from tokendrop.models.families import build_model
from tokendrop.models.masked_lm import document_ids

T = 8192
SEP, PAD = 3, 0
HALF = 64  # local_attention = 128, ModernBERT's window
# the span is layers [1, 3): a sliding first half layer (kept queries, all T keys), a sliding layer
# over kept rows only (where the two semantics differ), then a global layer over the merged rows
LAYERS = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]


def _model(drop: DropConfig):
    cfg = ModelConfig(
        family="modernbert",
        vocab_size=64,
        hidden_size=16,
        num_heads=2,
        intermediate_size=24,
        num_layers=4,
        local_attention=2 * HALF,
        max_position_embeddings=T,
        layer_norm_eps=1e-5,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pad_token_id=PAD,
        sep_token_id=SEP,
        global_rope_theta=160000.0,
        local_rope_theta=10000.0,
        layer_types=LAYERS,
    )
    assert cfg.local_attention // 2 == HALF
    torch.manual_seed(0)
    m = build_model(cfg, drop)
    with torch.no_grad():  # every norm and bias non-trivial
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m.train()  # dropping runs in training mode (no dropout here)


def _row() -> torch.Tensor:
    """One packed row of T tokens: documents of very different lengths (some shorter than the
    window)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 64, (T,), generator=g)
    ends, at = [], 0
    for n in [40, 3000, 90, 1500, 17, 2600]:
        at += n
        ends.append(at - 1)
    ids[torch.tensor(ends)] = SEP
    ids[-1] = SEP
    return ids[None]


def _positions(doc: torch.Tensor) -> torch.Tensor:
    """Position of each token within its document (0 at the document's first token)."""
    t = torch.arange(doc.numel())
    start = torch.zeros_like(t)
    start[1:] = (doc[1:] != doc[:-1]).long()
    first = torch.where(start.bool() | (t == 0), t, torch.zeros_like(t)).cummax(0).values
    return t - first


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """(h, n, dh) float64 rotated by rotary positions ``pos`` (n,) with base ``theta``."""
    dh = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    f = pos.double()[:, None] * inv
    cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _ln(x, mod):
    if isinstance(mod, torch.nn.Identity):
        return x
    b = None if mod.bias is None else mod.bias.double()
    return F.layer_norm(x, x.shape[-1:], mod.weight.double(), b, mod.eps)


def _attend(q, k, v, allowed_fn, reach, chunk: int = 1024):
    """softmax(q k^T / sqrt(dh) + mask) v over an explicit boolean mask, ``chunk`` query rows at a
    time. ``reach(sl) -> (lo, hi)``: key rows outside [lo, hi) are masked for every query of the
    chunk (in other documents, beyond a sliding window), so they are left out of its scores."""
    out = []
    for s in range(0, q.shape[1], chunk):
        sl = slice(s, s + chunk)
        lo, hi = reach(sl)
        sc = q[:, sl] @ k[:, lo:hi].transpose(-1, -2) / math.sqrt(q.shape[-1])
        allowed = allowed_fn(sl)[:, lo:hi]  # (n_chunk, N) -> the reachable keys
        sc = sc.masked_fill(~allowed, float("-inf"))
        out.append(torch.softmax(sc, -1) @ v[:, lo:hi])
    return torch.cat(out, 1)


def _reference(m, row: torch.Tensor, keep: torch.Tensor, windows_over: str) -> torch.Tensor:
    """The encoder's final hidden states (T, d), written out directly (module docstring).
    ``windows_over``: "positions" (original positions: what tokendrop does) or "kept" (the
    alternative: kept-row index)."""
    enc = m.model
    cfg = enc.config
    h, d = cfg.num_heads, cfg.hidden_size
    doc = document_ids(row, SEP, PAD)[0]
    rot = _positions(doc)  # rotary positions restart in every document
    at = torch.arange(T)
    start, end = enc.span.start, enc.span.end
    x = _ln(enc.embeddings.tok_embeddings.weight.double()[row[0]], enc.embeddings.norm)
    x_in = None
    for i, layer in enumerate(enc.layers):
        sliding = layer.sliding
        theta = cfg.local_rope_theta if sliding else cfg.global_rope_theta
        if i == start:
            x_in = x
        if i == start:  # the first half layer: the kept rows as queries, all T rows as keys/values
            q_idx, k_idx, hq, kv = keep, at, x[keep], x
        elif start < i < end:  # x holds the kept rows only
            q_idx, k_idx, hq, kv = keep, keep, x, x
        else:
            q_idx, k_idx, hq, kv = at, at, x, x
        w = layer.attn.Wqkv.weight.double()
        qn, kn = _ln(hq, layer.attn_norm), _ln(kv, layer.attn_norm)
        q = (qn @ w[:d].T).view(-1, h, d // h).transpose(0, 1)
        k = (kn @ w[d : 2 * d].T).view(-1, h, d // h).transpose(0, 1)
        v = (kn @ w[2 * d :].T).view(-1, h, d // h).transpose(0, 1)
        q, k = _rope(q, rot[q_idx], theta), _rope(k, rot[k_idx], theta)
        qd, kd = doc[q_idx], doc[k_idx]
        # the index among the kept rows
        if windows_over == "kept" and q_idx is k_idx and start < i < end:
            qa = ka = torch.arange(len(keep))
        else:
            # original positions (the first half layer's keys are all T rows: the two agree there)
            qa, ka = at[q_idx], at[k_idx]

        def allowed(sl, qd=qd, kd=kd, qa=qa, ka=ka, sliding=sliding):
            ok = qd[sl, None] == kd[None, :]
            if sliding:
                ok &= (qa[sl, None] - ka[None, :]).abs() <= HALF
            return ok

        # documents (and windows) ascend along the row
        def reach(sl, qa=qa, ka=ka, qd=qd, kd=kd, sliding=sliding):
            lo = int(torch.searchsorted(kd, qd[sl][0]))
            hi = int(torch.searchsorted(kd, qd[sl][-1], right=True))
            if sliding:
                lo = max(lo, int(torch.searchsorted(ka, qa[sl][0] - HALF)))
                hi = min(hi, int(torch.searchsorted(ka, qa[sl][-1] + HALF, right=True)))
            return lo, hi

        y = (
            _attend(q, k, v, allowed, reach).transpose(0, 1).reshape(-1, d)
            @ layer.attn.Wo.weight.double().T
        )
        hq = hq + y
        a, gate = (_ln(hq, layer.mlp_norm) @ layer.mlp.Wi.weight.double().T).chunk(2, -1)
        x = hq + (F.gelu(a) * gate) @ layer.mlp.Wo.weight.double().T
        # the merge: kept rows scattered back, dropped rows keep their span-entry state
        if i == end - 1:
            x = x_in.index_copy(0, keep, x)
    return _ln(x, enc.final_norm)


@pytest.fixture(scope="module")
def case():
    drop = DropConfig(method="random", variant="drop", rate=0.5)
    m = _model(drop)
    row = _row()
    g = torch.Generator().manual_seed(2)
    # scattered: windows matter
    keep = torch.sort(torch.randperm(T, generator=g)[: drop.num_kept(T)]).values
    with torch.no_grad():
        ref = _reference(m, row, keep, "positions")
    return m, row, keep, ref


def _ours(m, row, keep) -> torch.Tensor:
    doc = document_ids(row, SEP, PAD)
    with torch.no_grad():
        return m.model(row, keep_idx=keep[None], doc_ids=doc)[0].double()


@pytest.mark.parametrize("form", ["band", "bias"])
def test_windows_over_kept_rows_match_a_direct_reference_at_8192(case, form, monkeypatch):
    m, row, keep, ref = case
    assert m.model.span is not None and (m.model.span.start, m.model.span.end) == (1, 3)
    assert [layer.sliding for layer in m.model.layers] == [True, True, True, False]
    if form == "bias":
        monkeypatch.setattr(attention, "BAND_BLOCK", 0)
    else:  # the default: windows (and documents) as bands, which must actually be used here
        built = []
        real = attention.Band.build

        def spy(*a, **k):
            b = real(*a, **k)
            built.append(b is not None)
            return b

        monkeypatch.setattr(attention.Band, "build", staticmethod(spy))
    got = _ours(m, row, keep)
    if form == "band":
        assert any(built)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_windows_over_kept_rows_differ_from_windows_over_kept_row_index(case):
    """The other semantics (the window counted over kept rows) is measurably different: the test
    above can tell them apart."""
    m, row, keep, ref = case
    with torch.no_grad():
        other = _reference(m, row, keep, "kept")
    assert (other - ref).abs().max() > 1e-3
    assert (_ours(m, row, keep) - other).abs().max() > 1e-3
