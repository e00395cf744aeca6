"""Atomic directory output: build into a hidden temp dir beside the target, then rename it.

    with atomic_directory(out) as tmp:
        (tmp / "model.safetensors").write_bytes(...)
    # out now holds the complete result; on any error (or a kill) out is untouched

A killed writer leaves only ``.NAME.tmp-*`` (never taken for the result); an existing ``out`` is
moved aside and removed only after the new one is in place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def replace_dir(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``, replacing an existing ``out``."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        old.rmdir()
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


@contextlib.contextmanager
def atomic_directory(out_dir: str | os.PathLike) -> Iterator[Path]:
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary directory
    try:
        yield tmp
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
