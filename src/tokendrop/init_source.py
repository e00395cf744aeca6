"""Continued pretraining from a published BERT checkpoint: resolve ``model.init`` and load its weights.

``model.init`` (``tokendrop pretrain --init SOURCE``) names one of

* a Hugging Face BERT directory: ``config.json`` + ``model.safetensors``, sharded safetensors
  (``model.safetensors.index.json``), or ``pytorch_model.bin`` (read with
  ``torch.load(weights_only=True)``: a pickle holding anything but tensors is refused);
* a tokendrop run directory (its newest checkpoint that verifies) or checkpoint directory;
* a Hub name (``org/name``) that is not a local path: fetched with ``huggingface_hub`` when that is
  installed and online, otherwise a one-line error asking for a local directory.

Accepted weight layouts: ``BertForMaskedLM``, ``BertForPreTraining`` (the NSP head is ignored),
``BertModel`` with or without the ``bert.`` prefix (sentence-transformers), old TF-converted names
(``LayerNorm.gamma``/``beta``).  The source's ``config.json`` gives the model's shape; anything our
model cannot reproduce exactly (another ``model_type``, relative positions, a tanh-GELU, a decoder,
an untied MLM decoder) is a one-line error naming the field.

The weights' sha256 is recorded at resolution (``model.init_sha256``) and checked again, on the very
bytes that are parsed, when they are loaded.  Several shards hash as ``sha256sum`` of their
``sha256sum`` lines (``sha256sum model-*.safetensors | sha256sum``).  Reading the files, hashing
them and matching their tensors with a model's is :mod:`tokendrop.weights` (shared with the
ModernBERT loader, :mod:`tokendrop.hf_modern`); this module resolves a source and loads BERT weights.

    src = resolve_init_source("/models/bert-base-uncased")
    model = BertForMaskedLM(src.model)
    report = load_init_weights(src, model)   # fresh / unexpected / ignored tensors + notes
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import checkpoint as ckpt_mod
from .config import MODEL_PRESETS, ConfigError, ModelConfig, from_dict
from .data.tokenizer import has_tokenizer_files
from .errors import InitError
from .hf import TOKENIZER_FILES, from_hf, model_config_from_hf, save_source_files, to_hf
from .hf_modern import check_modern_tensors, load_modern_weights, normalise_modern_names
from .model import BertForMaskedLM
from .weights import (InitReport, InitSource, check_encoder_shapes, check_tied_decoder, first_line, fresh_init,
                      match_tensors, read_source_tensors, scan_tensors, shape_name, weight_files)

__all__ = [
    "InitError",
    "InitSource",
    "InitReport",
    "resolve_init_source",
    "model_section_from_init",
    "resolve_model_init",
    "load_init_weights",
    "load_source_weights",
    "save_source_files",
    "read_source_tensors",
    "normalise_hf_names",
]


# ----------------------------------------------------------------------------------------------
# resolution

_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_HUB_PATTERNS = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
                 *TOKENIZER_FILES]
_HUB_BIN_PATTERNS = ["config.json", "pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin",
                     *TOKENIZER_FILES]


def normalise_hf_names(keys: list[str]) -> tuple[dict[str, str], bool]:
    """Source tensor names -> {canonical name (``bert.``-prefixed, LayerNorm.weight/bias): source name}."""
    prefixed = any(k.startswith("bert.") for k in keys)
    out: dict[str, str] = {}
    for k in keys:
        c = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k))
        if not prefixed and c.split(".")[0] in ("embeddings", "encoder", "pooler"):
            c = "bert." + c
        out[c] = k
    if "cls.predictions.bias" not in out and "cls.predictions.decoder.bias" in out:
        out["cls.predictions.bias"] = out.pop("cls.predictions.decoder.bias")  # the same tensor, other name
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


def _check_hf_tensors(where: Path, canon: dict[str, str], shapes: dict[str, tuple[int, ...]], prefixed: bool,
                      cfg: ModelConfig) -> None:
    """Every encoder tensor present with the shape config.json implies (one-line error otherwise)."""
    expected = _expected_hf_shapes(cfg)
    if "bert.embeddings.word_embeddings.weight" not in canon:
        raise InitError(f"{where}: no BERT weights recognised (no bert.embeddings.word_embeddings.weight or "
                        f"embeddings.word_embeddings.weight among {len(canon)} tensors); expected BertForMaskedLM, "
                        "BertForPreTraining or BertModel weights")
    check_encoder_shapes(where, canon, shapes, expected, _REQUIRED, cfg,
                         show=lambda name: name if prefixed or not name.startswith("bert.") else name[5:],
                         ignore=lambda c: c.endswith("position_ids"))


def _looks_like_hub_name(source: str) -> bool:
    return bool(_HUB_NAME.match(source)) and not source.startswith((".", "~"))


def _download(name: str) -> Path:
    """A Hub name -> a local snapshot dir (only when huggingface_hub is installed and can reach it)."""
    try:
        import huggingface_hub
    except ImportError:
        raise InitError(f"{name}: no such local directory, and huggingface_hub is not installed to fetch it from the "
                        "Hugging Face Hub; pass a local directory (a saved BERT model or a tokendrop run)") from None
    try:
        path = Path(huggingface_hub.snapshot_download(repo_id=name, allow_patterns=_HUB_PATTERNS))
        if not any(path.glob("*.safetensors")):
            path = Path(huggingface_hub.snapshot_download(repo_id=name, allow_patterns=_HUB_BIN_PATTERNS))
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, gated repo, network errors
        raise InitError(f"{name}: no such local directory, and it could not be fetched from the Hugging Face Hub "
                        f"({type(e).__name__}: {first_line(e)}); pass a local directory "
                        "(a saved BERT model or a tokendrop run)") from None
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InitError(f"{path}: invalid JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InitError(f"{path}: unreadable ({first_line(e)})") from None
    if not isinstance(d, dict):
        raise InitError(f"{path}: expected a JSON object")
    return d


def _resolve_hf(source: str, p: Path) -> InitSource:
    cj = p / "config.json"
    if not cj.is_file():
        raise InitError(f"{p}: not a model directory (no config.json) and not a tokendrop run (no checkpoints/); "
                        "expected a Hugging Face BERT directory or a `tokendrop pretrain` output")
    d = _read_json(cj)
    cfg = model_config_from_hf(d, str(cj))
    hashed, files, fmt, sharded = weight_files(p)
    sha, shapes = scan_tensors(files, fmt, sharded)
    if cfg.family == "modernbert":  # transformers.ModernBertForMaskedLM / ModernBertModel (tokendrop.hf_modern)
        layout = check_modern_tensors(hashed, normalise_modern_names(list(shapes)), shapes, cfg)
    else:
        canon, prefixed = normalise_hf_names(list(shapes))
        _check_hf_tensors(hashed, canon, shapes, prefixed, cfg)
        layout = _hf_layout(canon, prefixed)
    tok = p if has_tokenizer_files(p) else None
    return InitSource(source=source, path=p, kind="huggingface", layout=layout, model=cfg,
                      weights_file=hashed, sha256=sha, tokenizer_dir=tok, hf_config=d, weights_files=files,
                      weights_format=fmt)


def _resolve_tokendrop(source: str, p: Path) -> InitSource:
    try:
        ck = ckpt_mod.find(p)  # the shared verifying loader (tokendrop.checkpoint): a run's newest checkpoint
    except ckpt_mod.CheckpointError as e:
        raise InitError(str(e)) from None
    run = p if ck != p else (p.parent.parent if p.parent.name == "checkpoints" else p)
    try:
        meta = ckpt_mod.read_meta(ck)
        meta = ckpt_mod.verify(ck, files=ckpt_mod.model_files(meta))  # model.safetensors, or an FSDP run's shards
        model_d = meta["config"]["model"]
        cfg = from_dict(ModelConfig, {k: v for k, v in model_d.items() if k != "preset"})
        sha = ckpt_mod.weights_sha256_of(meta)
    except ckpt_mod.CheckpointError as e:
        raise InitError(str(e)) from None
    except (KeyError, TypeError) as e:
        raise InitError(f"{ck / 'meta.json'}: no {e.args[0] if e.args else 'config'!r} entry") from None
    except ConfigError as e:
        raise InitError(f"{ck / 'meta.json'}: {e}") from None
    if cfg.vocab_size <= 0:
        raise InitError(f"{ck / 'meta.json'}: model.vocab_size is {cfg.vocab_size}, expected the resolved size")
    for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):  # 0 would mean "the preset's"
        if key in model_d and model_d[key] != getattr(cfg, key):
            raise InitError(f"{ck / 'meta.json'}: model.{key} is {model_d.get(key)!r}, expected the resolved size "
                            f"(a checkpoint records its shape; the file was edited: restore it or use another checkpoint)")
    tok = next((c for c in (ck / "tokenizer", run / "tokenizer", p / "tokenizer", run / "source")
                if has_tokenizer_files(c)), None)
    hf_cfg = _read_json(run / "source" / "config.json") if (run / "source" / "config.json").is_file() else None
    return InitSource(source=source, path=ck, kind="tokendrop", layout="tokendrop", model=cfg,
                      weights_file=ck / "model.safetensors", sha256=sha, tokenizer_dir=tok, hf_config=hf_cfg,
                      weights_files=[ck / "model.safetensors"], weights_format="safetensors")


def resolve_init_source(source: str) -> InitSource:
    """``model.init`` -> an :class:`InitSource` (directory, layout, shape, weights hash, tokenizer).

    Reads config.json and the tensor headers (a ``.bin`` is read whole, with weights_only) and checks
    that every encoder tensor is there with the shape config.json implies; raises :class:`InitError`."""
    s = str(source).strip()
    if not s:
        raise InitError("model.init: empty; expected a Hugging Face BERT directory, a tokendrop run or checkpoint "
                        "directory, or a Hub name")
    p = Path(s).expanduser()
    if not p.exists():
        if not _looks_like_hub_name(s):
            raise InitError(f"{s}: no such directory; expected a Hugging Face BERT directory, a tokendrop run or "
                            "checkpoint directory, or a Hub name (org/name)")
        p = _download(s)
    if not p.is_dir():
        raise InitError(f"{p}: expected a directory (a Hugging Face BERT directory holding config.json, or a "
                        "tokendrop run/checkpoint directory), not a file")
    if (p / "checkpoints").is_dir() or ((p / "meta.json").is_file() and ((p / "model.safetensors").is_file() or (
            p / "shards").is_dir()) and not (p / "config.json").is_file()):
        return _resolve_tokendrop(s, p)
    return _resolve_hf(s, p)


# ----------------------------------------------------------------------------------------------
# the [model] section

_ARCH_FIELDS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size",
                "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
                "family", "global_rope_theta", "local_rope_theta", "local_attention", "layer_types", "norm_bias")
_TRAINING_FIELDS = ("hidden_dropout", "attention_dropout", "initializer_range")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def model_section_from_init(model: dict, src: InitSource, where: str = "model") -> dict:
    """The explicitly given ``[model]`` keys (with ``init``) and the resolved source ``src`` -> the
    full ``[model]`` table: the source's shape, ``init`` and ``init_sha256`` filled.  Architecture
    fields that contradict the source are a ConfigError naming the field and both values
    (``vocab_size = 0``, "from the data", is allowed); dropout and ``initializer_range`` (used for
    freshly initialised tensors) may be overridden.  Pure: ``src`` was resolved by the caller."""
    init = model.get("init", "")
    if not isinstance(init, str) or not init.strip():
        raise ConfigError(f"{where}.init: expected a Hugging Face BERT directory, a tokendrop run/checkpoint "
                          f"directory or a Hub name, got {init!r}")
    shape = {k: v for k, v in dataclasses.asdict(src.model).items() if k not in ("preset", "init", "init_sha256")}
    origin = f"the init source {init} ({src.weights_file.name if src.kind == 'huggingface' else src.path})"
    out = dict(shape)
    for key, val in model.items():
        if key in ("init",):
            continue
        if key == "init_sha256":
            if val and val != src.sha256:
                raise ConfigError(f"{where}.init_sha256: {val!r} was given but {src.weights_file} now has sha256 "
                                  f"{src.sha256!r}; the source changed (remove {where}.init_sha256 to accept it)")
            continue
        if key == "preset":
            if val in MODEL_PRESETS:
                want = dict(MODEL_PRESETS[val])
                if "intermediate_size" not in model:
                    want["intermediate_size"] = 4 * want["hidden_size"]
                if any(want[k] != shape[k] for k in want):
                    mine = ", ".join(f"{k}={want[k]}" for k in want)
                    theirs = ", ".join(f"{k}={shape[k]}" for k in want)
                    raise ConfigError(f"{where}.preset: {val!r} means {mine} but {origin} has {theirs}; remove "
                                      f"{where}.preset (the shape comes from the init source)")
                continue
            out[key] = val  # not a preset name: ModelConfig reports it
            continue
        if key in _ARCH_FIELDS:
            if key == "vocab_size" and val == 0:
                continue
            if isinstance(shape[key], (str, list, bool)):  # family, layer_types, norm_bias
                if val != shape[key]:
                    raise ConfigError(f"{where}.{key}: {val!r} contradicts {origin}, which has {key} = {shape[key]!r}; "
                                      f"remove {where}.{key} (the architecture comes from the init source)")
                continue
            a, b = _num(val), _num(shape[key])
            if a is None:
                out[key] = val  # wrong type: the config loader reports it
                continue
            if a != b:
                raise ConfigError(f"{where}.{key}: {val!r} contradicts {origin}, which has {key} = {shape[key]!r}; "
                                  f"remove {where}.{key} (the shape comes from the init source)")
            continue
        out[key] = val  # training settings (dropout, initializer_range) and unknown keys (the loader reports them)
    out["init"] = init
    out["init_sha256"] = src.sha256
    return out


def resolve_model_init(model: ModelConfig, src: InitSource) -> ModelConfig:
    """A parsed ``[model]`` section with ``init`` (its shape pending, or already resolved) and the
    source resolved from it -> the resolved section (a new object; ``model`` is not changed).

    The given keys are the fields that differ from their defaults (the rule ``ModelConfig`` applies
    to presets), plus ``preset``; :func:`model_section_from_init` checks them against the source."""
    defaults = ModelConfig(init=model.init)
    given = {f.name: getattr(model, f.name) for f in dataclasses.fields(ModelConfig)
             if getattr(model, f.name) != getattr(defaults, f.name) or f.name == "init"}
    return from_dict(ModelConfig, model_section_from_init(given, src))


# ----------------------------------------------------------------------------------------------
# loading

_REQUIRED = ("bert.embeddings.", "bert.encoder.")
_TASK_HEADS = ("classifier.", "qa_outputs.")  # another number of labels: start fresh


def load_source_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Load ``src``'s weights into any of our model classes (BertForMaskedLM, -SequenceClassification,
    -QuestionAnswering).  Encoder tensors must all be there with the right shape; the pooler and heads
    missing from the file are initialised as BERT does and listed in ``fresh``."""
    if model.config.family == "modernbert":  # transformers' own names (tokendrop.hf_modern)
        return load_modern_weights(src, model)
    where = src.weights_file
    sd = read_source_tensors(src)
    std = model.config.initializer_range
    own_ours = model.state_dict()
    ignored: list[str] = []
    notes: list[str] = [f"{src.source}: {src.layout} ({src.kind}), {shape_name(src.model)}, sha256 {src.sha256[:12]}"]
    if src.kind == "tokendrop":
        canon = {k: k for k in sd}
        values = sd
        own = own_ours
        to_ours = {k: k for k in own}
    else:
        canon, prefixed = normalise_hf_names(list(sd))
        values = {c: sd[k] for c, k in canon.items()}
        own = to_hf(own_ours)
        to_ours = {k: next(iter(from_hf({k: v}))) for k, v in own.items()
                   if not re.match(r"bert\.encoder\.layer\.\d+\.attention\.self\.(key|value)\.", k)}
    # resolution checked the encoder tensors; the file may have changed since
    take, fresh_src = match_tensors(own, values, canon, _REQUIRED, _TASK_HEADS, where, shape_name(src.model), notes)
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
            check_tied_decoder(values, c, "bert.embeddings.word_embeddings.weight", k, where, "word embeddings")
            ignored.append(k)
        elif c == "cls.predictions.decoder.bias" and "cls.predictions.bias" in take:
            ignored.append(k)  # an alias of cls.predictions.bias
        elif not has_mlm and c.startswith(("mlm.", "cls.predictions.")):
            ignored.append(k)  # a classifier/QA model does not use the MLM head
        elif c.startswith(("classifier.", "qa_outputs.")) and c not in own:
            ignored.append(k)  # a task head of another model class
        elif c.startswith(_REQUIRED):
            raise InitError(f"{where}: encoder tensor {k} is not part of the model ({shape_name(src.model)}): "
                            "the configuration and the weights disagree")
        else:
            unexpected.append(k)
    if any(k.startswith(("cls.seq_relationship.",)) for k in canon):
        notes.append("NSP head (cls.seq_relationship.*) ignored")
    if any(canon[c] != c for c in canon if c.endswith("LayerNorm.weight") and canon[c].endswith("gamma")):
        notes.append("TF-converted names LayerNorm.gamma/beta read as LayerNorm.weight/bias")
    if "cls.predictions.decoder.weight" in canon:
        notes.append("cls.predictions.decoder.weight equals the word embeddings (tied): ignored")
    stored = sorted({str(v.dtype).replace("torch.", "") for k, v in take.items() if v.dtype != own[k].dtype})
    if stored:
        notes.append(f"weights stored as {', '.join(stored)}: loaded as {str(next(iter(own.values())).dtype).replace('torch.', '')}")
    # assemble in our names, load, then initialise what was not in the file
    merged = {k: (take[k].to(dtype=t.dtype) if k in take else t) for k, t in own.items()}
    ours = merged if src.kind == "tokendrop" else from_hf(merged)
    model.load_state_dict(ours, strict=True)
    fresh = [n for n in own_ours if n in {to_ours[k] for k in fresh_src}]
    fresh_init(model, fresh, std)
    mlm_fresh = [n for n in fresh if n.startswith("mlm.")]
    if mlm_fresh and len(mlm_fresh) == sum(1 for n in own_ours if n.startswith("mlm.")):
        notes.append(f"no MLM head in the source: mlm.* initialised as BERT does (dense N(0, {std}), bias 0, "
                     "LayerNorm 1/0, output bias 0; the decoder is tied to the word embeddings)")
    elif mlm_fresh:
        notes.append(f"MLM head partly in the source: {', '.join(mlm_fresh)} initialised fresh (e.g. the TF->HF "
                     "converter drops cls.predictions.bias)")
    if any(n.startswith("bert.pooler.") for n in fresh):
        notes.append("no pooler in the source: bert.pooler.* initialised fresh (pretraining does not train it)")
    if unexpected:
        notes.append(f"{len(unexpected)} tensor(s) in the file used by nothing: {', '.join(unexpected[:4])}"
                     + (" ..." if len(unexpected) > 4 else ""))
    return InitReport(fresh=fresh, unexpected=unexpected, ignored=ignored, notes=notes)


def load_init_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Continued pretraining: load ``src`` into our ``BertForMaskedLM`` (see :func:`load_source_weights`).

    Verifies the weights' sha256 again (on the bytes parsed), requires every encoder tensor, starts a
    missing MLM head as BERT does (decoder tied to the word embeddings) and reports what was fresh,
    unexpected and ignored."""
    if getattr(type(model), "task", None) != "mlm":
        raise TypeError(f"load_init_weights: expected an MLM model (tokendrop.families.build_model), got {type(model).__name__}")
    want = dataclasses.asdict(src.model)
    have = dataclasses.asdict(model.config)
    for k in _ARCH_FIELDS:
        if want[k] != have[k]:
            raise InitError(f"{src.weights_file}: the model was built with {k} = {have[k]!r} but the source has "
                            f"{want[k]!r}; build it from the [model] section model_section_from_init returns")
    return load_source_weights(src, model)
