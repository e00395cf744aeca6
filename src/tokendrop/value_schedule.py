"""A value going from a start to an end over a run's progress p in [0, 1] (p clamped), linearly or
along a half cosine that is flat at both ends:

    linear(p, a, b) = a + (b - a) p
    cosine(p, a, b) = b + (a - b) (1 + cos(pi p)) / 2

It is the masking-rate schedule (``data.mask_prob = [start, end]``, ``data.mask_schedule``) of
tokendrop's trainer (``tokendrop.train.schedules.mask_schedule``) and of the transformers
integration's ``MaskingRateCollator``, which imports nothing of ``train/``: one formula, below both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAYS = ("linear", "cosine")  # the shapes of a value schedule (data.mask_schedule)


def clamp(p: float) -> float:
    """``p`` clamped to [0, 1]."""
    return 0.0 if p < 0.0 else 1.0 if p > 1.0 else p


def linear(p: float, start: float, end: float) -> float:
    """Linear from ``start`` (p = 0) to ``end`` (p = 1)."""
    return start + (end - start) * clamp(p)


def cosine(p: float, start: float, end: float) -> float:
    """Half-cosine from ``start`` (p = 0) to ``end`` (p = 1): flat at both ends."""
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * clamp(p)))


def decay(kind: str, p: float, start: float, end: float) -> float:
    if kind == "linear":
        return linear(p, start, end)
    if kind == "cosine":
        return cosine(p, start, end)
    raise ValueError(f"unknown schedule {kind!r}; expected one of {', '.join(DECAYS)}")


@dataclass(frozen=True)
class ValueSchedule:
    """A value from ``start`` to ``end`` over the run (``kind``: linear | cosine); constant when
    equal."""

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


__all__ = ["DECAYS", "ValueSchedule", "clamp", "cosine", "decay", "linear"]
