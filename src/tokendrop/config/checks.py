"""The check of a numeric config field that must be finite and positive, with the one message shape
of a config error: ``FIELD: expected WHAT, got VALUE``."""

from __future__ import annotations

import math

from tokendrop.errors import ConfigError


def check_positive(field: str, value: float, expected: str, *, zero: bool = False) -> None:
    """Raise ConfigError ``"{field}: expected {expected}, got {value}"`` unless ``value`` is finite
    and > 0 (>= 0 with ``zero``).  ``expected`` says what the field holds ("a positive, finite
    learning rate"), in the words its error has always used."""
    if not (math.isfinite(value) and (value > 0 or zero and value == 0)):
        raise ConfigError(f"{field}: expected {expected}, got {value}")


def positive_int(value: object) -> bool:
    """``value`` is an integer > 0 (a bool is no number)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_size(
    field: str,
    value: object,
    word: str,
    means: str,
    fix: str,
    takes: str = "a positive integer",
    ok=positive_int,
) -> None:
    """Raise ConfigError unless ``value`` is the name ``word`` of where the size comes from
    (``means`` says what it names; ``fix`` ends the message ``write FIELD = "word" to ...``) or
    ``ok(value)`` (``takes`` says what that takes; a positive integer unless told): a size is given
    or named, never 0 or negative."""
    if value != word and not ok(value):
        raise ConfigError(
            f"{field}: expected {takes} or {word!r} ({means}), got {value!r}; write "
            f'{field} = "{word}" to {fix}'
        )
