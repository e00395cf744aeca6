"""How config layers combine: a preset over the preset it ``extends``, the command line's
``--set`` overrides over the preset.  A later layer's value replaces an earlier one's, key by key
(``deep_merge``), except for settings spelled by several fields, where a choice made in a later
layer replaces the other fields of an earlier one (``merge_layer``).  A key counts because the layer
holds it, whatever its value (its field's default too), never by comparison with a default; the
[model] section's keys over its ``model.preset`` follow the same rule (``ModelConfig.given``)."""

from __future__ import annotations

import copy
from typing import Any

# Settings that are one choice spelled by several fields: a layer (a preset over the one it extends,
# the command line's overrides over the preset) that gives one of them replaces what earlier layers
# gave for the others, as composer's max_duration or transformers' max_steps over num_train_epochs;
# two of them in the same layer stay an error (``TrainConfig.validate``).  section -> (field ->
# "given")
# train.steps while the run's length comes from tokens, epochs, a time budget or the default
# (tokendrop.config.TrainConfig.fixed_steps); train.tokens / train.epochs while it does not come
# from them (tokendrop.config.LENGTH_UNSET)
STEPS_UNSET = "unset"
ONE_CHOICE: dict[str, tuple[dict[str, Any], ...]] = {
    "train": (
        {
            "steps": lambda v: v != STEPS_UNSET and bool(v),
            "tokens": lambda v: v != STEPS_UNSET and bool(v),
            "epochs": lambda v: v != STEPS_UNSET and bool(v),
            "time_budget": bool,
        },  # the run's length
        {
            "warmup_steps": lambda v: (
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            ),
            "warmup_ratio": bool,
        },  # the learning-rate warm-up
        {
            "batch_warmup_tokens": lambda v: v != STEPS_UNSET and bool(v),
            "batch_warmup_share": lambda v: v != STEPS_UNSET and bool(v),
        },  # the batch warm-up's length
    ),
}


def merge_layer(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged onto ``base`` (``deep_merge``), where a choice ``over`` makes in one of the
    ``ONE_CHOICE`` groups replaces the fields of that group ``base`` set (a run's length: a later
    layer's ``train.time_budget`` replaces an earlier ``train.steps``, whatever the unit)."""
    base = copy.deepcopy(base)
    for section, groups in ONE_CHOICE.items():
        b, o = base.get(section), over.get(section)
        if not (isinstance(b, dict) and isinstance(o, dict)):
            continue
        for group in groups:
            if any(k in o and test(o[k]) for k, test in group.items()):
                for k in group:
                    if k not in o:
                        b.pop(k, None)
    return deep_merge(base, over)


def deep_merge(base: dict, over: dict) -> dict:
    """``over``'s keys over ``base``'s, tables merged recursively."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


__all__ = ["ONE_CHOICE", "merge_layer", "deep_merge"]
