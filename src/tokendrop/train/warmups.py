"""Sequence-length and batch-size warm-ups of a run: the shape of each optimizer step.

``data.seq_len_start`` (with ``data.seq_len_warmup_share``) and ``train.batch_warmup_*`` resolved
against the prepared data (T, packed or not) and the ranks (``tokendrop.train.schedules`` has the
formulas; docs/design.md "Schedules").  ``StepPlan.at(p, tokens_seen)`` is the length L the loader
cuts the step's sequences to and the number of micro-batches each rank accumulates: a pure
function of the progress p and the tokens taken so far (which the loader's position determines),
so a resumed run takes the same shapes as an uninterrupted one.

The batch grows by taking more of the loader's batches per step (the loader yields batches of a
fixed size in a fixed order and never learns the step's batch), so the data order is the same as
without the warm-up and a checkpoint's loader position is exact whatever the step's batch was.
The loader's batch must therefore divide the starting batch per rank: with
``train.micro_batch_size = "auto"`` it is the largest common divisor of both per-rank batches.

``bucketed`` (a compiled step that joins them into one micro-batch: one graph per batch) rounds
each step's batch down to ``start``, twice ``start``, four times, ... or the final batch
(``BatchWarmup.sizes``); the tokens counted are the ones the step took, so a tokens-based warm-up
and the run's token count stay exact, and the warm-up spends more of its steps at small batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokendrop.config import DataConfig, TrainConfig
from tokendrop.data.pieces import MIN_PIECE
from tokendrop.errors import ConfigError
from tokendrop.train.schedules import BatchWarmup, SeqLenWarmup, batch_warmup_start


def default_micro_batch(tc: TrainConfig, per_rank: int, world: int) -> int:
    """The per-rank micro-batch when ``train.micro_batch_size`` is "auto" (``tc``: the ``[train]``
    section): the per-rank batch, or with a batch warm-up the largest divisor of it and of the
    warm-up's starting batch per rank."""
    start = batch_warmup_start(tc)
    if not start or start >= tc.batch_size:
        return per_rank
    if start % world:
        raise ConfigError(
            f"train.batch_warmup_start: {start} is not divisible by the {world} ranks"
        )
    return math.gcd(per_rank, start // world)


@dataclass(frozen=True)
class StepShape:
    seq_len: int  # L: the length of this step's sequences (T outside a sequence-length warm-up)
    micro: int  # micro-batches this rank accumulates
    batch: int  # global sequences of length T (the step holds batch T / L pieces of length L)


class StepPlan:
    """The shape of every step of a run (see the module doc): its ``[train]`` and ``[data]``
    sections, the prepared data's sequence length and packing, the loader's micro-batch and the
    ranks."""

    def __init__(
        self,
        tc: TrainConfig,
        dc: DataConfig,
        seq_len: int,
        packed: bool,
        micro_bs: int,
        world: int,
        bucketed: bool = False,
    ):
        T = seq_len
        first = dc.seq_len_warmup_from  # 0: "off"
        if first:
            if not packed:
                raise ConfigError(
                    "data.seq_len_start: the sequence-length warm-up cuts packed sequences into "
                    f"pieces; {dc.path} is unpacked (prepare it packed, or set "
                    "data.seq_len_start = 'off')"
                )
            if first > T or T % first or first < MIN_PIECE:
                raise ConfigError(
                    f"data.seq_len_start: {first} is not a divisor >= {MIN_PIECE} of the prepared "
                    f"sequence length {T}; expected e.g. {max(MIN_PIECE, T // 4)}"
                )
        self.seq = SeqLenWarmup(first, dc.seq_len_warmup_share, T)
        unit = micro_bs * world
        start = batch_warmup_start(tc)
        if start and start % unit:
            raise ConfigError(
                f"train.batch_warmup_start: {start} is not a multiple of the micro-batch "
                f"{micro_bs} x {world} ranks; set train.micro_batch_size to a divisor of it"
            )
        self.batch = BatchWarmup(
            start,
            tc.batch_size,
            unit,
            tc.fixed_batch_warmup_share,
            tc.fixed_batch_warmup_tokens,
            bucketed,
        )
        self.T, self.micro_bs, self.world = T, micro_bs, world
        self.accum = tc.batch_size // unit

    @property
    def active(self) -> bool:
        return self.seq.active or self.batch.active

    def at(self, p: float, tokens_seen: int = 0) -> StepShape:
        """The shape of the step taken at progress ``p`` after ``tokens_seen`` tokens of the run."""
        b = self.batch.at(p, tokens_seen)
        return StepShape(self.seq.at(p), b // (self.micro_bs * self.world), b)


__all__ = ["default_micro_batch", "StepShape", "StepPlan"]
