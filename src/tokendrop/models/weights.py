"""A model source's weights: the files, their hash, and matching their tensors with a model's.

Shared by resolution (:mod:`tokendrop.models.source`: which files, their sha256, their tensor
shapes) and by both families' loaders (``init_source.load_source_weights`` for BERT,
``hf_modern.load_modern_weights`` for ModernBERT): reading tensor files (safetensors, sharded
safetensors, ``pytorch_model.bin`` through ``torch.load(weights_only=True)``) with the sha256 of
exactly the bytes parsed, and the checks and report every loader shares (:func:`match_tensors`,
:func:`check_encoder_shapes`, :func:`check_tied_decoder`, :class:`InitReport`).  Several shards
hash as ``sha256sum`` of their ``sha256sum`` lines (``sha256sum model-*.safetensors | sha256sum``).
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load as st_load
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.errors import InitError
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.checkpoint import sha256_file


@dataclass
class InitSource:
    source: str  # what the user passed
    path: Path  # resolved local directory: the HF dir, or the tokendrop checkpoint dir
    kind: str  # "huggingface" | "tokendrop"
    # "BertForMaskedLM" | "BertForPreTraining" | "BertModel" | "BertModel (no bert. prefix)" |
    # "tokendrop"
    layout: str
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
    # tensors in the file left out on purpose (NSP head, position_ids, tied aliases)
    ignored: list[str]
    notes: list[str]  # human-readable lines


def first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def combined_sha(hashes: list[tuple[str, str]], sharded: bool) -> str:
    """One file: its sha256.  Shards: sha256 of their ``sha256sum`` lines ("HEX  NAME\\n")."""
    if not sharded:
        return hashes[0][1]
    return hashlib.sha256("".join(f"{h}  {name}\n" for name, h in hashes).encode()).hexdigest()


def weight_files(p: Path) -> tuple[Path, list[Path], str, bool]:
    """-> (hashed file, tensor files in order, "safetensors" | "bin", sharded)."""
    if (p / "model.safetensors").is_file():
        return p / "model.safetensors", [p / "model.safetensors"], "safetensors", False
    for idx_name, fmt in (
        ("model.safetensors.index.json", "safetensors"),
        ("pytorch_model.bin.index.json", "bin"),
    ):
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
    other = [
        n
        for n in ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index", "model.onnx")
        if (p / n).exists()
    ]
    hint = (
        f" (found {other[0]}: only PyTorch weights are read; convert it with transformers' "
        "save_pretrained)"
        if other
        else ""
    )
    raise InitError(
        f"{p}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin{hint}"
    )


def _torch_load(data: bytes, where: Path) -> dict[str, Tensor]:
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n\n|$)", str(e), re.S)
        why = " ".join(m.group(1).split()) if m else first_line(e)
        raise InitError(
            f"{where}: refused by torch.load(weights_only=True) ({why}): it is a pickle holding "
            "more than tensors, and tokendrop never unpickles arbitrary objects; re-save the "
            "weights as model.safetensors where they were made"
        ) from None
    except Exception as e:  # noqa: BLE001 - truncated/corrupt files raise RuntimeError, EOFError, ...
        raise InitError(
            f"{where}: not a readable PyTorch weights file for torch.load(weights_only=True) "
            f"({first_line(e)}); tokendrop never unpickles arbitrary objects: provide "
            "model.safetensors"
        ) from None
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()
    ):
        raise InitError(
            f"{where}: not a state dict (expected a flat mapping of tensor names to tensors)"
        )
    return obj


def read_tensors(files: list[Path], fmt: str, sharded: bool) -> tuple[dict[str, Tensor], str]:
    """Read every tensor file once -> (tensors, sha256 of exactly the bytes parsed)."""
    sd: dict[str, Tensor] = {}
    hashes = []
    for f in files:
        data = f.read_bytes()
        hashes.append((f.name, hashlib.sha256(data).hexdigest()))
        if fmt == "safetensors":
            try:
                part = st_load(data)
            except Exception as e:  # noqa: BLE001 - SafetensorError and friends
                raise InitError(f"{f}: not a valid safetensors file ({first_line(e)})") from None
        else:
            part = _torch_load(data, f)
        dup = set(part) & set(sd)
        if dup:
            raise InitError(f"{f}: tensor {sorted(dup)[0]} also appears in another shard")
        sd.update(part)
        del data
    return sd, combined_sha(hashes, sharded)


def scan_tensors(
    files: list[Path], fmt: str, sharded: bool
) -> tuple[str, dict[str, tuple[int, ...]]]:
    """-> (sha256, {tensor name: shape}) without keeping the tensors (safetensors: header only).
    Resolution calls it once per source; loading re-hashes the bytes it parses."""
    if fmt == "bin":
        sd, sha = read_tensors(files, fmt, sharded)
        shapes = {k: tuple(v.shape) for k, v in sd.items()}
    else:
        shapes = {}
        hashes = []
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as so:
                    for k in so.keys():
                        shapes[k] = tuple(so.get_slice(k).get_shape())
            except Exception as e:  # noqa: BLE001
                raise InitError(f"{f}: not a valid safetensors file ({first_line(e)})") from None
            hashes.append((f.name, sha256_file(f)))
        sha = combined_sha(hashes, sharded)
    return sha, shapes


def shape_name(cfg: ModelConfig) -> str:
    return (
        f"{cfg.num_layers} layers x {cfg.hidden_size} ({cfg.num_heads} heads, ffn "
        f"{cfg.intermediate_size}, "
        f"vocab {cfg.vocab_size}, {cfg.max_position_embeddings} positions)"
    )


def check_encoder_shapes(
    where: Any,
    canon: dict[str, str],
    shapes: dict[str, tuple[int, ...]],
    expected: dict[str, tuple[int, ...]],
    required: tuple[str, ...],
    cfg: ModelConfig,
    show=lambda name: name,
    ignore=lambda name: False,
) -> None:
    """Both families' check of a source's tensors against the model its config.json describes
    (``expected``: name -> shape; ``canon``: our naming -> the file's): no encoder tensor (prefix in
    ``required``) beyond the expected ones (``ignore`` aside), every expected encoder tensor
    present, every present expected tensor with its shape.  One-line InitError otherwise."""
    extra = sorted(
        c for c in canon if c.startswith(required) and c not in expected and not ignore(c)
    )
    if extra:
        raise InitError(
            f"{where}: tensor {canon[extra[0]]} is not part of the model config.json describes "
            f"({shape_name(cfg)}); {len(extra)} such encoder tensor(s): config.json and "
            "weights disagree"
        )
    for name, shape in expected.items():
        if name not in canon:
            if name.startswith(required):
                n = sum(1 for k in expected if k.startswith(required) and k not in canon)
                raise InitError(
                    f"{where}: encoder tensor {show(name)} is missing ({n} encoder tensor(s) "
                    f"missing; config.json says {shape_name(cfg)})"
                )
            continue
        got = shapes[canon[name]]
        if got != shape:
            raise InitError(
                f"{where}: tensor {canon[name]} has shape {list(got)} in the file but "
                f"{list(shape)} for the model config.json describes ({shape_name(cfg)})"
            )


def fresh_init(model: nn.Module, names: list[str], std: float) -> None:
    """BERT's initialisation for the named parameters: LayerNorm 1/0, biases 0, weights N(0,
    std)."""
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
    """Every tensor of the source, as named in its file, after checking the sha256 of the bytes
    parsed."""
    # through the shared verifying loader: hashed against meta.json, then parsed
    if src.kind == "tokendrop":
        try:
            meta = ckpt_mod.read_meta(src.path)
            sd = ckpt_mod.read_model(src.path, meta)  # a sharded checkpoint: consolidated here
        except ckpt_mod.CheckpointError as e:
            raise InitError(str(e)) from None
        sha = ckpt_mod.weights_sha256_of(meta)
    else:
        files = src.weights_files or [src.weights_file]
        sd, sha = read_tensors(files, src.weights_format, sharded=src.weights_file not in files)
    if sha != src.sha256:
        raise InitError(
            f"{src.weights_file}: sha256 is now {sha}, not {src.sha256} as when {src.source!r} was "
            "resolved (model.init_sha256); the file changed: check it, then start again"
        )
    return sd


def check_tied_decoder(
    values: dict[str, Tensor],
    decoder: str,
    embeddings: str,
    name: str,
    where: str,
    noun: str = "token embeddings",
) -> None:
    """Both families' loaders: a source's MLM decoder weight ``values[decoder]`` (file name
    ``name``) must equal its embeddings ``values[embeddings]`` (tokendrop ties them; ``noun``: what
    the family calls them); InitError otherwise."""
    we = values.get(embeddings)
    if we is None or values[decoder].shape != we.shape or not torch.equal(values[decoder], we):
        raise InitError(
            f"{where}: {name} differs from the {noun}: an untied MLM decoder cannot be "
            f"loaded (tokendrop ties the decoder to {embeddings.removesuffix('.weight')})"
        )


def match_tensors(
    own: dict[str, Tensor],
    values: dict[str, Tensor],
    canon: dict[str, str],
    required: tuple[str, ...],
    task_heads: tuple[str, ...],
    where: Any,
    shape_name: str,
    notes: list[str],
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
                notes.append(
                    f"{canon[name]}: shape {list(v.shape)} in the file, {list(t.shape)} here: "
                    "initialised fresh"
                )
                continue
            raise InitError(
                f"{where}: tensor {canon[name]} has shape {list(v.shape)} in the file but "
                f"{list(t.shape)} in the model ({shape_name})"
            )
        if not v.is_floating_point():
            raise InitError(
                f"{where}: tensor {canon[name]} has dtype {v.dtype}, expected floating point"
            )
        take[name] = v
    return take, fresh
