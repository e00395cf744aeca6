"""How a ``[train]`` field writes an amount of time or of tokens: ``parse_duration`` ("1h30m") and
``parse_tokens`` ("2B").  The config checks the fields with them; ``tokendrop.train.budget`` turns
them into the run's length."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_FORM = (
    'a duration such as "90s", "20m", "6h" or "1h30m" (hours h, minutes m, '
    "seconds s, in that order)"
)


def parse_duration(text: str, where: str = "train.time_budget") -> float:
    """Seconds in ``"1h30m"``, ``"20m"``, ``"90s"``, ``"2.5h"``; ValueError naming ``where``
    otherwise."""
    s = str(text).strip().lower().replace(" ", "")
    parts = _PART.findall(s)
    units = [u for _, u in parts]
    if (
        not s
        or "".join(f"{n}{u}" for n, u in parts) != s
        or units != sorted(set(units), key="hms".index)
    ):
        raise ValueError(f"{where}: cannot parse {text!r}; expected {_FORM}")
    seconds = sum(float(n) * {"h": 3600.0, "m": 60.0, "s": 1.0}[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{where}: {text!r} is no time at all; expected a positive {_FORM}")
    return seconds


_TOKENS = re.compile(r"(\d+(?:\.\d*)?(?:e\+?\d+)?)([kmbgt]?)")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_TOKENS_FORM = (
    'a token count such as "2B", "500M", "1.5e9", "750k" or an integer (k/M/B/T: 1e3/1e6/1e9/1e12)'
)


def parse_tokens(value, where: str = "train.tokens") -> int:
    """Tokens in ``"2B"``, ``"500M"``, ``"1.5e9"``, ``"750k"``, ``2_000_000`` or an int; ValueError
    naming ``where`` otherwise.  Exact (decimal arithmetic); a fractional count is rounded up."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: cannot parse {value!r}; expected {_TOKENS_FORM}")
    s = str(value).strip().lower().replace("_", "").replace(",", "").replace(" ", "")
    m = _TOKENS.fullmatch(s)
    try:
        n = Decimal(m[1]) * _SCALE[m[2]] if m else None
    except InvalidOperation:
        n = None
    if n is None:
        raise ValueError(f"{where}: cannot parse {value!r}; expected {_TOKENS_FORM}")
    if n <= 0:
        raise ValueError(
            f"{where}: {value!r} is no tokens at all; expected a positive count ({_TOKENS_FORM})"
        )
    return int(math.ceil(n))


__all__ = ["parse_duration", "parse_tokens"]
