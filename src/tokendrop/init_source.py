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
``sha256sum`` lines (``sha256sum model-*.safetensors | sha256sum``).

    src = resolve_init_source("/models/bert-base-uncased")
    model = BertForMaskedLM(src.model)
    report = load_init_weights(src, model)   # fresh / unexpected / ignored tensors + notes
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .config import MODEL_PRESETS, ConfigError, ModelConfig
from .hf import TOKENIZER_FILES, InteropError, from_hf, model_config_from_hf, save_source_files, to_hf

__all__ = [
    "InitError",
    "InitSource",
    "InitReport",
    "resolve_init_source",
    "model_section_from_init",
    "load_init_weights",
    "load_source_weights",
    "save_source_files",
    "read_source_tensors",
    "normalise_hf_names",
]


class InitError(InteropError):
    """A continued-pretraining source that cannot be used as asked (one line, naming the file/field)."""


@dataclass
class InitSource:
    source: str  # what the user passed
    path: Path  # resolved local directory: the HF dir, or the tokendrop checkpoint dir
    kind: str  # "huggingface" | "tokendrop"
    layout: str  # "BertForMaskedLM" | "BertForPreTraining" | "BertModel" | "BertModel (no bert. prefix)" | "tokendrop"
    model: ModelConfig  # the shape, from config.json (or the checkpoint's meta.json)
    weights_file: Path  # the hashed file; the index file for shards (all shards in weights_files)
    sha256: str  # of the weights file; for shards: of the shards' `sha256sum` lines, in name order
    tokenizer_dir: Path | None
    hf_config: dict | None  # the source's config.json as read
    weights_files: list[Path] = field(default_factory=list)  # every tensor file, in hashing order
    weights_format: str = "safetensors"  # "safetensors" | "bin"


@dataclass
class InitReport:
    fresh: list[str]  # our parameter names initialised here (not in the file)
    unexpected: list[str]  # tensors in the file (their names there) that nothing uses
    ignored: list[str]  # tensors in the file left out on purpose (NSP head, position_ids, tied aliases)
    notes: list[str]  # human-readable lines


# ----------------------------------------------------------------------------------------------
# resolution

_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_HUB_PATTERNS = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
                 *TOKENIZER_FILES]
_HUB_BIN_PATTERNS = ["config.json", "pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin",
                     *TOKENIZER_FILES]


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _sha256_file(path: Path) -> str:
    from .checkpoint import sha256_file

    return sha256_file(path)


def _combined_sha(hashes: list[tuple[str, str]], sharded: bool) -> str:
    """One file: its sha256.  Shards: sha256 of their ``sha256sum`` lines ("HEX  NAME\\n")."""
    if not sharded:
        return hashes[0][1]
    return hashlib.sha256("".join(f"{h}  {name}\n" for name, h in hashes).encode()).hexdigest()


def _weight_files(p: Path) -> tuple[Path, list[Path], str, bool]:
    """-> (hashed file, tensor files in order, "safetensors" | "bin", sharded)."""
    if (p / "model.safetensors").is_file():
        return p / "model.safetensors", [p / "model.safetensors"], "safetensors", False
    for idx_name, fmt in (("model.safetensors.index.json", "safetensors"), ("pytorch_model.bin.index.json", "bin")):
        idx = p / idx_name
        if not idx.is_file():
            continue
        try:
            wm = json.loads(idx.read_text())["weight_map"]
            names = sorted(set(wm.values()))
        except json.JSONDecodeError as e:
            raise InitError(f"{idx}: invalid JSON ({e})") from None
        except (KeyError, TypeError, AttributeError):
            raise InitError(f"{idx}: no 'weight_map' object naming the shards") from None
        if not names or not all(isinstance(n, str) for n in names):
            raise InitError(f"{idx}: 'weight_map' names no shard files")
        files = [p / n for n in names]
        for f in files:
            if not f.is_file():
                raise InitError(f"{idx}: shard {f.name} is listed but missing from {p}")
        return idx, files, fmt, True
    if (p / "pytorch_model.bin").is_file():
        return p / "pytorch_model.bin", [p / "pytorch_model.bin"], "bin", False
    other = [n for n in ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index", "model.onnx") if (p / n).exists()]
    hint = (f" (found {other[0]}: only PyTorch weights are read; convert it with transformers' save_pretrained)"
            if other else "")
    raise InitError(f"{p}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin{hint}")


def _torch_load(data: bytes, where: Path) -> dict[str, Tensor]:
    import pickle

    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n\n|$)", str(e), re.S)
        why = " ".join(m.group(1).split()) if m else _first_line(e)
        raise InitError(f"{where}: refused by torch.load(weights_only=True) ({why}): it is a pickle holding more than "
                        "tensors, and tokendrop never unpickles arbitrary objects; re-save the weights as "
                        "model.safetensors where they were made") from None
    except Exception as e:  # noqa: BLE001 - truncated/corrupt files raise RuntimeError, EOFError, ...
        raise InitError(f"{where}: not a readable PyTorch weights file for torch.load(weights_only=True) "
                        f"({_first_line(e)}); tokendrop never unpickles arbitrary objects: provide model.safetensors") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        raise InitError(f"{where}: not a state dict (expected a flat mapping of tensor names to tensors)")
    return obj


def _read_tensors(files: list[Path], fmt: str, sharded: bool) -> tuple[dict[str, Tensor], str]:
    """Read every tensor file once -> (tensors, sha256 of exactly the bytes parsed)."""
    from safetensors.torch import load as st_load

    sd: dict[str, Tensor] = {}
    hashes = []
    for f in files:
        data = f.read_bytes()
        hashes.append((f.name, hashlib.sha256(data).hexdigest()))
        if fmt == "safetensors":
            try:
                part = st_load(data)
            except Exception as e:  # noqa: BLE001 - SafetensorError and friends
                raise InitError(f"{f}: not a valid safetensors file ({_first_line(e)})") from None
        else:
            part = _torch_load(data, f)
        dup = set(part) & set(sd)
        if dup:
            raise InitError(f"{f}: tensor {sorted(dup)[0]} also appears in another shard")
        sd.update(part)
        del data
    return sd, _combined_sha(hashes, sharded)


_SCAN_CACHE: dict[tuple, tuple[str, dict[str, tuple[int, ...]]]] = {}


def _scan(files: list[Path], fmt: str, sharded: bool) -> tuple[str, dict[str, tuple[int, ...]]]:
    """-> (sha256, {tensor name: shape}) without keeping the tensors (safetensors: header only).
    Cached per process by (path, size, mtime); loading always re-hashes the bytes it parses."""
    key = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files) + (fmt,)
    if key in _SCAN_CACHE:
        return _SCAN_CACHE[key]
    if fmt == "bin":
        sd, sha = _read_tensors(files, fmt, sharded)
        shapes = {k: tuple(v.shape) for k, v in sd.items()}
    else:
        from safetensors import safe_open

        shapes = {}
        hashes = []
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as so:
                    for k in so.keys():
                        shapes[k] = tuple(so.get_slice(k).get_shape())
            except Exception as e:  # noqa: BLE001
                raise InitError(f"{f}: not a valid safetensors file ({_first_line(e)})") from None
            hashes.append((f.name, _sha256_file(f)))
        sha = _combined_sha(hashes, sharded)
    _SCAN_CACHE.clear()  # one entry: resolution, then the trainer's second resolution of the same source
    _SCAN_CACHE[key] = (sha, shapes)
    return sha, shapes


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
    from .model import BertForMaskedLM

    with torch.device("meta"):
        m = BertForMaskedLM(cfg)
    return {k: tuple(v.shape) for k, v in to_hf(m.state_dict()).items()}


def _shape_name(cfg: ModelConfig) -> str:
    return (f"{cfg.num_layers} layers x {cfg.hidden_size} ({cfg.num_heads} heads, ffn {cfg.intermediate_size}, "
            f"vocab {cfg.vocab_size}, {cfg.max_position_embeddings} positions)")


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


def check_encoder_shapes(where: Any, canon: dict[str, str], shapes: dict[str, tuple[int, ...]],
                         expected: dict[str, tuple[int, ...]], required: tuple[str, ...], cfg: ModelConfig,
                         show=lambda name: name, ignore=lambda name: False) -> None:
    """Both families' check of a source's tensors against the model its config.json describes
    (``expected``: name -> shape; ``canon``: our naming -> the file's): no encoder tensor (prefix in
    ``required``) beyond the expected ones (``ignore`` aside), every expected encoder tensor present,
    every present expected tensor with its shape.  One-line InitError otherwise."""
    extra = sorted(c for c in canon if c.startswith(required) and c not in expected and not ignore(c))
    if extra:
        raise InitError(f"{where}: tensor {canon[extra[0]]} is not part of the model config.json describes "
                        f"({_shape_name(cfg)}); {len(extra)} such encoder tensor(s): config.json and weights disagree")
    for name, shape in expected.items():
        if name not in canon:
            if name.startswith(required):
                n = sum(1 for k in expected if k.startswith(required) and k not in canon)
                raise InitError(f"{where}: encoder tensor {show(name)} is missing ({n} encoder tensor(s) missing; "
                                f"config.json says {_shape_name(cfg)})")
            continue
        got = shapes[canon[name]]
        if got != shape:
            raise InitError(f"{where}: tensor {canon[name]} has shape {list(got)} in the file but {list(shape)} "
                            f"for the model config.json describes ({_shape_name(cfg)})")


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
                        f"({type(e).__name__}: {_first_line(e)}); pass a local directory "
                        "(a saved BERT model or a tokendrop run)") from None
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InitError(f"{path}: invalid JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InitError(f"{path}: unreadable ({_first_line(e)})") from None
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
    hashed, files, fmt, sharded = _weight_files(p)
    sha, shapes = _scan(files, fmt, sharded)
    if cfg.family == "modernbert":  # transformers.ModernBertForMaskedLM / ModernBertModel (tokendrop.hf_modern)
        from .hf_modern import check_modern_tensors, normalise_modern_names

        layout = check_modern_tensors(hashed, normalise_modern_names(list(shapes)), shapes, cfg)
    else:
        canon, prefixed = normalise_hf_names(list(shapes))
        _check_hf_tensors(hashed, canon, shapes, prefixed, cfg)
        layout = _hf_layout(canon, prefixed)
    from .data.tokenizer import has_tokenizer_files

    tok = p if has_tokenizer_files(p) else None
    return InitSource(source=source, path=p, kind="huggingface", layout=layout, model=cfg,
                      weights_file=hashed, sha256=sha, tokenizer_dir=tok, hf_config=d, weights_files=files,
                      weights_format=fmt)


def _resolve_tokendrop(source: str, p: Path) -> InitSource:
    from . import checkpoint as ckpt_mod
    from .config import from_dict

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
    from .data.tokenizer import has_tokenizer_files

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


def model_section_from_init(model: dict, where: str = "model") -> dict:
    """The explicitly given ``[model]`` keys (with ``init``) -> the full ``[model]`` table: the source's
    shape, ``init`` and ``init_sha256`` filled.  Architecture fields that contradict the source are a
    ConfigError naming the field and both values (``vocab_size = 0``, "from the data", is allowed);
    dropout and ``initializer_range`` (used for freshly initialised tensors) may be overridden."""
    init = model.get("init", "")
    if not isinstance(init, str) or not init.strip():
        raise ConfigError(f"{where}.init: expected a Hugging Face BERT directory, a tokendrop run/checkpoint "
                          f"directory or a Hub name, got {init!r}")
    src = resolve_init_source(init)
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


# ----------------------------------------------------------------------------------------------
# loading

_REQUIRED = ("bert.embeddings.", "bert.encoder.")
_TASK_HEADS = ("classifier.", "qa_outputs.")  # another number of labels: start fresh


def _fresh_init(model: nn.Module, names: list[str], std: float) -> None:
    """BERT's initialisation for the named parameters: LayerNorm 1/0, biases 0, weights N(0, std)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            p = params[n]
            if n.endswith("norm.weight"):
                p.fill_(1.0)
            elif n.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, std)


def read_source_tensors(src: InitSource) -> dict[str, Tensor]:
    """Every tensor of the source, as named in its file, after checking the sha256 of the bytes parsed."""
    if src.kind == "tokendrop":  # through the shared verifying loader: hashed against meta.json, then parsed
        from . import checkpoint as ckpt_mod

        try:
            meta = ckpt_mod.read_meta(src.path)
            sd = ckpt_mod.read_model(src.path, meta)  # a sharded checkpoint: consolidated here
        except ckpt_mod.CheckpointError as e:
            raise InitError(str(e)) from None
        sha = ckpt_mod.weights_sha256_of(meta)
    else:
        files = src.weights_files or [src.weights_file]
        sd, sha = _read_tensors(files, src.weights_format, sharded=src.weights_file not in files)
    if sha != src.sha256:
        raise InitError(f"{src.weights_file}: sha256 is now {sha}, not {src.sha256} as when {src.source!r} was "
                        "resolved (model.init_sha256); the file changed: check it, then start again")
    return sd


def check_tied_decoder(values: dict[str, Tensor], decoder: str, embeddings: str, name: str, where: str,
                       noun: str = "token embeddings") -> None:
    """Both families' loaders: a source's MLM decoder weight ``values[decoder]`` (file name ``name``)
    must equal its embeddings ``values[embeddings]`` (tokendrop ties them; ``noun``: what the family
    calls them); InitError otherwise."""
    we = values.get(embeddings)
    if we is None or values[decoder].shape != we.shape or not torch.equal(values[decoder], we):
        raise InitError(f"{where}: {name} differs from the {noun}: an untied MLM decoder cannot be "
                        f"loaded (tokendrop ties the decoder to {embeddings.removesuffix('.weight')})")


def match_tensors(own: dict[str, Tensor], values: dict[str, Tensor], canon: dict[str, str], required: tuple[str, ...],
                  task_heads: tuple[str, ...], where: Any, shape_name: str, notes: list[str]
                  ) -> tuple[dict[str, Tensor], list[str]]:
    """Match a model's tensors ``own`` with a file's ``values`` (both in the same naming; ``canon``
    maps it back to the file's names for messages) -> (tensors to load, names initialised fresh).

    Both families' loaders use this.  A tensor the file lacks is fresh unless it starts with one
    of ``required`` (the encoder: an error); a shape mismatch is an error except for ``task_heads``
    (a classifier of another label count: fresh, noted); non-float tensors are errors.  The file's
    dtype is kept (the caller's ``load_state_dict`` casts)."""
    take: dict[str, Tensor] = {}
    fresh: list[str] = []
    for name, t in own.items():
        if name not in values:
            if name.startswith(required):
                raise InitError(f"{where}: encoder tensor {name} is missing")
            fresh.append(name)
            continue
        v = values[name]
        if tuple(v.shape) != tuple(t.shape):
            if name.startswith(task_heads):
                fresh.append(name)
                notes.append(f"{canon[name]}: shape {list(v.shape)} in the file, {list(t.shape)} here: initialised fresh")
                continue
            raise InitError(f"{where}: tensor {canon[name]} has shape {list(v.shape)} in the file but "
                            f"{list(t.shape)} in the model ({shape_name})")
        if not v.is_floating_point():
            raise InitError(f"{where}: tensor {canon[name]} has dtype {v.dtype}, expected floating point")
        take[name] = v
    return take, fresh


def load_source_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Load ``src``'s weights into any of our model classes (BertForMaskedLM, -SequenceClassification,
    -QuestionAnswering).  Encoder tensors must all be there with the right shape; the pooler and heads
    missing from the file are initialised as BERT does and listed in ``fresh``."""
    if model.config.family == "modernbert":  # transformers' own names (tokendrop.hf_modern)
        from .hf_modern import load_modern_weights

        return load_modern_weights(src, model)
    where = src.weights_file
    sd = read_source_tensors(src)
    std = model.config.initializer_range
    own_ours = model.state_dict()
    ignored: list[str] = []
    notes: list[str] = [f"{src.source}: {src.layout} ({src.kind}), {_shape_name(src.model)}, sha256 {src.sha256[:12]}"]
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
    take, fresh_src = match_tensors(own, values, canon, _REQUIRED, _TASK_HEADS, where, _shape_name(src.model), notes)
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
            raise InitError(f"{where}: encoder tensor {k} is not part of the model ({_shape_name(src.model)}): "
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
    _fresh_init(model, fresh, std)
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
        raise TypeError(f"load_init_weights: expected an MLM model (tokendrop.model.build_model), got {type(model).__name__}")
    want = dataclasses.asdict(src.model)
    have = dataclasses.asdict(model.config)
    for k in _ARCH_FIELDS:
        if want[k] != have[k]:
            raise InitError(f"{src.weights_file}: the model was built with {k} = {have[k]!r} but the source has "
                            f"{want[k]!r}; build it from the [model] section model_section_from_init returns")
    return load_source_weights(src, model)
