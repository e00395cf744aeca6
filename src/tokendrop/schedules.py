"""Schedules over a run: pure functions of the progress p in [0, 1] (and, for warm-ups, the step).

p is ``step / train.steps`` in a run of fixed length, or the fraction of ``train.time_budget`` used
so far in a time-budgeted run (``tokendrop.budget``).  Nothing here keeps state: a value at step k
depends on (k, p) only, so a resumed run and an uninterrupted one compute the same values.

    linear(p, a, b)   = a + (b - a) p
    cosine(p, a, b)   = b + (a - b) (1 + cos(pi p)) / 2
    warm-up ramp w(k) = (k + 1) / W for k < W, else 1            (W = train.warmup_steps)
                    time budget with train.warmup_ratio r: w(p) = min(1, p / r)
    LR "linear", fixed length: w(k) peak for k < W, then peak (S - k) / (S - W)   (the original
                    schedule, bit for bit: ``lr_at``)
    LR "linear", time budget:  peak w(k) (1 - p)
    LR "wsd":       peak w(k) s(p), s(p) = 1 for p < 1 - d, then over the last share d of the run
                    q = (p - (1 - d)) / d and s = 1 - sqrt(q) ("1-sqrt", Hägele et al. 2024, as
                    ModernBERT) or s = 1 - q ("linear")
    masking rate:   linear or cosine from data.mask_prob[0] to data.mask_prob[1]
(p is clamped to [0, 1] everywhere.)  docs/design.md "Schedules" has the same formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAYS = ("linear", "cosine")  # value schedules between a start and an end (masking rate)
LR_SCHEDULES = ("linear", "wsd")
WSD_DECAYS = ("1-sqrt", "linear")


def _clamp(p: float) -> float:
    return 0.0 if p < 0.0 else 1.0 if p > 1.0 else p


def linear(p: float, start: float, end: float) -> float:
    """Linear from ``start`` (p = 0) to ``end`` (p = 1)."""
    return start + (end - start) * _clamp(p)


def cosine(p: float, start: float, end: float) -> float:
    """Half-cosine from ``start`` (p = 0) to ``end`` (p = 1): flat at both ends."""
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * _clamp(p)))


def decay(kind: str, p: float, start: float, end: float) -> float:
    if kind == "linear":
        return linear(p, start, end)
    if kind == "cosine":
        return cosine(p, start, end)
    raise ValueError(f"unknown schedule {kind!r}; expected one of {', '.join(DECAYS)}")


def warmup_ramp(step: int, warmup: int) -> float:
    """(step + 1) / warmup during the first ``warmup`` steps (0-based step), then 1."""
    return (step + 1) / warmup if warmup > 0 and step < warmup else 1.0


def lr_linear_steps(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total`` (the
    original schedule; the expression is kept as it was so the values are bit-identical)."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def wsd_shape(p: float, decay_share: float, shape: str = "1-sqrt") -> float:
    """Warmup-stable-decay without the warm-up: 1 until ``1 - decay_share``, then down to 0 at p = 1."""
    q = (_clamp(p) - (1.0 - decay_share)) / decay_share
    if q <= 0.0:
        return 1.0
    q = min(q, 1.0)
    return 1.0 - math.sqrt(q) if shape == "1-sqrt" else 1.0 - q


@dataclass(frozen=True)
class LRSchedule:
    """``train.lr_schedule`` resolved: ``at(step, p)`` is the learning rate of step ``step`` (0-based)
    taken at progress ``p``.  ``total`` is ``train.steps`` (0 in a time-budgeted run)."""

    kind: str
    peak: float
    warmup: int
    total: int
    decay_share: float = 0.2
    decay_shape: str = "1-sqrt"
    warmup_share: float = 0.0  # a time-budgeted run's train.warmup_ratio: the ramp is min(1, p / share)

    def ramp(self, step: int, p: float) -> float:
        if self.warmup_share > 0:
            return min(1.0, _clamp(p) / self.warmup_share)
        return warmup_ramp(step, self.warmup)

    def at(self, step: int, p: float) -> float:
        if self.kind == "linear":
            if self.total:
                return lr_linear_steps(step, self.peak, self.warmup, self.total)
            return self.peak * self.ramp(step, p) * (1.0 - _clamp(p))
        return self.peak * self.ramp(step, p) * wsd_shape(p, self.decay_share, self.decay_shape)


@dataclass(frozen=True)
class ValueSchedule:
    """A value from ``start`` to ``end`` over the run (``kind``: linear | cosine); constant when equal."""

    start: float
    end: float
    kind: str = "linear"

    @property
    def constant(self) -> bool:
        return self.start == self.end

    @property
    def largest(self) -> float:
        return max(self.start, self.end)

    def at(self, p: float) -> float:
        return self.start if self.constant else decay(self.kind, p, self.start, self.end)


def lr_schedule(train_cfg) -> LRSchedule:
    """The LR schedule of a ``TrainConfig``."""
    share = 0.0 if train_cfg.steps else getattr(train_cfg, "warmup_ratio", 0.0)  # ratio of a time budget
    return LRSchedule(train_cfg.lr_schedule, train_cfg.lr, max(0, train_cfg.warmup_steps), train_cfg.steps,
                      train_cfg.decay_share, train_cfg.decay_shape, share)


def mask_schedule(data_cfg) -> ValueSchedule:
    """The masking-rate schedule of a ``DataConfig`` (constant for a plain ``mask_prob``)."""
    return ValueSchedule(data_cfg.mask_prob_start, data_cfg.mask_prob_end, data_cfg.mask_schedule)


__all__ = ["linear", "cosine", "decay", "warmup_ramp", "lr_linear_steps", "wsd_shape", "LRSchedule", "ValueSchedule",
           "lr_schedule", "mask_schedule", "DECAYS", "LR_SCHEDULES", "WSD_DECAYS"]
