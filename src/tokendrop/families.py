"""The encoder families and the one entry point that builds a model of either: ``build_model``.

``model.family`` names the family: ``bert`` (:mod:`tokendrop.model`) or ``modernbert``
(:mod:`tokendrop.modern`, which reuses the BERT module's shared encoder machinery).  This module
sits above both, so neither family module imports the other's classes to dispatch.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from . import modern
from .config import DropConfig, ModelConfig
from .model import BertForMaskedLM, BertForQuestionAnswering, BertForSequenceClassification


TASKS = ("mlm", "classification", "qa")


def build_model(cfg: ModelConfig, drop: DropConfig | None = None, task: str = "mlm", **head_kwargs) -> nn.Module:
    """The one entry point for building a model: ``cfg.family`` (bert -> ``tokendrop.model``, modernbert ->
    ``tokendrop.modern``) and ``task``: "mlm" (pretraining; ``drop`` applies), "classification"
    (``num_labels``) or "qa".  Every family's classes share one interface (forward signature,
    ``config``, ``mlm_nll``)."""
    if task not in TASKS:
        raise ValueError(f"build_model: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if cfg.family == "modernbert":
        classes = {"mlm": modern.ModernBertForMaskedLM, "classification": modern.ModernBertForSequenceClassification,
                   "qa": modern.ModernBertForQuestionAnswering}
    else:
        classes = {"mlm": BertForMaskedLM, "classification": BertForSequenceClassification,
                   "qa": BertForQuestionAnswering}
    if task == "mlm":
        return classes[task](cfg, drop)
    return classes[task](cfg, **head_kwargs)


def task_of(model_or_class: Any) -> str:
    """"mlm" | "classification" | "qa" for any family's model class (or instance)."""
    cls = model_or_class if isinstance(model_or_class, type) else type(model_or_class)
    task = getattr(cls, "task", None)
    if task not in TASKS:
        raise ValueError(f"{cls.__name__}: not a tokendrop model class")
    return task


__all__ = ["TASKS", "build_model", "task_of"]
