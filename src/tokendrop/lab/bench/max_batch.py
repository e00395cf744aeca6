"""The largest batch that fits: doubling from a start size, then bisection, one training step per
try.

A batch *fits* when its step runs without an out-of-memory error and, if ``memory_limit`` is
set, its peak training memory (state + the step's peak) stays under it -- the limit is how a CPU
dry run (which never runs out of memory) exercises the same search.  Eager steps only (a compiled
step would recompile for every batch size).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field

import torch

from tokendrop.lab.bench.steps import StepBuilder, state_bytes
from tokendrop.lab.bench.timing import peak_step_memory
from tokendrop.lab.bench.workload import Setting


@dataclass
class BatchTry:
    batch_size: int
    fits: bool
    peak_bytes: int | None  # state + step peak (None after an out-of-memory error)
    why: str = ""  # "out of memory" | "over the memory limit" | ""


@dataclass
class MaxBatch:
    setting: str  # e.g. "T128/dense" (the name at the start size)
    seq_len: int
    largest_fit: int  # 0: not even the start size fits
    # the smallest size tried that did not fit; None: the cap or the time ran out first
    first_fail: int | None
    cap: int
    stopped: str  # "resolved" | "cap" | "time budget"
    tries: list[BatchTry] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int | None:
        fit = [t for t in self.tries if t.fits and t.batch_size == self.largest_fit]
        return fit[0].peak_bytes if fit else None

    def describe(self) -> str:
        if self.largest_fit == 0:
            return (
                f"none (B={self.tries[0].batch_size} does not fit)" if self.tries else "not tried"
            )
        if self.first_fail is None:
            return (
                f">= {self.largest_fit} "
                f"({'the search cap' if self.stopped == 'cap' else 'time budget'})"
            )
        return f"{self.largest_fit} (B={self.first_fail} does not fit)"


def _release(builder: StepBuilder, r, s: Setting) -> None:
    for o in r.state if r is not None else ():
        if isinstance(o, torch.optim.Optimizer):
            o.zero_grad(set_to_none=True)
    builder.forget_batch(s.batch_size, s.seq_len)
    # after an out-of-memory error: give the next size the whole device
    if builder.device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def try_batch(builder: StepBuilder, s: Setting, memory_limit: int | None = None) -> BatchTry:
    """One training step of ``s`` at its batch size: does it fit?"""
    r = None
    try:
        r = builder.runner(s)
        # a first step also allocates the optimizer state: inside its peak
        before = state_bytes(*r.state)
        peak, _ = peak_step_memory(r.step, builder.device)
        total = before + (peak or 0)
        if memory_limit is not None and total > memory_limit:
            return BatchTry(s.batch_size, False, total, "over the memory limit")
        return BatchTry(s.batch_size, True, total)
    except torch.cuda.OutOfMemoryError:  # (torch.OutOfMemoryError in newer torch is the same class)
        return BatchTry(s.batch_size, False, None, "out of memory")
    finally:
        _release(builder, r, s)


def largest_batch(
    builder: StepBuilder,
    setting: Setting,
    cap: int,
    memory_limit: int | None = None,
    deadline: float | None = None,
    resolution: int = 0,
) -> MaxBatch:
    """Search the largest batch size in [setting.batch_size, cap] whose step fits.

    Doubling from the start size until a size does not fit (or ``cap``), then bisection down to
    ``resolution`` (default: an eighth of the largest fit, at least 1).  ``deadline`` is a
    ``time.perf_counter()`` value after which no new size is tried.
    """
    start = max(1, setting.batch_size)
    res = MaxBatch(
        setting=setting.name,
        seq_len=setting.seq_len,
        largest_fit=0,
        first_fail=None,
        cap=cap,
        stopped="resolved",
    )

    def attempt(b: int) -> bool | None:
        if deadline is not None and time.perf_counter() > deadline:
            res.stopped = "time budget"
            return None
        t = try_batch(builder, dataclasses.replace(setting, batch_size=b), memory_limit)
        res.tries.append(t)
        return t.fits

    b = min(start, cap)
    while True:
        ok = attempt(b)
        if ok is None:
            return res
        if not ok:
            res.first_fail = b
            break
        res.largest_fit = b
        if b >= cap:
            res.stopped = "cap"
            return res
        b = min(2 * b, cap)
    lo, hi = res.largest_fit, res.first_fail
    while lo > 0 and hi - lo > max(1, resolution or lo // 8):
        mid = (lo + hi) // 2
        ok = attempt(mid)
        if ok is None:
            return res
        if ok:
            lo = res.largest_fit = mid
        else:
            hi = res.first_fail = mid
    return res
