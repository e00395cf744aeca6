"""What a resume may change, declared on each field of a run's config.

A section's field is declared ``fixed(default)`` or ``free(default)`` in place of ``= default``:

- ``fixed``: it defines what the run computes (the model, the selection method and its schedule
  constants, the masking, the global batch, the seed); ``--resume`` with another value is refused,
  naming the field.
- ``free``: the run's length, learning-rate schedule, execution and logging; ``--resume`` with
  another value continues with it and says so in a note, field by field.

``resume_rules(Config)`` lists every leaf field with its rule (a test holds that every field of
every section has one); ``tokendrop.train.resume`` reads it, and nothing else keeps a list.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any

RESUME = "resume"  # the metadata key
FIXED = "fixed"
FREE = "free"
RULES = (FIXED, FREE)


def fixed(default: Any = MISSING, *, factory: Any = MISSING) -> Any:
    """A field a resume may not change (module docstring); ``factory`` for a mutable default."""
    return dataclasses.field(default=default, default_factory=factory, metadata={RESUME: FIXED})


def free(default: Any = MISSING, *, factory: Any = MISSING) -> Any:
    """A field a resume may change, with a note (module docstring)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={RESUME: FREE})


def resume_rules(cls: type, prefix: str = "") -> dict[str, str]:
    """Every leaf field of the config dataclass ``cls`` (dotted, nested sections walked) -> its
    rule; a field declared without one maps to ``""``."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        section = _section_type(f)
        if section is not None:
            out.update(resume_rules(section, key + "."))
        else:
            out[key] = f.metadata.get(RESUME, "")
    return out


def _section_type(f: dataclasses.Field) -> type | None:
    """The dataclass a section field holds (``Config.model``: ``ModelConfig``), else None."""
    if f.default_factory is not MISSING and dataclasses.is_dataclass(f.default_factory):
        return f.default_factory  # type: ignore[return-value]
    return None
