"""Token-dropping variants against a slow per-sequence reference written with explicit index
lists."""

import math

import pytest
import torch

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.engine import gather_rows, scatter_rows
from tokendrop.dropping.methods import DROP_VARIANTS, VARIANTS
from tokendrop.errors import ConfigError
from tokendrop.models.bert.model import BertForMaskedLM

# the variants that keep a selected subset
SELECTING = [n for n, v in VARIANTS.items() if v.selects]


def ref_layer(layer, q_rows, kv_rows, kv_valid):
    """One post-LN BERT layer for one sequence, written out: q_rows (n, d), kv_rows (N, d)."""
    a = layer.attn
    d = q_rows.shape[1]
    h = a.num_heads
    dh = d // h
    wk, wv = a.kv.weight.chunk(2, 0)
    bk, bv = a.kv.bias.chunk(2, 0)
    q = q_rows @ a.q.weight.T + a.q.bias
    k = kv_rows @ wk.T + bk
    v = kv_rows @ wv.T + bv
    out = torch.zeros_like(q)
    for head in range(h):
        sl = slice(head * dh, (head + 1) * dh)
        for i in range(q.shape[0]):
            logits = torch.stack(
                [
                    (q[i, sl] * k[j, sl]).sum() / math.sqrt(dh)
                    if kv_valid[j]
                    else torch.tensor(-1e30)
                    for j in range(k.shape[0])
                ]
            )
            p = torch.softmax(logits, 0)
            out[i, sl] = (p[:, None] * v[:, sl]).sum(0)
    x = torch.nn.functional.layer_norm(
        q_rows + out @ a.o.weight.T + a.o.bias, (d,), a.norm.weight, a.norm.bias, a.norm.eps
    )
    f = layer.ffn
    y = torch.nn.functional.gelu(x @ f.up.weight.T + f.up.bias) @ f.down.weight.T + f.down.bias
    return torch.nn.functional.layer_norm(x + y, (d,), f.norm.weight, f.norm.bias, f.norm.eps)


def ref_forward(model, ids, keep, mask, start, end, variant):
    """Per-sequence reference: returns final hidden states (B, T, d); ``variant`` a registry row's
    name (its facts: pooling, or dropped rows frozen as keys/values)."""
    row = VARIANTS[variant]
    outs = []
    emb = model.bert.embeddings(ids, None)
    layers = model.bert.encoder.layers
    for b in range(ids.shape[0]):
        T = ids.shape[1]
        valid = [bool(mask[b, j]) for j in range(T)]
        h = emb[b]
        for li in range(start):
            h = ref_layer(layers[li], h, h, valid)
        h_in = h
        if row.pools:
            pairs = [list(range(i, min(i + 2, T))) for i in range(0, T, 2)]
            # a pair pools its real rows only ((real, [PAD]) -> the real row) and is valid if it
            # holds one
            real = [[j for j in p if valid[j]] or p for p in pairs]
            pooled = torch.stack([h_in[r].mean(0) for r in real])
            pvalid = [any(valid[j] for j in p) for p in pairs]
            pooled = ref_layer(layers[start], pooled, h_in, valid)
            for li in range(start + 1, end):
                pooled = ref_layer(layers[li], pooled, pooled, pvalid)
            merged = torch.stack([pooled[i // 2] + h_in[i] for i in range(T)])
        else:
            K = [int(i) for i in keep[b]]
            kept = torch.stack([h_in[i] for i in K])
            kvalid = [valid[i] for i in K]
            kept = ref_layer(layers[start], kept, h_in, valid)
            for li in range(start + 1, end):
                if row.frozen_kv:
                    kv = torch.stack([kept[K.index(i)] if i in K else h_in[i] for i in range(T)])
                    kept = ref_layer(layers[li], kept, kv, valid)
                else:
                    kept = ref_layer(layers[li], kept, kept, kvalid)
            merged = torch.stack([kept[K.index(i)] if i in K else h_in[i] for i in range(T)])
        h = merged
        for li in range(end, len(layers)):
            h = ref_layer(layers[li], h, h, valid)
        outs.append(h)
    return torch.stack(outs)


def random_keep(b, t, m, gen):
    return torch.stack([torch.randperm(t, generator=gen)[:m].sort().values for _ in range(b)])


def make(small_cfg, variant, rate=0.5, **kw):
    torch.manual_seed(0)
    drop = DropConfig(
        method="cumulative" if VARIANTS[variant].selects else "none",
        variant=variant,
        rate=rate,
        **kw,
    )
    return BertForMaskedLM(small_cfg, drop).train(), drop


@pytest.mark.parametrize("variant", DROP_VARIANTS)
@pytest.mark.parametrize("padded", [False, True])
def test_variant_matches_reference(small_cfg, variant, padded):
    model, drop = make(small_cfg, variant)
    start, end = drop.span(small_cfg.num_layers)
    T, B = 11, 3
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, small_cfg.vocab_size, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    if padded:
        mask[1, 8:] = 0
        mask[2, 5:] = 0
    keep = random_keep(B, T, drop.num_kept(T), gen)
    with torch.no_grad():
        fast = model.bert(ids, mask if padded else None, keep_idx=keep, drop_active=True)
        ref = ref_forward(model, ids, keep, mask, start, end, variant)
    rows = mask.bool()
    torch.testing.assert_close(fast[rows], ref[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", SELECTING)
def test_dropped_rows_leave_span_unchanged(small_cfg, variant):
    """With the span ending at the last layer, a dropped row's output is its span-entry state (a
    pooling variant drops no row)."""
    model, drop = make(small_cfg, variant, start=2, end=small_cfg.num_layers)
    T = 10
    ids = torch.randint(5, 97, (2, T))
    keep = torch.tensor([[0, 2, 3, 7, 9], [1, 4, 5, 6, 8]])
    entry = {}

    def grab(module, args, kwargs):
        entry.setdefault("kv", kwargs["kv_in"])

    hook = model.bert.encoder.layers[2].register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad():
        out = model.bert(ids, keep_idx=keep, drop_active=True)
    hook.remove()
    for b in range(2):
        dropped = [i for i in range(T) if i not in keep[b].tolist()]
        torch.testing.assert_close(out[b, dropped], entry["kv"][b, dropped], atol=0, rtol=0)


@pytest.mark.parametrize("variant", SELECTING)
def test_rate_zero_is_dense(small_cfg, variant):
    model, drop = make(small_cfg, variant, rate=0.0)
    T = 12
    ids = torch.randint(5, 97, (3, T))
    mask = torch.ones(3, T, dtype=torch.long)
    mask[2, 9:] = 0
    keep = torch.arange(T).expand(3, T)
    assert drop.num_kept(T) == T
    with torch.no_grad():
        for m in (None, mask):
            dense = model.bert(ids, m)  # training mode, no keep_idx -> dense
            dropped = model.bert(ids, m, keep_idx=keep, drop_active=True)
            torch.testing.assert_close(dropped, dense, atol=1e-6, rtol=0)


def test_eval_mode_never_drops(small_cfg):
    model, drop = make(small_cfg, "drop")
    ids = torch.randint(5, 97, (2, 10))
    keep = torch.tensor([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, keep_idx=keep, drop_active=True), model(ids), atol=0, rtol=0
        )


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradients_reach_every_parameter(small_cfg, variant):
    model, drop = make(small_cfg, variant)
    T = 12
    ids = torch.randint(5, 97, (2, T))
    tt = torch.zeros_like(ids)
    tt[:, 6:] = 1
    keep = torch.tensor([[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 11]])
    pos = torch.tensor([[1, 4, 6], [3, 8, 11]])
    logits = model(ids, pos, token_type_ids=tt, keep_idx=keep, drop_active=True)
    logits.logsumexp(-1).sum().backward()
    pooled = model.bert.pooler(model.bert(ids))  # the pooler is used by classification only
    pooled.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{variant}: no gradient for {name}"


@pytest.mark.parametrize("variant", SELECTING)
def test_no_gradient_into_dropped_rows_through_half_layers(small_cfg, variant):
    """Loss on the dropped rows only, span up to the last layer: half-layer weights get nothing,
    and the gradient w.r.t. a dropped row's span-entry state is exactly the identity path."""
    model, drop = make(small_cfg, variant, start=2, end=small_cfg.num_layers)
    T = 10
    keep = torch.tensor([[0, 2, 3, 7, 9]])
    dropped = [1, 4, 5, 6, 8]
    x = torch.randn(1, T, small_cfg.hidden_size, requires_grad=True)
    enc = model.bert.encoder
    h = x
    for layer in enc.layers[:2]:
        h = layer(h)
    entry = h.detach().requires_grad_(True)
    y = enc.layers[2](gather_rows(entry, keep), kv_in=entry)
    for layer in enc.layers[3:]:
        kv = scatter_rows(entry, y, keep) if VARIANTS[variant].frozen_kv else None
        y = layer(y, kv_in=kv)
    out = scatter_rows(entry, y, keep)
    w = torch.randn(len(dropped), small_cfg.hidden_size)
    (out[0, dropped] * w).sum().backward()
    for name, p in enc.layers[2:].named_parameters():
        assert p.grad is None or p.grad.abs().max() == 0, name
    torch.testing.assert_close(entry.grad[0, dropped], w, atol=0, rtol=0)
    assert entry.grad[0, keep[0]].abs().max() == 0


def test_gather_scatter_round_trip():
    x = torch.randn(3, 9, 4)
    keep = torch.tensor([[0, 3, 4, 8], [1, 2, 5, 6], [0, 1, 2, 3]])
    g = gather_rows(x, keep)
    for b in range(3):
        torch.testing.assert_close(g[b], x[b, keep[b]], atol=0, rtol=0)
    torch.testing.assert_close(scatter_rows(x, g, keep), x, atol=0, rtol=0)
    z = scatter_rows(torch.zeros_like(x), g, keep)
    for b in range(3):
        for i in range(9):
            expect = x[b, i] if i in keep[b].tolist() else torch.zeros(4)
            torch.testing.assert_close(z[b, i], expect, atol=0, rtol=0)


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(start=4, end=9), "drop.start/drop.end"),
        (dict(start=5, end=3), "drop.start/drop.end"),
        (dict(rate=1.0), "drop.rate"),
        (dict(rate=-0.1), "drop.rate"),
        (dict(variant="funnel"), "drop.variant"),
        (dict(method="magic"), "drop.method"),
        (dict(variant="avg", rate=0.25), "drop.rate"),
        (dict(variant="layer_rearranged", end=5), "drop.end"),
        # a layer index or "auto" (the variant's span): -1 is no index here, not Python's last
        (dict(start=-1), "drop.start: expected a layer index >= 0 or 'auto'"),
        (dict(end=-2), "drop.end: expected a layer index >= 0 or 'auto'"),
    ],
)
def test_bad_drop_config(small_cfg, kw, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        BertForMaskedLM(small_cfg, DropConfig(method=kw.pop("method", "cumulative"), **kw))


def test_paper_default_span():
    assert DropConfig().span(12) == (5, 11) == DropConfig(start="auto", end="auto").span(12)
    assert DropConfig(variant="layer_rearranged").span(12) == (6, 12)
    assert DropConfig().span(24) == (11, 23)
    assert DropConfig(rate=0.5).num_kept(512) == 256
    assert DropConfig(rate=0.625).num_kept(128) == 48
