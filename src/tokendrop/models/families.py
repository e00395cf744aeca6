"""The encoder families, registered in one table (``FAMILIES``), and the one entry point that builds a
model of any of them: ``build_model``.

A family is a :class:`FamilySpec`: its model classes (one per task), its Hugging Face adapter both
ways (config.json, tensor names, layout checks, weight loading), what the FLOP model needs to know
(GeGLU FFN, sliding-window layers) and what pretraining leaves untrained.  Everything that differs
by family asks this table (``spec_of(cfg)``): export and import (``tokendrop.models.hf``,
``tokendrop.models.source``, ``tokendrop.models.source``), the FLOP model (``tokendrop.dropping.flops``), the
trainer and ``bench``'s transformers baseline.  Tokenizers are not per family: a source's own files
say what it is (a WordPiece vocab.txt, or a tokenizer.json used as it is; ``tokendrop.data.tokenizer``).

Two families: ``bert`` (:mod:`tokendrop.models.bert.model`, :mod:`tokendrop.models.bert.hf`) and ``modernbert``
(:mod:`tokendrop.models.modernbert.model`, :mod:`tokendrop.models.modernbert.hf`).  A new family is one model module, one adapter
module and one entry below, plus its entry in ``config.MODEL_FAMILIES`` (what the config schema knows
of it as data: document attention by default, rotary positions, classifier pooling; a test keeps the
two tables' names equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from torch import Tensor, nn

from tokendrop.models.bert import hf as hf_bert, model
from tokendrop.models.modernbert import hf as hf_modern, model as modern
from tokendrop.config import ConfigError, DropConfig, ModelConfig
from tokendrop.models.weights import InitReport, InitSource


TASKS = ("mlm", "classification", "qa")


@dataclass(frozen=True)
class FamilySpec:
    name: str  # model.family
    classes: Mapping[str, type[nn.Module]]  # task -> our class
    hf_model_type: str  # config.json's model_type
    hf_architectures: Mapping[str, str]  # task -> the transformers class an export names
    config_from_hf: Callable[[dict[str, Any], str], ModelConfig]  # config.json -> ModelConfig (one-line errors)
    hf_config: Callable[[ModelConfig, list[str] | None], dict[str, Any]]  # ModelConfig -> config.json
    hf_config_defaults: Mapping[str, Any]  # export: fields set when the source's config.json has none
    to_hf: Callable[[dict[str, Tensor]], dict[str, Tensor]]  # our state dict -> transformers names
    from_hf: Callable[[dict[str, Tensor]], dict[str, Tensor]]  # a file's tensors (any accepted layout) -> ours
    check_hf_tensors: Callable[[Path, dict[str, tuple[int, ...]], ModelConfig], str]  # shapes -> layout name
    load_weights: Callable[[InitSource, nn.Module], InitReport]  # an HF dir or our run -> any of our classes
    hf_sparse_prediction: bool  # transformers' MLM class can run its head on the masked slots only
    token_types: bool  # the model reads token_type_ids
    glu_ffn: bool  # FLOP model: GeGLU FFN (d -> 2f, f -> d) rather than d -> f -> d
    sliding_windows: bool  # FLOP model: layers may attend within a window (model.layer_types)
    max_seq_len: int  # the longest sequence bench builds the family for (it refuses longer)
    # continued pretraining may extend the positions (a longer T than the source's max_position_embeddings,
    # other rotary bases): rotary positions have no weights; learned positions do (docs/design.md §2.8)
    extends_positions: bool
    hf_head_fields: tuple[str, ...] = ()  # config.json fields about the source's task head (not kept on fine-tuning)
    pretrain_frozen: tuple[str, ...] = ()  # submodules pretraining does not train


FAMILIES: dict[str, FamilySpec] = {
    "bert": FamilySpec(
        name="bert", classes=model.CLASSES, hf_model_type="bert", hf_architectures=hf_bert.ARCHITECTURES,
        config_from_hf=hf_bert.bert_config_from_hf, hf_config=hf_bert.hf_config_dict, hf_config_defaults={},
        to_hf=hf_bert.to_hf, from_hf=hf_bert.state_from_hf, check_hf_tensors=hf_bert.check_bert_tensors,
        load_weights=hf_bert.load_bert_weights, hf_sparse_prediction=False, token_types=True, glu_ffn=False,
        # published BERTs learn 512 positions; one built from scratch (bench) learns max_position_embeddings
        sliding_windows=False, max_seq_len=8192,
        extends_positions=False,
        hf_head_fields=("classifier_dropout",),  # ours is hidden_dropout_prob
        pretrain_frozen=("bert.pooler",)),  # no NSP: the pooler is not trained
    "modernbert": FamilySpec(
        name="modernbert", classes=modern.CLASSES, hf_model_type="modernbert",
        hf_architectures=hf_modern.ARCHITECTURES, config_from_hf=hf_modern.modern_config_from_hf,
        hf_config=hf_modern.modern_hf_config_dict,
        # else transformers' defaults (50281) name ids outside a smaller vocabulary
        hf_config_defaults={"bos_token_id": None, "cls_token_id": None},
        to_hf=hf_modern.to_hf_modern, from_hf=hf_modern.modern_state_from_hf,
        check_hf_tensors=hf_modern.check_modern_tensors, load_weights=hf_modern.load_modern_weights,
        hf_sparse_prediction=True, token_types=False, glu_ffn=True, sliding_windows=True,
        max_seq_len=8192,  # rotary positions (ModernBERT's max_position_embeddings)
        extends_positions=True),
}


def spec_of(cfg: ModelConfig | str) -> FamilySpec:
    """The family of a ModelConfig (or a family name)."""
    name = cfg if isinstance(cfg, str) else cfg.family
    if name not in FAMILIES:
        raise ConfigError(f"model.family: unknown family {name!r}; expected one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def spec_for_hf_model_type(model_type: str) -> FamilySpec | None:
    """The family whose checkpoints' config.json says ``model_type``, or None."""
    return next((s for s in FAMILIES.values() if s.hf_model_type == model_type), None)


def build_model(cfg: ModelConfig, drop: DropConfig | None = None, task: str = "mlm", **head_kwargs) -> nn.Module:
    """The one entry point for building a model: ``cfg.family``'s class for ``task``: "mlm"
    (pretraining; ``drop`` applies), "classification" (``num_labels``) or "qa".  Every family's
    classes share one interface (forward signature, ``config``, ``mlm_nll``)."""
    if task not in TASKS:
        raise ValueError(f"build_model: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    cls = spec_of(cfg).classes[task]
    if task == "mlm":
        return cls(cfg, drop)
    return cls(cfg, **head_kwargs)


def task_of(model_or_class: Any) -> str:
    """"mlm" | "classification" | "qa" for any family's model class (or instance)."""
    cls = model_or_class if isinstance(model_or_class, type) else type(model_or_class)
    task = getattr(cls, "task", None)
    if task not in TASKS:
        raise ValueError(f"{cls.__name__}: not a tokendrop model class")
    return task


__all__ = ["TASKS", "FamilySpec", "FAMILIES", "spec_of", "spec_for_hf_model_type", "build_model", "task_of"]
