"""Training length as users give it: train.tokens, train.epochs, train.warmup_ratio
(tokendrop.train.budget)."""

from __future__ import annotations

import pytest

from tokendrop.config import Config, TrainConfig, from_dict
from tokendrop.config.quantities import parse_tokens
from tokendrop.errors import ConfigError
from tokendrop.train.budget import (
    resolve_length,
    resolved_train,
    steps_for_tokens,
    steps_per_epoch,
)
from tokendrop.train.schedules import lr_schedule


@pytest.mark.parametrize(
    "text,want",
    [
        ("2B", 2_000_000_000),
        ("500M", 500_000_000),
        ("1.5e9", 1_500_000_000),
        ("750k", 750_000),
        ("1.25T", 1_250_000_000_000),
        (123456, 123456),
        ("2_000_000", 2_000_000),
        ("0.1B", 100_000_000),
        (1.5e9, 1_500_000_000),
    ],
)
def test_parse_tokens(text, want):
    assert parse_tokens(text) == want


@pytest.mark.parametrize("bad", ["2X", "", "B", "-5", "0", "1.5.2M", True])
def test_parse_tokens_refuses(bad):
    with pytest.raises(ValueError, match="train.tokens"):
        parse_tokens(bad)


def train(**kw) -> TrainConfig:
    t = TrainConfig(**kw)
    t.validate()
    return t


def test_tokens_resolve_to_ceil_of_tokens_over_global_batch_slots():
    # 2B tokens, global batch 256 x T=512 = 131072 slots/step: 2e9 / 131072 = 15258.789... -> 15259
    t = train(tokens="2B", batch_size=256)
    r = resolve_length(t, num_sequences=10**7, seq_len=512, world=8)
    assert r.steps == 15259 and r.warmup_steps == 100
    # the global batch decides, whatever the ranks and the accumulation
    for world, micro in ((1, "auto"), (2, "auto"), (4, 16), (8, 8)):
        t = train(tokens="2B", batch_size=256, micro_batch_size=micro)
        assert resolve_length(t, 10**7, 512, world).steps == 15259
    # exact multiples do not round up; one token more does
    assert steps_for_tokens(32 * 128 * 10, 32, 128) == 10
    assert steps_for_tokens(32 * 128 * 10 + 1, 32, 128) == 11


def test_epochs_resolve_over_the_loaders_pass_with_accumulation_and_ranks():
    # N = 1000 sequences, batch 32.
    # 1 rank, no accumulation: G = 32, floor(1000/32) = 31 micro-batches = 31 steps/pass; 2 passes:
    # 62
    assert resolve_length(train(epochs=2.0, batch_size=32), 1000, 64, world=1).steps == 62
    # 2 ranks x micro 4 (accumulation 4): G = 8, floor(1000/8) = 125 micro-batches, / 4 = 31.25
    # steps/pass
    t = train(epochs=2.0, batch_size=32, micro_batch_size=4)
    assert steps_per_epoch(1000, 32, 2, 4) == pytest.approx(31.25)
    assert resolve_length(t, 1000, 64, world=2).steps == 63  # ceil(62.5)
    # 4 ranks x micro 8 (no accumulation): G = 32 -> as one rank
    assert resolve_length(train(epochs=2.0, batch_size=32), 1000, 64, world=4).steps == 62
    # 1 rank, micro 1 (accumulation 32): G = 1, 1000 micro-batches -> 31.25 steps/pass; 1.1 passes:
    # ceil(34.375)
    assert (
        resolve_length(
            train(epochs=1.1, batch_size=32, micro_batch_size=1), 1000, 64, world=1
        ).steps
        == 35
    )
    # decimal epochs are exact: 0.1 x 31 * 10 passes would be 31.000000000000004 in floats
    assert resolve_length(train(epochs=1.0, batch_size=32), 1000, 64).steps == 31
    assert resolve_length(train(epochs=0.3, batch_size=10), 1000, 64).steps == 30


def test_epochs_with_less_than_one_global_batch_is_an_error():
    with pytest.raises(ValueError, match="train.epochs: the training split has 20 sequences"):
        resolve_length(train(epochs=1.0, batch_size=32), 20, 64)


def test_warmup_ratio_resolves_against_the_steps():
    t = train(tokens=32 * 128 * 50, batch_size=32, warmup_ratio=0.06)  # 50 steps; ceil(3.0) = 3
    r = resolve_length(t, 1000, 128)
    assert (r.steps, r.warmup_steps) == (50, 3)
    t = train(steps=1000, warmup_ratio=0.1)
    assert resolve_length(t, 1000, 128).warmup_steps == 100
    t = train(steps=7, warmup_ratio=0.1)
    assert resolve_length(t, 1000, 128).warmup_steps == 1  # ceil(0.7)
    new = resolved_train(t, 1000, 128)
    assert (new.steps, new.warmup_steps, new.warmup_ratio) == (7, 1, 0.0)
    assert "warmup_ratio = 0.1" in new.resolved_from
    # resolved: a plain config, valid and resolving to nothing more
    new.validate()
    assert resolve_length(new, 1000, 128) is None


def test_warmup_ratio_of_a_time_budget_is_a_share_of_the_budget():
    t = train(time_budget="10m", warmup_ratio=0.1, lr=1.0, lr_schedule="wsd")
    new = resolved_train(t, 1000, 128)
    assert new.warmup_ratio == 0.1 and new.steps == "unset"
    s = lr_schedule(new)
    assert s.at(0, 0.05) == pytest.approx(0.5)  # half-way through the warm-up share
    assert s.at(5, 0.1) == pytest.approx(1.0)
    assert s.at(999, 0.5) == pytest.approx(1.0)


def test_resolved_config_records_steps_and_how():
    t = train(tokens="1M", batch_size=16)
    new = resolved_train(t, 10**5, 128)  # 1e6 / 2048 = 488.28 -> 489
    assert (new.steps, new.tokens, new.epochs) == (489, "unset", "unset")
    assert (
        "ceil(1000000 / (16 sequences x 128 token slots per step)) = 489 steps" in new.resolved_from
    )
    assert "sequence slot" in new.resolved_from
    assert resolved_train(train(steps=5), 10, 128).steps == 5  # nothing to resolve: unchanged


@pytest.mark.parametrize(
    "overrides,first,second",
    [
        (["train.steps=10", "train.tokens='2B'"], "train.steps", "train.tokens"),
        (["train.steps=10", "train.epochs=1.5"], "train.steps", "train.epochs"),
        (["train.tokens='2B'", "train.epochs=1.0"], "train.tokens", "train.epochs"),
        (["train.epochs=1.0", "train.time_budget='1h'"], "train.epochs", "train.time_budget"),
    ],
)
def test_two_lengths_is_a_one_line_error_naming_both(overrides, first, second):
    with pytest.raises(ConfigError) as e:
        from_dict(Config, {}, overrides)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{first} and {second}: both set")


def test_warmup_steps_and_ratio_both_set_is_an_error():
    with pytest.raises(ConfigError, match=r"^train.warmup_steps and train.warmup_ratio: both set"):
        from_dict(Config, {}, ["train.warmup_steps=10", "train.warmup_ratio=0.1"])
    cfg = from_dict(Config, {}, ["train.warmup_ratio=0.1"])
    assert cfg.train.warmup_steps == "auto"
    assert from_dict(Config, {}, []).train.warmup_steps == 100  # the default, unchanged
    for bad, field in (
        (["train.warmup_ratio=1.0"], "train.warmup_ratio"),
        (["train.epochs=-1.0"], "train.epochs"),
        (["train.tokens='lots'"], "train.tokens"),
    ):
        with pytest.raises(ConfigError, match=f"^{field}"):
            from_dict(Config, {}, ["train.steps=unset", *bad])


def test_tokens_alone_leaves_steps_unset_until_resolved():
    cfg = from_dict(Config, {}, ["train.tokens='2B'"])
    assert cfg.train.steps == "unset" and cfg.train.tokens == "2B"
    assert from_dict(Config, {}, ["train.tokens=2000000000"]).train.tokens == 2_000_000_000
