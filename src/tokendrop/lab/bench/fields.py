"""The JSON form of the benchmark's dataclass records: ``optional()`` fields (left out while None)
and ``record_dict``, used by :mod:`.records` and :mod:`.environment` alike."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def optional(default: Any = None) -> Any:
    """A dataclass field left out of ``to_dict`` while it is None."""
    return field(default=default, metadata={"omit_none": True})


def record_dict(obj: Any) -> Any:
    """Dataclasses (recursively) -> plain JSON-ready values, dropping unset ``optional()``
    fields."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = record_dict(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [record_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: record_dict(v) for k, v in obj.items()}
    return obj
