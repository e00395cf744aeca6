"""Token dropping's configuration: the registry of selection methods (:data:`METHODS`, what each
method is) and the ``[drop]`` section of a config (docs/design.md §2.2-2.3, §2.10, §2.11).

``tokendrop.config`` assembles the sections into a ``Config`` and loads them from TOML."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tokendrop.errors import ConfigError


@dataclass(frozen=True)
class SelectionMethod:
    """What a ``drop.method`` is, asked here rather than by comparing names: a new method is one row
    of :data:`METHODS` (plus its selection code in ``tokendrop.dropping.importance`` / ``tokendrop.dropping.random_ltd``)."""

    name: str
    drops: bool = True  # keeps fewer than T tokens in the middle layers ("none": the dense baseline)
    learns_from_loss: bool = False  # the importance vector is updated from the per-token MLM loss
    random: bool = False  # draws from the selector's seeded generator
    per_layer: bool = False  # a kept subset of its own in every middle layer (docs/design.md §2.10)
    needs_counts: bool = False  # reads the corpus token counts (drop.counts_path or the prepared data's)


METHODS: dict[str, SelectionMethod] = {m.name: m for m in (
    SelectionMethod("none", drops=False),
    SelectionMethod("cumulative", learns_from_loss=True),  # the paper's
    SelectionMethod("half_random", learns_from_loss=True, random=True),
    SelectionMethod("random", random=True),
    SelectionMethod("frequency", needs_counts=True),
    SelectionMethod("random_ltd", random=True, per_layer=True),
)}
DROP_METHODS = tuple(METHODS)
LOSS_METHODS = tuple(n for n, m in METHODS.items() if m.learns_from_loss)
RANDOM_METHODS = tuple(n for n, m in METHODS.items() if m.random)
PER_LAYER_METHODS = tuple(n for n, m in METHODS.items() if m.per_layer)
DROP_VARIANTS = ("drop", "pass", "avg", "layer_rearranged")
LTD_SCHEDULES = ("fixed_linear", "linear")
IMPORTANCE_INITS = ("auto", "constant", "dense_pass", "frequency")


@dataclass
class DropConfig:
    """Token dropping (docs/design.md §2.2-2.3).

    method:  which tokens are kept -- ``none`` (dense BERT), ``cumulative`` (the paper's running MLM
             loss per token id), ``half_random``, ``random``, ``frequency`` (rarer ids kept first),
             ``random_ltd`` (DeepSpeed's random-LTD: every half layer draws its own random subset, its
             size ramped up from ``ltd_start_fraction`` of T to T over ``ltd_schedule_share`` of the
             steps; docs/design.md §2.10).
    variant: what happens to them -- ``drop`` (paper default), ``pass`` (dropped rows stay as
             frozen keys/values), ``avg`` (Funnel-style 2:1 average pooling; ignores ``method``),
             ``layer_rearranged`` (no full layer after the span).
    start/end: the half-layer span ``[start, end)``; -1 means the paper's default for the variant
             (``L//2 - 1, L - 1``; layer_rearranged: ``L//2, L``; random_ltd: ``1, L - 1``).
    consistency_weight: ScTD's semantic-consistency term on top of token dropping (docs/design.md
             §2.11); 0 = plain token dropping.
    """

    method: str = "none"
    variant: str = "drop"
    rate: float = 0.5
    start: int = -1
    end: int = -1
    beta: float = 0.995
    init_score: float = 10.0
    half_random_frac: float = 0.05  # J = int(half_random_frac * T)
    keep_mlm_targets: bool = False  # beyond the paper: never drop a prediction slot's position
    pinned_tokens: list[str] = field(default_factory=list)  # extra tokens always kept
    stage2_fraction: float = 0.0  # last fraction of the steps trained without dropping
    counts_path: str = ""  # frequency method: .npy of per-id corpus counts ("" = from prepared data)
    # How the cumulative-loss vector starts (tokendrop.train.continued.warm_start_importance):
    # constant (init_score everywhere, the paper from scratch) | dense_pass (mean loss of each id
    # over importance_init_batches dense no-update batches) | frequency (unigram surprisal) |
    # auto (= constant from scratch, dense_pass with model.init; docs/design.md says why)
    importance_init: str = "auto"
    importance_init_batches: int = 16
    # random_ltd (docs/design.md §2.10): kept rows per half layer ramp from round(ltd_start_fraction T)
    # to T over the first ltd_schedule_share of train.steps, on a grid of ltd_step rows
    ltd_start_fraction: float = 0.5
    ltd_schedule_share: float = 0.5
    ltd_schedule: str = "fixed_linear"  # fixed_linear (DeepSpeed's, floor to the grid) | linear (nearest)
    ltd_step: int = 16  # DeepSpeed's seq_per_step: kept counts are multiples of it (few compiled shapes)
    # ScTD (docs/design.md §2.11): weight of the [CLS] KL term, applied every consistency_every steps
    consistency_weight: float = 0.0
    consistency_every: int = 10

    @property
    def per_layer(self) -> bool:
        """Every half layer draws its own kept subset (random_ltd)."""
        return self.method in PER_LAYER_METHODS

    @property
    def enabled(self) -> bool:
        return self.method != "none" or self.variant == "avg"

    def span(self, num_layers: int) -> tuple[int, int]:
        """The resolved half-layer span ``[start, end)``."""
        if self.variant == "layer_rearranged":
            start_d, end_d = num_layers // 2, num_layers
        elif self.per_layer:
            start_d, end_d = 1, num_layers - 1
        else:
            start_d, end_d = num_layers // 2 - 1, num_layers - 1
        start = start_d if self.start < 0 else self.start
        end = end_d if self.end < 0 else self.end
        return start, end

    def num_kept(self, seq_len: int) -> int:
        """M: rows kept inside the span (static for every sequence)."""
        if self.variant == "avg":
            return (seq_len + 1) // 2
        return max(1, int(round(seq_len * (1.0 - self.rate))))

    def validate(self, num_layers: int) -> None:
        if self.method not in DROP_METHODS:
            raise ConfigError(f"drop.method: unknown method {self.method!r}; expected one of {', '.join(DROP_METHODS)}")
        if self.variant not in DROP_VARIANTS:
            raise ConfigError(f"drop.variant: unknown variant {self.variant!r}; expected one of {', '.join(DROP_VARIANTS)}")
        if not 0.0 <= self.rate < 1.0:
            raise ConfigError(f"drop.rate: expected a fraction in [0, 1), got {self.rate}")
        if self.variant == "avg" and self.rate != 0.5:
            raise ConfigError("drop.rate: variant 'avg' pools 2:1 (window 2, stride 2), so the rate must be 0.5")
        if self.variant == "avg" and self.method not in ("none", "cumulative"):
            raise ConfigError(f"drop.method: variant 'avg' selects no tokens; method {self.method!r} has no effect there (use 'none')")
        start, end = self.span(num_layers)
        if not 0 <= start < end <= num_layers:
            raise ConfigError(
                f"drop.start/drop.end: span [{start}, {end}) must satisfy 0 <= start < end <= num_layers={num_layers}"
            )
        if self.variant == "layer_rearranged" and end != num_layers:
            raise ConfigError(f"drop.end: variant 'layer_rearranged' merges after the last layer, so end must be {num_layers}")
        if not 0.0 < self.beta < 1.0:
            raise ConfigError(f"drop.beta: expected a value in (0, 1), got {self.beta}")
        if not 0.0 <= self.half_random_frac < 1.0:
            raise ConfigError(f"drop.half_random_frac: expected a fraction in [0, 1), got {self.half_random_frac}")
        if self.method == "half_random" and self.half_random_frac > 1.0 - self.rate:
            # J = int(frac T) random slots must fit in the M = round((1 - rate) T) kept ones, for every T
            raise ConfigError(
                f"drop.half_random_frac: {self.half_random_frac} random slots per token is more than the kept share "
                f"1 - drop.rate = {1.0 - self.rate:g}; expected half_random_frac <= {1.0 - self.rate:g} "
                "(lower drop.half_random_frac or drop.rate)")
        if self.importance_init not in IMPORTANCE_INITS:
            raise ConfigError(f"drop.importance_init: unknown {self.importance_init!r}; expected one of {', '.join(IMPORTANCE_INITS)}")
        if self.importance_init_batches <= 0:
            raise ConfigError(f"drop.importance_init_batches: expected a positive integer, got {self.importance_init_batches}")
        if not 0.0 <= self.stage2_fraction <= 1.0:
            raise ConfigError(f"drop.stage2_fraction: expected a fraction in [0, 1], got {self.stage2_fraction}")
        self._validate_ltd(num_layers)
        self._validate_consistency()

    def _validate_ltd(self, num_layers: int) -> None:
        if not 0.0 < self.ltd_start_fraction <= 1.0:
            raise ConfigError(f"drop.ltd_start_fraction: expected a fraction in (0, 1] of the sequence (the kept share "
                              f"random_ltd starts from), got {self.ltd_start_fraction}")
        if not 0.0 < self.ltd_schedule_share <= 1.0:
            raise ConfigError(f"drop.ltd_schedule_share: expected a fraction in (0, 1] of train.steps, got "
                              f"{self.ltd_schedule_share}")
        if self.ltd_schedule not in LTD_SCHEDULES:
            raise ConfigError(f"drop.ltd_schedule: unknown schedule {self.ltd_schedule!r}; expected one of "
                              f"{', '.join(LTD_SCHEDULES)}")
        if self.ltd_step < 1:
            raise ConfigError(f"drop.ltd_step: expected a positive number of rows, got {self.ltd_step}")
        if not self.per_layer:
            return
        if self.variant != "drop":
            raise ConfigError(f"drop.variant: random_ltd skips a layer entirely for the tokens it does not keep, so "
                              f"variant {self.variant!r} has no meaning there; use variant 'drop'")
        if self.keep_mlm_targets or self.pinned_tokens:
            raise ConfigError("drop.keep_mlm_targets/drop.pinned_tokens: random_ltd keeps a uniform random subset and "
                              "pins nothing (as DeepSpeed); unset them or use method 'random'")
        start, end = self.span(num_layers)
        if start < 1 or end > num_layers - 1:
            raise ConfigError(f"drop.start/drop.end: random_ltd keeps every token in the first and last layers, so "
                              f"the span [{start}, {end}) must lie within [1, {num_layers - 1})")

    def _validate_consistency(self) -> None:
        if not (math.isfinite(self.consistency_weight) and self.consistency_weight >= 0.0):
            raise ConfigError(f"drop.consistency_weight: expected a weight >= 0, got {self.consistency_weight}")
        if self.consistency_every < 1:
            raise ConfigError(f"drop.consistency_every: expected a positive number of steps, got {self.consistency_every}")
        if self.consistency_weight > 0 and (self.method == "none" or self.per_layer or self.variant == "avg"):
            raise ConfigError(f"drop.consistency_weight: ScTD's consistency term compares the [CLS] state of a "
                              f"token-dropping pass with a dense pass; it needs a selecting method (cumulative, "
                              f"half_random, random, frequency) with variant drop, pass or layer_rearranged, not "
                              f"method {self.method!r} / variant {self.variant!r}")
