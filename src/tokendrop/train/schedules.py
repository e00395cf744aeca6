"""Schedules over a run: pure functions of the progress p in [0, 1] (and, for warm-ups, the step).

p is ``step / train.steps`` in a run of fixed length, or the fraction of ``train.time_budget`` used
so far in a time-budgeted run (``tokendrop.train.budget``).  Nothing here keeps state: a value at
step k depends on (k, p) only, so a resumed run and an uninterrupted one compute the same values.

    linear(p, a, b)   = a + (b - a) p
    cosine(p, a, b)   = b + (a - b) (1 + cos(pi p)) / 2
    warm-up ramp w(k) = (k + 1) / W for k < W, else 1            (W = train.warmup_steps)
                    time budget with train.warmup_ratio r: w(p) = min(1, p / r)
    LR "linear", fixed length: w(k) peak for k < W, then peak max(0, (S - k) / max(1, S - W))
    LR "linear", time budget:  peak w(k) (1 - p)
    LR "wsd":       peak w(k) s(p), s(p) = 1 for p < 1 - d, then over the last share d of the run
                    q = (p - (1 - d)) / d and s = 1 - sqrt(q) ("1-sqrt", Hägele et al. 2024, as
                    ModernBERT) or s = 1 - q ("linear")
    masking rate:   linear or cosine from data.mask_prob[0] to data.mask_prob[1]
                    (tokendrop.value_schedule)
    sequence length (data.seq_len_start L0 > 0, share h): L(p) = the largest divisor d of T with
                    L0 <= d <= L0 + (T - L0) min(1, p / h)   (L0 divides T; T from p >= h on)
    global batch (train.batch_warmup_start B0 > 0): B = B0 + (B_T - B0) r, floored to a multiple
                    of the unit u (micro-batch x ranks), r = min(1, p / h) (share h) or
                    min(1, tokens_seen / N) (N = train.batch_warmup_tokens); bucketed (a compiled
                    step of one micro-batch): B floored to the largest of B0 2^k (< B_T) and B_T
(p is clamped to [0, 1] everywhere.)  docs/design.md "Schedules" has the same formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokendrop.value_schedule import ValueSchedule, clamp


def warmup_ramp(step: int, warmup: int) -> float:
    """(step + 1) / warmup during the first ``warmup`` steps (0-based step), then 1."""
    return (step + 1) / warmup if warmup > 0 and step < warmup else 1.0


def lr_linear_steps(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total`` (0
    after it; a warm-up longer than the run ramps until the run ends)."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def wsd_shape(p: float, decay_share: float, shape: str = "1-sqrt") -> float:
    """Warmup-stable-decay without the warm-up: 1 until ``1 - decay_share``, then down to 0 at p =
    1."""
    q = (clamp(p) - (1.0 - decay_share)) / decay_share
    if q <= 0.0:
        return 1.0
    q = min(q, 1.0)
    return 1.0 - math.sqrt(q) if shape == "1-sqrt" else 1.0 - q


@dataclass(frozen=True)
class LRSchedule:
    """``train.lr_schedule`` resolved: ``at(step, p)`` is the learning rate of step ``step``
    (0-based) taken at progress ``p``.  ``total`` is ``train.steps`` (0 in a time-budgeted run)."""

    kind: str
    peak: float
    warmup: int
    total: int
    decay_share: float = 0.2
    decay_shape: str = "1-sqrt"
    # a time-budgeted run's train.warmup_ratio: the ramp is min(1, p / share)
    warmup_share: float = 0.0

    def ramp(self, step: int, p: float) -> float:
        if self.warmup_share > 0:
            return min(1.0, clamp(p) / self.warmup_share)
        return warmup_ramp(step, self.warmup)

    def at(self, step: int, p: float) -> float:
        if self.kind == "linear":
            if self.total:
                return lr_linear_steps(step, self.peak, self.warmup, self.total)
            return self.peak * self.ramp(step, p) * (1.0 - clamp(p))
        return self.peak * self.ramp(step, p) * wsd_shape(p, self.decay_share, self.decay_shape)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def seq_len_at(p: float, start: int, share: float, seq_len: int) -> int:
    """Sequence-length warm-up: the largest divisor of ``seq_len`` between ``start`` (which divides
    it) and the linear ramp ``start + (seq_len - start) min(1, p / share)``; ``seq_len`` when
    off."""
    if start <= 0 or start >= seq_len:
        return seq_len
    target = start + (seq_len - start) * min(1.0, clamp(p) / share)
    return max(d for d in divisors(seq_len) if start <= d <= target + 1e-9)


def batch_at(ramp: float, start: int, final: int, unit: int) -> int:
    """Batch-size warm-up: ``start + (final - start) ramp`` floored to a multiple of ``unit``, at
    least ``start`` (``ramp`` in [0, 1]; ``start`` and ``final`` are multiples of ``unit``)."""
    b = start + (final - start) * clamp(ramp)
    return max(start, min(final, int(b + 1e-9) // unit * unit))


@dataclass(frozen=True)
class SeqLenWarmup:
    """``data.seq_len_start`` / ``data.seq_len_warmup_share`` resolved for a run of length
    ``seq_len``."""

    start: int
    share: float
    seq_len: int

    @property
    def active(self) -> bool:
        return 0 < self.start < self.seq_len

    def at(self, p: float) -> int:
        return seq_len_at(p, self.start, self.share, self.seq_len) if self.active else self.seq_len

    def lengths(self) -> list[int]:
        """Every length the run trains at (the compiled shapes)."""
        return (
            [d for d in divisors(self.seq_len) if self.start <= d]
            if self.active
            else [self.seq_len]
        )


@dataclass(frozen=True)
class BatchWarmup:
    """``train.batch_warmup_*`` resolved: the global batch grows from ``start`` to ``final`` over
    the share ``share`` of the run, or over its first ``tokens`` tokens, in multiples of
    ``unit``.  ``bucketed``: only the batches :meth:`sizes` names, each step's floored to the
    largest of them not above the formula's (a compiled step compiles one graph per batch)."""

    start: int
    final: int
    unit: int
    share: float = 0.0
    tokens: int = 0
    bucketed: bool = False

    @property
    def active(self) -> bool:
        return 0 < self.start < self.final

    def ramp(self, p: float, tokens_seen: int) -> float:
        if self.tokens:
            return min(1.0, tokens_seen / self.tokens)
        return min(1.0, clamp(p) / self.share)

    def at(self, p: float, tokens_seen: int = 0) -> int:
        """The global batch (sequences) of the step taken at progress ``p`` after ``tokens_seen``
        tokens."""
        if not self.active:
            return self.final
        b = batch_at(self.ramp(p, tokens_seen), self.start, self.final, self.unit)
        return max(s for s in self.sizes() if s <= b) if self.bucketed else b

    def sizes(self) -> list[int]:
        """Every global batch the warm-up trains at: the multiples of ``unit`` from ``start`` to
        ``final``; bucketed, ``start`` doubled while below ``final``, and ``final``."""
        if not self.active:
            return [self.final]
        if not self.bucketed:
            return list(range(self.start, self.final + 1, self.unit))
        out = [self.start]
        while out[-1] * 2 < self.final:
            out.append(out[-1] * 2)
        return [*out, self.final]


def batch_warmup_start(tc) -> int:
    """``train.batch_warmup_start`` in sequences: a share of ``train.batch_size`` (a number in
    (0, 1)) floored, at least 1; an integer as it is; 0 when it is "off" (no warm-up)."""
    v = tc.batch_warmup_start
    if isinstance(v, str):  # "off" (config.WARMUP_OFF)
        return 0
    return max(1, int(v * tc.batch_size)) if isinstance(v, float) and 0.0 < v < 1.0 else int(v)


def batch_warmup_line(tc, world: int = 1) -> str:
    """The banner's words for the batch warm-up ("" when there is none)."""
    start = batch_warmup_start(tc)
    if not 0 < start < tc.batch_size:
        return ""
    share = isinstance(tc.batch_warmup_start, float)
    how = f" ({tc.batch_warmup_start:g} of it)" if share else ""
    over = (
        f"the first {tc.fixed_batch_warmup_tokens:,} tokens"
        if tc.fixed_batch_warmup_tokens
        else f"the first {tc.fixed_batch_warmup_share:g} of the run"
    )
    return f"; warm-up from {start}{how} over {over}"


def lr_schedule(train_cfg) -> LRSchedule:
    """The LR schedule of a ``TrainConfig``."""
    # ratio of a time budget
    share = 0.0 if train_cfg.fixed_steps else getattr(train_cfg, "warmup_ratio", 0.0)
    return LRSchedule(
        train_cfg.lr_schedule,
        train_cfg.lr,
        train_cfg.fixed_warmup_steps,
        train_cfg.fixed_steps,
        train_cfg.decay_share,
        train_cfg.decay_shape,
        share,
    )


def mask_schedule(data_cfg) -> ValueSchedule:
    """The masking-rate schedule of a ``DataConfig`` (constant for a plain ``mask_prob``)."""
    return ValueSchedule(data_cfg.mask_prob_start, data_cfg.mask_prob_end, data_cfg.mask_schedule)


__all__ = [
    "warmup_ramp",
    "lr_linear_steps",
    "wsd_shape",
    "LRSchedule",
    "lr_schedule",
    "mask_schedule",
    "divisors",
    "seq_len_at",
    "batch_at",
    "SeqLenWarmup",
    "BatchWarmup",
    "batch_warmup_start",
    "batch_warmup_line",
]
