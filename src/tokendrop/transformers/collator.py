"""A masking-rate schedule (e.g. 30% -> 15% over the run, Ankner et al. 2024) for transformers'
``DataCollatorForLanguageModeling``: :class:`MaskingRateCollator` wraps it and sets its
``mlm_probability`` before every batch from the run's progress, which
:class:`tokendrop.transformers.TokenDroppingCallback` advances at every optimizer step.

The progress is one float in shared memory, so DataLoader worker processes read the value the
training process last set.  A batch takes the rate in effect when it is collated: the Trainer
fetches a step's batches (and accelerate one batch more) before the step begins, and workers
collate ``prefetch_factor`` batches ahead, so a batch may use the rate of a step or a few before
its own.  A resumed run sets the progress of its first step, so with a schedule on the first
batches after a resume can differ from the uninterrupted run's (a constant rate resumes exactly).
"""

from __future__ import annotations

from typing import Any

import torch

from tokendrop.transformers.options import TokenDroppingError
from tokendrop.value_schedule import DECAYS, ValueSchedule


class MaskingRateCollator:
    """``collator`` (a DataCollatorForLanguageModeling with ``mlm=True``) with its masking rate
    going from ``start`` to ``end`` over the run (``schedule``: linear | cosine, the formulas of
    tokendrop's own ``data.mask_schedule``: :class:`tokendrop.value_schedule.ValueSchedule`)."""

    def __init__(self, collator: Any, start: float, end: float, schedule: str = "linear"):
        from transformers import DataCollatorForLanguageModeling

        if not isinstance(collator, DataCollatorForLanguageModeling) or not collator.mlm:
            raise TokenDroppingError(
                f"MaskingRateCollator: expected a DataCollatorForLanguageModeling with mlm=True, "
                f"got {type(collator).__name__}"
            )
        for name, v in (("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v < 1.0:
                raise TokenDroppingError(
                    f"MaskingRateCollator: {name} must be a masking rate in (0, 1), got {v!r}"
                )
        if schedule not in DECAYS:
            raise TokenDroppingError(
                f"MaskingRateCollator: schedule must be one of {', '.join(DECAYS)}, "
                f"got {schedule!r}"
            )
        self.collator = collator
        self.start, self.end, self.schedule = float(start), float(end), schedule
        self._rates = ValueSchedule(self.start, self.end, schedule)
        self._progress = torch.zeros(1, dtype=torch.float64).share_memory_()

    @property
    def progress(self) -> float:
        return float(self._progress[0])

    def set_progress(self, p: float) -> None:
        """The fraction of the run done (the callback sets step / max_steps)."""
        self._progress[0] = min(max(float(p), 0.0), 1.0)

    @property
    def rate(self) -> float:
        return self._rates.at(self.progress)

    def __call__(self, examples):
        self.collator.mlm_probability = self.rate
        return self.collator(examples)


__all__ = ["MaskingRateCollator"]
