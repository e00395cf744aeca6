"""DropPlan, the method behind one object: its per-step rules against the rules written out, its
selection against the selector's, its update and its FLOPs against the FLOP model."""

from __future__ import annotations

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import consistency_flops, step_flops
from tokendrop.dropping.importance import build_selector
from tokendrop.dropping.methods import METHODS, VARIANTS, ltd_kept, ltd_kept_at
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.errors import ConfigError

V, T = 97, 32
MODEL = ModelConfig(vocab_size=V, num_layers=4, hidden_size=32, num_heads=2)


def plan(total_steps: int | None = 20, counts=None, **drop) -> DropPlan:
    return DropPlan.for_model(
        DropConfig(**drop), MODEL, T, SPECIAL_IDS, total_steps=total_steps, seed=3, counts=counts
    )


def batch(seed: int = 0) -> torch.Tensor:
    ids = torch.randint(len(SPECIAL_IDS), V, (3, T), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = SPECIAL_IDS["cls"]
    return ids


@pytest.mark.parametrize("frac", [0.0, 0.25])
def test_stage2_in_steps_and_in_a_time_budget(frac):
    """Stage 2 (the last stage2_fraction is dense): steps before S - round(frac S) drop in a run of
    S steps; in a time budget (total 0) the steps before 1 - frac of it is used."""
    p = plan(total_steps=20, method="cumulative", stage2_fraction=frac)
    first_dense = 20 - round(frac * 20)
    assert p.stage2_start == first_dense
    assert [p.at(k, T).dropping for k in range(20)] == [k < first_dense for k in range(20)]
    timed = plan(total_steps=0, method="cumulative", stage2_fraction=frac)
    assert timed.stage2_start is None
    for progress in (0.0, 0.5, 0.74, 0.76, 0.99):
        assert timed.at(7, T, progress).dropping == (progress < 1.0 - frac)
    dense = plan(method="none")
    assert dense.stage2_start == 0 and not dense.at(0, T).dropping and dense.selector is None


def test_a_dense_step_keeps_every_row_and_runs_no_consistency_pass():
    p = plan(method="cumulative", stage2_fraction=0.5, consistency_weight=0.1, consistency_every=1)
    at = p.at(15, T)
    assert at == DropStep(15, T, False, T, False) and at.kept_fraction == 1.0
    assert p.keep_idx(batch(), at) is None


def test_kept_count_is_the_method_rule():
    """M: the variant's static count, or random-LTD's ramp at the step (and over the progress in a
    time budget)."""
    assert plan(method="cumulative", rate=0.25).at(5, T).kept == round(0.75 * T)
    assert plan(method="none", variant="avg", rate=0.5).at(5, T).kept == (T + 1) // 2
    ltd = dict(method="random_ltd", ltd_start_fraction=0.25, ltd_step=4)
    p = plan(total_steps=40, **ltd)
    assert [p.at(k, T).kept for k in range(40)] == [ltd_kept(p.drop, T, k, 40) for k in range(40)]
    assert p.at(0, T).kept < p.at(10, T).kept < p.at(39, T).kept == T
    timed = plan(total_steps=0, **ltd)
    assert timed.at(3, T, 0.3).kept == ltd_kept_at(timed.drop, T, 3, 0, 0.3)


def test_consistency_cadence():
    """ScTD's term runs on every consistency_every-th dropping step, from step 0."""
    p = plan(method="cumulative", consistency_weight=0.05, consistency_every=3, stage2_fraction=0.5)
    assert [k for k in range(20) if p.at(k, T).consistency] == [0, 3, 6, 9]  # stage 2 from step 10
    assert p.consistency and not plan(method="cumulative").consistency
    assert not any(plan(method="cumulative").at(k, T).consistency for k in range(5))


def test_selection_is_the_selectors():
    """keep_idx: the selector's own selection with the same seed (B, M); (S, B, M) per half layer
    for random_ltd; None when the variant pools or a per-layer method is at full length."""
    ids = batch()
    p = plan(method="random")
    ref = build_selector(p.drop, V, SPECIAL_IDS, T, seed=3)
    assert torch.equal(p.keep_idx(ids, p.at(0, T)), ref.select(ids))
    ltd = plan(total_steps=10, method="random_ltd", ltd_start_fraction=0.5, ltd_step=4)
    keep = ltd.keep_idx(ids, ltd.at(0, T))
    assert keep.shape == (ltd.half_layers, 3, T // 2) and ltd.half_layers == MODEL.num_layers - 2
    assert ltd.keep_idx(ids, ltd.at(9, T)) is None  # the ramp has reached T: a dense pass
    for name, variant in VARIANTS.items():
        p = plan(method="cumulative" if variant.selects else "none", variant=name)
        assert (p.selector is None) == variant.pools
        keep = p.keep_idx(ids, p.at(0, T))
        assert keep is None if variant.pools else keep.shape == (3, p.at(0, T).kept)


def test_update_learns_only_for_a_learning_method():
    labels = torch.randint(5, V, (3, 4))
    nll, w = torch.rand(3, 4) + 1.0, torch.ones(3, 4)
    for name, method in METHODS.items():
        if not method.drops or method.per_layer:
            continue
        p = plan(method=name, counts=torch.arange(V)) if method.needs_counts else plan(method=name)
        before = p.importance.clone()
        p.update(labels, nll, w)
        assert p.learns == method.learns_from_loss
        assert torch.equal(before, p.importance) != method.learns_from_loss, name


def test_flops_are_the_flop_models():
    p = plan(method="cumulative", consistency_weight=0.05, consistency_every=2)
    assert p.flops(p.at(1, T), 8) == step_flops(MODEL, T, 8, p.drop).total
    assert p.flops(p.at(2, T), 8) == step_flops(MODEL, T, 8, p.drop).total + consistency_flops(
        MODEL, T, 8
    )
    dense = DropStep(0, T, False, T, False)
    assert p.flops(dense, 8) == step_flops(MODEL, T, 8, None).total
    assert p.nominal_flops(T, 8) == {
        "dropping": step_flops(MODEL, T, 8, p.drop).total,
        "dense": step_flops(MODEL, T, 8, None).total,
    }
    with pytest.raises(ConfigError, match="FLOPs need the model"):
        DropPlan(
            DropConfig(method="cumulative"), SPECIAL_IDS, num_layers=4, vocab_size=V, seq_len=T
        ).flops(dense, 1)


def test_a_rule_that_needs_the_runs_length_says_so():
    with pytest.raises(ConfigError, match="stage2_fraction needs the run's length"):
        plan(total_steps=None, method="cumulative", stage2_fraction=0.1).at(0, T)
    with pytest.raises(ConfigError, match="random_ltd's kept-count ramp needs the run's length"):
        plan(total_steps=None, method="random_ltd").at(0, T)
    assert plan(total_steps=None, method="cumulative").at(0, T).dropping  # nothing needs it


def test_a_bad_config_is_refused_when_the_plan_is_built():
    with pytest.raises(ConfigError, match="drop.variant"):
        plan(method="cumulative", variant="nope")
