"""The ``[drop]`` section of a config, :class:`DropConfig`: which selection method and variant a
run uses (rows of :data:`tokendrop.dropping.methods.METHODS` and
:data:`~tokendrop.dropping.methods.VARIANTS`), the span, the rate, and the phase rules of a run --
which steps are dense, random, learning, and where stage 2 starts (docs/design.md §2.2-2.3,
§2.10, §2.11).  Validation reads the registries' facts and names the field and the fix in one line.

``tokendrop.config`` assembles the sections into a ``Config`` and loads them from TOML: it imports
:class:`DropConfig` from here (``config`` sits above ``dropping``; nothing in ``dropping`` imports
``config``, ``models`` or ``train``).  Nothing here imports torch: parsing and validating a config
loads none (``tests/unit/config/test_config_imports.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokendrop.dropping.methods import (
    DEFAULT_VARIANT,
    DROP_METHODS,
    DROP_VARIANTS,
    LOSS_METHODS,
    METHODS,
    PAPER_METHOD,
    VARIANTS,
    DropVariant,
    SelectionMethod,
)
from tokendrop.errors import ConfigError
from tokendrop.fields import fixed, free

# drop.start / drop.end: the variant's default span (DropConfig.span)
SPAN_AUTO = "auto"
LTD_SCHEDULES = ("fixed_linear", "linear")
IMPORTANCE_INITS = ("auto", "constant", "dense_pass", "frequency")
# how the selection treats [MASK] rows: pinned (always kept, the paper) | ranked (scored like any
# row, at the expected importance of a masked slot's target; docs/design.md §2.3)
MASK_ROWS = ("pinned", "ranked")


@dataclass
class DropConfig:
    """Token dropping (docs/design.md §2.2-2.3).

    method:  which tokens are kept -- ``none`` (dense BERT), ``cumulative`` (the paper's running MLM
             loss per token id), ``half_random``, ``random``, ``frequency`` (rarer ids kept first),
             ``random_ltd`` (DeepSpeed's random-LTD: every half layer draws its own random subset,
             its size ramped up from ``ltd_start_fraction`` of T to T over ``ltd_schedule_share`` of
             the steps; docs/design.md §2.10).
    variant: what happens to them -- ``drop`` (paper default), ``pass`` (dropped rows stay as
             frozen keys/values), ``avg`` (Funnel-style 2:1 average pooling; ignores ``method``),
             ``layer_rearranged`` (no full layer after the span).
    start/end: the half-layer span ``[start, end)``: layer indices >= 0, or "auto" (``SPAN_AUTO``)
             for the paper's default for the variant (``L//2 - 1, L - 1``; layer_rearranged:
             ``L//2, L``; random_ltd: ``1, L - 1``).
    consistency_weight: ScTD's semantic-consistency term on top of token dropping (docs/design.md
             §2.11); 0 = plain token dropping.
    dense_start_share: the first share of the run's steps trained dense (no dropping; a loss-
             learning method's importance still learns from their losses); then dropping.
    random_start_share: the next share of the steps selects uniformly at random (method
             ``random``'s rule) while a loss-learning method's importance learns; then the method.
    stage2_fraction: the last share of the steps trained dense (the paper's stage 2).
             The phases run in that order: dense start, random start, the method, stage 2; their
             shares sum to at most 1 (shares of ``train.steps``, or of a time budget's progress).
    mask_rows: ``pinned`` (the paper: [MASK] rows always kept) or ``ranked`` (a [MASK] row is
             ranked like any other, at the mean importance of the step's prediction targets; ties
             among [MASK] rows broken at random; a loss-learning method only; docs/design.md
             §2.3).
    """

    method: str = fixed("none")
    variant: str = fixed("drop")
    rate: float = fixed(0.5)
    start: int | str = fixed(SPAN_AUTO)
    end: int | str = fixed(SPAN_AUTO)
    beta: float = fixed(0.995)
    init_score: float = free(10.0)
    half_random_frac: float = fixed(0.05)  # J = int(half_random_frac * T)
    # beyond the paper: never drop a prediction slot's position
    keep_mlm_targets: bool = fixed(False)
    pinned_tokens: list[str] = fixed(factory=list)  # extra tokens always kept
    stage2_fraction: float = free(0.0)  # last fraction of the steps trained without dropping
    # first share of the steps trained dense (importance learns)
    dense_start_share: float = free(0.0)
    # next share: uniformly random selection (importance learns)
    random_start_share: float = free(0.0)
    mask_rows: str = fixed("pinned")  # pinned | ranked ([MASK] rows scored like any row; MASK_ROWS)
    # frequency method: .npy of per-id corpus counts ("" = from prepared data)
    counts_path: str = free("")
    # How the cumulative-loss vector starts (tokendrop.train.continued.warm_start_importance):
    # constant (init_score everywhere, the paper from scratch) | dense_pass (mean loss of each id
    # over importance_init_batches dense no-update batches) | frequency (unigram surprisal) |
    # auto (= constant from scratch, dense_pass with model.init; docs/design.md says why)
    importance_init: str = free("auto")
    importance_init_batches: int = free(16)
    # random_ltd (docs/design.md §2.10): kept rows per half layer ramp from round(ltd_start_fraction
    # T) to T over the first ltd_schedule_share of train.steps, on a grid of ltd_step rows
    ltd_start_fraction: float = fixed(0.5)
    ltd_schedule_share: float = fixed(0.5)
    # fixed_linear (DeepSpeed's, floor to the grid) | linear (nearest)
    ltd_schedule: str = fixed("fixed_linear")
    # DeepSpeed's seq_per_step: kept counts are multiples of it (few compiled shapes)
    ltd_step: int = fixed(16)
    # ScTD (docs/design.md §2.11): weight of the [CLS] KL term, applied every consistency_every
    # steps
    consistency_weight: float = fixed(0.0)
    consistency_every: int = fixed(10)

    @property
    def selection(self) -> SelectionMethod:
        """The registry row of ``method`` (a one-line error for a name that is none)."""
        if self.method not in METHODS:
            raise ConfigError(
                f"drop.method: unknown method {self.method!r}; expected one of "
                f"{', '.join(DROP_METHODS)}"
            )
        return METHODS[self.method]

    @property
    def variant_row(self) -> DropVariant:
        """The registry row of ``variant`` (a one-line error for a name that is none)."""
        if self.variant not in VARIANTS:
            raise ConfigError(
                f"drop.variant: unknown variant {self.variant!r}; expected one of "
                f"{', '.join(DROP_VARIANTS)}"
            )
        return VARIANTS[self.variant]

    @property
    def per_layer(self) -> bool:
        """Every half layer draws its own kept subset (random_ltd)."""
        return self.method in METHODS and METHODS[self.method].per_layer

    @property
    def pools(self) -> bool:
        """The variant pools rows 2:1 instead of selecting them (avg): no selection, no
        importance."""
        return self.variant in VARIANTS and VARIANTS[self.variant].pools

    @property
    def enabled(self) -> bool:
        """Dropping (or pooling) changes the middle layers: a method that drops (an unknown one is
        refused by :meth:`validate`), or a pooling variant."""
        return self.method not in METHODS or METHODS[self.method].drops or self.pools

    def span(self, num_layers: int) -> tuple[int, int]:
        """The resolved half-layer span ``[start, end)``: ``drop.start``/``drop.end``, or the
        defaults (the variant's :meth:`~DropVariant.default_span`; a per-layer method's ``[1, L -
        1)``)."""
        if self.per_layer and not self.variant_row.merges_last:
            start_d, end_d = 1, num_layers - 1
        else:
            start_d, end_d = self.variant_row.default_span(num_layers)
        start = start_d if self.start == SPAN_AUTO else int(self.start)
        end = end_d if self.end == SPAN_AUTO else int(self.end)
        return start, end

    def num_kept(self, seq_len: int) -> int:
        """M: rows kept inside the span by the variant's static rule
        (:meth:`DropVariant.num_kept`)."""
        return self.variant_row.num_kept(self.rate, seq_len)

    def kept_rows(
        self, seq_len: int, step: int = 0, train_steps: int = 1, progress: float = 0.0
    ) -> int:
        """Rows kept in the span at optimizer step ``step`` (0-based) of a ``train_steps`` run,
        ``progress`` of it done (a time-budgeted run: ``train_steps`` 0): the method's count rule
        (:meth:`SelectionMethod.kept_rows`: random_ltd's ramp, else :meth:`num_kept`).  The defaults
        give the first step's."""
        return self.selection.kept_rows(self, seq_len, step, train_steps, progress)

    def stage2_start(self, train_steps: int) -> int:
        """The first step of a ``train_steps``-step run trained without dropping (stage 2 is its
        last ``stage2_fraction``; ``train_steps`` when there is none); 0 when nothing drops."""
        if not self.enabled:
            return 0
        return train_steps - int(round(self.stage2_fraction * train_steps))

    def dense_start_steps(self, train_steps: int) -> int:
        """How many first steps of a ``train_steps``-step run are dense (``dense_start_share`` of
        them); 0 when nothing drops."""
        if not self.enabled:
            return 0
        return int(round(self.dense_start_share * train_steps))

    def check_steps(self, train_steps: int) -> None:
        """Refuse phases a ``train_steps``-step run cannot hold: a share > 0 that rounds to no step
        (the banner would announce a phase that never runs)."""
        if not self.enabled:
            return
        for name in ("dense_start_share", "random_start_share", "stage2_fraction"):
            share = getattr(self, name)
            if share > 0 and int(round(share * train_steps)) == 0:
                raise ConfigError(
                    f"drop.{name}: {share:g} of {train_steps} steps rounds to no step; set it to "
                    f"0, or to at least {1 / train_steps:.2g} (one step of {train_steps})"
                )

    def random_start_end(self, train_steps: int) -> int:
        """The first step of a ``train_steps``-step run that selects by the method again (the
        random start, ``random_start_share`` of the steps, follows the dense start)."""
        return int(round((self.dense_start_share + self.random_start_share) * train_steps))

    def dropping_at(self, step: int, train_steps: int, progress: float = 0.0) -> bool:
        """Whether optimizer step ``step`` (0-based) drops tokens: in a run of ``train_steps``
        steps, from :meth:`dense_start_steps` to before :meth:`stage2_start`; in a time-budgeted
        run (``train_steps`` 0, ``progress`` the share used) while ``dense_start_share <=
        progress < 1 - stage2_fraction``.  Every step when both shares are 0."""
        if not self.enabled:
            return False
        if self.stage2_fraction <= 0 and self.dense_start_share <= 0:
            return True
        if train_steps > 0:
            return self.dense_start_steps(train_steps) <= step < self.stage2_start(train_steps)
        return self.dense_start_share <= progress < 1.0 - self.stage2_fraction

    def random_at(self, step: int, train_steps: int, progress: float = 0.0) -> bool:
        """Whether a dropping step ``step`` selects uniformly at random (the random start: before
        :meth:`random_start_end`, or ``progress < dense_start_share + random_start_share`` in a
        time-budgeted run)."""
        if self.random_start_share <= 0 or not self.enabled:
            return False
        if train_steps > 0:
            return step < self.random_start_end(train_steps)
        return progress < self.dense_start_share + self.random_start_share

    def learns_at(self, step: int, train_steps: int, progress: float = 0.0) -> bool:
        """Whether step ``step``'s losses update the importance vector (a loss-learning method's
        dropping steps and its dense start; never stage 2)."""
        if not self.enabled:
            return False
        if self.dropping_at(step, train_steps, progress):
            return True
        if train_steps > 0:
            return step < self.dense_start_steps(train_steps)
        return progress < self.dense_start_share

    def consistency_at(self, step: int) -> bool:
        """ScTD's cadence: whether a dropping step ``step`` also runs the dense pass and the [CLS]
        KL term (every ``consistency_every``-th step, from step 0; never with weight 0)."""
        return self.consistency_weight > 0 and step % self.consistency_every == 0

    def validate(self, num_layers: int) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if v != SPAN_AUTO and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ConfigError(
                    f"drop.{name}: expected a layer index >= 0 or {SPAN_AUTO!r} (the variant's "
                    f'default span), got {v!r}; write drop.{name} = "{SPAN_AUTO}" to use it'
                )
        selection = self.selection
        variant = self.variant_row
        if not 0.0 <= self.rate < 1.0:
            raise ConfigError(f"drop.rate: expected a fraction in [0, 1), got {self.rate}")
        if variant.pools and self.rate != 0.5:
            raise ConfigError(
                f"drop.rate: variant {self.variant!r} pools 2:1 (window 2, stride 2), so the "
                "rate must be 0.5"
            )
        if variant.pools and selection.drops and self.method != PAPER_METHOD:
            raise ConfigError(
                f"drop.method: variant {self.variant!r} selects no tokens; method {self.method!r} "
                "has no effect there (use 'none')"
            )
        start, end = self.span(num_layers)
        if not 0 <= start < end <= num_layers:
            raise ConfigError(
                f"drop.start/drop.end: span [{start}, {end}) must satisfy 0 <= start < end <= "
                f"num_layers={num_layers}"
            )
        if variant.merges_last and end != num_layers:
            raise ConfigError(
                f"drop.end: variant {self.variant!r} merges after the last layer, so end must "
                f"be {num_layers}"
            )
        if not 0.0 < self.beta < 1.0:
            raise ConfigError(f"drop.beta: expected a value in (0, 1), got {self.beta}")
        if not 0.0 <= self.half_random_frac < 1.0:
            raise ConfigError(
                f"drop.half_random_frac: expected a fraction in [0, 1), got {self.half_random_frac}"
            )
        selection.check(self)
        if self.importance_init not in IMPORTANCE_INITS:
            raise ConfigError(
                f"drop.importance_init: unknown {self.importance_init!r}; expected one of "
                f"{', '.join(IMPORTANCE_INITS)}"
            )
        if self.importance_init_batches <= 0:
            raise ConfigError(
                "drop.importance_init_batches: expected a positive integer, got "
                f"{self.importance_init_batches}"
            )
        self._validate_phases()
        self._validate_ltd(num_layers)
        self._validate_consistency()

    def _validate_phases(self) -> None:
        for name in ("dense_start_share", "random_start_share", "stage2_fraction"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ConfigError(f"drop.{name}: expected a fraction in [0, 1], got {v}")
        total = self.dense_start_share + self.random_start_share + self.stage2_fraction
        if total > 1.0 + 1e-9:
            raise ConfigError(
                "drop.dense_start_share + drop.random_start_share + drop.stage2_fraction: "
                f"expected at most 1 (the run's steps), got {total:g}; lower one of them"
            )
        row = self.selection
        dense = self.dense_start_share + self.stage2_fraction
        if self.enabled and dense >= 1.0 - 1e-9:
            raise ConfigError(
                f"drop.dense_start_share + drop.stage2_fraction: {dense:g} covers every step, so "
                'nothing would drop; lower them, or set drop.method = "none" for a dense run'
            )
        if self.enabled and row.per_layer and self.dense_start_share >= self.ltd_schedule_share:
            raise ConfigError(
                f"drop.dense_start_share: {self.dense_start_share:g} covers {self.method}'s whole "
                f"kept-count ramp (drop.ltd_schedule_share = {self.ltd_schedule_share:g}), after "
                "which every row is kept, so nothing would drop; "
                "lower the dense start or lengthen the ramp"
            )
        if self.random_start_share > 0 and not (
            row.drops and row.reads_scores and not row.per_layer and self.variant_row.selects
        ):
            scored = ", ".join(
                n for n, m in METHODS.items() if m.drops and m.reads_scores and not m.per_layer
            )
            raise ConfigError(
                "drop.random_start_share: a random start replaces a scored selection "
                f"({scored}, with a selecting variant); method {self.method!r} / variant "
                f"{self.variant!r} has none (set it to 0)"
            )
        if self.mask_rows not in MASK_ROWS:
            raise ConfigError(
                f"drop.mask_rows: unknown {self.mask_rows!r}; expected one of "
                f"{', '.join(MASK_ROWS)}"
            )
        if self.mask_rows != "pinned" and not (row.learns_from_loss and self.variant_row.selects):
            learning = ", ".join(LOSS_METHODS)
            raise ConfigError(
                f"drop.mask_rows: {self.mask_rows!r} scores [MASK] rows by the targets' learned "
                f"importance, which only a loss-learning method keeps ({learning}); method "
                f"{self.method!r} / variant {self.variant!r} keeps 'pinned'"
            )

    def _validate_ltd(self, num_layers: int) -> None:
        if not 0.0 < self.ltd_start_fraction <= 1.0:
            raise ConfigError(
                "drop.ltd_start_fraction: expected a fraction in (0, 1] of the sequence (the kept "
                f"share random_ltd starts from), got {self.ltd_start_fraction}"
            )
        if not 0.0 < self.ltd_schedule_share <= 1.0:
            raise ConfigError(
                f"drop.ltd_schedule_share: expected a fraction in (0, 1] of train.steps, got "
                f"{self.ltd_schedule_share}"
            )
        if self.ltd_schedule not in LTD_SCHEDULES:
            raise ConfigError(
                f"drop.ltd_schedule: unknown schedule {self.ltd_schedule!r}; expected one of "
                f"{', '.join(LTD_SCHEDULES)}"
            )
        if self.ltd_step < 1:
            raise ConfigError(
                f"drop.ltd_step: expected a positive number of rows, got {self.ltd_step}"
            )
        if not self.per_layer:
            return
        if self.variant != DEFAULT_VARIANT:
            raise ConfigError(
                "drop.variant: random_ltd skips a layer entirely for the tokens it does not keep, "
                f"so variant {self.variant!r} has no meaning there; use variant {DEFAULT_VARIANT!r}"
            )
        if self.keep_mlm_targets or self.pinned_tokens:
            raise ConfigError(
                "drop.keep_mlm_targets/drop.pinned_tokens: random_ltd keeps a uniform random "
                "subset and pins nothing (as DeepSpeed); unset them or use method 'random'"
            )
        start, end = self.span(num_layers)
        if start < 1 or end > num_layers - 1:
            raise ConfigError(
                "drop.start/drop.end: random_ltd keeps every token in the first and last layers, "
                f"so the span [{start}, {end}) must lie within [1, {num_layers - 1})"
            )

    def _validate_consistency(self) -> None:
        if not (math.isfinite(self.consistency_weight) and self.consistency_weight >= 0.0):
            raise ConfigError(
                f"drop.consistency_weight: expected a weight >= 0, got {self.consistency_weight}"
            )
        if self.consistency_every < 1:
            raise ConfigError(
                "drop.consistency_every: expected a positive number of steps, got "
                f"{self.consistency_every}"
            )
        if self.consistency_weight > 0 and (
            not self.selection.drops or self.per_layer or self.pools
        ):
            one_subset = ", ".join(n for n, m in METHODS.items() if m.drops and not m.per_layer)
            raise ConfigError(
                f"drop.consistency_weight: ScTD's consistency term compares the [CLS] state of a "
                "token-dropping pass with a dense pass; it needs a selecting method "
                f"({one_subset}) "
                f"with variant {', '.join(n for n, v in VARIANTS.items() if v.selects)}, not "
                f"method {self.method!r} / variant {self.variant!r}"
            )
