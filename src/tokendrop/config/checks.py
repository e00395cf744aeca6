"""The checks of a numeric config field -- finite and positive, a size or its name, a count within
what a machine holds -- with the one message shape of a config error: ``FIELD: expected WHAT, got
VALUE``."""

from __future__ import annotations

import math
import os

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


# a count of CPU threads or processes may oversubscribe the machine's CPUs this many times over
CPU_OVERSUBSCRIBE = 4


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_at_most(field: str, value: object, most: int, what: str) -> None:
    """Raise ConfigError unless ``value`` (an integer; a name such as "auto" passes) is at most
    ``most``, the bound a count of ``what`` has on any machine; the message says this machine's
    CPU count."""
    if isinstance(value, int) and not isinstance(value, bool) and value > most:
        raise ConfigError(
            f"{field}: {value} {what} is more than any machine runs usefully (at most {most}); "
            f"this machine has {machine_cpus()} CPUs"
        )


def check_cpu_count(field: str, value: object, what: str, fix: str) -> None:
    """Raise ConfigError when ``value`` (an integer count of ``what``; a name passes) is more than
    CPU_OVERSUBSCRIBE per CPU of the machine running it; ``fix`` ends the message (what to set
    instead).  Checked where the count is used, not in a config's validation: a config is read on
    other machines too."""
    cpus = machine_cpus()
    if isinstance(value, int) and not isinstance(value, bool) and value > CPU_OVERSUBSCRIBE * cpus:
        raise ConfigError(
            f"{field}: {value} {what} on a machine with {cpus} CPUs (at most "
            f"{CPU_OVERSUBSCRIBE * cpus}, {CPU_OVERSUBSCRIBE} per CPU); {fix}"
        )
