"""Token dropping inside the training scripts people already run: a ``transformers`` integration.

    from tokendrop.transformers import TokenDroppingCallback, apply_token_dropping

    # BertForMaskedLM / ModernBertForMaskedLM
    model = apply_token_dropping(model, tokenizer=tokenizer, rate=0.5)
    # schedules, logs, checkpoints
    trainer = Trainer(model=model, ..., callbacks=[TokenDroppingCallback()])

The patched model runs tokendrop's schedule (docs/design.md §2.2-2.3, §2.10-2.11) on transformers'
own layer modules in training mode and is exactly the unpatched model in eval mode and in
``save_pretrained``; ``remove_token_dropping`` undoes the patch.  A checkpoint without an MLM
head (sentence-transformers models) gets its head trained alone first by ``warm_up_mlm_head``.
docs/transformers.md has the
options, resuming, what is saved, and when to use tokendrop's own trainer instead.
"""

from tokendrop.transformers.callback import TokenDroppingCallback
from tokendrop.transformers.collator import MaskingRateCollator
from tokendrop.transformers.head import mlm_head_is_fresh, warm_up_mlm_head
from tokendrop.transformers.options import OPTIONS, SUPPORTED_NAMES, TokenDroppingError
from tokendrop.transformers.patch import (
    apply_token_dropping,
    remove_token_dropping,
    state_of as token_dropping_state,
)
from tokendrop.transformers.state import TokenDroppingState, load_state, save_state

__all__ = [
    "MaskingRateCollator",
    "OPTIONS",
    "SUPPORTED_NAMES",
    "TokenDroppingCallback",
    "TokenDroppingError",
    "TokenDroppingState",
    "apply_token_dropping",
    "load_state",
    "mlm_head_is_fresh",
    "remove_token_dropping",
    "save_state",
    "token_dropping_state",
    "warm_up_mlm_head",
]
