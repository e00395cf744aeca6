"""Hugging Face interop for the ModernBERT family: config.json <-> ModelConfig, state dicts,
loading.

Our ModernBERT modules carry ``transformers``' own parameter names
(``tokendrop.models.modernbert.model``), so the state-dict adapter only adds/drops the tied
``decoder.weight`` and the ``model.`` prefix of a bare ``ModernBertModel``.
:func:`modern_config_from_hf` reads both config layouts transformers has written
(``rope_parameters`` per layer type, or the older ``global_rope_theta`` / ``local_rope_theta`` /
``global_attn_every_n_layers``); whatever our model cannot reproduce exactly (biases in
attention/MLP, RoPE scaling, another activation or pooling, an untied decoder, ...) is a one-line
InteropError naming the field.  :func:`load_modern_weights` is
``tokendrop.models.source.load_source_weights`` for this family (the shared checks:
``tokendrop.models.weights``)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.config.model import CLASSIFIER_POOLING, LAYER_TYPES
from tokendrop.errors import InitError, InteropError
from tokendrop.models.modernbert.model import CLASSES
from tokendrop.models.weights import (
    InitReport,
    check_encoder_shapes,
    check_tied_decoder,
    fresh_init,
    match_tensors,
    read_source_tensors,
    shape_name,
)

ARCHITECTURES = {
    "mlm": "ModernBertForMaskedLM",
    "classification": "ModernBertForSequenceClassification",
    "qa": "ModernBertForQuestionAnswering",
}
REQUIRED = ("model.embeddings.", "model.layers.", "model.final_norm.")
_HEADS = ("head.", "decoder.")
_TASK_HEADS = ("classifier.",)
_HF_DEFAULT_SEP = 50282  # transformers.ModernBertConfig's sep_token_id when config.json has none


def modern_config_from_hf(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """A ``model_type: modernbert`` config.json -> our ModelConfig (family "modernbert").

    Steps: refuse what the model cannot reproduce (:func:`_check_supported`), read the sizes, the
    rotary bases (:func:`_rope_thetas`), the layer pattern (:func:`_layer_types`), the dropout, the
    special ids and the pooling, then validate the ModelConfig; every error is an InteropError
    naming ``where`` and the field."""
    f = _Fields(d, where)
    _check_supported(f)
    hidden, heads = f.num("hidden_size", None, int), f.num("num_attention_heads", None, int)
    if d.get("head_dim") is not None and heads > 0 and d["head_dim"] != hidden // heads:
        raise f.bad(
            "head_dim",
            f"{d['head_dim']!r} is not hidden_size / num_attention_heads = "
            f"{hidden // max(heads, 1)}",
        )
    theta = _rope_thetas(f)
    layers = f.num("num_hidden_layers", None, int)
    every = f.num("global_attn_every_n_layers", 3, int)
    types = _layer_types(f, layers, every)
    drop = _hidden_dropout(f)
    vocab = f.num("vocab_size", None, int)
    pad = _pad_token_id(f, vocab)
    sep = d.get("sep_token_id", _HF_DEFAULT_SEP)
    pooling = d.get("classifier_pooling", "cls")
    if pooling not in CLASSIFIER_POOLING:
        raise f.bad(
            "classifier_pooling",
            f"{pooling!r} is not supported: expected one of {', '.join(CLASSIFIER_POOLING)}",
        )
    cfg = ModelConfig(
        family="modernbert",
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=f.num("intermediate_size", None, int),
        max_position_embeddings=f.num("max_position_embeddings", 8192, int),
        layer_norm_eps=f.num("norm_eps", 1e-5, float),
        norm_bias=bool(d.get("norm_bias", False)),
        hidden_dropout=drop,
        attention_dropout=f.num("attention_dropout", 0.0, float),
        initializer_range=f.num("initializer_range", 0.02, float),
        pad_token_id=pad,
        sep_token_id=int(sep) if isinstance(sep, int) and 0 <= sep < vocab else -1,
        global_rope_theta=theta["full_attention"],
        local_rope_theta=theta["sliding_attention"],
        local_attention=f.num("local_attention", 128, int),
        global_attn_every_n_layers=max(every, 1),
        layer_types=list(types),
        classifier_pooling=pooling,
    )
    if cfg.vocab_size <= 0:
        raise f.bad("vocab_size", f"must be a positive integer, got {cfg.vocab_size}")
    try:
        cfg.validate()
    except ValueError as e:
        raise InteropError(f"{where}: {e}") from None
    return cfg


class _Fields:
    """A config.json's fields ``d`` read with one-line errors that name the file ``where`` and the
    field."""

    def __init__(self, d: dict[str, Any], where: str):
        self.d, self.where = d, where

    def bad(self, field: str, why: str) -> InteropError:
        return InteropError(f"{self.where}: {field} {why}")

    def num(self, key: str, default: Any, tp: type) -> Any:
        """Field ``key`` as ``tp`` (int or float); absent or null -> ``default`` (transformers'
        default)."""
        v = self.d.get(key)
        v = default if v is None else v  # null = transformers' default
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (tp is int and float(v) != int(v))
        ):
            raise self.bad(key, f"must be {'an integer' if tp is int else 'a number'}, got {v!r}")
        return tp(v)


def _check_supported(f: _Fields) -> None:
    """Refuse what tokendrop's ModernBERT cannot reproduce exactly (another activation, biases in
    attention/MLP/classifier, no decoder bias, an untied decoder, RoPE scaling, a decoder) and a
    config.json without the required sizes."""
    d, bad = f.d, f.bad
    for key, want in (("hidden_activation", "gelu"), ("classifier_activation", "gelu")):
        if d.get(key, want) != want:
            raise bad(key, f"{d.get(key)!r} is not supported: tokendrop's ModernBERT uses {want!r}")
    for key in ("attention_bias", "mlp_bias", "classifier_bias"):
        if d.get(key, False):
            raise bad(
                key,
                "is true: tokendrop's ModernBERT has no biases there (as answerdotai/ModernBERT)",
            )
    if d.get("decoder_bias", True) is not True:
        raise bad("decoder_bias", "is false: tokendrop's ModernBERT MLM decoder always has a bias")
    if d.get("tie_word_embeddings", True) is False:
        raise bad(
            "tie_word_embeddings",
            "is false: tokendrop's MLM decoder is tied to the token embeddings",
        )
    if d.get("rope_scaling") is not None:
        raise bad(
            "rope_scaling",
            f"{d.get('rope_scaling')!r} is not supported: tokendrop's rotary "
            "positions are unscaled",
        )
    for key in ("is_decoder", "add_cross_attention"):
        if d.get(key, False):
            raise bad(key, "is true: tokendrop's ModernBERT is a bidirectional encoder")
    required = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
    )
    missing = [k for k in required if k not in d]
    if missing:
        raise bad(
            repr(missing[0]), f"is missing (a ModernBERT config.json needs {', '.join(required)})"
        )


def _rope_thetas(f: _Fields) -> dict[str, float]:
    """The rotary base per layer type: rope_parameters (transformers >= 5; one set for every layer
    type, or one per type) over global_/local_rope_theta (older configs); only the default RoPE."""
    theta = {
        "full_attention": f.num("global_rope_theta", 160000.0, float),
        "sliding_attention": f.num("local_rope_theta", 10000.0, float),
    }
    rp = f.d.get("rope_parameters")
    if rp is None:
        return theta
    if not isinstance(rp, dict):
        raise f.bad("rope_parameters", f"must be an object per layer type, got {rp!r}")
    if "rope_type" in rp or "rope_theta" in rp:  # one set for every layer type
        rp = {t: rp for t in LAYER_TYPES}
    for t, params in rp.items():
        if t not in LAYER_TYPES:
            raise f.bad(
                f"rope_parameters.{t}",
                f"is not a layer type tokendrop knows ({', '.join(LAYER_TYPES)})",
            )
        if params is None:
            continue
        extra = sorted(k for k in params if k not in ("rope_type", "rope_theta"))
        if params.get("rope_type", "default") != "default" or extra:
            what = extra[0] if extra else "rope_type"
            raise f.bad(
                f"rope_parameters.{t}.{what}",
                f"{params.get(what)!r} is not supported: tokendrop's rotary "
                "positions are the default (unscaled) RoPE",
            )
        if "rope_theta" in params:
            theta[t] = float(params["rope_theta"])
    return theta


def _layer_types(f: _Fields, layers: int, every: int) -> list:
    """Each layer's attention type: layer_types, or (older configs) full attention every ``every``
    layers from the first, sliding-window attention between."""
    types = f.d.get("layer_types")
    if types is None:
        types = [
            "full_attention" if i % max(every, 1) == 0 else "sliding_attention"
            for i in range(layers)
        ]
    if not isinstance(types, list):
        raise f.bad("layer_types", f"must be a list, got {types!r}")
    for i, t in enumerate(types):
        if t not in LAYER_TYPES:
            raise f.bad(
                f"layer_types[{i}]",
                f"{t!r} is not supported: expected one of {', '.join(LAYER_TYPES)}",
            )
    if len(types) != layers:
        raise f.bad("layer_types", f"has {len(types)} entries for num_hidden_layers = {layers}")
    return types


def _hidden_dropout(f: _Fields) -> float:
    """mlp_dropout, which embedding_dropout and classifier_dropout must equal (one hidden
    dropout)."""
    drop = f.num("mlp_dropout", 0.0, float)
    for key in ("embedding_dropout", "classifier_dropout"):
        if f.num(key, 0.0, float) != drop:
            raise f.bad(
                key,
                f"{f.d.get(key)!r} differs from mlp_dropout {drop!r}: tokendrop's ModernBERT has "
                "one hidden dropout (model.hidden_dropout) for embeddings, MLP and classifier",
            )
    return drop


def _pad_token_id(f: _Fields, vocab: int) -> int:
    """pad_token_id (transformers' default 50283; null -> 0), an id of the vocabulary."""
    pad = f.d.get("pad_token_id", 50283)
    if pad is None:
        pad = 0
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < vocab:
        raise f.bad("pad_token_id", f"{pad!r} is not an id of the vocabulary (vocab_size {vocab})")
    return pad


def modern_hf_config_dict(
    cfg: ModelConfig, architectures: list[str] | None = None
) -> dict[str, Any]:
    """Our ModelConfig -> a config.json that ``transformers`` reads as this very network."""
    d: dict[str, Any] = {
        "architectures": architectures or [ARCHITECTURES["mlm"]],
        "model_type": "modernbert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "hidden_activation": "gelu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": cfg.initializer_range,
        "norm_eps": cfg.layer_norm_eps,
        "norm_bias": cfg.norm_bias,
        "pad_token_id": cfg.pad_token_id,
        "attention_bias": False,
        "attention_dropout": cfg.attention_dropout,
        "layer_types": cfg.resolved_layer_types(),
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta},
        },
        "local_attention": cfg.local_attention,
        "embedding_dropout": cfg.hidden_dropout,
        "mlp_bias": False,
        "mlp_dropout": cfg.hidden_dropout,
        "decoder_bias": True,
        "classifier_pooling": cfg.classifier_pooling,
        "classifier_dropout": cfg.hidden_dropout,
        "classifier_bias": False,
        "classifier_activation": "gelu",
        "tie_word_embeddings": True,
    }
    if cfg.sep_token_id >= 0:
        d["sep_token_id"] = d["eos_token_id"] = cfg.sep_token_id
    return d


def to_hf_modern(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our ModernBERT state dict -> transformers names (the same; the tied decoder weight
    omitted)."""
    return {k: v.detach().contiguous() for k, v in sd.items() if k != "decoder.weight"}


def normalise_modern_names(keys: list[str]) -> dict[str, str]:
    """Source tensor names -> {our name: source name}: a bare ModernBertModel gets the ``model.``
    prefix; ``position_ids``-style buffers are kept as they are (the caller ignores them)."""
    prefixed = any(k.startswith("model.") for k in keys)
    out = {}
    for k in keys:
        c = k
        if not prefixed and k.split(".")[0] in ("embeddings", "layers", "final_norm"):
            c = "model." + k
        out[c] = k
    return out


def modern_state_from_hf(raw: dict[str, Tensor]) -> dict[str, Tensor]:
    """A file's tensors (ModernBertForMaskedLM or a bare ModernBertModel) -> our names (the tied
    decoder left out)."""
    return {
        c: raw[k] for c, k in normalise_modern_names(list(raw)).items() if c != "decoder.weight"
    }


def expected_shapes(
    cfg: ModelConfig, task: str = "mlm", **head_kwargs: Any
) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):  # shapes only: document attention (and its [SEP] id) plays no part
        m = CLASSES[task](dataclasses.replace(cfg, document_attention="off"), **head_kwargs)
    return {k: tuple(v.shape) for k, v in to_hf_modern(m.state_dict()).items()}


def check_modern_tensors(where: Any, shapes: dict[str, tuple[int, ...]], cfg: ModelConfig) -> str:
    """A file's tensor shapes (by its names): every encoder tensor present with the shape
    config.json implies (one-line InitError otherwise) -> the layout name."""
    canon = normalise_modern_names(list(shapes))
    if "model.embeddings.tok_embeddings.weight" not in canon:
        raise InitError(
            f"{Path(where).parent / 'config.json'}: model_type 'modernbert' but {Path(where).name} "
            "holds no ModernBERT weights (no model.embeddings.tok_embeddings.weight among "
            f"{len(canon)} tensors); expected ModernBertForMaskedLM or ModernBertModel weights"
        )
    check_encoder_shapes(where, canon, shapes, expected_shapes(cfg), REQUIRED, cfg)
    if any(k.startswith("head.") for k in canon) and "decoder.bias" in canon:
        return "ModernBertForMaskedLM"
    if "classifier.weight" in canon:
        return "ModernBertForSequenceClassification"
    return "ModernBertModel"


def load_modern_weights(src: Any, model: nn.Module) -> Any:
    """Load ``src`` (a ``tokendrop.models.weights.InitSource``: a ModernBERT HF dir or a tokendrop
    run of this family) into any of our ModernBERT classes.  Encoder tensors must all be there; the
    head, decoder bias and task heads missing from the file are initialised fresh and listed."""
    where = src.weights_file
    sd = read_source_tensors(src)
    canon = {k: k for k in sd} if src.kind == "tokendrop" else normalise_modern_names(list(sd))
    values = {c: sd[k] for c, k in canon.items()}
    own = model.state_dict()
    notes = [
        f"{src.source}: {src.layout} ({src.kind}), {shape_name(src.model)}, sha256 "
        f"{src.sha256[:12]}"
    ]
    take, fresh = match_tensors(
        own, values, canon, REQUIRED, _TASK_HEADS, where, shape_name(src.model), notes
    )
    ignored: list[str] = []
    unexpected: list[str] = []
    for c, k in canon.items():
        if c in take:
            continue
        if c == "decoder.weight":
            check_tied_decoder(values, c, "model.embeddings.tok_embeddings.weight", k, where)
            ignored.append(k)
        elif c.startswith(_HEADS + _TASK_HEADS) and c not in own:
            ignored.append(k)  # a head of another model class
        elif c.startswith(REQUIRED) or re.match(r"model\.", c):
            raise InitError(
                f"{where}: encoder tensor {k} is not part of the model ({shape_name(src.model)}): "
                "the configuration and the weights disagree"
            )
        else:
            unexpected.append(k)
    model.load_state_dict({**own, **take}, strict=True)
    fresh_init(model, fresh, model.config.initializer_range)
    if fresh:
        notes.append(f"initialised fresh (not in the source): {', '.join(fresh)}")
    if unexpected:
        notes.append(
            f"{len(unexpected)} tensor(s) in the file used by nothing: {', '.join(unexpected[:4])}"
            + (" ..." if len(unexpected) > 4 else "")
        )
    return InitReport(fresh=fresh, unexpected=unexpected, ignored=ignored, notes=notes)
