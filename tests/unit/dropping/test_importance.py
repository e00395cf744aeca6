"""Importance scores and token selection (docs/design.md §2.3)."""

import pytest
import torch

from tokendrop.data.tokenizer import SPECIAL_IDS as SPECIAL
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.importance import TokenSelector
from tokendrop.dropping.methods import PIN_HIGH, PIN_LOW

V = 20


def selector(method="cumulative", rate=0.5, T=8, **kw):
    return TokenSelector(
        DropConfig(method=method, rate=rate, **kw),
        V,
        SPECIAL,
        T,
        **({} if method != "frequency" else {"counts": torch.arange(V)}),
    )


def test_initial_and_pinned_values():
    s = selector()
    assert s.scores[10] == 10.0
    assert s.scores[2] == s.scores[3] == s.scores[4] == PIN_HIGH
    assert s.scores[0] == PIN_LOW


def test_update_hand_computed():
    """Repeated ids averaged, zero-weight slots ignored, pinned ids re-pinned."""
    s = selector(beta=0.9)
    labels = torch.tensor([[7, 7, 9, 0], [7, 3, 11, 0]])  # 0 = unused slot label ([PAD])
    nll = torch.tensor([[1.0, 3.0, 4.0, 100.0], [5.0, 2.0, 6.0, 50.0]])
    # slot (1,2) has weight 0: id 11 unchanged
    w = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    s.update(labels, nll, w)
    # id 7: mean(1, 3, 5) = 3 -> 0.9 * 10 + 0.1 * 3 = 9.3 ; id 9: 0.9 * 10 + 0.1 * 4 = 9.4
    assert s.scores[7].item() == pytest.approx(9.3)
    assert s.scores[9].item() == pytest.approx(9.4)
    assert s.scores[11].item() == 10.0
    assert s.scores[3].item() == PIN_HIGH  # [SEP] was a label with loss 2: re-pinned
    assert s.scores[0].item() == PIN_LOW  # padded slots never erode [PAD]
    s.update(labels, nll, w)
    assert s.scores[7].item() == pytest.approx(0.9 * 9.3 + 0.3)


def test_selection_pins_pad_and_ties():
    s = selector(T=8, rate=0.5)  # M = 4
    s.scores[10] = 5.0
    s.scores[11] = 7.0
    ids = torch.tensor(
        [
            [2, 10, 10, 10, 11, 3, 0, 0],  # CLS, ties on 10, SEP, PADs
            [2, 0, 10, 11, 10, 4, 10, 3],
        ]
    )
    keep = s.select(ids)
    # row 0: CLS(0), SEP(5), 11 at 4, then the earliest 10 (position 1)
    assert keep[0].tolist() == [0, 1, 4, 5]
    # row 1: CLS, MASK(5), SEP(7) pinned; then 11 at 3; PAD at 1 dropped first
    assert keep[1].tolist() == [0, 3, 5, 7]
    assert torch.equal(s.select(ids), keep)  # deterministic


def test_pinned_never_dropped_and_pad_first_random_batches():
    torch.manual_seed(0)
    for method in ("cumulative", "half_random", "random", "frequency"):
        s = selector(method, T=40, rate=0.5)
        s.scores[5:] = torch.rand(V - 5) * 10 if method != "frequency" else s.scores[5:]
        for _ in range(20):
            ids = torch.randint(5, V, (4, 40))
            ids[:, 0] = 2
            ids[:, -1] = 3
            ids[:, 10:14] = 4
            ids[1, 30:39] = 0  # padding
            keep = s.select(ids)
            assert keep.shape == (4, 20)
            assert (keep.diff(dim=1) > 0).all()  # ascending, unique
            for b in range(4):
                k = set(keep[b].tolist())
                assert {0, 10, 11, 12, 13, 39} <= k, method
            assert not (set(range(30, 39)) & set(keep[1].tolist())), method


def test_half_random_rank_ranges():
    T, rate = 40, 0.5
    s = selector("half_random", T=T, rate=rate)
    M, J = 20, int(0.05 * T)
    assert s.num_random == J == 2
    s.scores[5:] = torch.linspace(9, 1, V - 5)
    ids = torch.arange(5, 5 + 15).repeat(3)[:T].unsqueeze(0).repeat(50, 1)
    sc = s.scores[ids[0]]
    order = torch.sort(sc, descending=True, stable=True).indices
    head = set(order[: M - J].tolist())
    pool = order[M - J :].tolist()
    seen_beyond_m = False
    for row in s.select(ids):
        k = set(row.tolist())
        assert head <= k
        extra = k - head
        assert len(extra) == J and extra <= set(pool)
        seen_beyond_m |= bool(extra & set(order[M:].tolist()))
    assert seen_beyond_m  # draws come from ranks M-J+1..T, not only the top M


def test_random_is_uniform_among_unpinned():
    s = selector("random", T=10, rate=0.5)
    ids = torch.tensor([[2] + [7] * 8 + [3]]).repeat(2000, 1)
    keep = s.select(ids)
    counts = torch.zeros(10)
    for p in keep.flatten():
        counts[p] += 1
    assert counts[0] == counts[9] == 2000
    inner = counts[1:9] / 2000
    assert torch.allclose(inner, torch.full((8,), 3 / 8), atol=0.05)


def test_frequency_rarer_first():
    s = selector("frequency", T=6, rate=0.5)  # counts = arange: id 19 most frequent
    ids = torch.tensor([[2, 19, 6, 12, 5, 3]])
    assert s.select(ids)[0].tolist() == [0, 4, 5]  # CLS, SEP pinned + rarest (id 5)
    before = s.scores.clone()
    s.update(ids, torch.ones(1, 6), torch.ones(1, 6))
    assert torch.equal(s.scores, before)  # static


def test_keep_mlm_targets():
    s = selector(T=8, rate=0.5, keep_mlm_targets=True)
    s.scores[10] = 1.0
    s.scores[11] = 9.0
    ids = torch.tensor([[2, 11, 11, 11, 10, 10, 11, 3]])
    pos = torch.tensor([[4, 5, 0]])
    w = torch.tensor([[1.0, 1.0, 0.0]])
    assert s.select(ids, pos, w)[0].tolist() == [0, 4, 5, 7]
    assert s.select(ids)[0].tolist() == [0, 1, 2, 7]


def test_more_pinned_than_m_keeps_earliest_pinned():
    s = selector(T=8, rate=0.75)  # M = 2
    ids = torch.tensor([[2, 4, 4, 10, 4, 10, 10, 3]])
    assert s.select(ids)[0].tolist() == [0, 1]


def test_build_selector_is_the_one_factory():
    """build_selector: pins the special ids and the extra ids, uses counts for 'frequency' only (and
    requires them there: ConfigError), moves to the device."""
    import numpy as np

    from tokendrop.dropping.importance import build_selector
    from tokendrop.errors import ConfigError

    s = build_selector(
        DropConfig(method="cumulative"),
        V,
        SPECIAL,
        8,
        pinned_ids=[7],
        counts=np.arange(V),
        seed=3,
        device="cpu",
    )
    assert s.pinned_ids.tolist() == [2, 3, 4, 7] and s.pad_id == 0 and s.seed == 3
    # counts unused: init_score
    assert s.scores[7] == PIN_HIGH and s.scores[0] == PIN_LOW and s.scores[10] == 10.0
    f = build_selector(DropConfig(method="frequency"), V, SPECIAL, 8, counts=np.arange(V))
    assert f.scores[5] > f.scores[6] and torch.equal(f.scores, selector("frequency").scores)
    with pytest.raises(ConfigError, match="'frequency' needs token counts"):
        build_selector(DropConfig(method="frequency"), V, SPECIAL, 8)
    with pytest.raises(ConfigError, match=f"drop.counts_path: expected {V} counts"):
        build_selector(DropConfig(method="frequency"), V, SPECIAL, 8, counts=np.arange(V + 1))


def test_a_new_method_is_one_registry_row(monkeypatch):
    """A selection method is its row of METHODS: registering a row (here: keep the lowest scores,
    pinned ids aside) is enough for the config to accept it and the selector to dispatch to it, and
    its flags decide the rest (this one learns nothing from the loss, so updates leave m alone)."""
    from tokendrop.dropping.methods import METHODS, SelectionMethod, stable_topk_positions

    class Lowest(SelectionMethod):
        def select(self, scores, kept, drop, uniform):
            return stable_topk_positions(
                torch.where(scores.abs() >= PIN_HIGH, scores, -scores), kept
            )

    monkeypatch.setitem(METHODS, "lowest", Lowest("lowest"))
    drop = DropConfig(method="lowest")
    drop.validate(4)
    assert drop.enabled and not drop.per_layer and drop.span(4) == (1, 3)
    s = TokenSelector(drop, V, SPECIAL, 6)
    s.scores[5:9] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    ids = torch.tensor([[2, 5, 6, 7, 8, 3]])  # [CLS] ... [SEP] (pinned)
    # M = 3: pinned [CLS]/[SEP] + the lowest score (id 8)
    assert s.select(ids)[0].tolist() == [
        0,
        4,
        5,
    ]
    before = s.scores.clone()
    s.update(torch.tensor([[5, 6]]), torch.tensor([[9.0, 9.0]]), torch.ones(1, 2))
    assert torch.equal(s.scores, before)
    with pytest.raises(TypeError, match="one subset for the whole span"):
        s.select_layers(ids, 2, 2)
