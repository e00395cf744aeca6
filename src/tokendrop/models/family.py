"""What an encoder family is: one :class:`FamilySpec` row, declared as ``FAMILY`` in the family's
own folder (``models/<family>/__init__.py``) and registered once in ``tokendrop.models.families``.

The row carries everything that differs by family, as data or as the family's own functions: its
model classes (one per task), its Hugging Face adapter both ways (config.json, tensor names, layout
checks, weight loading), what pretraining leaves untrained, how the transformers integration
patches its transformers classes (:class:`HFIntegration`), and -- read from the folder's
``family.toml``, which the config parses without the models -- its ``[model]`` schema and presets
(the FLOP model's facts among them: ``tokendrop.dropping.flops`` reads them without the models)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from tokendrop.config.model import (
    FAMILY_FILE,
    MODEL_FAMILIES,
    MODEL_PRESETS,
    PRESET_FAMILY,
    FamilySchema,
    ModelConfig,
)
from tokendrop.errors import ConfigError
from tokendrop.models.weights import InitReport, InitSource


@dataclass(frozen=True)
class HFIntegration:
    """How ``tokendrop.transformers`` patches the family's transformers classes, as data."""

    mlm_class: str  # transformers' MLM class (e.g. "BertForMaskedLM")
    bare_class: str  # its bare encoder class (e.g. "BertModel")
    base: str  # the MLM model's attribute holding the bare encoder
    layers: str  # the dotted path of the layer list in the bare encoder
    # the MLM model's head modules, applied in this order to the hidden states
    head: tuple[str, ...]
    layout: (
        str  # how its layers run with dropping: a key of tokendrop.transformers.encoders.LAYOUTS
    )
    pooler: bool  # the bare encoder's output carries its pooler's output
    # the MLM loss is the model's own loss_function (num_items_in_batch honoured); else mean CE
    model_loss: bool
    # config flags that must be off (a decoder, cross-attention)
    refused_flags: tuple[str, ...] = ()
    absolute_positions: bool = False  # config.position_embedding_type must be "absolute"


@dataclass(frozen=True)
class FamilySpec:
    name: str  # model.family, and the family's folder under models/
    classes: Mapping[str, type[nn.Module]]  # task -> our class
    hf_model_type: str  # config.json's model_type
    hf_architectures: Mapping[str, str]  # task -> the transformers class an export names
    # config.json -> ModelConfig (one-line errors)
    config_from_hf: Callable[[dict[str, Any], str], ModelConfig]
    # ModelConfig -> config.json
    hf_config: Callable[[ModelConfig, list[str] | None], dict[str, Any]]
    # export: fields set when the source's config.json has none
    hf_config_defaults: Mapping[str, Any]
    to_hf: Callable[[dict[str, Tensor]], dict[str, Tensor]]  # our state dict -> transformers names
    # a file's tensors (any accepted layout) -> ours
    from_hf: Callable[[dict[str, Tensor]], dict[str, Tensor]]
    # shapes -> layout name
    check_hf_tensors: Callable[[Path, dict[str, tuple[int, ...]], ModelConfig], str]
    # an HF dir or our run -> any of our classes
    load_weights: Callable[[InitSource, nn.Module], InitReport]
    hf_sparse_prediction: bool  # transformers' MLM class can run its head on the masked slots only
    token_types: bool  # the model reads token_type_ids
    max_seq_len: int  # the longest sequence bench builds the family for (it refuses longer)
    # continued pretraining may extend the positions (a longer T than the source's
    # max_position_embeddings, other rotary bases): rotary positions have no weights; learned
    # positions do (docs/design.md §2.8)
    extends_positions: bool
    # config.json fields about the source's task head (not kept on fine-tuning)
    hf_head_fields: tuple[str, ...] = ()
    pretrain_frozen: tuple[str, ...] = ()  # submodules pretraining does not train
    # None: tokendrop.transformers does not patch this family
    integration: HFIntegration | None = None

    def __post_init__(self) -> None:
        if self.name not in MODEL_FAMILIES:
            raise ConfigError(
                f"models/{self.name}/{FAMILY_FILE}: missing; a family's folder holds its [model] "
                "schema and presets there (docs/design.md §6)"
            )

    @property
    def schema(self) -> FamilySchema:
        """What the ``[model]`` section knows of the family (its ``family.toml``)."""
        return MODEL_FAMILIES[self.name]

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """The family's ``model.preset`` names and their fields (its ``family.toml``)."""
        return {k: v for k, v in MODEL_PRESETS.items() if PRESET_FAMILY[k] == self.name}


__all__ = ["FamilySpec", "HFIntegration"]
