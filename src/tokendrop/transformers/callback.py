"""``TokenDroppingCallback``: what a ``transformers.Trainer`` run with a patched model needs.

* the schedules: the optimizer step (random-LTD's kept-count ramp, ``stage2_fraction``, ScTD's
  every-k steps read it) and the run's length (``max_steps``) go to the model's state; the masking
  rate of a :class:`MaskingRateCollator` (found in the train dataloader, or passed) follows the
  progress;
* logging: the kept fraction and a summary of the importance vector join every log record
  (``trainer.state.log_history`` and the callbacks after this one; see docs/transformers.md for the
  reporting integrations);
* a model whose MLM head is untrained while its encoder is (a checkpoint without the head): one
  line on stderr at the start naming the remedy (``tokendrop.transformers.head``);
* checkpoints: ``token_dropping.safetensors`` + ``token_dropping.json`` in every
  ``checkpoint-N`` folder (rank 0), restored when ``trainer.train(resume_from_checkpoint=...)``
  resumes, so the run continues exactly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tokendrop.transformers.collator import MaskingRateCollator
from tokendrop.transformers.head import FRESH_HEAD_NOTE, mlm_head_is_fresh
from tokendrop.transformers.options import TokenDroppingError
from tokendrop.transformers.patch import state_of
from tokendrop.transformers.state import STATE_JSON, load_state, save_state


def _find_collator(dataloader: Any) -> MaskingRateCollator | None:
    obj = getattr(dataloader, "collate_fn", None)
    for _ in range(4):  # Trainer may wrap it (RemoveColumnsCollator.data_collator)
        if isinstance(obj, MaskingRateCollator):
            return obj
        obj = getattr(obj, "data_collator", None)
    return None


class TokenDroppingCallback(TrainerCallback):
    """Add to ``Trainer(callbacks=[...])`` when training a model patched by
    ``apply_token_dropping``.

    ``collator``: the MaskingRateCollator whose rate to schedule (default: the one in the train
    dataloader, if any).  ``resume_from_checkpoint``: where to read the token-dropping state when
    resuming, if not the checkpoint Trainer resumes from under ``output_dir``."""

    def __init__(
        self, collator: MaskingRateCollator | None = None, resume_from_checkpoint: str | None = None
    ):
        self.collator = collator
        self.resume_from_checkpoint = resume_from_checkpoint

    # -- schedules ------------------------------------------------------------------------------

    def _sync(self, state, model) -> None:
        st = state_of(model)
        st.step = state.global_step
        if self.collator is not None and state.max_steps > 0:
            self.collator.set_progress(state.global_step / state.max_steps)

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        st = state_of(model)
        if self.collator is None:
            self.collator = _find_collator(train_dataloader)
        if state.max_steps > 0:
            st.total_steps = state.max_steps
        if state.global_step == 0 and args.should_log and mlm_head_is_fresh(model):  # no head
            print(FRESH_HEAD_NOTE, file=sys.stderr, flush=True)
        # resuming: the state saved with the checkpoint Trainer resumed from
        if state.global_step > 0:
            load_state(st, self._checkpoint_dir(args, state))
            if st.step != state.global_step:
                raise TokenDroppingError(
                    f"TokenDroppingCallback: the token-dropping state is from step {st.step}, "
                    f"the Trainer resumes at step {state.global_step}"
                )
        self._sync(state, model)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self._sync(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._sync(state, model)  # the step is done: what a checkpoint saved now records
        # total_flos: the Trainer counts every forward as dense (6 N D); take off what this step's
        # dropping forwards did not spend (every rank drops the same share: x world size, as the
        # Trainer sums the ranks' counts; taken off now, before the Trainer stores this step's
        # count: the sum is exact once it does)
        st = state_of(model)
        if st.flops_saved:
            state.total_flos -= st.flops_saved * args.world_size
            st.flops_saved = 0.0

    def _checkpoint_dir(self, args, state) -> Path:
        tried = []
        for c in (
            self.resume_from_checkpoint,
            getattr(args, "resume_from_checkpoint", None),
            os.path.join(args.output_dir, f"checkpoint-{state.global_step}"),
        ):
            if isinstance(c, (str, os.PathLike)) and c:
                tried.append(str(c))
                if (Path(c) / STATE_JSON).is_file():
                    return Path(c)
        raise TokenDroppingError(
            f"TokenDroppingCallback: resuming at step {state.global_step} but no {STATE_JSON} in "
            f"{' or '.join(tried)}; pass TokenDroppingCallback(resume_from_checkpoint=<the "
            "checkpoint folder>)"
        )

    # -- logging and checkpoints ----------------------------------------------------------------

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if logs is None or model is None or "loss" not in logs:  # training records only
            return
        extra = state_of(model).summary()
        if self.collator is not None:
            extra["token_dropping/mask_rate"] = self.collator.rate
        logs.update(extra)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(extra)

    def on_save(self, args, state, control, model=None, **kwargs):
        if not args.should_save:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not folder.is_dir():
            raise TokenDroppingError(
                f"TokenDroppingCallback: the checkpoint folder {folder} does not exist (a "
                "hyper-parameter search's trial folders are not supported)"
            )
        save_state(state_of(model), folder)


__all__ = ["TokenDroppingCallback"]
