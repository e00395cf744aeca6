"""Atomic directory output: build into a hidden temp dir beside the target, then rename it.

    with atomic_directory(out) as tmp:
        (tmp / "model.safetensors").write_bytes(...)
    # out now holds the complete result; on any error (or a kill) out is untouched

A killed writer leaves only ``.NAME.tmp-*`` (never taken for the result); an existing ``out``
directory is moved aside (to a temp name) and removed only after the new one is in place; a file or
link at ``out`` is never replaced (FileExistsError).  Every temp dir records its writer
(host and pid); the next write to the same target removes the temp dirs whose writer on this host
is gone, so a writer killed hard (SIGKILL, OOM) does not leave its partial output behind for good.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokendrop.errors import TokendropError


def replace_dir(tmp: Path, out: Path, prefix: str | None = None) -> None:
    """Rename ``tmp`` to ``out``, replacing an existing ``out`` directory (never a file or a
    link)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(errno.EEXIST, "exists and is not a directory; not replaced", str(out))
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=prefix or f".{out.name}.tmp-", dir=out.parent))
        old.rmdir()
        out.rename(old)
        tmp.rename(out)
        _remove(old)
    else:
        tmp.rename(out)


def discard_dir(d: Path, prefix: str | None = None) -> None:
    """Remove directory ``d``: renamed first to a temp name with this process as its writer, so that
    a kill during the removal leaves only a temp dir that the next write to ``d`` sweeps away."""
    d = Path(d)
    gone = Path(tempfile.mkdtemp(prefix=prefix or f".{d.name}.tmp-", dir=d.parent))
    gone.rmdir()
    d.rename(gone)
    _remove(gone)


def _remove(d: Path) -> None:
    try:
        (d / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    except OSError:
        pass
    shutil.rmtree(d, ignore_errors=True)


_OWNER = ".tokendrop-writer"  # "<host> <pid>" of the process writing a temp dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temp_dirs(parent: Path, prefix: str) -> list[Path]:
    """Remove ``parent/prefix*`` temp dirs whose recorded writer is a dead process on this host.

    Dirs without a writer record, from another host, or whose writer still runs are left alone
    (a recycled pid only delays the clean-up)."""
    removed = []
    host = socket.gethostname()
    for d in sorted(Path(parent).glob(prefix + "*")):
        try:
            whost, wpid = (d / _OWNER).read_text().split()
            if whost != host or _alive(int(wpid)):
                continue
        except (OSError, ValueError):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _ordinary_modes(root: Path, umask: int) -> None:
    """Give the files a writer created private (safetensors writes 0600) the mode of an ordinary
    new file (0666 less the umask), so the result honours the user's umask like any other output."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~umask)


@contextlib.contextmanager
def atomic_directory(out_dir: str | os.PathLike, prefix: str | None = None) -> Iterator[Path]:
    """Yield a fresh temp dir beside ``out_dir`` (named ``prefix*``, default ``.NAME.tmp-*``) after
    removing the ones dead writers left there; rename it to ``out_dir`` when the block ends, remove
    it when the block raises."""
    out = Path(out_dir)
    prefix = prefix or f".{out.name}.tmp-"
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_dirs(out.parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        # mkdtemp makes it private; the result is an ordinary directory
        os.chmod(tmp, 0o777 & ~umask)
        (tmp / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        yield tmp
        (tmp / _OWNER).unlink(missing_ok=True)
        _ordinary_modes(tmp, umask)
        replace_dir(tmp, out, prefix)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# what to do about an OSError, by its errno: the one mapping every refusal of a failed read or write
# uses (cli.main, the checkpoint writer, prepare, locks), so each names its real cause
_OS_ERROR_FIXES = {
    errno.EROFS: "the file system is read-only: remount it read-write or choose a directory "
    "on a writable one",
    errno.EACCES: "permission denied: check its permissions or choose a directory "
    "you may write into",
    errno.EPERM: "not permitted: check its permissions or choose a directory you may write into",
    errno.ENOSPC: "the disk is full: free space",
    errno.EFBIG: "the file is larger than the file system allows: choose a directory on "
    "another file system",
}
if hasattr(errno, "EDQUOT"):
    _OS_ERROR_FIXES[errno.EDQUOT] = (
        "the disk quota is used up: free space within your quota or raise it"
    )
DISK_ERRNOS = frozenset(
    e for e in (errno.EROFS, errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e
)


def os_error_fix(e: OSError) -> str:
    """What to do about ``e``, named by its cause (read-only, permissions, disk full, quota, file
    size); for another errno: "check the file system (STRERROR)"."""
    return _OS_ERROR_FIXES.get(e.errno, f"check the file system ({e.strerror or e})")


def write_safetensors(
    tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    """``safetensors.torch.save_file``, whose I/O failures (disk full, quota, file too large)
    surface as an ``OSError`` with the errno (safetensors raises its own ``SafetensorError`` for
    them), so every writer's disk-full handling (``cli.main``, the checkpoint writer) sees them."""
    # safetensors.torch imports torch: here, so that the command line's output-directory checks
    # (tokendrop.runs.rundir) run before torch loads
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as e:
        m = re.search(r"os error (\d+)", str(e))
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


# ----------------------------------------------------------------------------------------------
# atomic files (tokendrop.runs.rundir re-exports them as part of the run-directory API)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path`` (same suffix, so e.g. ``savefig`` infers the format); when
    the block ends it is flushed to disk and renamed onto ``path``; when the block raises it is
    removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.tmp-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp makes 0600, and a writer may have replaced the temp file with its own (safetensors
        # does): the published file gets the mode of an ordinary new file (0666 less the umask)
        os.chmod(tmp, 0o666 & ~_umask())
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends): a reader sees the old content or the new one,
    never half."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def json_default(o: Any) -> Any:
    """What the package's JSON files hold for values ``json`` cannot write: a dataclass as its
    ``asdict``, a path as its string, a numpy/torch scalar or array as ``tolist()``, anything else
    as ``str``."""
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def json_text(obj: Any, indent: int = 1) -> str:
    """``obj`` as the JSON text every file of the package uses (UTF-8 kept,
    :func:`json_default`)."""
    return json.dumps(obj, indent=indent, default=json_default, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 1) -> Path:
    return atomic_write_text(path, json_text(obj, indent))


_RAISE = object()


def read_json(
    path: str | os.PathLike,
    error: type[Exception] = TokendropError,
    expect: type | None = dict,
    hint: str = "",
    default: Any = _RAISE,
) -> Any:
    """The one JSON reader: ``path`` parsed, or ``error`` with one line naming the file and what is
    wrong (missing, unreadable, not UTF-8, invalid JSON with its line and column, not a ``expect``)
    and ``hint`` (the fix) appended; with ``default`` given, that instead of any error (for state
    files whose absence or damage only means "start over")."""
    if default is not _RAISE:
        try:
            return read_json(path, error, expect, hint)
        except error:
            return default
    tail = f"; {hint}" if hint else ""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise error(f"{path}: not found{tail}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (invalid byte at {e.start}){tail}") from None
    except json.JSONDecodeError as e:
        raise error(
            f"{path}: invalid JSON (line {e.lineno} column {e.colno}: {e.msg}){tail}"
        ) from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e}){tail}") from None
    if expect is not None and not isinstance(obj, expect):
        raise error(
            f"{path}: expected a JSON {'object' if expect is dict else expect.__name__}, got "
            f"{type(obj).__name__}{tail}"
        )
    return obj


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
