import pytest

from tokendrop.config import DropConfig, ModelConfig
from tokendrop.flops import flop_ratio, layer_flops, step_flops


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


def test_variants_order():
    cfg = ModelConfig(num_layers=12, hidden_size=768, num_heads=12)
    T = 128
    r = {v: flop_ratio(cfg, T, DropConfig(method="cumulative" if v != "avg" else "none", variant=v)) for v in
         ("drop", "pass", "avg", "layer_rearranged")}
    assert r["drop"] < r["pass"] < 1
    assert r["avg"] == pytest.approx(r["drop"])
    assert flop_ratio(cfg, T, DropConfig(method="cumulative", rate=0.0)) == 1.0
    rates = [flop_ratio(cfg, T, DropConfig(method="cumulative", rate=x)) for x in (0.25, 0.5, 0.625, 0.75)]
    assert rates == sorted(rates, reverse=True)
