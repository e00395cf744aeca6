"""Waiting on child processes by what they have done, never by how long it took.

A signal sent "a moment after start-up" races the handler's installation on a loaded machine; these
helpers wait for evidence instead (a logged training step is written only inside the loop, where
SIGINT/SIGTERM are handled), and give up only on a generous deadline or when the process ended.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable


def logged_steps(run: Path) -> int:
    """Training steps logged in ``run``'s metrics.jsonl so far (0 before it exists)."""
    try:
        return (run / "metrics.jsonl").read_bytes().count(b'"loss"')
    except FileNotFoundError:
        return 0


def wait_until(p: subprocess.Popen, cond: Callable[[], bool], timeout: float = 300.0, poll: float = 0.005) -> bool:
    """Poll ``cond()`` until it holds (True), or ``p`` ended / the deadline passed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if p.poll() is not None:
            return cond()
        time.sleep(poll)
    return False


def wait_for_training(p: subprocess.Popen, run: Path, steps: int = 1) -> None:
    """Return once ``p`` (a pretrain of ``run``) has logged ``steps`` training steps: its signal
    handlers are installed from then on.  Fails with the process's output if it ended first."""
    if not wait_until(p, lambda: logged_steps(run) >= steps):
        if p.poll() is None:
            p.kill()
        raise AssertionError(f"no training step {steps} logged in {run}: {p.communicate()}")
