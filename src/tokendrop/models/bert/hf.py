"""Hugging Face interop for the BERT family: names, config.json and weights, both ways.

Our parameter names are short (``bert.encoder.layers.3.attn.kv.weight``); :func:`to_hf` /
:func:`from_hf` map them 1:1 onto ``transformers.BertForMaskedLM`` keys (``kv`` = ``key`` and
``value`` stacked).  :func:`bert_config_from_hf` reads a config.json and refuses whatever our model
cannot reproduce exactly; :func:`hf_config_dict` writes one.  :func:`check_bert_tensors` and
:func:`load_bert_weights` accept every published layout: ``BertForMaskedLM``, ``BertForPreTraining``
(the NSP head is ignored), ``BertModel`` with or without the ``bert.`` prefix
(sentence-transformers) and old TF-converted names (``LayerNorm.gamma``/``beta``).  The family's
entry in ``tokendrop.models.families.FAMILIES`` points here; ModernBERT's counterpart is
:mod:`tokendrop.models.modernbert.hf`, and the family-independent parts (reading files, hashing,
matching tensors) are :mod:`tokendrop.models.weights`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.errors import InitError, InteropError
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.weights import (
    InitReport,
    InitSource,
    check_encoder_shapes,
    check_tied_decoder,
    fresh_init,
    match_tensors,
    read_source_tensors,
    shape_name,
)

ARCHITECTURES = {
    "mlm": "BertForMaskedLM",
    "classification": "BertForSequenceClassification",
    "qa": "BertForQuestionAnswering",
}
REQUIRED_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)

_LAYER_MAP = [  # (ours, hf) inside bert.encoder.layer(s).{i}.
    ("attn.q", "attention.self.query"),
    ("attn.o", "attention.output.dense"),
    ("attn.norm", "attention.output.LayerNorm"),
    ("ffn.up", "intermediate.dense"),
    ("ffn.down", "output.dense"),
    ("ffn.norm", "output.LayerNorm"),
]
_TOP_MAP = [
    ("bert.embeddings.norm.", "bert.embeddings.LayerNorm."),
    ("bert.embeddings.", "bert.embeddings."),
    ("bert.pooler.dense.", "bert.pooler.dense."),
    ("mlm.dense.", "cls.predictions.transform.dense."),
    ("mlm.norm.", "cls.predictions.transform.LayerNorm."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
]


def to_hf(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict -> ``transformers`` BERT key names (tied decoder weight omitted)."""
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        m = re.match(r"bert\.encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            i, mod, kind = m.groups()
            pre = f"bert.encoder.layer.{i}."
            if mod == "attn.kv":
                k, v = value.chunk(2, dim=0)
                out[f"{pre}attention.self.key.{kind}"] = k.contiguous()
                out[f"{pre}attention.self.value.{kind}"] = v.contiguous()
                continue
            hf = dict(_LAYER_MAP).get(mod)
            if hf is None:
                raise InteropError(f"state dict: no Hugging Face name for {key!r}")
            out[f"{pre}{hf}.{kind}"] = value
            continue
        if key == "mlm.bias":
            out["cls.predictions.bias"] = value
            continue
        for ours, hf in _TOP_MAP:
            if key.startswith(ours):
                out[hf + key[len(ours) :]] = value
                break
        else:
            raise InteropError(f"state dict: no Hugging Face name for {key!r}")
    return {k: v.detach().contiguous() for k, v in out.items()}


def from_hf(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """``transformers`` BERT keys (BertForMaskedLM/-SequenceClassification/-QuestionAnswering or a
    bare BertModel) -> our names.  Unknown keys (NSP head, position_ids) are ignored."""
    sd = {
        k.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias"
        ): v
        for k, v in sd.items()
    }
    if not any(k.startswith("bert.") for k in sd):  # a bare BertModel
        sd = {
            ("bert." + k if k.split(".")[0] in ("embeddings", "encoder", "pooler") else k): v
            for k, v in sd.items()
        }
    out: dict[str, Tensor] = {}
    rev_layer = {hf: ours for ours, hf in _LAYER_MAP}
    pending: dict[tuple[str, str], dict[str, Tensor]] = {}
    for key, value in sd.items():
        m = re.match(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            i, mod, kind = m.groups()
            pre = f"bert.encoder.layers.{i}."
            if mod in ("attention.self.key", "attention.self.value"):
                pending.setdefault((pre, kind), {})[mod.rsplit(".", 1)[1]] = value
            elif mod in rev_layer:
                out[f"{pre}{rev_layer[mod]}.{kind}"] = value
            continue
        if key == "cls.predictions.bias":
            out["mlm.bias"] = value
            continue
        if (
            key.endswith("position_ids")
            or key.startswith("cls.predictions.decoder")
            or key.startswith("cls.seq_relationship")
        ):
            continue
        for ours, hf in _TOP_MAP:
            if key.startswith(hf):
                out[ours + key[len(hf) :]] = value
                break
    for (pre, kind), kv in pending.items():
        if set(kv) != {"key", "value"}:
            raise InteropError(f"state dict: {pre}: key and value projections must both be present")
        out[f"{pre}attn.kv.{kind}"] = torch.cat([kv["key"], kv["value"]], dim=0)
    if "mlm.bias" not in out and "cls.predictions.decoder.bias" in sd:
        out["mlm.bias"] = sd["cls.predictions.decoder.bias"]
    return out


def hf_config_dict(cfg: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    return {
        "architectures": architectures or ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


def bert_config_from_hf(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """A BERT ``config.json`` (``model_type`` bert or none) -> our ModelConfig.  Whatever our model
    cannot reproduce exactly is a one-line InteropError naming the field (never silently ignored);
    ``tokendrop.models.hf.model_config_from_hf`` has checked the shape fields that are there."""
    if d.get("hidden_act", "gelu") != "gelu":
        raise InteropError(
            f"{where}: hidden_act {d.get('hidden_act')!r} is not supported: tokendrop's BERT uses "
            "the exact erf-GELU (hidden_act 'gelu')"
        )
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise InteropError(
            f"{where}: position_embedding_type {d.get('position_embedding_type')!r} is not "
            "supported: tokendrop's BERT has learned absolute positions ('absolute')"
        )
    for flag in ("is_decoder", "add_cross_attention"):
        if d.get(flag, False):
            raise InteropError(
                f"{where}: {flag} is true: a decoder / cross-attention BERT cannot be loaded "
                "(tokendrop's BERT is a bidirectional encoder)"
            )
    if d.get("tie_word_embeddings", True) is False:
        raise InteropError(
            f"{where}: tie_word_embeddings is false: tokendrop's MLM decoder is tied to the word "
            "embeddings, so an untied decoder cannot be loaded"
        )
    missing = [k for k in REQUIRED_FIELDS if k not in d]
    if missing:
        raise InteropError(
            f"{where}: missing field {missing[0]!r} (a BERT config.json needs "
            f"{', '.join(REQUIRED_FIELDS)})"
        )

    def num(key: str, default: Any, tp: type) -> Any:
        v = d.get(key, default)
        if v is None and key == "pad_token_id":
            v = 0
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (tp is int and float(v) != int(v))
        ):
            raise InteropError(
                f"{where}: {key} must be {'an integer' if tp is int else 'a number'}, got {v!r}"
            )
        return tp(v)

    cfg = ModelConfig(
        vocab_size=num("vocab_size", None, int),
        hidden_size=num("hidden_size", None, int),
        num_layers=num("num_hidden_layers", None, int),
        num_heads=num("num_attention_heads", None, int),
        intermediate_size=num("intermediate_size", None, int),
        max_position_embeddings=num("max_position_embeddings", 512, int),
        type_vocab_size=num("type_vocab_size", 2, int),
        layer_norm_eps=num("layer_norm_eps", 1e-12, float),
        hidden_dropout=num("hidden_dropout_prob", 0.1, float),
        attention_dropout=num("attention_probs_dropout_prob", 0.1, float),
        initializer_range=num("initializer_range", 0.02, float),
        pad_token_id=num("pad_token_id", 0, int),
    )
    if cfg.vocab_size <= 0:
        raise InteropError(f"{where}: vocab_size must be a positive integer, got {cfg.vocab_size}")
    try:
        cfg.validate()
    except ValueError as e:
        raise InteropError(f"{where}: {e}") from None
    return cfg


# ----------------------------------------------------------------------------------------------
# weights

_REQUIRED = ("bert.embeddings.", "bert.encoder.")
_TASK_HEADS = ("classifier.", "qa_outputs.")  # another number of labels: start fresh


def normalise_hf_names(keys: list[str]) -> tuple[dict[str, str], bool]:
    """Source tensor names -> {canonical name (``bert.``-prefixed, LayerNorm.weight/bias): source
    name}."""
    prefixed = any(k.startswith("bert.") for k in keys)
    out: dict[str, str] = {}
    for k in keys:
        c = re.sub(
            r"LayerNorm\.gamma$",
            "LayerNorm.weight",
            re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k),
        )
        if not prefixed and c.split(".")[0] in ("embeddings", "encoder", "pooler"):
            c = "bert." + c
        out[c] = k
    if "cls.predictions.bias" not in out and "cls.predictions.decoder.bias" in out:
        # the same tensor, other name
        out["cls.predictions.bias"] = out.pop("cls.predictions.decoder.bias")
    return out, prefixed


def _hf_layout(canon: dict[str, str], prefixed: bool) -> str:
    if any(k.startswith("cls.seq_relationship.") for k in canon):
        return "BertForPreTraining"
    if any(k.startswith("cls.predictions.") for k in canon):
        return "BertForMaskedLM"
    return "BertModel" if prefixed else "BertModel (no bert. prefix)"


def _expected_hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Tensor shapes a ``transformers`` BertForMaskedLM (+ pooler) of ``cfg`` has, by HF name."""
    with torch.device("meta"):
        m = BertForMaskedLM(cfg)
    return {k: tuple(v.shape) for k, v in to_hf(m.state_dict()).items()}


def check_bert_tensors(where: Path, shapes: dict[str, tuple[int, ...]], cfg: ModelConfig) -> str:
    """A file's tensor shapes (by its names): every encoder tensor present with the shape
    config.json implies (one-line InitError otherwise) -> the layout name (BertForMaskedLM,
    BertModel, ...)."""
    canon, prefixed = normalise_hf_names(list(shapes))
    expected = _expected_hf_shapes(cfg)
    if "bert.embeddings.word_embeddings.weight" not in canon:
        raise InitError(
            f"{where}: no BERT weights recognised (no bert.embeddings.word_embeddings.weight or "
            f"embeddings.word_embeddings.weight among {len(canon)} tensors); expected "
            "BertForMaskedLM, "
            "BertForPreTraining or BertModel weights"
        )
    check_encoder_shapes(
        where,
        canon,
        shapes,
        expected,
        _REQUIRED,
        cfg,
        show=lambda name: name if prefixed or not name.startswith("bert.") else name[5:],
        ignore=lambda c: c.endswith("position_ids"),
    )
    return _hf_layout(canon, prefixed)


def state_from_hf(raw: dict[str, Tensor]) -> dict[str, Tensor]:
    """A file's tensors in any accepted layout -> our names (the NSP head and position_ids left
    out)."""
    return from_hf({c: raw[k] for c, k in normalise_hf_names(list(raw))[0].items()})


def load_bert_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Load ``src`` (an ``InitSource``: a BERT HF dir or a tokendrop run of this family) into any of
    our BERT classes (BertForMaskedLM, -SequenceClassification, -QuestionAnswering).  Encoder
    tensors must all be there with the right shape; the pooler and heads missing from the file are
    initialised as BERT does and listed in ``fresh``."""
    where = src.weights_file
    sd = read_source_tensors(src)
    std = model.config.initializer_range
    own_ours = model.state_dict()
    ignored: list[str] = []
    notes: list[str] = [
        f"{src.source}: {src.layout} ({src.kind}), {shape_name(src.model)}, sha256 "
        f"{src.sha256[:12]}"
    ]
    if src.kind == "tokendrop":
        canon = {k: k for k in sd}
        values = sd
        own = own_ours
        to_ours = {k: k for k in own}
    else:
        canon, prefixed = normalise_hf_names(list(sd))
        values = {c: sd[k] for c, k in canon.items()}
        own = to_hf(own_ours)
        to_ours = {
            k: next(iter(from_hf({k: v})))
            for k, v in own.items()
            if not re.match(r"bert\.encoder\.layer\.\d+\.attention\.self\.(key|value)\.", k)
        }
    # resolution checked the encoder tensors; the file may have changed since
    take, fresh_src = match_tensors(
        own, values, canon, _REQUIRED, _TASK_HEADS, where, shape_name(src.model), notes
    )
    # every tensor of the file: used, ignored on purpose, or unexpected
    unexpected: list[str] = []
    has_mlm = any(k.startswith(("mlm.", "cls.predictions.")) for k in own)
    for c, k in canon.items():
        if c in take:
            continue
        if c.endswith("position_ids"):
            ignored.append(k)
        elif c.startswith("cls.seq_relationship."):
            ignored.append(k)
        elif c == "cls.predictions.decoder.weight":
            check_tied_decoder(
                values, c, "bert.embeddings.word_embeddings.weight", k, where, "word embeddings"
            )
            ignored.append(k)
        elif c == "cls.predictions.decoder.bias" and "cls.predictions.bias" in take:
            ignored.append(k)  # an alias of cls.predictions.bias
        elif not has_mlm and c.startswith(("mlm.", "cls.predictions.")):
            ignored.append(k)  # a classifier/QA model does not use the MLM head
        elif c.startswith(("classifier.", "qa_outputs.")) and c not in own:
            ignored.append(k)  # a task head of another model class
        elif c.startswith(_REQUIRED):
            raise InitError(
                f"{where}: encoder tensor {k} is not part of the model ({shape_name(src.model)}): "
                "the configuration and the weights disagree"
            )
        else:
            unexpected.append(k)
    if any(k.startswith(("cls.seq_relationship.",)) for k in canon):
        notes.append("NSP head (cls.seq_relationship.*) ignored")
    if any(
        canon[c] != c
        for c in canon
        if c.endswith("LayerNorm.weight") and canon[c].endswith("gamma")
    ):
        notes.append("TF-converted names LayerNorm.gamma/beta read as LayerNorm.weight/bias")
    if "cls.predictions.decoder.weight" in canon:
        notes.append("cls.predictions.decoder.weight equals the word embeddings (tied): ignored")
    stored = sorted(
        {str(v.dtype).replace("torch.", "") for k, v in take.items() if v.dtype != own[k].dtype}
    )
    if stored:
        notes.append(
            f"weights stored as {', '.join(stored)}: loaded as "
            f"{str(next(iter(own.values())).dtype).replace('torch.', '')}"
        )
    # assemble in our names, load, then initialise what was not in the file
    merged = {k: (take[k].to(dtype=t.dtype) if k in take else t) for k, t in own.items()}
    ours = merged if src.kind == "tokendrop" else from_hf(merged)
    model.load_state_dict(ours, strict=True)
    fresh = [n for n in own_ours if n in {to_ours[k] for k in fresh_src}]
    fresh_init(model, fresh, std)
    mlm_fresh = [n for n in fresh if n.startswith("mlm.")]
    if mlm_fresh and len(mlm_fresh) == sum(1 for n in own_ours if n.startswith("mlm.")):
        notes.append(
            f"no MLM head in the source: mlm.* initialised as BERT does (dense N(0, {std}), bias "
            "0, LayerNorm 1/0, output bias 0; the decoder is tied to the word embeddings)"
        )
    elif mlm_fresh:
        notes.append(
            f"MLM head partly in the source: {', '.join(mlm_fresh)} initialised fresh (e.g. the "
            "TF->HF converter drops cls.predictions.bias)"
        )
    if any(n.startswith("bert.pooler.") for n in fresh):
        notes.append(
            "no pooler in the source: bert.pooler.* initialised fresh (pretraining "
            "does not train it)"
        )
    if unexpected:
        notes.append(
            f"{len(unexpected)} tensor(s) in the file used by nothing: {', '.join(unexpected[:4])}"
            + (" ..." if len(unexpected) > 4 else "")
        )
    return InitReport(fresh=fresh, unexpected=unexpected, ignored=ignored, notes=notes)
