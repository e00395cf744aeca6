"""Training checkpoints: safetensors + JSON, written atomically, verified on load, no pickles.

Layout of ``RUN_DIR/checkpoints/step-00001234/``:
    model.safetensors   the model's state dict (our key names, fp32)
    state.safetensors   optimizer moments, importance vector, RNG states (uint8 tensors)
    meta.json           config, step, data position, optimizer hyper-parameters, package version,
                        git revision, and the size + sha256 of both tensor files

A checkpoint is written into a hidden temp dir beside its final name and renamed when complete, so
a killed writer leaves only a ``.step-*.tmp-*`` dir that is ignored (and removed by the next
writer).  ``load`` re-hashes the tensor files: a corrupt file is never taken as valid.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from . import __version__
from .errors import TokendropError
from .fsutil import atomic_directory, discard_dir
from .rundir import atomic_write_json, latest_checkpoint


class CheckpointError(TokendropError, ValueError):
    """A checkpoint that is missing, incomplete or corrupt."""


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks (the one file-hash helper)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_sha256 = sha256_file


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def optimizer_to_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """Flatten an optimizer state dict into tensors + JSON-able param groups."""
    sd = opt.state_dict()
    tensors: dict[str, Tensor] = {}
    for idx, st in sd["state"].items():
        for name, val in st.items():
            t = val if isinstance(val, Tensor) else torch.tensor(val)
            tensors[f"optim.{idx}.{name}"] = t.detach().cpu().contiguous()
    return tensors, sd["param_groups"]


def optimizer_from_tensors(opt: torch.optim.Optimizer, tensors: dict[str, Tensor], groups: list[dict[str, Any]]) -> None:
    state: dict[int, dict[str, Tensor]] = {}
    for key, val in tensors.items():
        if not key.startswith("optim."):
            continue
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = val
    opt.load_state_dict({"state": state, "param_groups": groups})


def _rng_tensor(state: Tensor) -> Tensor:
    return state.detach().cpu().to(torch.uint8).contiguous()


def save(
    run_dir: Path,
    step: int,
    model_state: dict[str, Tensor],
    state_tensors: dict[str, Tensor],
    meta: dict[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint ``step`` atomically and keep only the newest ``keep``."""
    ck_root = run_dir / "checkpoints"
    ck_root.mkdir(parents=True, exist_ok=True)
    for stale in ck_root.glob(".step-*.tmp-*"):  # the run dir is locked: every temp dir here is a dead writer's
        shutil.rmtree(stale, ignore_errors=True)
    final = ck_root / f"step-{step:08d}"
    with atomic_directory(final) as tmp:
        files = {}
        save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
        save_file(state_tensors, str(tmp / "state.safetensors"))
        for name in ("model.safetensors", "state.safetensors"):
            files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)}
        meta = dict(meta, step=step, files=files, version=__version__, git_revision=git_revision())
        atomic_write_json(tmp / "meta.json", meta)
    existing = sorted(p for p in ck_root.iterdir() if p.name.startswith("step-"))
    for old in existing[:-keep]:
        discard_dir(old)  # renamed to .step-*.tmp-* first: an interrupted removal leaves no half checkpoint
    return final


def verify(ckpt: Path) -> dict[str, Any]:
    """-> meta, after checking that every file is present with the recorded size and hash."""
    mp = ckpt / "meta.json"
    if not mp.is_file():
        raise CheckpointError(f"{ckpt}: incomplete checkpoint (no meta.json)")
    try:
        meta = json.loads(mp.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{mp}: corrupt ({e})") from None
    for name, info in meta.get("files", {}).items():
        f = ckpt / name
        if not f.is_file() or f.stat().st_size != info["bytes"] or _sha256(f) != info["sha256"]:
            raise CheckpointError(f"{f}: missing or corrupt (size/hash differ from meta.json)")
    if set(meta.get("files", {})) != {"model.safetensors", "state.safetensors"}:
        raise CheckpointError(f"{ckpt}: incomplete checkpoint")
    return meta


latest = latest_checkpoint  # newest checkpoint that verifies: one function, in tokendrop.rundir


def load(ckpt: Path) -> tuple[dict[str, Any], dict[str, Tensor], dict[str, Tensor]]:
    """-> (meta, model state, training-state tensors)."""
    meta = verify(ckpt)
    return meta, load_file(str(ckpt / "model.safetensors")), load_file(str(ckpt / "state.safetensors"))


def rng_tensors(selector_state: Tensor | None) -> dict[str, Tensor]:
    out = {"rng.torch": _rng_tensor(torch.get_rng_state())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["rng.cuda"] = _rng_tensor(torch.cuda.get_rng_state())
    if selector_state is not None:
        out["rng.selector"] = _rng_tensor(selector_state)
    return out


def restore_rng(tensors: dict[str, Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
