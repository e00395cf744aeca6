"""How long a run lasts: ``train.steps`` optimizer steps, or ``train.time_budget`` of training time;
``train.tokens`` and ``train.epochs`` resolved to steps against the prepared data
(``resolve_length``).

``RunLength`` answers the two questions the training loop asks: the progress p in [0, 1] that the
schedules (``tokendrop.train.schedules``) are evaluated at, and whether the run is finished.

* Fixed length: p = step / steps; finished when step >= steps.
* Time budget: p = used / budget, finished when used >= budget, where ``used`` is the run's
  *training* time in seconds -- the clock the loop keeps as ``wall_time`` (the steps, the host
  waiting for the device included; evaluation and checkpoint writing excluded, so how often a run
  evaluates does not change how much it trains).  The loop reads it after every step, so a run stops
  at the first step boundary at or past its budget: within one step of it.  Checkpoints record
  ``wall_time``; a resumed run starts from the time it had used and so keeps the budget it had left.
  On CUDA the host's clock runs ahead of the device by what is queued (about a step); the final
  synchronisation before the last checkpoint is then counted.

The clock is ``train.budget_clock``'s (``budget_clock``): "wall" (``time.perf_counter``) or
"process" (``time.process_time``: the CPU seconds of the training process, its torch threads
included, its data workers not), which a machine shared with other jobs slows down far less than
wall time, so study arms run while the load changes get comparable budgets.  ``wall_time`` in the
metrics and checkpoints is then that clock's seconds.

Under DDP the ranks must agree on p (the learning rate) and on when to stop: rank 0's reading is
broadcast every step in a time-budgeted run (``agree``, over a CPU group: no device sync); a
fixed-length run needs nothing.

Resolution (``resolve_length``, called once by ``pretrain`` after it opens the data; docs/design.md
§2.5.2).  A *token* is a sequence slot: T per sequence, [CLS]/[SEP] and any [PAD] included (packed
data has no [PAD]), i.e. what the model processes and what ``tokens_per_s`` counts.

* ``train.tokens = X``: S = ceil(X / (train.batch_size * T)).
* ``train.epochs = E``: one epoch is one pass of the loader over the N training sequences: floor(N /
  G) micro-batches per rank, G = micro_batch_size * world (the tail that fills no global micro-batch
  is left out, as the loader leaves it out), i.e. floor(N / G) / A optimizer steps with A micro-
  batches per step (gradient accumulation); S = ceil(E * floor(N / G) / A).
* ``train.warmup_ratio = r``: W = ceil(r * S) warm-up steps in a run of S steps; in a time-budgeted
  run the ramp is over the first share r of the budget (``schedules.LRSchedule.warmup_share``).
* ``train.warmup_steps = "auto"`` without a ratio: W = min(100, S) (a run given in steps gets it
  when its config is built, ``TrainConfig.__post_init__``).

The resolved S and W replace the fields they came from in the run's config (``train.steps``,
``train.warmup_steps``; ``train.tokens``/``epochs`` are set back to "unset", ``warmup_ratio`` to 0,
and
``train.resolved_from`` says how), so ``--resume`` and ``inspect`` read plain steps.  Numbers are
exact (decimal fractions, no float rounding): ``epochs = 1.1`` is 11/10.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.distributed as dist

from tokendrop.config import (
    DEFAULT_WARMUP_STEPS,
    LENGTH_UNSET,
    MICRO_BATCH_AUTO,
    STEPS_UNSET,
    WARMUP_AUTO,
)
from tokendrop.config.quantities import parse_duration, parse_tokens


@dataclass(frozen=True)
class RunLength:
    """``steps`` > 0: a fixed number of optimizer steps; else ``budget_s`` seconds of training
    time."""

    steps: int = 0
    budget_s: float = 0.0

    @classmethod
    def of(cls, train_cfg) -> RunLength:
        if train_cfg.time_budget:
            return cls(0, parse_duration(train_cfg.time_budget))
        return cls(train_cfg.fixed_steps, 0.0)

    @property
    def timed(self) -> bool:
        return self.steps == 0

    def progress(self, step: int, used: float) -> float:
        """p in [0, 1] at the start of step ``step`` (0-based) after ``used`` seconds of
        training."""
        p = used / self.budget_s if self.timed else step / self.steps
        return min(1.0, max(0.0, p))

    def finished(self, step: int, used: float) -> bool:
        """Whether the run ends after ``step`` steps and ``used`` seconds of training time."""
        return used >= self.budget_s if self.timed else step >= self.steps

    def describe(self) -> str:
        return (
            f"train.time_budget={self.budget_s:g}s" if self.timed else f"train.steps={self.steps}"
        )

    def agree(self, used: float, world: int) -> float:
        """Rank 0's ``used`` on every rank (a time-budgeted run under DDP); else ``used`` as it is.
        A host value over a CPU (gloo) group, every step: the ranks agree without waiting for their
        devices (a CUDA tensor read back each step would be a host synchronisation)."""
        if not self.timed or world <= 1:
            return used
        t = torch.tensor([used], dtype=torch.float64)
        dist.broadcast(t, src=0, group=_host_group())
        return float(t.item())


_HOST_GROUPS: dict[int, object] = {}


def _host_group():
    """A gloo group of every rank (the default group when it is gloo already), made once per
    default group: every rank makes it at its first agreement, the same step."""
    if dist.get_backend() == "gloo":
        return None
    key = id(dist.group.WORLD)
    if key not in _HOST_GROUPS:
        _HOST_GROUPS[key] = dist.new_group(backend="gloo")
    return _HOST_GROUPS[key]


def _exact(x: float) -> Fraction:
    """A config float as the decimal the user wrote (1.1 -> 11/10), not its binary approximation."""
    return Fraction(repr(float(x)))


def steps_for_tokens(tokens: int, batch_size: int, seq_len: int) -> int:
    """ceil(tokens / (batch_size * T)): optimizer steps that process at least ``tokens`` sequence
    slots."""
    return max(1, -(-int(tokens) // (int(batch_size) * int(seq_len))))


def steps_per_epoch(
    num_sequences: int,
    batch_size: int,
    world: int = 1,
    micro_batch_size: int | str = MICRO_BATCH_AUTO,
) -> Fraction:
    """Optimizer steps in one pass of the loader over ``num_sequences``: floor(N / G) / A with G =
    micro * world the loader's global micro-batch (``train.micro_batch_size``; "auto": the
    per-rank batch) and A = per-rank batch / micro the accumulation."""
    per_rank = batch_size // world
    micro = per_rank if micro_batch_size == MICRO_BATCH_AUTO else int(micro_batch_size)
    accum = per_rank // micro
    return Fraction(num_sequences // (micro * world), accum)


@dataclass(frozen=True)
class ResolvedLength:
    """``train.steps``/``train.warmup_steps`` as resolved, and ``note``: how (for
    ``train.resolved_from``)."""

    steps: int
    warmup_steps: int | str  # "auto" while it is a share of a time budget
    note: str

    def updates(self, train_cfg) -> dict:
        """The TrainConfig fields to replace (``dataclasses.replace(train_cfg, **updates)``)."""
        out = {
            "steps": self.steps or STEPS_UNSET,  # a time-budgeted run's steps stay unset
            "tokens": LENGTH_UNSET,
            "epochs": LENGTH_UNSET,
            "resolved_from": self.note,
        }
        # a time-budgeted run keeps its ratio (a share of the budget)
        if train_cfg.warmup_ratio and self.steps:
            out.update(warmup_steps=self.warmup_steps, warmup_ratio=0.0)
        elif train_cfg.warmup_steps == WARMUP_AUTO and not train_cfg.warmup_ratio:
            out.update(warmup_steps=self.warmup_steps)
        return out


def resolve_length(
    train_cfg, num_sequences: int, seq_len: int, world: int = 1
) -> ResolvedLength | None:
    """Steps and warm-up steps of ``train_cfg`` (``train.tokens``/``epochs``/``warmup_ratio``) on
    data of ``num_sequences`` training sequences of T = ``seq_len`` with ``world`` ranks; None when
    nothing needs resolving (plain steps and warmup_steps, or a time budget without a warm-up
    ratio). ValueError (one line) when the data holds less than one global batch."""
    tc = train_cfg
    tokens_given, epochs_given = tc.tokens != LENGTH_UNSET, tc.epochs != LENGTH_UNSET
    if not (tokens_given or epochs_given or tc.warmup_ratio):
        return None
    steps, notes = tc.fixed_steps, []
    per_step = f"{tc.batch_size} sequences x {seq_len} token slots"
    if tokens_given:
        tokens = parse_tokens(tc.tokens)
        steps = steps_for_tokens(tokens, tc.batch_size, seq_len)
        notes.append(
            f"train.tokens = {tokens}: ceil({tokens} / ({per_step} per step)) = {steps} steps "
            "(a token is a sequence slot, [CLS]/[SEP]/[PAD] included)"
        )
    elif epochs_given:
        per_epoch = steps_per_epoch(num_sequences, tc.batch_size, world, tc.micro_batch_size)
        if per_epoch == 0:
            raise ValueError(
                f"train.epochs: the training split has {num_sequences} sequences, fewer than one "
                f"global batch of {tc.batch_size}; expected more data or a smaller train.batch_size"
            )
        steps = max(1, math.ceil(_exact(tc.epochs) * per_epoch))
        notes.append(
            f"train.epochs = {tc.epochs:g}: ceil({tc.epochs:g} x {per_epoch} steps per pass over "
            f"{num_sequences} training sequences with {world} rank(s)) = {steps} steps"
        )
    warmup = tc.warmup_steps
    if warmup == WARMUP_AUTO and not tc.warmup_ratio:  # "auto": at most the run
        warmup = min(DEFAULT_WARMUP_STEPS, steps) if steps else DEFAULT_WARMUP_STEPS
        notes.append(
            f'train.warmup_steps = "{WARMUP_AUTO}": {DEFAULT_WARMUP_STEPS} steps at most the '
            f"run's {steps} = {warmup} warm-up steps"
        )
    if tc.warmup_ratio and steps:
        warmup = math.ceil(_exact(tc.warmup_ratio) * steps)
        notes.append(
            f"train.warmup_ratio = {tc.warmup_ratio:g}: ceil({tc.warmup_ratio:g} x {steps}) = "
            f"{warmup} warm-up steps"
        )
    elif tc.warmup_ratio:
        notes.append(f"train.warmup_ratio = {tc.warmup_ratio:g} of the time budget")
    # a share of a time budget: warmup_steps stays "auto"
    warmup = warmup if warmup == WARMUP_AUTO else int(warmup)
    return ResolvedLength(int(steps), warmup, "; ".join(notes))


def resolved_train(train_cfg, num_sequences: int, seq_len: int, world: int = 1):
    """``train_cfg`` with ``train.tokens``/``epochs``/``warmup_ratio`` resolved
    (``resolve_length``), as a new TrainConfig; ``train_cfg`` itself when there is nothing to
    resolve."""
    r = resolve_length(train_cfg, num_sequences, seq_len, world)
    return train_cfg if r is None else dataclasses.replace(train_cfg, **r.updates(train_cfg))


def budget_clock(train_cfg):
    """The seconds clock of ``train.budget_clock``: ``time.perf_counter`` ("wall") or
    ``time.process_time`` ("process": CPU seconds of this process, all its threads; forked data
    workers are not counted), looked up when called so tests can substitute a fake one."""
    return time.process_time if train_cfg.budget_clock == "process" else time.perf_counter


__all__ = [
    "resolved_train",
    "steps_for_tokens",
    "steps_per_epoch",
    "resolve_length",
    "ResolvedLength",
    "RunLength",
    "budget_clock",
]
