"""How long a run lasts: ``train.steps`` optimizer steps, or ``train.time_budget`` of training time.

``RunLength`` answers the two questions the training loop asks: the progress p in [0, 1] that the
schedules (``tokendrop.schedules``) are evaluated at, and whether the run is finished.

* Fixed length: p = step / steps; finished when step >= steps.
* Time budget: p = used / budget, finished when used >= budget, where ``used`` is the run's
  *training* time in seconds -- the clock the loop keeps as ``wall_time`` (the steps, the host
  waiting for the device included; evaluation and checkpoint writing excluded, so how often a run
  evaluates does not change how much it trains).  The loop reads it after every step, so a run stops
  at the first step boundary at or past its budget: within one step of it.  Checkpoints record
  ``wall_time``; a resumed run starts from the time it had used and so keeps the budget it had left.
  On CUDA the host's clock runs ahead of the device by what is queued (about a step); the final
  synchronisation before the last checkpoint is then counted.

The clock is ``train.budget_clock``'s (``budget_clock``): "wall" (``time.perf_counter``) or "process"
(``time.process_time``: the CPU seconds of the training process, its torch threads included, its
data workers not), which a machine shared with other jobs slows down far less than wall time, so
study arms run while the load changes get comparable budgets.  ``wall_time`` in the metrics and
checkpoints is then that clock's seconds.

Under DDP the ranks must agree on p (the learning rate) and on when to stop: rank 0's reading is
broadcast every step in a time-budgeted run (``agree``); a fixed-length run needs nothing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_FORM = 'a duration such as "90s", "20m", "6h" or "1h30m" (hours h, minutes m, seconds s, in that order)'


def parse_duration(text: str, where: str = "train.time_budget") -> float:
    """Seconds in ``"1h30m"``, ``"20m"``, ``"90s"``, ``"2.5h"``; ValueError naming ``where`` otherwise."""
    s = str(text).strip().lower().replace(" ", "")
    parts = _PART.findall(s)
    units = [u for _, u in parts]
    if not s or "".join(f"{n}{u}" for n, u in parts) != s or units != sorted(set(units), key="hms".index):
        raise ValueError(f"{where}: cannot parse {text!r}; expected {_FORM}")
    seconds = sum(float(n) * {"h": 3600.0, "m": 60.0, "s": 1.0}[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{where}: {text!r} is no time at all; expected a positive {_FORM}")
    return seconds


@dataclass(frozen=True)
class RunLength:
    """``steps`` > 0: a fixed number of optimizer steps; else ``budget_s`` seconds of training time."""

    steps: int = 0
    budget_s: float = 0.0

    @classmethod
    def of(cls, train_cfg) -> "RunLength":
        if train_cfg.time_budget:
            return cls(0, parse_duration(train_cfg.time_budget))
        return cls(int(train_cfg.steps), 0.0)

    @property
    def timed(self) -> bool:
        return self.steps == 0

    def progress(self, step: int, used: float) -> float:
        """p in [0, 1] at the start of step ``step`` (0-based) after ``used`` seconds of training."""
        p = used / self.budget_s if self.timed else step / self.steps
        return min(1.0, max(0.0, p))

    def finished(self, step: int, used: float) -> bool:
        """Whether the run ends after ``step`` steps and ``used`` seconds of training time."""
        return used >= self.budget_s if self.timed else step >= self.steps

    def describe(self) -> str:
        return f"train.time_budget={self.budget_s:g}s" if self.timed else f"train.steps={self.steps}"

    def agree(self, used: float, world: int) -> float:
        """Rank 0's ``used`` on every rank (a time-budgeted run under DDP); else ``used`` as it is."""
        if not self.timed or world <= 1:
            return used
        import torch
        import torch.distributed as dist

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([used], dtype=torch.float64, device=device)
        dist.broadcast(t, src=0)
        return float(t.item())


def budget_clock(train_cfg):
    """The seconds clock of ``train.budget_clock``: ``time.perf_counter`` ("wall") or
    ``time.process_time`` ("process": CPU seconds of this process, all its threads; forked data
    workers are not counted), looked up when called so tests can substitute a fake one."""
    return time.process_time if train_cfg.budget_clock == "process" else time.perf_counter


__all__ = ["parse_duration", "RunLength", "budget_clock"]
