"""The disk as the cases see it: snapshots compared before and after, leftovers, and the small
edits a setup makes (a flipped byte, a cut file, an edited meta.json, a shard's hash)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokendrop.runs.metrics import scan_lines


def sha256(p: Path) -> str:
    from tokendrop.runs.checkpoint import sha256_file  # the one file-hash helper

    return sha256_file(p)


def snapshot(root: Path) -> dict[str, Any]:
    """name -> (size, sha256) of every file (and "dir" of every directory) under ``root``."""
    if root.is_symlink() or root.is_file():
        return {".": (root.stat().st_size, sha256(root))}
    if not root.exists():
        return {".": "absent"}
    out: dict[str, Any] = {".": "dir"}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (
            "dir"
            if p.is_dir() and not p.is_symlink()
            else (p.lstat().st_size, sha256(p) if p.is_file() else "link")
        )
    return out


LEFTOVER = re.compile(r"\.tmp-|\.old-|\.tokendrop\.lock$|\.tokendrop-writer$")


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if LEFTOVER.search(p.name))


def flip_byte(p: Path, offset: int = -100) -> None:
    b = bytearray(p.read_bytes())
    b[offset] ^= 0xFF
    p.write_bytes(bytes(b))


def flip(rel: str) -> Callable[[Path], None]:
    """A setup: one byte of CASE/REL flipped."""
    return lambda c: flip_byte(c / rel)


def truncate(p: Path, frac: float = 0.5) -> None:
    with open(p, "r+b") as f:
        f.truncate(int(p.stat().st_size * frac))


def edit_json(p: Path, fn: Callable[[dict], Any]) -> None:
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d, indent=1))


def metrics(run: Path) -> list[dict]:
    """The records of run/metrics.jsonl that parse (tokendrop.runs.metrics.scan_lines, the log's one
    parser; torn or bad lines are left out here: the checks look at steps)."""
    p = run / "metrics.jsonl"
    return [rec for _, rec in scan_lines(p.read_text())[0]] if p.is_file() else []


def ckpt_ok(ck: Path) -> bool:
    """A checkpoint dir whose files match its meta.json's sizes and sha256 (checked here, not by
    tokendrop)."""
    try:
        meta = json.loads((ck / "meta.json").read_text())
        return bool(meta["files"]) and all(
            (ck / n).stat().st_size == i["bytes"] and sha256(ck / n) == i["sha256"]
            for n, i in meta["files"].items()
        )
    except (OSError, ValueError, KeyError):
        return False


def checkpoints(run: Path) -> list[Path]:
    d = run / "checkpoints"
    return sorted(p for p in d.iterdir() if p.name.startswith("step-")) if d.is_dir() else []


def load_tensors(p: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(p))


def save_tensors(tensors: dict, p: Path) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(p))


def shard_path(data: Path, split: str = "train") -> Path:
    return data / json.loads((data / "meta.json").read_text())["splits"][split]["file"]


def set_shard_hash(data: Path, split: str = "train") -> None:
    """Record the shard's current sha256 (and size-derived counts unchanged) in meta.json: an edit
    that only a content check (not the hash) can find."""
    f = shard_path(data, split)

    def fn(d):
        info = d["splits"][split]
        for k in ("sha256", "file_sha256"):
            if k in info:
                info[k] = sha256(f)

    edit_json(data / "meta.json", fn)
