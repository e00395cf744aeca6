"""Token dropping's selection methods and its variants: the registries
:data:`METHODS` (what each ``drop.method`` is, how it chooses the kept rows and how many it keeps
at a step) and :data:`VARIANTS` (what each ``drop.variant`` does with the rows inside the span)
(docs/design.md §2.2-2.3, §2.10, §2.11).  The ``[drop]`` section that names them is
:class:`tokendrop.dropping.config.DropConfig`.

Each row of :data:`METHODS` is a :class:`SelectionMethod`: the facts other code asks (drops, learns
from the loss, random, per layer, needs counts) and the method's behaviour (its importance vector's
start, any check of its own on ``[drop]``, its kept count at a step --
:meth:`~SelectionMethod.kept_rows`: the variant's static count, or random-LTD's ramp -- and
:meth:`~SelectionMethod.select` / :meth:`~SelectionMethod.select_layers`).  Each row of
:data:`VARIANTS` is a :class:`DropVariant`: whether it pools instead of selecting, whether dropped
rows stay keys/values, where it merges, its default span and its kept count; the engine and every
consumer ask these facts rather than comparing names.
``tokendrop.dropping.importance.TokenSelector`` holds the vector and the random generator and
dispatches through the row; a new method or variant is one row.

Selection works on (B, T) position scores (``m[input_id]``, pinned ids at +/-1e4) and returns the
kept positions in ascending order; random draws come from a ``uniform(shape)`` the selector passes
in (its seeded generator, on the batch's device).  Nothing here waits on the host.

Validating ``[drop]`` (``tokendrop.dropping.config``) reads the registries' facts, so this module
imports torch only inside the behaviour (``import torch`` in each method that computes): parsing
and validating a config loads no torch (``tests/unit/config/test_config_imports.py``).

random-LTD's kept count (Yao et al. 2022; DeepSpeed's ``data_routing``; docs/design.md §2.10) is a
pure function of the optimizer step k (:func:`ltd_kept`): every half layer keeps M_k rows,

    M_0 = round(ltd_start_fraction * T),  K = max(1, round(ltd_schedule_share * train.steps))
    v_k = M_0 + (T - M_0) * min(k, K) / K             (the linear ramp)
    fixed_linear (DeepSpeed's ``fixed_linear``, seq_per_step = s):
        M_k = floor(v_k) - floor(v_k) % s
    linear (nearest grid point):
        M_k = s * round(v_k / s)
    then M_k = min(T, max(M_k, min(s, T)))            (never 0 rows, never more than T)
    and M_k = T for k >= K                            (full length even when s does not divide T)

Kept counts are multiples of ``s = drop.ltd_step`` (or T itself), so a compiled step sees at most
about (T - M_0) / s + 1 shapes over the whole run."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from tokendrop.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

PIN_HIGH = 1e4  # the score of an id that is always kept ([CLS], [SEP], [MASK], drop.pinned_tokens)
PIN_LOW = -1e4  # the score of [PAD]: dropped first


class DropSection(Protocol):
    """What the methods' behaviour reads of the ``[drop]`` section: the fields of
    :class:`tokendrop.dropping.config.DropConfig` that a method's checks, draws and kept counts use
    (the section imports this registry to validate against it, so the registry names the fields it
    reads instead of importing the section)."""

    rate: float
    init_score: float
    half_random_frac: float
    ltd_start_fraction: float
    ltd_schedule_share: float
    ltd_schedule: str
    ltd_step: int

    def num_kept(self, seq_len: int) -> int: ...


# shape -> U[0, 1) draws from the selector's generator
Uniform = Callable[[tuple[int, ...]], "Tensor"]


def stable_topk_positions(scores: Tensor, m: int) -> Tensor:
    """(B, T) scores -> (B, M) positions of the M highest scores, ties to the earlier position,
    returned in ascending position order."""
    import torch

    # (B, T) rank -> position
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    return order[:, :m].sort(dim=1).values


@dataclass(frozen=True)
class SelectionMethod:
    """A ``drop.method``: the facts other code asks (rather than comparing names) and the behaviour
    ``TokenSelector`` dispatches to.  This base keeps the top-M scores of an importance vector that
    starts at ``drop.init_score`` everywhere; a method that differs overrides what differs."""

    name: str
    # keeps fewer than T tokens in the middle layers ("none": the dense baseline)
    drops: bool = True
    learns_from_loss: bool = False  # the importance vector is updated from the per-token MLM loss
    random: bool = False  # draws from the selector's seeded generator
    per_layer: bool = False  # a kept subset of its own in every middle layer (docs/design.md §2.10)
    # reads the corpus token counts (drop.counts_path or the prepared data's)
    needs_counts: bool = False
    # the selection ranks by the importance vector (False: a uniform draw)
    reads_scores: ClassVar[bool] = True

    def check(self, drop: DropSection) -> None:
        """The method's own checks of the ``[drop]`` section (``DropConfig.validate`` calls
        them)."""

    def random_slots(self, drop: DropSection, seq_len: int) -> int:
        """J: how many of the M kept positions of a length-``seq_len`` sequence are drawn at
        random."""
        return 0

    def kept_rows(
        self, drop: DropSection, seq_len: int, step: int, train_steps: int, progress: float
    ) -> int:
        """M: rows kept in the span at optimizer step ``step`` (0-based) of a ``train_steps`` run
        (``progress`` of it done; a time-budgeted run has ``train_steps`` 0): the variant's static
        count (``drop.num_kept``)."""
        return drop.num_kept(seq_len)

    def initial_scores(self, drop: DropSection, vocab_size: int, counts: Tensor | None) -> Tensor:
        """The importance vector m (V,) fp32 before any update (pins are the selector's)."""
        import torch

        return torch.full((vocab_size,), float(drop.init_score), dtype=torch.float32)

    def select(self, scores: Tensor, kept: int, drop: DropSection, uniform: Uniform) -> Tensor:
        """(B, T) position scores -> (B, M = ``kept``) ascending positions: the top-M scores, ties
        to the earlier position (the paper's selection)."""
        return stable_topk_positions(scores, kept)

    def select_layers(
        self,
        shape: tuple[int, int],
        pad_mask: Tensor | None,
        kept: int,
        num_layers: int,
        uniform: Uniform,
    ) -> Tensor:
        """A per-layer method: (S = ``num_layers``, B, M = ``kept``) ascending positions, a subset
        of its own for every half layer of a (B, T) = ``shape`` batch; ``pad_mask`` (B, T) True at
        [PAD]."""
        raise TypeError(
            f"drop.method {self.name!r} keeps one subset for the whole span (select), "
            "not one per layer"
        )


class HalfRandom(SelectionMethod):
    """``half_random``: the last J = int(half_random_frac T) of the top-M replaced by J positions
    drawn uniformly without replacement from ranks M-J+1..T; pinned ids in that pool are always
    drawn, [PAD] is drawn last."""

    def check(self, drop: DropSection) -> None:
        if drop.half_random_frac > 1.0 - drop.rate:
            # J = int(frac T) random slots must fit in the M = round((1 - rate) T) kept ones, for
            # every T
            raise ConfigError(
                f"drop.half_random_frac: {drop.half_random_frac} random slots per token is more "
                "than the kept share "
                f"1 - drop.rate = {1.0 - drop.rate:g}; expected half_random_frac <= "
                f"{1.0 - drop.rate:g} "
                "(lower drop.half_random_frac or drop.rate)"
            )

    def random_slots(self, drop: DropSection, seq_len: int) -> int:
        return int(drop.half_random_frac * seq_len)

    def select(self, scores: Tensor, kept: int, drop: DropSection, uniform: Uniform) -> Tensor:
        import torch

        m, j = kept, self.random_slots(drop, scores.shape[1])
        if j == 0:
            return stable_topk_positions(scores, m)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # (B, T)
        head = order[:, : m - j]  # deterministic part: ranks 1..M-J
        pool = order[:, m - j :]  # ranks M-J+1..T
        u = uniform(pool.shape)
        pool_s = scores.gather(1, pool)
        u = torch.where(pool_s >= PIN_HIGH, -1.0, u)  # pinned rows in the pool stay kept
        u = torch.where(pool_s <= PIN_LOW, 2.0, u)  # [PAD] is drawn last
        pick = torch.argsort(u, dim=1)[:, :j]  # J distinct draws from the pool
        return torch.cat([head, pool.gather(1, pick)], dim=1).sort(dim=1).values


class UniformRandom(SelectionMethod):
    """``random``: M positions uniformly among the non-pinned ones; pinned positions always kept,
    [PAD] dropped first."""

    reads_scores = False

    def select(self, scores: Tensor, kept: int, drop: DropSection, uniform: Uniform) -> Tensor:
        import torch

        u = uniform(tuple(scores.shape))
        s = torch.where(scores >= PIN_HIGH, 2.0, torch.where(scores <= PIN_LOW, -1.0, u))
        return stable_topk_positions(s, kept)


class Frequency(SelectionMethod):
    """``frequency`` (static): m_i = -log(1 + count_i) over the corpus counts, so rarer ids are kept
    first."""

    def initial_scores(self, drop: DropSection, vocab_size: int, counts: Tensor | None) -> Tensor:
        import torch

        if counts is None:
            raise ConfigError(
                f"drop.method: {self.name!r} needs token counts (drop.counts_path or the "
                "prepared data's counts)"
            )
        counts = torch.as_tensor(counts, dtype=torch.float64)
        if counts.shape != (vocab_size,):
            raise ConfigError(
                f"drop.counts_path: expected {vocab_size} counts, got shape {tuple(counts.shape)}"
            )
        return (-torch.log1p(counts)).float()  # rarer -> higher score


class PerLayerRandom(SelectionMethod):
    """``random_ltd`` (DeepSpeed's random-LTD, docs/design.md §2.10): every half layer draws its own
    uniform subset per sequence (DeepSpeed's ``bert_sample_tokens``: multinomial over equal weights,
    then sorted); nothing is pinned, [PAD] is drawn last (packed data has none)."""

    reads_scores = False

    def kept_rows(
        self, drop: DropSection, seq_len: int, step: int, train_steps: int, progress: float
    ) -> int:
        """The ramp's count M_k (:func:`ltd_kept_at`; module docstring)."""
        return ltd_kept_at(drop, seq_len, step, train_steps, progress)

    def select(self, scores: Tensor, kept: int, drop: DropSection, uniform: Uniform) -> Tensor:
        raise TypeError(f"drop.method {self.name!r} draws a subset per half layer (select_layers)")

    def select_layers(
        self,
        shape: tuple[int, int],
        pad_mask: Tensor | None,
        kept: int,
        num_layers: int,
        uniform: Uniform,
    ) -> Tensor:
        import torch

        u = uniform((num_layers, *shape))
        if pad_mask is not None:
            u = u + pad_mask.to(u.dtype).unsqueeze(0)  # [PAD] ranks after every real token
        return torch.topk(u, kept, dim=-1, largest=False, sorted=False).indices.sort(dim=-1).values


def ltd_total_steps(drop: DropSection, train_steps: int) -> int:
    """K: the steps over which random-LTD's kept count ramps up to T."""
    return max(1, int(round(drop.ltd_schedule_share * train_steps)))


def ltd_kept(drop: DropSection, seq_len: int, step: int, train_steps: int) -> int:
    """M_k: rows each half layer keeps at optimizer step ``step`` (0-based) of a ``train_steps`` run
    (module docstring)."""
    t, s = seq_len, drop.ltd_step
    m0 = max(1, int(round(drop.ltd_start_fraction * t)))
    k_total = ltd_total_steps(drop, train_steps)
    if step >= k_total:
        return t
    v = m0 + (t - m0) * min(max(step, 0), k_total) / k_total
    if drop.ltd_schedule == "fixed_linear":
        m = math.floor(v)
        m -= m % s
    else:
        m = s * int(round(v / s))
    return min(t, max(m, min(s, t)))


LTD_BUDGET_GRID = 1_000_000  # a time-budgeted run's ramp, in steps of 1e-6 of the budget


def ltd_kept_at(
    drop: DropSection, seq_len: int, step: int, train_steps: int, progress: float
) -> int:
    """:func:`ltd_kept` for a run of ``train_steps`` steps; in a time-budgeted run (``train_steps``
    0) the ramp runs over ``progress``, the fraction of the budget used (docs/design.md §2.10)."""
    if train_steps > 0:
        return ltd_kept(drop, seq_len, step, train_steps)
    return ltd_kept(
        drop, seq_len, int(min(max(progress, 0.0), 1.0) * LTD_BUDGET_GRID), LTD_BUDGET_GRID
    )


# the paper's method; variant avg, which selects nothing, tolerates it beside "none"
PAPER_METHOD = "cumulative"

METHODS: dict[str, SelectionMethod] = {
    m.name: m
    for m in (
        SelectionMethod("none", drops=False),
        SelectionMethod(
            PAPER_METHOD, learns_from_loss=True
        ),  # the paper's: the running MLM loss per token id
        HalfRandom("half_random", learns_from_loss=True, random=True),
        UniformRandom("random", random=True),
        Frequency("frequency", needs_counts=True),
        PerLayerRandom("random_ltd", random=True, per_layer=True),
    )
}
DROP_METHODS = tuple(METHODS)
LOSS_METHODS = tuple(n for n, m in METHODS.items() if m.learns_from_loss)
RANDOM_METHODS = tuple(n for n, m in METHODS.items() if m.random)
PER_LAYER_METHODS = tuple(n for n, m in METHODS.items() if m.per_layer)
UNSCORED_METHODS = tuple(n for n, m in METHODS.items() if m.drops and not m.reads_scores)


@dataclass(frozen=True)
class DropVariant:
    """A ``drop.variant``: what the half layers of the span ``[start, end)`` do with the sequence's
    rows (docs/design.md §2.2).  The engine (``tokendrop.dropping.engine.run_layers``), the FLOP
    model and every consumer ask these facts rather than comparing names; a new variant is one row
    (and, if it needs one, a branch of the engine)."""

    name: str
    # 2:1 average pooling of adjacent rows instead of a selection (selects nothing)
    pools: bool = False
    # dropped rows stay keys/values in every half layer, frozen at span entry
    frozen_kv: bool = False
    merges_last: bool = False  # the span runs to the last layer: the kept rows merge after it

    @property
    def selects(self) -> bool:
        """The span keeps a selected subset of positions (a selection method chooses them)."""
        return not self.pools

    def default_span(self, num_layers: int) -> tuple[int, int]:
        """The paper's span for ``num_layers`` layers: ``[L//2 - 1, L - 1)``, or ``[L//2, L)`` when
        the variant merges after the last layer."""
        if self.merges_last:
            return num_layers // 2, num_layers
        return num_layers // 2 - 1, num_layers - 1

    def num_kept(self, rate: float, seq_len: int) -> int:
        """M: rows inside the span at ``rate``: ceil(T/2) pooled rows, else round((1 - rate) T), >=
        1."""
        if self.pools:
            return (seq_len + 1) // 2
        return max(1, int(round(seq_len * (1.0 - rate))))


DEFAULT_VARIANT = "drop"  # the paper's; the only one a per-layer method (random_ltd) runs with
VARIANTS: dict[str, DropVariant] = {
    v.name: v
    for v in (
        DropVariant(DEFAULT_VARIANT),
        DropVariant("pass", frozen_kv=True),  # token passing: dropped rows frozen as keys/values
        DropVariant("avg", pools=True),  # token averaging (Funnel-style 2:1 pooling)
        DropVariant("layer_rearranged", merges_last=True),  # no full layer after the span
    )
}
DROP_VARIANTS = tuple(VARIANTS)
