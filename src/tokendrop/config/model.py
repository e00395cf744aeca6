"""The ``[model]`` section of a config: the encoder's shape and family (names as
``transformers.BertConfig`` / ``ModernBertConfig``), the model presets, attention settings.

What the section knows of each family -- its schema and its presets -- is data in the family's own
folder (``models/<family>/family.toml``), read here without importing the models, so a config
parses without torch.  ``tokendrop.config`` assembles the sections into a ``Config`` and loads them
from TOML; this module holds only the section (docs/design.md §1, §2.9)."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendrop.config.checks import check_positive, check_size
from tokendrop.errors import ConfigError
from tokendrop.fields import fixed, free

LAYER_TYPES = ("full_attention", "sliding_attention")
DOCUMENT_ATTENTION = ("auto", "on", "off")
CLASSIFIER_POOLING = ("cls", "mean")


@dataclass(frozen=True)
class FamilySchema:
    """What the ``[model]`` section knows of an encoder family, as data: the family folder's
    ``family.toml`` (:func:`read_families`), the FLOP model's facts among it
    (``tokendrop.dropping.flops`` reads them off a ``ModelConfig`` without the models).  The family
    itself -- classes, HF adapter, the transformers integration -- is its ``FamilySpec`` in
    ``models/<family>/__init__.py``, which carries this schema too."""

    document_attention: bool  # model.document_attention = "auto" means per-document attention (MLM)
    rotary: bool  # rotary positions: the head size must be even
    classifier_pooling: tuple[str, ...]  # what its sequence classifier may pool
    glu_ffn: bool  # FLOP model: GeGLU FFN (d -> 2f, f -> d) rather than d -> f -> d
    sliding_windows: bool  # FLOP model: layers may attend within a window (model.layer_types)
    # [model] fields only this family reads: another family's config refuses them set
    owns: tuple[str, ...] = ()


FAMILY_FILE = "family.toml"
# one folder per family, each with its FAMILY_FILE
MODELS_DIR = Path(__file__).resolve().parents[1] / "models"


def read_families(
    models_dir: Path = MODELS_DIR,
) -> tuple[dict[str, FamilySchema], dict[str, dict[str, Any]], dict[str, str]]:
    """The families' schemas, the model presets and each preset's family, read from every
    ``<family>/family.toml`` under ``models_dir`` (folders in name order, presets in file order):
    its ``document_attention``, ``rotary``, ``classifier_pooling``, ``glu_ffn`` and
    ``sliding_windows``, its ``[presets]`` (``model.preset`` name -> fields), and
    ``[preset_defaults]``, fields every preset of the family sets."""
    schemas: dict[str, FamilySchema] = {}
    presets: dict[str, dict[str, Any]] = {}
    owners: dict[str, str] = {}
    for path in sorted(models_dir.glob(f"*/{FAMILY_FILE}")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            schemas[path.parent.name] = FamilySchema(
                bool(data["document_attention"]),
                bool(data["rotary"]),
                tuple(data["classifier_pooling"]),
                bool(data["glu_ffn"]),
                bool(data["sliding_windows"]),
                tuple(data.get("owns", ())),
            )
            defaults = data.get("preset_defaults", {})
            for name, fields in data.get("presets", {}).items():
                if name in presets:
                    raise ConfigError(
                        f"{path}: preset {name!r} is also another family's; give it another name"
                    )
                presets[name] = {**fields, **defaults}
                owners[name] = path.parent.name
        except (KeyError, TypeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(
                f"{path}: not a family file ({type(e).__name__}: {e}); it needs "
                "document_attention, "
                "rotary, classifier_pooling, glu_ffn, sliding_windows and a [presets] table"
            ) from None
    return schemas, presets, owners


MODEL_FAMILIES, MODEL_PRESETS, PRESET_FAMILY = read_families()
ATTENTION_BACKENDS = ("auto", "sdpa", "flex")  # how attention runs (tokendrop.models.attention)
DEFAULT_MODEL_PRESET = "bert-base"  # the shape of a ModelConfig that names none
VOCAB_FROM_DATA = "data"  # model.vocab_size: the prepared data's (its tokenizer's) vocabulary
# the rotary bases a ModelConfig leaving them at 0 gets (answerdotai/ModernBERT's, and
# transformers')
ROPE_THETAS = {"global_rope_theta": 160000.0, "local_rope_theta": 10000.0}
# the [model] fields whose default means "not set" (the preset's / ModernBERT's, with ``init`` the
# source's, sep_token_id the data's): given that value, a field still counts as not given
UNSET = {
    "hidden_size": 0,
    "num_layers": 0,
    "num_heads": 0,
    "intermediate_size": 0,
    "global_rope_theta": 0.0,
    "local_rope_theta": 0.0,
    "sep_token_id": -1,
}


@dataclass
class ModelConfig:
    """Encoder hyper-parameters, named as in ``transformers.BertConfig`` / ``ModernBertConfig``
    where one exists.

    The shape (num_layers, hidden_size, num_heads, intermediate_size) and everything else a preset
    names (a modern-* preset also sets family, max_position_embeddings, layer_norm_eps, dropout): a
    field given (:meth:`given`) always wins, whatever its value -- its default too; a field not
    given comes from ``preset`` (bert-base without one), and intermediate_size from 4 * hidden_size.
    One rule, on every path (``ModelConfig(...)``, TOML, ``--set``):
    ``ModelConfig(preset="bert-base", num_layers=6)`` has 6 layers,
    ``ModelConfig(preset="modern-tiny", local_attention=128)`` a 128-token window (the field's
    default; the preset's is 64)."""

    preset: str = fixed("")
    # continued pretraining: a Hugging Face BERT dir, a tokendrop run/checkpoint dir or a hub name.
    # The shape then comes from the source's config.json (tokendrop.models.source); init_sha256 is
    # the sha256 of the weights file the run started from (filled in when the source is resolved).
    init: str = fixed("")
    init_sha256: str = fixed("")
    # or "data" (VOCAB_FROM_DATA): the prepared data's vocabulary, filled in when pretraining
    # opens it
    vocab_size: int | str = fixed(30522)
    hidden_size: int = fixed(0)  # 0 -> the preset's
    num_layers: int = fixed(0)  # 0 -> the preset's
    num_heads: int = fixed(0)  # 0 -> the preset's
    intermediate_size: int = fixed(0)  # 0 -> 4 * hidden_size
    max_position_embeddings: int = fixed(512)
    type_vocab_size: int = fixed(2)
    layer_norm_eps: float = fixed(1e-12)
    hidden_dropout: float = fixed(0.1)
    attention_dropout: float = fixed(0.1)
    initializer_range: float = fixed(0.02)
    pad_token_id: int = fixed(0)
    # [SEP]: packed rows hold one [SEP] between consecutive documents (document attention);
    # -1 = take it from the prepared data (pretraining), from config.json (a Hugging Face source)
    sep_token_id: int = fixed(-1)
    # the encoder family: "bert" (tokendrop.models.bert.model, post-LN BERT) | "modernbert"
    # (tokendrop.models.modernbert.model: pre-LN without biases, GeGLU, rotary positions,
    # alternating global / sliding-window attention)
    family: str = fixed("bert")
    # packed rows: each token attends only within its own document (its [SEP] included);
    # auto = the family's default (MODEL_FAMILIES: on for modernbert, as ModernBERT trains; off for
    # bert).  MLM pretraining/eval only.
    document_attention: str = fixed("auto")
    # modernbert only (transformers.ModernBertConfig names): rotary bases of the global and the
    # sliding-window layers; the window (a token sees keys within local_attention // 2 positions on
    # each side); layer i is global if i % global_attn_every_n_layers == 0 unless layer_types lists
    # "full_attention" / "sliding_attention" per layer; LayerNorm biases (norm_bias; BERT has them)
    # how attention runs (execution only: the same allowed pairs, the same results up to float
    # summation order; tokendrop.models.attention): "auto" = FlexAttention on CUDA for document /
    # window masks when no attention dropout is in effect, else SDPA (sliding windows block by
    # block); "sdpa"; "flex" = FlexAttention for every document / window mask (needs
    # attention_dropout = 0; off CUDA it runs unfused, for checks only)
    attention_backend: str = free("auto")
    # rotary bases: 0 = ModernBERT's (160000 global, 10000 local), or with ``init`` the source's.
    # With ``init`` (a modernbert source) a value given here, like a larger max_position_embeddings,
    # is a position extension (docs/design.md §2.8): e.g. continued pretraining at T = 2048 from a
    # 512-position checkpoint with global_rope_theta = 160000, as ModernBERT's own long-context
    # phase
    global_rope_theta: float = fixed(0.0)
    local_rope_theta: float = fixed(0.0)
    local_attention: int = fixed(128)
    global_attn_every_n_layers: int = fixed(3)
    layer_types: list[str] = fixed(factory=list)
    norm_bias: bool = fixed(False)
    # modernbert sequence classification: the [CLS] state ("cls") or the mean over the non-padding
    # tokens ("mean", answerdotai/ModernBERT's published configs), as transformers'
    # ModernBertForSequenceClassification; BERT classifies from its pooler ("cls" only)
    classifier_pooling: str = fixed("cls")

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelConfig:
        self = super().__new__(cls)
        # the fields the caller gave: a TOML [model] table's keys (the layers merged), --set keys,
        # keyword arguments.  ``copy`` and ``pickle`` keep the original's, ``dataclasses.replace``
        # gives every field, ``to_dict`` of a section waiting for its source only those given
        self._given = frozenset(kwargs) | {f.name for f in dataclasses.fields(cls)[: len(args)]}
        return self

    def given(self) -> dict[str, Any]:
        """The fields given to the constructor, at their values now: what wins over ``preset`` and,
        with ``init``, over the source, whatever the value (the field's default too).  A field given
        its "not set" value (:data:`UNSET`: 0 for a shape field) counts as not given."""
        return {
            k: getattr(self, k)
            for k in sorted(self._given)
            if not (k in UNSET and getattr(self, k) == UNSET[k])
        }

    def __post_init__(self) -> None:
        """Resolve the shape: explicit field > ``preset`` > bert-base; then ``preset`` is cleared
        (the numbers are the truth from here on, e.g. in a run's config.toml).  With ``init``
        nothing is filled in: the fields hold what was given, and the source's shape replaces the
        rest when the command that runs resolves the source
        (``tokendrop.models.source.resolve_model_init``)."""
        for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):  # given: a size
            v = getattr(self, key)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if key in self._given and number and v <= 0:
                raise ConfigError(
                    f"model.{key}: expected a positive integer, got {v}; a size is "
                    f"given, or comes "
                    'from model.preset (e.g. "bert-base") or model.init (a '
                    "checkpoint's shape)"
                )
        name = self.preset or DEFAULT_MODEL_PRESET
        if name not in MODEL_PRESETS:
            raise ConfigError(
                f"model.preset: unknown preset {name!r}; expected one of {', '.join(MODEL_PRESETS)}"
            )
        # the shape comes from the source when the command resolves it (resolve_model_init)
        if self.init:
            return
        given = self.given()
        for k, v in MODEL_PRESETS[name].items():
            if k not in given:
                setattr(self, k, v)
        if not self.intermediate_size:
            self.intermediate_size = 4 * self.hidden_size
        for name, value in ROPE_THETAS.items():
            if not getattr(self, name):
                setattr(self, name, value)
        self.preset = ""

    def resolved_layer_types(self) -> list[str]:
        """Per layer "full_attention" | "sliding_attention" (modernbert): ``layer_types`` or the
        pattern from ``global_attn_every_n_layers``."""
        if self.layer_types:
            return list(self.layer_types)
        n = max(1, self.global_attn_every_n_layers)
        return [
            "full_attention" if i % n == 0 else "sliding_attention" for i in range(self.num_layers)
        ]

    @property
    def shape_pending(self) -> bool:
        """``init`` names a source whose shape (or rotary bases) has not been resolved into these
        fields yet."""
        return bool(self.init) and 0 in (
            self.hidden_size,
            self.num_layers,
            self.num_heads,
            self.intermediate_size,
            self.global_rope_theta,
            self.local_rope_theta,
        )

    @property
    def resolved(self) -> bool:
        """No source to resolve (``init`` empty), or resolved: its shape and sha256 filled in."""
        return not self.init or (bool(self.init_sha256) and not self.shape_pending)

    @property
    def uses_document_attention(self) -> bool:
        """Per-document attention in MLM pretraining (``document_attention`` with auto resolved: the
        family's default)."""
        if self.document_attention == "auto":
            return self.schema.document_attention
        return self.document_attention == "on"

    @property
    def schema(self) -> FamilySchema:
        """The family's entry of :data:`MODEL_FAMILIES` (an unknown family: the one-line
        ConfigError)."""
        if self.family not in MODEL_FAMILIES:
            raise ConfigError(
                f"model.family: unknown family {self.family!r}; expected one of "
                f"{', '.join(MODEL_FAMILIES)}"
            )
        return MODEL_FAMILIES[self.family]

    def validate(self) -> None:
        check_size(
            "model.vocab_size",
            self.vocab_size,
            VOCAB_FROM_DATA,
            "the prepared data's vocabulary",
            "take it from the data",
        )
        pending = self.shape_pending  # model.init: a shape field left at 0 comes from the source
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            if getattr(self, name) <= 0 and not (pending and getattr(self, name) == 0):
                raise ConfigError(
                    f"model.{name}: expected a positive integer, got {getattr(self, name)}"
                )
        if pending:
            self._validate_settings()
            return
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model.hidden_size: {self.hidden_size} is not divisible by "
                f"model.num_heads={self.num_heads}"
            )
        self._validate_settings()
        for i, t in enumerate(self.layer_types):
            if t not in LAYER_TYPES:
                raise ConfigError(
                    f"model.layer_types[{i}]: unknown layer type {t!r}; expected one of "
                    f"{', '.join(LAYER_TYPES)}"
                )
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ConfigError(
                f"model.layer_types: {len(self.layer_types)} entries for "
                f"model.num_layers={self.num_layers}; "
                "expected one per layer (or [] for the global_attn_every_n_layers pattern)"
            )
        for name in ("local_attention", "global_attn_every_n_layers"):
            check_positive(f"model.{name}", getattr(self, name), "a positive integer")
        for name in ("global_rope_theta", "local_rope_theta"):
            check_positive(f"model.{name}", getattr(self, name), "a positive rotary base")
        self._refuse_foreign_fields()  # after each field's own check: a bad value says so first
        if self.schema.rotary and (self.hidden_size // self.num_heads) % 2:
            raise ConfigError(
                f"model.hidden_size: the head size {self.hidden_size // self.num_heads} must be "
                f"even for rotary positions (family {self.family})"
            )

    def _refuse_foreign_fields(self) -> None:
        """A field another family owns (its ``family.toml`` ``owns``), set away from its default,
        would be silently ignored by this family's model: refused, naming the family."""
        defaults = {f.name: f for f in dataclasses.fields(self)}
        for other, schema in MODEL_FAMILIES.items():
            if other == self.family:
                continue
            for name in schema.owns:
                f = defaults[name]
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default
                # the rotary bases: 0 is filled in with ModernBERT's on every config
                if getattr(self, name) not in (default, ROPE_THETAS.get(name, default)):
                    raise ConfigError(
                        f"model.{name}: {getattr(self, name)!r} is a {other} setting, which a "
                        f"{self.family} model does not have; remove it (or use a {other} "
                        f"model: model.family = {other!r} or one of its presets)"
                    )

    def _validate_settings(self) -> None:
        """The checks that do not need the shape (all of them run on a config whose shape is
        pending)."""
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(
                    f"model.{name}: expected a probability in [0, 1), got {getattr(self, name)}"
                )
        schema = self.schema
        if self.document_attention not in DOCUMENT_ATTENTION:
            raise ConfigError(
                f"model.document_attention: expected one of {', '.join(DOCUMENT_ATTENTION)}, "
                f"got {self.document_attention!r}"
            )
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ConfigError(
                f"model.classifier_pooling: expected one of {', '.join(CLASSIFIER_POOLING)}, "
                f"got {self.classifier_pooling!r}"
            )
        if self.classifier_pooling not in schema.classifier_pooling:
            raise ConfigError(
                f"model.classifier_pooling: family {self.family} classifies with "
                f"{' or '.join(map(repr, schema.classifier_pooling))} only, not "
                f"{self.classifier_pooling!r}"
            )
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(
                f"model.attention_backend: expected one of {', '.join(ATTENTION_BACKENDS)}, "
                f"got {self.attention_backend!r}"
            )
        # FlexAttention's presence: tokendrop.models.attention.check_flex_available
        if self.attention_backend == "flex":
            if self.attention_dropout:
                raise ConfigError(
                    "model.attention_backend: flex has no attention dropout but "
                    "model.attention_dropout "
                    f"= {self.attention_dropout}; set it to 0 or use attention_backend = auto"
                )
