"""The run's phases and the [MASK] rows' ranking (docs/design.md §2.3): a dense start
(``drop.dense_start_share``), a random start (``drop.random_start_share``), stage 2, and
``drop.mask_rows``, against the rules written out; shares of 0 and pinned [MASK] rows against
the paper's selection and update written out (bit for bit)."""

from __future__ import annotations

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import step_flops
from tokendrop.dropping.importance import MASK_JITTER, TokenSelector
from tokendrop.dropping.methods import METHODS, PIN_HIGH, PIN_LOW, stable_topk_positions
from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import ConfigError

V, T, STEPS = 97, 32, 40
MODEL = ModelConfig(vocab_size=V, num_layers=4, hidden_size=32, num_heads=2)
MASK = SPECIAL_IDS["mask"]


def plan(total_steps: int | None = STEPS, **drop) -> DropPlan:
    return DropPlan.for_model(
        DropConfig(**drop), MODEL, T, SPECIAL_IDS, total_steps=total_steps, seed=3
    )


def batch(seed: int, mask_share: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids with [MASK] at a share of the positions, the original ids there)."""
    g = torch.Generator().manual_seed(seed)
    orig = torch.randint(len(SPECIAL_IDS), V, (4, T), generator=g)
    orig[:, 0] = SPECIAL_IDS["cls"]
    orig[:, -1] = SPECIAL_IDS["sep"]
    masked = torch.rand((4, T), generator=g) < mask_share
    masked[:, 0] = masked[:, -1] = False
    return torch.where(masked, MASK, orig), orig


def slots(ids: torch.Tensor, orig: torch.Tensor, seed: int):
    """(labels, nll, weights) of every [MASK] position, padded to T slots."""
    g = torch.Generator().manual_seed(100 + seed)
    is_mask = ids == MASK
    labels = torch.where(is_mask, orig, 0)
    nll = torch.rand(ids.shape, generator=g) * 8.0
    return labels, nll, is_mask.float()


@pytest.mark.parametrize(
    "dense,rand,stage2", [(0.1, 0.0, 0.0), (0.0, 0.25, 0.0), (0.1, 0.2, 0.1), (0.0, 0.0, 0.0)]
)
def test_phases_in_steps_are_the_rules_written_out(dense, rand, stage2):
    """dense start [0, d), random start [d, d + r), the method, stage 2 [S - s, S): d, r, s the
    rounded shares of S steps; the dense start learns, stage 2 does not."""
    p = plan(
        method="cumulative",
        dense_start_share=dense,
        random_start_share=rand,
        stage2_fraction=stage2,
    )
    d, r = round(dense * STEPS), round((dense + rand) * STEPS)
    s2 = STEPS - round(stage2 * STEPS)
    for k in range(STEPS):
        at = p.at(k, T)
        assert at.dropping == (d <= k < s2), k
        assert at.random_selection == (at.dropping and k < r), k
        assert at.learns == (k < s2), k
        assert at.kept == (T // 2 if at.dropping else T)


def test_phases_in_a_time_budget_follow_the_progress():
    p = plan(
        total_steps=0,
        method="cumulative",
        dense_start_share=0.1,
        random_start_share=0.2,
        stage2_fraction=0.1,
    )
    for progress, (dropping, rand, learns) in {
        0.0: (False, False, True),
        0.09: (False, False, True),
        0.1: (True, True, True),
        0.29: (True, True, True),
        0.31: (True, False, True),
        0.89: (True, False, True),
        0.9: (False, False, False),
    }.items():
        at = p.at(123, T, progress)
        assert (at.dropping, at.random_selection, at.learns) == (dropping, rand, learns), progress


def test_a_phase_needs_the_runs_length():
    for name in ("dense_start_share", "random_start_share"):
        with pytest.raises(ConfigError, match=f"{name} needs the run's length"):
            plan(total_steps=None, method="cumulative", **{name: 0.1}).at(0, T)


def test_zero_shares_and_pinned_mask_rows_are_the_papers_selection_and_update_bit_for_bit():
    """Shares of 0 (and mask_rows = pinned): every step drops, selects by the cumulative scores
    with [CLS]/[SEP]/[MASK] pinned and [PAD] last, and learns by the paper's update -- the
    reference written out here, compared exactly over 30 steps."""
    p = plan(
        method="cumulative",
        dense_start_share=0.0,
        random_start_share=0.0,
        stage2_fraction=0.0,
        mask_rows="pinned",
    )
    m = torch.full((V,), 10.0)
    pinned = torch.tensor(sorted(SPECIAL_IDS[k] for k in ("cls", "sep", "mask")))
    m[pinned] = PIN_HIGH
    m[SPECIAL_IDS["pad"]] = PIN_LOW
    for k in range(30):
        ids, orig = batch(k)
        at = p.at(k, T)
        assert at.dropping and at.learns and not at.random_selection
        keep = p.keep_idx(ids, at)
        assert torch.equal(keep, stable_topk_positions(m[ids], T // 2)), k
        labels, nll, w = slots(ids, orig, k)
        p.update(labels, nll, w)
        sums = torch.zeros(V).index_add_(0, labels.reshape(-1), (nll * w).reshape(-1))
        counts = torch.zeros(V).index_add_(0, labels.reshape(-1), w.reshape(-1))
        mean = sums / counts.clamp(min=1.0)
        m = torch.where(counts > 0, 0.995 * m + 0.005 * mean, m)
        m[pinned] = PIN_HIGH
        m[SPECIAL_IDS["pad"]] = PIN_LOW
        assert torch.equal(p.importance, m), k


def test_the_random_start_draws_uniformly_then_the_method_ranks():
    """A random-start step keeps what method ``random`` keeps from the same generator state
    (pinned rows kept); after it, the cumulative ranking; the importance learns throughout."""
    p = plan(method="cumulative", random_start_share=0.5)
    ref = TokenSelector(DropConfig(method="random"), V, SPECIAL_IDS, T, seed=3)
    ids, orig = batch(0)
    p.importance[10:20] = 1.0  # a ranking a uniform draw ignores
    at = p.at(0, T)
    assert at.random_selection
    keep = p.keep_idx(ids, at)
    assert torch.equal(keep, ref.select(ids))
    pinned = (ids == SPECIAL_IDS["cls"]) | (ids == SPECIAL_IDS["sep"]) | (ids == MASK)
    kept = torch.zeros_like(pinned).scatter(1, keep, True)
    assert bool((kept | ~pinned).all())
    before = p.importance.clone()
    p.update(*slots(ids, orig, 0))
    assert not torch.equal(before, p.importance)
    late = p.at(STEPS // 2, T)
    assert not late.random_selection
    assert torch.equal(p.keep_idx(ids, late), stable_topk_positions(p.importance[ids], T // 2))


def test_a_dense_start_learns_and_counts_dense_flops():
    p = plan(method="cumulative", dense_start_share=0.25)
    at = p.at(0, T)
    assert not at.dropping and at.learns and p.keep_idx(batch(0)[0], at) is None
    assert p.flops(at, 8) == step_flops(MODEL, T, 8, None).total
    assert p.flops(p.at(10, T), 8) == step_flops(MODEL, T, 8, p.drop).total
    ids, orig = batch(0)
    before = p.importance.clone()
    p.update(*slots(ids, orig, 0))
    assert not torch.equal(before, p.importance)


def test_ranked_mask_rows_score_the_expected_importance_of_a_target():
    """mask_rows = ranked: [MASK] is not pinned; after an update its score is the mean of the new
    scores over the step's real slots (ids weighted by their slot counts), hand-computed."""
    s = TokenSelector(
        DropConfig(method="cumulative", beta=0.9, mask_rows="ranked"), 20, SPECIAL_IDS, 8
    )
    assert s.scores[MASK] == 10.0 and s.scores[SPECIAL_IDS["cls"]] == PIN_HIGH
    labels = torch.tensor([[7, 7, 9, 0]])
    nll = torch.tensor([[1.0, 3.0, 4.0, 100.0]])
    w = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    s.update(labels, nll, w)
    # id 7: 0.9 * 10 + 0.1 * 2 = 9.2 (two slots); id 9: 9.4 -> [MASK] (2 * 9.2 + 9.4) / 3
    assert s.scores[MASK].item() == pytest.approx((2 * 9.2 + 9.4) / 3)
    s.update(labels, nll, w, valid=torch.tensor(False))  # a skipped step changes nothing
    assert s.scores[MASK].item() == pytest.approx((2 * 9.2 + 9.4) / 3)
    s.update(labels, nll, torch.zeros_like(w))  # no real slot: [MASK] keeps its score
    assert s.scores[MASK].item() == pytest.approx((2 * 9.2 + 9.4) / 3)


def test_ranked_mask_rows_compete_and_their_ties_go_at_random():
    """Below the other rows a [MASK] row is dropped; tied with each other, which [MASK] rows are
    kept varies from draw to draw rather than always being the earliest."""
    s = TokenSelector(
        DropConfig(method="cumulative", rate=0.5, mask_rows="ranked"), 20, SPECIAL_IDS, 8, seed=0
    )
    s.scores[MASK] = 1.0  # below every ordinary id (10)
    ids = torch.tensor([[2, 10, MASK, 11, MASK, 12, 13, 3]])
    # M = 4: CLS and SEP pinned, then the earliest ordinary rows (10, 11); no [MASK] row
    assert s.select(ids)[0].tolist() == [0, 1, 3, 7]
    ids = torch.tensor([[2, MASK, MASK, MASK, MASK, MASK, MASK, 3]] * 64)
    keep = s.select(ids)  # CLS, SEP and two of six tied [MASK] rows
    assert bool((keep[:, 0] == 0).all() and (keep[:, -1] == 7).all())
    chosen = {tuple(r) for r in keep[:, 1:3].tolist()}
    assert len(chosen) > 5  # 15 possible pairs; position order would give one
    assert MASK_JITTER < 1e-3


def test_zero_shares_keep_the_mask_pinned_selector_identical():
    """The selector of a config with the new options at their defaults equals today's: the same
    pinned ids and scores, and no random draw on a cumulative selection (no generator made)."""
    a = TokenSelector(DropConfig(method="cumulative"), V, SPECIAL_IDS, T)
    ids, _ = batch(1)
    a.select(ids)
    assert a.generator is None and a.ranked_mask_id == -1
    assert a.pinned_ids.tolist() == sorted(SPECIAL_IDS[k] for k in ("cls", "sep", "mask"))


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"dense_start_share": -0.1}, r"drop.dense_start_share: expected a fraction in \[0, 1\]"),
        ({"random_start_share": 1.5}, r"drop.random_start_share: expected a fraction in \[0, 1\]"),
        ({"dense_start_share": 0.6, "stage2_fraction": 0.5}, "expected at most 1"),
        ({"random_start_share": 0.6, "dense_start_share": 0.5}, "expected at most 1"),
        ({"mask_rows": "capped"}, "drop.mask_rows: unknown 'capped'; expected one of pinned, "),
    ],
)
def test_bad_phase_and_mask_options_are_one_line_errors(kw, match):
    with pytest.raises(ConfigError, match=match) as e:
        DropConfig(method="cumulative", **kw).validate(4)
    assert "\n" not in str(e.value)


def test_options_a_method_cannot_use_are_refused():
    """A random start replaces a scored, single-subset selection; a ranked [MASK] needs a learned
    importance: every other method (registry-derived) is refused with one line."""
    for name, row in METHODS.items():
        d = DropConfig(method=name, random_start_share=0.1)
        if row.drops and row.reads_scores and not row.per_layer:
            d.validate(4)
        else:
            with pytest.raises(ConfigError, match="drop.random_start_share: a random start"):
                d.validate(4)
        d = DropConfig(method=name, mask_rows="ranked")
        if row.learns_from_loss:
            d.validate(4)
        else:
            with pytest.raises(ConfigError, match="drop.mask_rows: 'ranked' scores"):
                d.validate(4)
    with pytest.raises(ConfigError, match="drop.random_start_share"):
        DropConfig(method="none", variant="avg", random_start_share=0.1).validate(4)
    with pytest.raises(ConfigError, match="drop.mask_rows"):
        DropConfig(method="cumulative", variant="avg", mask_rows="ranked").validate(4)
