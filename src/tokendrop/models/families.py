"""The encoder families, registered in one table (``FAMILIES``), and the one entry point that builds
a model of any of them: ``build_model``.

A family is one folder, ``models/<family>/``: its model, its Hugging Face adapter, its ``[model]``
schema and presets (``family.toml``) and its row, ``FAMILY``, a
:class:`~tokendrop.models.family.FamilySpec` (classes per task, the adapter both ways, what
pretraining leaves untrained, how the transformers integration patches it).  The row is registered
once, below.  Everything that differs by family asks this table (``spec_of(cfg)``): export and
import (``tokendrop.models.hf``, ``tokendrop.models.source``), the trainer, ``bench``'s transformers
baseline and ``tokendrop.transformers``; the FLOP model (``tokendrop.dropping.flops``) reads the
family's FLOP facts from its ``family.toml`` schema (``ModelConfig.schema``).  Tokenizers are not
per family: a source's own files say what it is (a WordPiece vocab.txt, or a tokenizer.json used as
it is; ``tokendrop.data.tokenizer``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.errors import ConfigError, check_arg
from tokendrop.models import bert, modernbert
from tokendrop.models.family import FamilySpec

TASKS = ("mlm", "classification", "qa")
# the registration: one FAMILY per family folder
FAMILIES: dict[str, FamilySpec] = {f.name: f for f in (bert.FAMILY, modernbert.FAMILY)}


def spec_of(cfg: ModelConfig | str) -> FamilySpec:
    """The family of a ModelConfig (or a family name)."""
    name = cfg if isinstance(cfg, str) else cfg.family
    if name not in FAMILIES:
        raise ConfigError(
            f"model.family: unknown family {name!r}; expected one of {', '.join(FAMILIES)}"
        )
    return FAMILIES[name]


def spec_for_hf_model_type(model_type: str) -> FamilySpec | None:
    """The family whose checkpoints' config.json says ``model_type``, or None."""
    return next((s for s in FAMILIES.values() if s.hf_model_type == model_type), None)


def build_model(
    cfg: ModelConfig, drop: DropConfig | None = None, task: str = "mlm", **head_kwargs
) -> nn.Module:
    """The one entry point for building a model: ``cfg.family``'s class for ``task``: "mlm"
    (pretraining; ``drop`` applies), "classification" (``num_labels``) or "qa".  Every family's
    classes share one interface (forward signature, ``config``, ``mlm_nll``)."""
    check_arg(
        "build_model",
        "cfg",
        cfg,
        ModelConfig,
        "a tokendrop.ModelConfig",
        "a Config's .model, or ModelConfig(...)",
    )
    check_arg(
        "build_model", "drop", drop, (DropConfig, type(None)), "a tokendrop.DropConfig or None"
    )
    check_arg("build_model", "task", task, str, f"one of {', '.join(TASKS)}")
    if task not in TASKS:
        raise ValueError(f"build_model: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if getattr(cfg, "shape_pending", False):  # model.init: a source whose shape is not read yet
        raise ConfigError(
            f"model.init: the shape of {cfg.init} is not resolved yet; "
            f"build_model(resolve_model(cfg.model), "
            "...) for its shape, or load_pretrained(SOURCE) for its shape and "
            "weights (tokendrop's API)"
        )
    cls = spec_of(cfg).classes[task]
    if task == "mlm":
        return cls(cfg, drop)
    n = head_kwargs.get("num_labels")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(
            f"build_model: num_labels must be a positive integer (1 for a regression), got {n!r}"
        )
    return cls(cfg, **head_kwargs)


def task_of(model_or_class: Any) -> str:
    """ "mlm" | "classification" | "qa" for any family's model class (or instance)."""
    cls = model_or_class if isinstance(model_or_class, type) else type(model_or_class)
    task = getattr(cls, "task", None)
    if task not in TASKS:
        raise ValueError(f"{cls.__name__}: not a tokendrop model class")
    return task


__all__ = ["TASKS", "FAMILIES", "spec_of", "spec_for_hf_model_type", "build_model", "task_of"]
