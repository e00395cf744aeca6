import math

import pytest

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import flop_ratio, layer_flops, step_flops
from tokendrop.dropping.methods import VARIANTS


def test_bert_base_hand_calculation():
    cfg = ModelConfig(num_layers=12, hidden_size=768, num_heads=12)
    d, T = 768, 512
    dense_layer = 24 * T * d * d + 4 * T * T * d  # the paper's 24 T d^2 + 4 T^2 d
    assert layer_flops(T, T, d, 4 * d) == dense_layer
    M = 256
    first_half = 20 * M * d * d + 4 * T * d * d + 4 * M * T * d
    later_half = 24 * M * d * d + 4 * M * M * d
    expected = 6 * dense_layer + first_half + 5 * later_half
    drop = DropConfig(method="cumulative", rate=0.5)
    assert step_flops(cfg, T, 1, drop).encoder == expected
    assert step_flops(cfg, T, 1, None).encoder == 12 * dense_layer
    r = flop_ratio(cfg, T, drop, encoder_only=True)
    assert 0.74 <= r <= 0.75, r
    head = 2 * 77 * d * d + 2 * 77 * d * 30522
    assert step_flops(cfg, T, 8, drop).total == 3 * 8 * (expected + head)


def test_released_head_on_all_positions_by_hand():
    """transformers' BertForMaskedLM as released runs its head (d -> d transform, then the d -> V
    decoder) on all T positions: P = T in the count; the sparse head on round(0.15 T) slots.  The
    encoder is the same, so the released/sparse gap is the head's rows alone."""
    cfg = ModelConfig(num_layers=12, hidden_size=256, num_heads=4, intermediate_size=1024)
    d, V, T, B = 256, cfg.vocab_size, 128, 16
    released, sparse = step_flops(cfg, T, B, None, num_predictions=T), step_flops(cfg, T, B, None)
    assert released.head == 2 * T * d * d + 2 * T * d * V
    assert sparse.head == 2 * 19 * d * d + 2 * 19 * d * V  # round(0.15 * 128) = 19
    assert released.encoder == sparse.encoder
    assert released.total - sparse.total == 3 * B * (T - 19) * (2 * d * d + 2 * d * V)


def test_attention_share_by_hand():
    """The attention products (4 n k d per layer) split out of the count: BERT's grow with T^2, a
    ModernBERT sliding-window layer's with T * W, kept rows' windows over original positions."""
    cfg = ModelConfig(num_layers=12, hidden_size=768, num_heads=12)
    d, T, M = 768, 8192, 4096
    drop = DropConfig(method="cumulative", rate=0.5)
    dense, dropped = step_flops(cfg, T, 1, None), step_flops(cfg, T, 1, drop)
    assert dense.attention == 12 * 4 * T * T * d
    assert dropped.attention == 6 * 4 * T * T * d + 4 * M * T * d + 5 * 4 * M * M * d
    assert dense.attention_share == dense.attention / (dense.encoder + dense.head)
    short = step_flops(cfg, 512, 1, None)
    assert short.attention_share < 0.15 < 0.5 < dense.attention_share  # where long context pays
    # global, sliding, sliding
    m = _modern(num_layers=3, local_attention=128, global_attn_every_n_layers=3)
    w = 2 * 64 + 1
    assert step_flops(m, T, 1, None).attention == 4 * T * T * 64 + 2 * 4 * T * w * 64
    # span [0, 2): layers 0 and 1 half
    kept = step_flops(m, T, 1, DropConfig(method="cumulative", rate=0.5))
    assert kept.attention == 4 * M * T * 64 + 4 * M * math.ceil(w * M / T) * 64 + 4 * T * w * 64


def test_variants_order():
    cfg = ModelConfig(num_layers=12, hidden_size=768, num_heads=12)
    T = 128
    r = {
        n: flop_ratio(cfg, T, DropConfig(method="cumulative" if v.selects else "none", variant=n))
        for n, v in VARIANTS.items()
    }
    assert r["drop"] < r["pass"] < 1
    assert r["avg"] == pytest.approx(r["drop"])
    assert flop_ratio(cfg, T, DropConfig(method="cumulative", rate=0.0)) == 1.0
    rates = [
        flop_ratio(cfg, T, DropConfig(method="cumulative", rate=x))
        for x in (0.25, 0.5, 0.625, 0.75)
    ]
    assert rates == sorted(rates, reverse=True)


def _modern(**kw) -> ModelConfig:
    base = dict(
        family="modernbert",
        num_layers=6,
        hidden_size=64,
        num_heads=2,
        intermediate_size=96,
        local_attention=64,
        global_attn_every_n_layers=3,
        vocab_size=1000,
    )
    return ModelConfig(**{**base, **kw})


def test_modern_hand_calculation():
    """6 layers (full, sliding, sliding) x 2, d=64, GeGLU f=96, window 64 (W = 65 positions),
    T=256."""
    from tokendrop.dropping.flops import layer_types

    cfg = _modern()
    assert layer_types(cfg) == ["full_attention", "sliding_attention", "sliding_attention"] * 2
    d, f, T, W = 64, 96, 256, 65
    proj = lambda n, kv: 4 * n * d * d + 4 * kv * d * d  # noqa: E731  Q+O on n rows, K+V on kv rows
    geglu = lambda n: 2 * n * d * (2 * f) + 2 * n * f * d  # noqa: E731  Wi: d -> 2f, Wo: f -> d
    attn = lambda n, k: 4 * n * k * d  # noqa: E731  scores + weighted values, k keys per query
    full = proj(T, T) + geglu(T) + attn(T, T)
    local = proj(T, T) + geglu(T) + attn(T, W)
    assert step_flops(cfg, T).encoder == 2 * full + 4 * local
    # 50% drop over [2, 5): layer 2 (sliding) sees M=128 queries and all T keys (a full window
    # each); layer 3 (full) M x M; layer 4 (sliding) M x M with the window in original positions:
    # ceil(65 * 128 / 256) = 33 kept keys per query on average
    M = 128
    dropped = (
        (proj(M, T) + geglu(M) + attn(M, W))
        + (proj(M, M) + geglu(M) + attn(M, M))
        + (proj(M, M) + geglu(M) + attn(M, 33))
    )
    drop = DropConfig(method="cumulative", rate=0.5)
    assert drop.span(6) == (2, 5)
    assert step_flops(cfg, T, 1, drop).encoder == full + local + dropped + local
    # P = round(0.15 * 256) = 38 slots: dense, then the decoder
    head = 2 * 38 * d * d + 2 * 38 * d * 1000
    assert step_flops(cfg, T, 4, drop).total == 3 * 4 * (full + local + dropped + local + head)
    # counted as a masked dense kernel runs it: every layer full attention
    assert step_flops(cfg, T, masked_dense_local=True).encoder == 6 * full
    # an explicit layer_types list wins over the every-n rule
    assert step_flops(_modern(layer_types=["full_attention"] * 6), T).encoder == 6 * full


def test_modern_window_covering_the_sequence_is_full_attention():
    T = 64
    wide = _modern(local_attention=2 * T)  # every key within reach: k = min(T, W) = T
    assert step_flops(wide, T).encoder == step_flops(wide, T, masked_dense_local=True).encoder
    assert step_flops(_modern(), T).encoder == step_flops(wide, T).encoder  # W = 65 > 64 already
    assert step_flops(_modern(local_attention=16), T).encoder < step_flops(wide, T).encoder


@pytest.mark.parametrize("family", ["bert", "modernbert"])
@pytest.mark.parametrize("T", [128, 512, 1024])
def test_dense_vs_drop_bound_both_families(family, T):
    """The bound lies between the all-attention and the all-linear limits, for either family: each
    half layer after the first saves at least half of its work (rows halve) and at most three
    quarters (attention is rows x keys); the first at most half (its keys/values stay T)."""
    kw = dict(num_layers=12, hidden_size=256, num_heads=4, vocab_size=30522)
    cfg = (
        _modern(**kw, intermediate_size=384, local_attention=128)
        if family == "modernbert"
        else ModelConfig(**kw)
    )
    drop = DropConfig(method="cumulative", rate=0.5)
    start, end = drop.span(12)
    span = end - start
    r = flop_ratio(cfg, T, drop, encoder_only=True)
    lo = 1 - (0.5 + 0.75 * (span - 1)) / 12
    hi = 1 - 0.5 * (span - 1) / 12
    assert lo < r < hi, (family, T, r)
    assert flop_ratio(cfg, T, drop) > r  # the MLM head (not dropped) dilutes the saving
    assert flop_ratio(cfg, T, DropConfig(method="cumulative", rate=0.0)) == 1.0
    rates = [flop_ratio(cfg, T, DropConfig(method="cumulative", rate=x)) for x in (0.25, 0.5, 0.75)]
    assert rates == sorted(rates, reverse=True)
    if family == "modernbert":
        # sliding-window layers make attention a smaller share than a masked dense kernel's
        dense_local = flop_ratio(cfg, T, drop, encoder_only=True, masked_dense_local=True)
        assert (dense_local < r) if T > 129 else (dense_local == r)


def test_flops_command_prints_the_modern_family(capsys):
    from tokendrop.cli import main

    assert (
        main(
            [
                "flops",
                "--config",
                "modern-tiny",
                "--set",
                "model.vocab_size=1000",
                "--set",
                "drop.method=cumulative",
                "--seq-len",
                "64",
                "256",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "modernbert: 4 layers (2 global, 2 sliding-window 16: <= 17 keys per query), d=64, GeGLU "
        "f=96" in out
    )
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["64", "256"]
    cfg = ModelConfig(preset="modern-tiny", local_attention=16, vocab_size=1000)
    drop = DropConfig(method="cumulative")
    assert float(rows[1][3]) == pytest.approx(flop_ratio(cfg, 256, drop), abs=5e-4)
    assert main(["flops", "--config", "tiny", "--set", "model.vocab_size=1000"]) == 0
    assert "bert: 4 layers, d=64, FFN f=256" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name,shape",
    [
        ("modern-base-1024", (22, 768, 12, 1152)),
        ("modern-large-1024", (28, 1024, 16, 2624)),
        ("modern-tiny", (4, 64, 2, 96)),
    ],
)
def test_modern_presets_load(name, shape):
    from tokendrop.config import load_config

    cfg = load_config(name, ["model.vocab_size=50368", "drop.method=cumulative"])
    m = cfg.model
    assert (
        m.family == "modernbert"
        and (m.num_layers, m.hidden_size, m.num_heads, m.intermediate_size) == shape
    )
    assert m.layer_norm_eps == 1e-5 and m.hidden_dropout == 0.0 and m.uses_document_attention
    if name != "modern-tiny":
        assert cfg.data.seq_len == 1024 and cfg.data.mask_prob == 0.3 and m.local_attention == 128
        assert load_config(name).model.vocab_size == "data"  # from the prepared data
        # 50% dropping over the paper's span: ~25% fewer encoder FLOPs, as for BERT
        assert 0.73 < flop_ratio(m, 1024, cfg.drop, encoder_only=True) < 0.76
    else:
        assert m.local_attention == 16 and cfg.train.device == "cpu"
