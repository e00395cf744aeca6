"""random-LTD (Yao et al. 2022, "Random-LTD: Random and Layerwise Token Dropping Brings Efficient
Training for Large-scale Transformers"; DeepSpeed's ``data_routing``): the kept-count schedule
(docs/design.md §2.10).  The per-layer draw is the ``random_ltd`` row of
``tokendrop.dropping.methods.METHODS``.

Every half layer (default: all but the first and the last layer) draws its own uniformly random
subset of ``M_k`` positions per sequence; the tokens not drawn skip that layer (their hidden state
passes through unchanged) and are merged back after it.  ``M_k`` ramps from ``M_0`` to T over the
first ``K`` optimizer steps and is a pure function of the step k:

    M_0 = round(ltd_start_fraction * T),  K = max(1, round(ltd_schedule_share * train.steps))
    v_k = M_0 + (T - M_0) * min(k, K) / K                       (the linear ramp)
    fixed_linear (DeepSpeed's ``fixed_linear``, seq_per_step = s):  M_k = floor(v_k) - floor(v_k) mod s
    linear (nearest grid point):                                    M_k = s * round(v_k / s)
    then M_k = min(T, max(M_k, min(s, T)))                       (never 0 rows, never more than T)
    and M_k = T for k >= K                                        (full length even when s does not divide T)

Kept counts are multiples of ``s = drop.ltd_step`` (or T itself), so a compiled step sees at most
about (T - M_0) / s + 1 shapes over the whole run.
"""

from __future__ import annotations

import math

from tokendrop.config import DropConfig


def ltd_total_steps(drop: DropConfig, train_steps: int) -> int:
    """K: the steps over which the kept count ramps up to T."""
    return max(1, int(round(drop.ltd_schedule_share * train_steps)))


def ltd_kept(drop: DropConfig, seq_len: int, step: int, train_steps: int) -> int:
    """M_k: rows each half layer keeps at optimizer step ``step`` (0-based) of a ``train_steps`` run."""
    t, s = seq_len, drop.ltd_step
    m0 = max(1, int(round(drop.ltd_start_fraction * t)))
    k_total = ltd_total_steps(drop, train_steps)
    if step >= k_total:
        return t
    v = m0 + (t - m0) * min(max(step, 0), k_total) / k_total
    if drop.ltd_schedule == "fixed_linear":
        m = math.floor(v)
        m -= m % s
    else:
        m = s * int(round(v / s))
    return min(t, max(m, min(s, t)))


LTD_BUDGET_GRID = 1_000_000  # a time-budgeted run's ramp, in steps of 1e-6 of the budget


def ltd_kept_at(drop: DropConfig, seq_len: int, step: int, train_steps: int, progress: float) -> int:
    """:func:`ltd_kept` for a run of ``train_steps`` steps; in a time-budgeted run (``train_steps`` 0)
    the ramp runs over ``progress``, the fraction of the budget used (docs/design.md §2.10)."""
    if train_steps > 0:
        return ltd_kept(drop, seq_len, step, train_steps)
    return ltd_kept(drop, seq_len, int(min(max(progress, 0.0), 1.0) * LTD_BUDGET_GRID), LTD_BUDGET_GRID)



def kept_rows(drop: DropConfig, seq_len: int, step: int = 0, train_steps: int = 1, progress: float = 0.0) -> int:
    """Rows kept in the drop span at optimizer step ``step`` (0-based) of a ``train_steps`` run,
    ``progress`` of it done (a time-budgeted run: ``train_steps`` 0): a per-layer method's scheduled
    count (:func:`ltd_kept_at`), else ``drop.num_kept(seq_len)``.  The defaults give the first step's."""
    if drop.per_layer:
        return ltd_kept_at(drop, seq_len, step, train_steps, progress)
    return drop.num_kept(seq_len)


__all__ = ["kept_rows", "ltd_kept", "ltd_kept_at", "ltd_total_steps"]
