"""Training checkpoints: safetensors + JSON, written atomically, verified on load, no pickles.

Layout of ``RUN_DIR/checkpoints/step-00001234/`` (FSDP runs:
:mod:`tokendrop.train.checkpoint_sharded`, ``shards/*.safetensors`` instead of model.safetensors):
    model.safetensors   the model's state dict (our key names, fp32)
    state.safetensors   optimizer moments, importance vector, RNG states (uint8 tensors)
    meta.json           config, step, data position, optimizer hyper-parameters, package version,
                        git revision, and the size + sha256 of both tensor files

A checkpoint is written into a hidden temp dir beside its final name and renamed when complete, so
a killed writer leaves only a ``.step-*.tmp-*`` dir that is ignored (and removed by the next
writer).

Every load of a tokendrop checkpoint goes through this module (:func:`load_verified` = :func:`find`
+
:func:`read_tensors`): a tensor file is read once and parsed only after the sha256 of exactly those
bytes matched ``meta.json``; a missing, truncated or corrupt file or ``meta.json`` is a one-line
:class:`CheckpointError` naming the file and the fix (an older checkpoint of the run that verifies,
when there is one).  ``tokendrop verify PATH`` (:mod:`tokendrop.verification`) checks whole runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load as st_load
from torch import Tensor

from tokendrop.errors import TokendropError
from tokendrop.runs.files import atomic_directory, atomic_write_json, discard_dir, write_safetensors
from tokendrop.version import __version__


class CheckpointError(TokendropError, ValueError):
    """A checkpoint that is missing, incomplete or corrupt."""


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks (the one file-hash helper)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def optimizer_to_tensors(
    opt: torch.optim.Optimizer,
) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """Flatten an optimizer state dict into tensors + JSON-able param groups."""
    sd = opt.state_dict()
    tensors: dict[str, Tensor] = {}
    for idx, st in sd["state"].items():
        for name, val in st.items():
            t = val if isinstance(val, Tensor) else torch.tensor(val)
            tensors[f"optim.{idx}.{name}"] = t.detach().cpu().contiguous()
    return tensors, sd["param_groups"]


def optimizer_from_tensors(
    opt: torch.optim.Optimizer, tensors: dict[str, Tensor], groups: list[dict[str, Any]]
) -> None:
    state: dict[int, dict[str, Tensor]] = {}
    for key, val in tensors.items():
        if not key.startswith("optim."):
            continue
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = val
    opt.load_state_dict({"state": state, "param_groups": groups})


def _rng_tensor(state: Tensor) -> Tensor:
    return state.detach().cpu().to(torch.uint8).contiguous()


def writing(run_dir: Path, step: int):
    """The temp dir that becomes checkpoint ``step`` when the block ends (``atomic_directory``),
    after removing the temp dirs dead writers left (the run dir is locked: every one is a dead
    writer's)."""
    ck_root = run_dir / "checkpoints"
    ck_root.mkdir(parents=True, exist_ok=True)
    for stale in ck_root.glob(".step-*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return atomic_directory(ck_root / f"step-{step:08d}")


def finish(
    tmp: Path,
    step: int,
    state_tensors: dict[str, Tensor],
    meta: dict[str, Any],
    weight_files: list[str],
) -> None:
    """Write state.safetensors, then meta.json (last) recording the size and sha256 of it and of
    ``weight_files`` (already in ``tmp``)."""
    write_safetensors(state_tensors, tmp / "state.safetensors")
    files = {}
    for name in [*weight_files, "state.safetensors"]:
        files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": sha256_file(tmp / name)}
    meta = dict(meta, step=step, files=files, version=__version__, git_revision=git_revision())
    atomic_write_json(tmp / "meta.json", meta)


def prune(ck_root: Path, keep: int) -> None:
    """Keep only the newest ``keep`` checkpoints; one that a reader holds (:func:`reading`) stays
    until a later prune finds it free."""
    existing = sorted(p for p in ck_root.iterdir() if p.name.startswith("step-"))
    for old in existing[:-keep]:
        with _lease(old, fcntl.LOCK_EX) as free:
            if free:
                discard_dir(
                    old
                    # renamed to .step-*.tmp-* first: an interrupted removal leaves no half
                    # checkpoint
                )


def _lease_path(ckpt: Path) -> Path:
    return ckpt.parent / f".{ckpt.name}.reading"


@contextlib.contextmanager
def _lease(ckpt: Path, how: int) -> Iterator[bool]:
    """Hold ``ckpt``'s lease file locked ``how`` (``LOCK_SH``: a reader, ``LOCK_EX``: the pruner),
    never waiting: yields whether it is held (False: another process holds it the other way).  A
    lease file that cannot be created (a read-only file system, no permission: then no prune runs
    there either) counts as held.  The file is removed when no one else holds it."""
    lf = _lease_path(ckpt)
    while True:
        try:
            fd = os.open(lf, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            yield True
            return
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            yield False
            return
        try:
            # not removed by another holder meanwhile
            same = os.stat(lf).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield True
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other reader: the file goes
            with contextlib.suppress(OSError):
                os.unlink(lf)
        except OSError:
            pass
        os.close(fd)


@contextlib.contextmanager
def reading(path: str | os.PathLike) -> Iterator[Path]:
    """The checkpoint to read for ``path``, held for the block so that rotation (:func:`prune`)
    cannot remove it meanwhile: a checkpoint dir itself, or a run dir's newest checkpoint (one
    removed between the listing and the lease is passed over for the next newest).  Any other
    directory (a Hugging Face model) is yielded as it is.  Raises :class:`CheckpointError` as
    :func:`find` does."""
    p = Path(path)
    if not (p / "checkpoints").is_dir():
        if (p / "meta.json").is_file() and p.parent.name == "checkpoints":
            with _lease(p, fcntl.LOCK_SH):
                yield p
        else:
            yield p
        return
    yield from _held_newest(p, verified=False)  # a damaged one is read, and refused


def save(
    run_dir: Path,
    step: int,
    model_state: dict[str, Tensor],
    state_tensors: dict[str, Tensor],
    meta: dict[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint ``step`` (unsharded: one process holds everything) atomically and keep only
    the newest ``keep``.  Sharded checkpoints: :mod:`tokendrop.train.checkpoint_sharded`."""
    with writing(run_dir, step) as tmp:
        write_safetensors(
            {k: v.detach().cpu().contiguous() for k, v in model_state.items()},
            tmp / "model.safetensors",
        )
        finish(tmp, step, state_tensors, meta, ["model.safetensors"])
    prune(run_dir / "checkpoints", keep)
    return run_dir / "checkpoints" / f"step-{step:08d}"


WEIGHT_FILES = ("model.safetensors", "state.safetensors")  # of an unsharded checkpoint
SHARD_DIR = "shards"  # of a sharded one: shards/*.safetensors (tokendrop.train.checkpoint_sharded)


def consolidate_model(ckpt: Path) -> dict[str, Tensor]:
    """The full model state dict of a sharded checkpoint, in one process and without a process
    group (DCP with ``no_dist``: each tensor assembled from the pieces every rank wrote).  No
    verification here: :func:`read_model` hashes the files first."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    md = HuggingFaceStorageReader(str(Path(ckpt) / SHARD_DIR)).read_metadata()
    tensors = {
        "model": {
            k[len("model.") :]: torch.empty(m.size, dtype=m.properties.dtype)
            for k, m in md.state_dict_metadata.items()
            if k.startswith("model.")
        }
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(
            tensors,
            storage_reader=HuggingFaceStorageReader(str(Path(ckpt) / SHARD_DIR)),
            no_dist=True,
        )
    return tensors["model"]


def is_sharded(meta: dict[str, Any]) -> bool:
    """Written by FSDP ranks (:mod:`tokendrop.train.checkpoint_sharded`): weights in
    ``shards/*``."""
    return isinstance(meta.get("sharded"), dict)


def tensor_files(meta: dict[str, Any]) -> tuple[str, ...]:
    """Every tensor file of the checkpoint (what :func:`verify` checks by default)."""
    return tuple(meta["files"]) if is_sharded(meta) else WEIGHT_FILES


def model_files(meta: dict[str, Any]) -> tuple[str, ...]:
    """The files holding the model weights: model.safetensors, or every shard file."""
    return (
        tuple(n for n in meta["files"] if n != "state.safetensors")
        if is_sharded(meta)
        else ("model.safetensors",)
    )


def weights_sha256_of(meta: dict[str, Any]) -> str:
    """The identity of the checkpoint's weights: model.safetensors' sha256, or for a sharded one the
    sha256 of its shard files' names and sha256s (one line each, sorted)."""
    if not is_sharded(meta):
        return meta["files"]["model.safetensors"]["sha256"]
    lines = "".join(f"{n} {meta['files'][n]['sha256']}\n" for n in sorted(model_files(meta)))
    return hashlib.sha256(lines.encode()).hexdigest()


def read_model(ckpt: str | os.PathLike, meta: dict[str, Any] | None = None) -> dict[str, Tensor]:
    """The full model state dict of a checkpoint, every file hashed against meta.json first; a
    sharded one is consolidated in this process (no process group needed)."""
    ckpt = Path(ckpt)
    meta = read_meta(ckpt) if meta is None else meta
    if not is_sharded(meta):
        return read_tensors(ckpt, "model.safetensors", meta)
    for name in model_files(meta):
        check_file(ckpt, name, meta)
    try:
        model = consolidate_model(ckpt)
    except Exception as e:  # noqa: BLE001 -- hashes matched: meta.json was edited too
        raise CheckpointError(
            f"{ckpt}: its shard files do not load "
            f"({str(e).splitlines()[0] if str(e) else e!r}); {_fix(ckpt)}"
        ) from None
    check_finite(model, ckpt / SHARD_DIR, _fix(ckpt))
    return model


_HINTING = [False]


def _fix(ckpt: Path) -> str:
    """The fix to name for a bad checkpoint: an older one of the same run that verifies, if any."""
    if ckpt.parent.name == "checkpoints" and not _HINTING[0]:
        _HINTING[0] = True  # the older checkpoints' own errors need no hint
        try:
            for cand in sorted(
                (
                    c
                    for c in ckpt.parent.iterdir()
                    if c.name.startswith("step-") and c.name < ckpt.name
                ),
                reverse=True,
            ):
                try:
                    verify(cand)
                except CheckpointError:
                    continue
                return f"restore it from a backup, or use the older checkpoint {cand}"
        finally:
            _HINTING[0] = False
    return (
        "restore it from a backup or use another checkpoint (`tokendrop verify PATH` "
        "lists every problem)"
    )


def read_meta(ckpt: str | os.PathLike) -> dict[str, Any]:
    """``ckpt/meta.json``, checked for the fields a checkpoint needs (``step``, ``config``, and
    ``files`` recording the size and sha256 of both tensor files); the tensor files are not read
    here."""
    ckpt = Path(ckpt)
    mp = ckpt / "meta.json"
    if not mp.is_file():
        raise CheckpointError(f"{ckpt}: not a complete checkpoint (no meta.json); {_fix(ckpt)}")
    try:
        meta = json.loads(mp.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{mp}: corrupt (invalid JSON: {str(e).splitlines()[0]}); {_fix(ckpt)}"
        ) from None
    except OSError as e:
        raise CheckpointError(
            f"{mp}: unreadable ({e.strerror or e}); check its permissions"
        ) from None
    files = meta.get("files") if isinstance(meta, dict) else None
    sharded = isinstance(meta, dict) and is_sharded(meta)
    expected = (
        ({n for n in files if n.startswith("shards/")} | {"state.safetensors"})
        if (sharded and isinstance(files, dict))
        else set(WEIGHT_FILES)
    )
    if (
        not isinstance(files, dict)
        or set(files) != expected
        or len(expected) < 2
        or not all(
            isinstance(i, dict)
            and isinstance(i.get("bytes"), int)
            and not isinstance(i.get("bytes"), bool)
            and isinstance(i.get("sha256"), str)
            for i in files.values()
        )
    ):
        what = "state.safetensors and the shard files" if sharded else " and ".join(WEIGHT_FILES)
        raise CheckpointError(
            f"{mp}: 'files' does not record the size and sha256 of {what} "
            f"(incomplete or edited); {_fix(ckpt)}"
        )
    step = meta.get("step")
    if (
        not isinstance(step, int)
        or isinstance(step, bool)
        or step < 0
        or not isinstance(meta.get("config"), dict)
    ):
        raise CheckpointError(
            f"{mp}: no valid 'step' (an integer >= 0) or 'config' table (incomplete or "
            f"edited); {_fix(ckpt)}"
        )
    return meta


def check_file(ckpt: Path, name: str, meta: dict[str, Any], data: bytes | None = None) -> None:
    info = meta["files"][name]
    f = ckpt / name
    if data is None and not f.is_file():
        raise CheckpointError(f"{f}: missing (meta.json records it); {_fix(ckpt)}")
    size = len(data) if data is not None else f.stat().st_size
    if size != info["bytes"]:
        raise CheckpointError(
            f"{f}: {size} bytes but meta.json records {info['bytes']} (truncated or "
            f"corrupt); {_fix(ckpt)}"
        )
    sha = hashlib.sha256(data).hexdigest() if data is not None else sha256_file(f)
    if sha != info["sha256"]:
        raise CheckpointError(
            f"{f}: corrupt (sha256 {sha[:12]}... differs from {info['sha256'][:12]}... recorded in "
            f"meta.json); {_fix(ckpt)}"
        )


def step_counters(ckpt: str | os.PathLike, meta: dict[str, Any]) -> dict[str, Tensor]:
    """The optimizer's step counters (``optim.*.step``) of a checkpoint whose tensor files' hashes
    were checked: from state.safetensors, or for a sharded checkpoint from its shard files, where
    DCP writes them (``optim.state.<name>.step``, each once), read by key from the safetensors
    headers: no process group, nothing else of the shards read."""
    ckpt = Path(ckpt)
    out: dict[str, Tensor] = {}
    for name in (*(model_files(meta) if is_sharded(meta) else ()), "state.safetensors"):
        with safe_open(str(ckpt / name), framework="pt") as st:
            for k in st.keys():
                if k.startswith("optim.") and k.endswith(".step"):
                    out[k] = st.get_tensor(k)
    return out


def verify(ckpt: str | os.PathLike, files: tuple[str, ...] | None = None) -> dict[str, Any]:
    """-> meta, after checking meta.json and that each of ``files`` (default: every tensor file) has
    the recorded size and sha256.  Raises :class:`CheckpointError` (one line naming the file and the
    fix)."""
    ckpt = Path(ckpt)
    meta = read_meta(ckpt)
    for name in tensor_files(meta) if files is None else files:
        check_file(ckpt, name, meta)
    return meta


def _listed(p: Path) -> list[Path]:
    """A run dir's checkpoint dirs, newest first (none when it has none)."""
    root = p / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(
        (c for c in root.iterdir() if c.name.startswith("step-") and c.is_dir()), reverse=True
    )


def _candidates(p: Path) -> list[Path]:
    """A run dir's checkpoint dirs, newest first (at least one), or [p] for a checkpoint dir."""
    if not p.is_dir():
        raise CheckpointError(
            f"{p}: no such directory; expected a tokendrop run or checkpoint directory"
        )
    if (p / "meta.json").is_file() and not (p / "checkpoints").is_dir():
        return [p]
    cands = _listed(p)
    if not cands:
        raise CheckpointError(
            f"{p}: no checkpoint (expected a run directory with checkpoints/step-*/ or a "
            "checkpoint directory holding meta.json); train until the first checkpoint "
            "(train.ckpt_every) or pass another path"
        )
    return cands


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    """``run_dir/checkpoints`` holds a checkpoint directory (complete by construction: temp dirs
    are hidden; whether it verifies is checked when it is loaded)."""
    root = Path(run_dir) / "checkpoints"
    return root.is_dir() and any(c.name.startswith("step-") and c.is_dir() for c in root.iterdir())


def find(path: str | os.PathLike, fallback: bool = False) -> Path:
    """The checkpoint to load for ``path``: a checkpoint dir itself, or a run dir's newest
    checkpoint.

    Without ``fallback`` only meta.json is checked here (the tensor files are hashed when they are
    read), and a run dir's newest checkpoint must be intact: a bad one raises
    :class:`CheckpointError` naming the file and an older checkpoint that verifies.  With
    ``fallback`` (``--resume``) bad checkpoints are skipped with a warning on stderr and the newest
    one that verifies in full is taken."""
    cands = _candidates(Path(path))
    if not fallback:
        read_meta(cands[0])
        return cands[0]
    first_error = None
    for cand in cands:
        try:
            verify(cand)
            return cand
        except CheckpointError as e:
            first_error = first_error or e
            print(f"warning: skipping {e}", file=sys.stderr)
    raise CheckpointError(f"{path}: no checkpoint that verifies ({first_error})")


def read_tensors(
    ckpt: str | os.PathLike, name: str = "model.safetensors", meta: dict[str, Any] | None = None
) -> dict[str, Tensor]:
    """The tensors of ``ckpt/name``, read once and parsed only after the sha256 of exactly those
    bytes matched meta.json.  The one way a tokendrop checkpoint's tensors are read."""
    ckpt = Path(ckpt)
    meta = read_meta(ckpt) if meta is None else meta
    f = ckpt / name
    try:
        data = f.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{f}: missing (meta.json records it); {_fix(ckpt)}") from None
    except OSError as e:
        raise CheckpointError(
            f"{f}: unreadable ({e.strerror or e}); check its permissions"
        ) from None
    check_file(ckpt, name, meta, data)
    try:
        tensors = st_load(data)
    except Exception as e:  # noqa: BLE001 -- SafetensorError and friends: hash matched, so meta.json was edited too
        raise CheckpointError(
            f"{f}: not a readable safetensors file "
            f"({str(e).splitlines()[0] if str(e) else e!r}); {_fix(ckpt)}"
        ) from None
    check_finite(tensors, f, _fix(ckpt))
    return tensors


def check_finite(tensors: dict[str, Tensor], where: str | os.PathLike, fix: str) -> None:
    """Refuse floating-point tensors holding NaN or inf (the trainer never saves one: it skips a
    non-finite step), whatever rewrote the file and its hash: weights, optimizer moments and
    importance scores read from disk are checked before anything uses them."""
    for k, t in tensors.items():
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(
                f"{where}: tensor {k} holds {bad} NaN/inf value(s) of {t.numel()}; {fix}"
            )


def latest_checkpoint(path: str | os.PathLike) -> Path | None:
    """The checkpoint to use for ``path``: a checkpoint dir itself (verified: a corrupt one raises
    ``CheckpointError``), or a run dir's newest checkpoint that verifies (corrupt ones are skipped
    with a warning on stderr); None when there is none."""
    p = Path(path)
    if (p / "meta.json").is_file() and (
        (p / "model.safetensors").is_file() or (p / "shards").is_dir()
    ):
        verify(p)
        return p
    root = p / "checkpoints"
    if not root.is_dir():
        return None
    for cand in sorted((c for c in root.iterdir() if c.name.startswith("step-")), reverse=True):
        try:
            verify(cand)
            return cand
        except CheckpointError as e:
            print(f"warning: skipping {e}", file=sys.stderr)
    return None


latest = latest_checkpoint  # newest checkpoint that verifies (None if none)


@contextlib.contextmanager
def reading_latest(path: str | os.PathLike) -> Iterator[Path | None]:
    """:func:`latest_checkpoint` held for the block as :func:`reading` holds a checkpoint: the
    newest one that verifies (corrupt ones skipped with a warning on stderr), a checkpoint removed
    by rotation before it is held passed over for the next newest; None when there is none.  For a
    checkpoint dir: that one, held, verified."""
    p = Path(path)
    if not (p / "checkpoints").is_dir():
        if (p / "meta.json").is_file() and p.parent.name == "checkpoints":
            with _lease(p, fcntl.LOCK_SH):
                yield latest_checkpoint(p)
        else:
            yield latest_checkpoint(p)
        return
    yield from _held_newest(p, verified=True)


def _held_newest(p: Path, verified: bool) -> Iterator[Path | None]:
    """A run dir's newest checkpoint under a shared lease, for :func:`reading` and
    :func:`reading_latest`: one removed by rotation between the listing and the lease is passed
    over for the next newest.  ``verified``: the newest that verifies (corrupt ones skipped with a
    warning on stderr), None when there is none; else the newest, and no checkpoint at all is
    :func:`_candidates`' error."""
    for _ in range(100):  # a training run rotating faster than this loop lists is retried
        cands = _listed(p) if verified else _candidates(p)
        gone = False
        for cand in cands:
            with _lease(cand, fcntl.LOCK_SH) as held:
                if not (held and cand.is_dir()):
                    gone = True  # removed by rotation meanwhile
                    continue
                if verified:
                    try:
                        verify(cand)
                    except CheckpointError as e:
                        print(f"warning: skipping {e}", file=sys.stderr)
                        continue
                else:  # a checkpoint, damaged or not: not some other directory (as find reads it)
                    read_meta(cand)
                yield cand
                return
        if verified and not gone:
            yield None
            return
    raise CheckpointError(
        f"{p}: its checkpoints were all removed while being opened; run the command again"
    )


def load(
    ckpt: str | os.PathLike, state: bool = True, consolidate: bool = True
) -> tuple[dict[str, Any], dict[str, Tensor], dict[str, Tensor]]:
    """-> (meta, model state, training-state tensors ({} unless ``state``)), every file verified.  A
    sharded checkpoint's model is consolidated into full tensors; with ``consolidate=False`` its
    shard files are only verified and the model state is {} (the caller loads the shards itself:
    :func:`tokendrop.train.checkpoint_sharded.load_into`)."""
    ckpt = Path(ckpt)
    meta = read_meta(ckpt)
    if is_sharded(meta) and not consolidate:
        for name in model_files(meta):
            check_file(ckpt, name, meta)
        model = {}
    else:
        model = read_model(ckpt, meta)
    return meta, model, (read_tensors(ckpt, "state.safetensors", meta) if state else {})


def load_verified(
    path: str | os.PathLike, state: bool = False, fallback: bool = False, consolidate: bool = True
) -> tuple[Path, dict[str, Any], dict[str, Tensor], dict[str, Tensor]]:
    """The shared verifying loader: a run or checkpoint dir -> (checkpoint dir, meta, model tensors,
    state tensors ({} unless ``state``)); every file read is hashed against meta.json before it is
    parsed.  ``fallback``: as :func:`find` (each file still read and hashed once).  ``consolidate``:
    as :func:`load`."""
    cands = _candidates(Path(path))
    if not fallback:
        ck = find(path)
        return (ck, *load(ck, state=state, consolidate=consolidate))
    skipped: list[CheckpointError] = []
    for cand in cands:
        try:
            found = (cand, *load(cand, state=state, consolidate=consolidate))
        except CheckpointError as e:
            skipped.append(e)
            continue
        # warned only when an older checkpoint is used instead (else: the one error below)
        for e in skipped:
            print(f"warning: skipping {e}", file=sys.stderr)
        return found
    raise CheckpointError(
        f"{path}: none of its {len(skipped)} checkpoint(s) verifies; the newest: {skipped[0]}"
    )


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
