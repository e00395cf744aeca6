"""A case (one row of the matrix), what its command did, and the test gates a driver waits at."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faultlib.commands import ENV


@dataclass
class Case:
    name: str
    # the category: outputs, corrupt files, locks, signals, moved runs, reuse, logs, bad input, ...
    row: str
    argv: list[str]  # after `python -m tokendrop`; {C} = the case dir, {B} = the base dir
    expect: str  # what should happen, in words (the report's "expected" column)
    rc: int | tuple[int, ...] = 2
    needs: tuple[str, ...] = ()  # base items copied into the case dir
    setup: Callable[[Path], None] | None = None
    watch: tuple[str, ...] = ()  # paths (relative to the case dir) that must be unchanged
    absent: tuple[str, ...] = ()  # paths that must not exist afterwards
    says: tuple[str, ...] = ()  # substrings the (one-line) message must contain ({C} expands)
    check: Callable[[Path, Outcome], str | None] | None = None  # -> why it fails, or None
    drive: Callable[[subprocess.Popen, Path], None] | None = None  # signals, while it runs
    gate: str = ""  # the test gate (tokendrop.runs.gate) the command waits at, for ``drive``
    # paths another process holds the write lock of while the command runs
    hold: tuple[str, ...] = ()
    cwd: str = ""  # relative to the case dir
    fsize: int = 0  # RLIMIT_FSIZE in bytes (a full disk, as far as one file is concerned)
    # the case dir is a read-only mount for the command (unshare -m: root, or user namespaces)
    read_only: bool = False
    one_line: bool | None = None  # default: required for non-zero exits
    timeout: int = 240
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # set for the command (over ENV)


@dataclass
class Outcome:
    rc: int | str
    stdout: str
    stderr: str
    seconds: float


# tokendrop.runs.gate: the command waits at a named point (test-only)
GATE_ENV = "TOKENDROP_TEST_GATE"


DRIVE_NOTES: dict[Path, str] = {}  # case dir -> why its driver could not do its part


def gate_file(c: Path) -> Path:
    """The file a case's command creates when it reaches its gate (beside the case dir, not in
    it)."""
    return c.parent / f"{c.name}.gate"


def gated_env(case: Case, c: Path) -> dict[str, str]:
    env = dict(ENV, **case.env)
    return dict(env, **{GATE_ENV: f"{case.gate}={gate_file(c)}"}) if case.gate else env


def at_gate(sig: int, limit: float = 600):
    """A driver: wait until the command is waiting at its gate (``Case.gate``: provably mid-work,
    whatever the machine's speed), send ``sig``, release the gate.  A command that ends without
    reaching its gate fails the case (noted), instead of being signalled at a moment it never
    had."""

    def drive(p: subprocess.Popen, c: Path) -> None:
        g = gate_file(c)
        t0 = time.time()
        while time.time() - t0 < limit and p.poll() is None and not g.exists():
            time.sleep(0.02)
        if not g.exists():
            DRIVE_NOTES[c] = (
                "the command ended (or took over the time limit) before it reached its gate"
            )
            return
        p.send_signal(sig)
        g.unlink()

    return drive


def text_lines(s: str) -> list[str]:
    return [ln for ln in s.splitlines() if ln.strip()]
