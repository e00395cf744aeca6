"""Small helpers shared by the study's modules: the error class, logging, atomic writes, numbers,
the machine's description."""

from __future__ import annotations

import math
import os
import platform
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from tokendrop.config import config_dir
from tokendrop.errors import ConfigError
from tokendrop.lab.machine import cpu_model, loadavg as machine_loadavg
from tokendrop.runs.checkpoint import git_revision
from tokendrop.version import __version__


class StudyError(ConfigError):
    """A study that cannot go on as asked (changed config over an existing OUT, interrupted run,
    ...).

    A ``ConfigError`` subclass so that the command line reports it as a one-line error."""


def log(msg: str) -> None:
    print(f"[study] {msg}", file=sys.stderr, flush=True)


def isnum(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def mean(xs: list[Any]) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else float("nan")


def pct(rate: float) -> str:
    return f"{100 * rate:g}"


def resolve_path(p: str) -> Path:
    """As given if it exists (or is absolute), else relative to the repository root."""
    q = Path(p).expanduser()
    if not q.is_absolute() and not q.exists():
        alt = config_dir().parent / q
        if alt.exists() or any(ch in p for ch in "*?["):
            q = alt
    return q.resolve() if q.exists() else q


def resolve_out(p: str) -> Path:
    """A path to write (docs_dir, source_cache): absolute as given, else under the working
    directory."""
    q = Path(p).expanduser()
    return q if q.is_absolute() else Path.cwd() / q


def hardware() -> dict[str, Any]:
    hw = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "tokendrop": __version__,
    }
    try:
        hw["git_revision"] = git_revision()
    except Exception:  # noqa: BLE001
        pass
    return hw


def cpu_s() -> float:
    """CPU seconds (user + system, all threads) of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loadavg() -> float | None:
    """The 1-minute load average (``tokendrop.lab.machine.loadavg``), or None."""
    la = machine_loadavg()
    return la[0] if la else None
