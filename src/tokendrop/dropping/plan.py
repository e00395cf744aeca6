"""The method behind one object: :class:`DropPlan`, built once per run from ``DropConfig`` and the
data's special ids, answers everything a training step needs from token dropping
(docs/design.md §2.2-2.3, §2.6, §2.10-2.11).

Per optimizer step a loop asks, in this order:

* :meth:`DropPlan.at` -> :class:`DropStep`: whether the step drops (a dense start, the first
  ``dense_start_share`` of the run, and stage 2, the last ``stage2_fraction``, are dense), whether
  it selects at random (the random start, ``random_start_share``), whether its losses update the
  importance, the kept count M (the variant's rate, or random-LTD's ramp at this step) and whether
  ScTD's consistency term runs (its every-k cadence);
* :meth:`DropPlan.keep_idx`: the kept positions of a batch -- (B, M) from the selection method
  (top-M importance, frequency, random, half-random), (S, B, M) for a per-layer method, None when
  the variant pools (avg) or a per-layer method is at full length;
* :meth:`DropPlan.update`, after the optimizer step of a step that learns (``DropStep.learns``):
  the importance update from the step's per-slot losses (all-reduced across ranks under
  ``torch.distributed``; a method that learns nothing: no-op);
* :meth:`DropPlan.flops`: the step's analytic FLOPs (``tokendrop.dropping.flops``).

The rules themselves are ``DropConfig``'s and its registries' (``tokendrop.dropping.methods``); the
state (the importance vector and the random generator) is the plan's
:class:`~tokendrop.dropping.importance.TokenSelector`, which checkpoints save and restore.  The
trainer's step (``tokendrop.train.step``), the ``transformers`` integration, ``bench`` and
``inspect`` call this object; a loop of one's own can too::

    plan = DropPlan.for_model(drop, model_cfg, seq_len=128, special_ids=ids, total_steps=1000)
    for step, batch in enumerate(batches):
        at = plan.at(step, batch["input_ids"].shape[1])
        keep = plan.keep_idx(batch["input_ids"], at)
        ...  # forward with keep_idx=keep (drop_active=at.dropping), backward, optimizer step
        if at.learns:
            plan.update(labels, nll, weights)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.engine import DropSpan
from tokendrop.dropping.flops import ModelConfig, consistency_flops, step_flops
from tokendrop.dropping.importance import TokenSelector, build_selector
from tokendrop.errors import ConfigError, check_arg


@dataclass(frozen=True)
class DropStep:
    """What the method does at one optimizer step (:meth:`DropPlan.at`)."""

    step: int  # the optimizer step, 0-based
    seq_len: int  # T of this step's sequences
    # the span keeps ``kept`` rows (False: a dense step -- a dense start, stage 2, or no dropping)
    dropping: bool
    kept: int  # M: rows kept in the span (``seq_len`` on a dense step)
    consistency: bool  # ScTD's dense pass and [CLS] KL term run on this step
    random_selection: bool = False  # the random start: uniformly random kept rows
    # the step's losses update the importance (None: as ``dropping``; True on a dense start)
    learns: bool | None = None

    def __post_init__(self):
        for name in ("step", "seq_len", "kept"):
            check_arg("DropStep", name, getattr(self, name), int, "an int")
        if self.learns is None:
            object.__setattr__(self, "learns", bool(self.dropping))

    @property
    def kept_fraction(self) -> float:
        return self.kept / self.seq_len

    @classmethod
    def dense(cls, step: int, seq_len: int, learns: bool = False) -> DropStep:
        """A step that drops nothing (what :meth:`DropPlan.at` gives in stage 2; ``learns`` on a
        dense start)."""
        return cls(step, seq_len, False, seq_len, False, learns=learns)


class DropPlan:
    """Token dropping for one run (module docstring).

    ``special_ids``: the data's [CLS]/[SEP]/[MASK] (always kept) and [PAD] (dropped first) ids;
    ``pinned_ids``: further ids always kept (``drop.pinned_tokens``, resolved by the caller);
    ``counts``: per-id corpus counts (``method = "frequency"`` only); ``seed``: the random methods'
    generator; ``total_steps``: the run's optimizer steps (0: a time budget, the schedules run over
    the progress; None: not known yet, refused by a rule that needs it); ``flop_model``: the
    encoder's ``ModelConfig``, for :meth:`flops`.  Nothing selects (no selector) when the method
    drops nothing or the variant pools."""

    def __init__(
        self,
        drop: DropConfig,
        special_ids: Mapping[str, int],
        *,
        num_layers: int,
        vocab_size: int,
        seq_len: int,
        pinned_ids: Iterable[int] = (),
        counts: Any = None,
        seed: int = 0,
        total_steps: int | None = None,
        flop_model: ModelConfig | None = None,
        device: torch.device | str | None = None,
    ):
        check_arg(
            "DropPlan", "drop", drop, DropConfig, "a tokendrop.DropConfig", "a Config's .drop"
        )
        check_arg("DropPlan", "num_layers", num_layers, int, "an int")
        drop.validate(num_layers)
        if total_steps:
            drop.check_steps(total_steps)
        self.drop = drop
        self.num_layers = num_layers
        self.total_steps = total_steps
        self.flop_model = flop_model
        self.span: DropSpan | None = (
            DropSpan.from_config(drop, num_layers) if drop.enabled else None
        )
        self.selector: TokenSelector | None = None
        if drop.enabled and drop.variant_row.selects:
            self.selector = build_selector(
                drop, vocab_size, special_ids, seq_len, pinned_ids, counts, seed=seed, device=device
            )
        self._flops: dict[tuple, int] = {}

    @classmethod
    def for_model(
        cls,
        drop: DropConfig,
        model: ModelConfig,
        seq_len: int,
        special_ids: Mapping[str, int],
        **kwargs: Any,
    ) -> DropPlan:
        """The plan of a run of ``model`` (a ``ModelConfig``: its layers, vocabulary and FLOPs)."""
        return cls(
            drop,
            special_ids,
            num_layers=model.num_layers,
            vocab_size=model.vocab_size,
            seq_len=seq_len,
            flop_model=model,
            **kwargs,
        )

    # -- what the method is ---------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Dropping (or pooling) changes the middle layers on a dropping step."""
        return self.drop.enabled

    @property
    def learns(self) -> bool:
        """The importance vector learns from the loss (:meth:`update` changes it)."""
        return self.selector is not None and self.drop.selection.learns_from_loss

    @property
    def consistency(self) -> bool:
        """ScTD's consistency term is on (on the steps :meth:`at` marks)."""
        return self.drop.enabled and self.drop.consistency_weight > 0

    @property
    def half_layers(self) -> int:
        """S: the layers of the span (each draws its own subset under a per-layer method)."""
        return 0 if self.span is None else self.span.end - self.span.start

    @property
    def needs_length(self) -> str | None:
        """What needs the run's length (``total_steps``), if anything: the phases (stage 2, a dense
        or random start), random-LTD's ramp."""
        if self.drop.enabled:
            for name in ("stage2_fraction", "dense_start_share", "random_start_share"):
                if getattr(self.drop, name) > 0:
                    return name
        if self.drop.per_layer:
            return f"{self.drop.method}'s kept-count ramp"
        return None

    def step_kinds(self, seq_len: int) -> int:
        """At most how many kinds of step this run takes at ``seq_len`` (what a compiled step
        compiles per length): one dense kind when any step is dense (no dropping, a dense start,
        stage 2; a time-budgeted or unknown-length run, whose phases follow the progress, and a
        per-layer method count one), and one per kept count its dropping steps take (random-LTD:
        every multiple of ``drop.ltd_step`` its ramp takes, up to T)."""
        drop = self.drop
        if not drop.enabled:
            return 1
        dense = (
            not self.total_steps
            or drop.stage2_fraction > 0
            or drop.dense_start_share > 0
            or drop.per_layer
        )
        kept = 1
        if drop.per_layer:
            m0 = max(1, int(round(drop.ltd_start_fraction * seq_len)))
            kept = (seq_len - m0) // max(drop.ltd_step, 1) + 1
        return int(dense) + kept

    def to(self, device: torch.device | str) -> DropPlan:
        """The selector's state on ``device``."""
        if self.selector is not None:
            self.selector.to(device)
        return self

    # -- the step's rules -----------------------------------------------------------------------

    @property
    def stage2_start(self) -> int | None:
        """The first step trained without dropping (``total_steps`` when there is no stage 2; 0 when
        nothing drops); None in a time-budgeted run or one of unknown length."""
        if not self.total_steps:
            return None
        return self.drop.stage2_start(self.total_steps)

    def _length(self) -> int:
        if self.total_steps is None:
            if what := self.needs_length:
                raise ConfigError(f"drop: {what} needs the run's length (total_steps)")
            return 1
        return self.total_steps

    def kept(self, seq_len: int, step: int = 0, progress: float = 0.0) -> int:
        """M: rows kept in the span at ``step`` (``progress`` of a time budget used): the method's
        count rule (``DropConfig.kept_rows``)."""
        return self.drop.kept_rows(seq_len, step, self._length(), progress)

    def dropping(self, step: int, progress: float = 0.0) -> bool:
        """Whether ``step`` drops tokens (``DropConfig.dropping_at``: a dense start and stage 2 do
        not)."""
        return self.drop.dropping_at(step, self._length(), progress)

    def at(self, step: int, seq_len: int, progress: float = 0.0) -> DropStep:
        """Optimizer step ``step`` (0-based) over sequences of ``seq_len`` tokens, ``progress`` (in
        [0, 1]) of a time budget used: whether it drops, selects at random and learns, M, and
        ScTD's cadence (decided on the host from the step: no device value is read)."""
        total = self._length()
        dropping = self.drop.dropping_at(step, total, progress)
        if not dropping:
            return DropStep.dense(step, seq_len, self.drop.learns_at(step, total, progress))
        return DropStep(
            step,
            seq_len,
            True,
            self.drop.kept_rows(seq_len, step, total, progress),
            self.drop.consistency_at(step),
            random_selection=self.drop.random_at(step, total, progress),
        )

    # -- selection and update -------------------------------------------------------------------

    @torch.no_grad()
    def select(
        self,
        input_ids: Tensor,
        kept: int,
        mlm_positions: Tensor | None = None,
        mlm_weights: Tensor | None = None,
        random: bool = False,
    ) -> Tensor | None:
        """The kept positions of ``input_ids`` (B, T) at M = ``kept``: (B, M) ascending (the
        method's selection, or a uniform draw when ``random``; ``mlm_positions``/``mlm_weights``
        for ``keep_mlm_targets``), (S, B, M) for a per-layer method (None when M = T: a dense
        pass), None when nothing selects (avg pools)."""
        if self.selector is None:
            return None
        if self.drop.per_layer:
            if kept >= input_ids.shape[1]:
                return None
            return self.selector.select_layers(input_ids, kept, self.half_layers)
        return self.selector.select(input_ids, mlm_positions, mlm_weights, random=random)

    def keep_idx(
        self,
        input_ids: Tensor,
        at: DropStep,
        mlm_positions: Tensor | None = None,
        mlm_weights: Tensor | None = None,
    ) -> Tensor | None:
        """:meth:`select` at step ``at`` (None on a dense step)."""
        if not at.dropping:
            return None
        return self.select(
            input_ids, at.kept, mlm_positions, mlm_weights, random=at.random_selection
        )

    def update(
        self, labels: Tensor, nll: Tensor, weights: Tensor, valid: Tensor | None = None
    ) -> None:
        """After the optimizer step of a step that learns (``DropStep.learns``): the importance
        vector learns the step's per-slot losses (``TokenSelector.update``: labels/nll/weights
        (..., P); ``valid`` a 0-dim bool, False for a skipped step; all-reduced across ranks);
        nothing for a method that learns nothing."""
        if self.learns:
            self.selector.update(labels, nll, weights, valid=valid)

    @property
    def importance(self) -> Tensor | None:
        """The importance vector m (one score per token id), or None when nothing selects."""
        return None if self.selector is None else self.selector.scores

    # -- FLOPs ----------------------------------------------------------------------------------

    def flops(self, at: DropStep, rows: int) -> int:
        """Forward + backward FLOPs of step ``at`` over ``rows`` sequences: the dense model on a
        dense step, else the span at M = ``at.kept``, plus ScTD's dense pass on its steps."""
        key = (at.seq_len, rows, at.dropping, at.kept, at.consistency)
        if key not in self._flops:
            model = self._flop_model()
            f = step_flops(
                model, at.seq_len, rows, self.drop if at.dropping else None, kept=at.kept
            ).total
            if at.consistency:
                f += consistency_flops(model, at.seq_len, rows)
            self._flops[key] = f
        return self._flops[key]

    def nominal_flops(self, seq_len: int, rows: int) -> dict[str, int]:
        """{"dropping": a dropping step at the first step's M, "dense": a dense step} over ``rows``
        sequences of ``seq_len`` tokens (no ScTD pass), the run's summary."""
        model = self._flop_model()
        return {
            "dropping": step_flops(
                model, seq_len, rows, self.drop if self.drop.enabled else None
            ).total,
            "dense": step_flops(model, seq_len, rows, None).total,
        }

    def _flop_model(self) -> ModelConfig:
        if self.flop_model is None:
            raise ConfigError("drop: FLOPs need the model's configuration (DropPlan.for_model)")
        return self.flop_model


__all__ = ["DropPlan", "DropStep"]
