"""What ``apply_token_dropping`` accepts: the options (the ``[drop]`` fields of tokendrop's config
that make sense outside its trainer, plus a few of the integration's own), their checks, and the
supported model classes.  Every refusal is one line (:class:`TokenDroppingError`)."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.methods import METHODS
from tokendrop.errors import ConfigError, TokendropError
from tokendrop.models.families import FAMILIES

# transformers' classes the patch knows: (MLM model, bare encoder) of each family's HFIntegration
SUPPORTED_NAMES = tuple(
    n
    for f in FAMILIES.values()
    if f.integration
    for n in (f.integration.mlm_class, f.integration.bare_class)
)

# [drop] fields that need tokendrop's own trainer or data directory
_TRAINER_ONLY = {
    "counts_path": "pass counts= (one count per token id) instead",
    "importance_init": "set the importance yourself with "
    "token_dropping_state(model).set_importance(...)",
    "importance_init_batches": "set the importance yourself with "
    "token_dropping_state(model).set_importance(...)",
}
DROP_OPTIONS = tuple(f.name for f in dataclasses.fields(DropConfig) if f.name not in _TRAINER_ONLY)
# the integration's own options
EXTRA_OPTIONS = ("tokenizer", "special_ids", "counts", "seed", "total_steps", "sparse_prediction")
OPTIONS = DROP_OPTIONS + EXTRA_OPTIONS
# the paper's (DropConfig's own default, "none", is the dense baseline)
DEFAULT_METHOD = "cumulative"


class TokenDroppingError(TokendropError, ValueError):
    """A model, an option or a saved state the transformers integration cannot use (one line)."""


def _type_error(name: str, value: Any, want: str) -> TokenDroppingError:
    return TokenDroppingError(f"apply_token_dropping: {name} must be {want}, got {value!r}")


def _check_type(name: str, value: Any, default: Any) -> Any:
    """``value`` checked against the type of the DropConfig field's default."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise _type_error(name, value, "True or False")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(name, value, "an integer")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(name, value, "a number")
        value = float(value)
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise _type_error(name, value, "a string")
    elif isinstance(default, list):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise _type_error(name, value, "a list of token strings")
        value = list(value)
    return value


def unknown_option_error(name: str) -> TokenDroppingError:
    if name in _TRAINER_ONLY:
        return TokenDroppingError(
            f"apply_token_dropping: option {name!r} belongs to tokendrop's own trainer; "
            f"{_TRAINER_ONLY[name]}"
        )
    near = difflib.get_close_matches(name, OPTIONS, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return TokenDroppingError(
        f"apply_token_dropping: unknown option {name!r}{hint}; options: {', '.join(OPTIONS)}"
    )


def drop_config(options: dict[str, Any], num_layers: int) -> DropConfig:
    """The [drop] options -> a validated DropConfig (one-line errors naming the option)."""
    for name in options:
        if name not in OPTIONS:
            raise unknown_option_error(name)
    defaults = DropConfig()
    values = {
        k: _check_type(k, v, getattr(defaults, k)) for k, v in options.items() if k in DROP_OPTIONS
    }
    values.setdefault("method", DEFAULT_METHOD)
    drop = DropConfig(**values)
    try:
        drop.validate(num_layers)
    except ConfigError as e:  # "drop.rate: ..." -> "apply_token_dropping: rate: ..."
        raise TokenDroppingError(f"apply_token_dropping: {str(e).replace('drop.', '')}") from None
    if not drop.enabled:
        raise TokenDroppingError(
            "apply_token_dropping: method 'none' drops nothing; pick one of "
            f"{', '.join(m for m in METHODS if METHODS[m].drops)} (or variant='avg')"
        )
    return drop


def check_total_steps(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _type_error(
            "total_steps", value, "a positive integer (the run's optimizer steps) or None"
        )
    return value


__all__ = [
    "DROP_OPTIONS",
    "EXTRA_OPTIONS",
    "OPTIONS",
    "SUPPORTED_NAMES",
    "TokenDroppingError",
    "drop_config",
]
