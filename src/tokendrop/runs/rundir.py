"""The run-directory API every writing command uses: claim an output directory, lock it, find the
latest verified checkpoint, read and append metrics, and publish files atomically.

    with rundir.lock(out, TrainingError):                  # one writer per directory
        mode = rundir.prepare_output(out, "run", overwrite, inputs=[data_dir], error=TrainingError)
        if mode == "replace":
            rundir.discard(out)                            # only ever a marked dir of the same kind
        rundir.create(out, "run")                          # mkdir + the marker file
        rundir.atomic_write_text(out / "config.toml", text)

The rules (docs/reliability.md checks each):

* a directory tokendrop writes holds a marker, ``.tokendrop.json`` (``{"kind": ..., "version":
  ...}``; a run's also its ``run_id``, which its checkpoints record);
* an existing non-empty target is refused unless ``overwrite``; even then only a directory whose
  marker names the same kind of output is replaced -- never a regular file, a link, a directory
  tokendrop did not write, or one that contains an input of the command.  Resumable commands
  (``study``, ``demo``, ``evaluate``) continue a marked directory of their own kind; a run that
  never reached its first checkpoint is started over by the next ``pretrain --out`` into it (there
  is nothing to resume, and the corrected command must not be blocked by the failed one);
* ``lock`` holds ``fcntl.flock`` on ``.NAME.tokendrop.lock`` beside the target for the command's
  lifetime; a second writer fails at once with "PATH is in use by pid N"; the kernel releases the
  lock of a process that dies, so a dead holder's lock is taken over, with a note naming the dead
  pid.  A forked child (a data worker) closes its copy of the lock at the fork, so it never
  holds the lock of a parent that died.  The lock file is removed on release;
* every file is published by :func:`atomic_file` (temp file beside it + ``os.replace``); every
  directory by :func:`tokendrop.runs.files.atomic_directory`.  No outcome leaves a temp entry
  behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tokendrop.errors import TokendropError, option
from tokendrop.runs.files import atomic_write_json, discard_dir, os_error_fix
from tokendrop.version import __version__

MARKER = ".tokendrop.json"
KINDS = (
    "prepared",
    "run",
    "finetune",
    "evaluate",
    "export",
    "inspect",
    "study",
    "demo",
    "campaign",
)
# a marked dir of the same kind is continued without --overwrite
RESUMABLE = (
    "study",
    "demo",
    "evaluate",
    "campaign",
)


class RunDirError(TokendropError, ValueError):
    """An output directory that cannot be written as asked (exists, in use, not tokendrop's)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM turned into an exception; ``cli.main`` exits with 128 + ``signum``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class StopFlag:
    """SIGINT/SIGTERM set a flag; the loop saves a checkpoint at the end of the step and exits.  A
    second signal raises ``rundir.Interrupted`` at once (a checkpoint being written is then removed
    whole by its atomic directory; the last complete one stays)."""

    def __init__(self) -> None:
        self.stop = False
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if in_main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum:  # second signal: give up at once
            raise Interrupted(signum)
        self.stop = True
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def close_on_error(*things):
    """Close the progress bar, the loader (its worker processes) and the log when the loop raises
    (a second Ctrl-C, a non-finite loss); on success the loop's own ending closes them.  A thing
    with ``closes_failed`` set is closed with ``close(ok=False)`` (the metrics log: its trackers
    record a failed run)."""
    try:
        yield
    except BaseException:
        for t in things:
            if t is not None:
                with contextlib.suppress(Exception):
                    t.close(ok=False) if getattr(t, "closes_failed", False) else t.close()
        raise


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# ----------------------------------------------------------------------------------------------
# markers and the refusal rules


def read_marker(path: str | os.PathLike) -> dict[str, Any] | None:
    """The marker of a directory tokendrop wrote, or None."""
    try:
        m = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("kind") in KINDS else None


def write_marker(directory: str | os.PathLike, kind: str) -> Path:
    """The marker of a new ``kind`` output; a run's also holds its ``run_id`` (:func:`run_id`)."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    marker: dict[str, Any] = {
        "kind": kind,
        "writer": "tokendrop",
        "version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if kind == "run":
        marker["run_id"] = uuid.uuid4().hex
    return atomic_write_json(Path(directory) / MARKER, marker)


def run_id(path: str | os.PathLike) -> str | None:
    """The id a run directory got when it was created (its marker's ``run_id``, recorded in every
    checkpoint it writes: a checkpoint of another run copied in is told apart, whatever its
    settings); None for a directory that is no run or a run made before runs had ids."""
    m = read_marker(path)
    rid = m.get("run_id") if m is not None and m.get("kind") == "run" else None
    return rid if isinstance(rid, str) and rid else None


def create(path: str | os.PathLike, kind: str) -> Path:
    """``mkdir -p`` ``path`` and mark it as ``kind`` output (an existing marker is kept)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    if read_marker(p) is None:
        write_marker(p, kind)
    return p


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def prepare_output(
    path: str | os.PathLike,
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    error: type[TokendropError] = RunDirError,
    resumable: bool | None = None,
) -> str:
    """Check that ``path`` may be written as ``kind`` output; nothing is changed on disk.

    -> ``"new"`` (absent or empty), ``"continue"`` (a resumable kind's own marked dir, no
    ``overwrite``), ``"replace"`` (``overwrite`` of a marked dir of the same kind that contains
    none of ``inputs``), ``"restart"`` (a run that stopped before its first checkpoint -- an
    impossible setting, a full disk, a kill -- holds nothing to resume: it is started over without
    ``overwrite``, so the corrected command is never blocked by it).  Anything else raises
    ``error`` with a one-line message naming the path and the fix."""
    p = Path(path)
    resumable = kind in RESUMABLE if resumable is None else resumable
    if p.is_symlink():
        raise error(
            f"{p}: is a symbolic link; tokendrop does not write through or replace links; "
            "give the real directory or another path"
        )
    if p.exists() and not p.is_dir():
        raise error(
            f"{p}: exists and is not a directory; tokendrop never replaces a file with its output; "
            "choose another output directory"
        )
    if not p.exists() or not any(p.iterdir()):
        return "new"
    marker = read_marker(p)
    have = marker["kind"] if marker else None
    if resumable and not overwrite and have == kind:
        return "continue"
    restart = kind == "run" and have == "run" and not overwrite and not has_checkpoint_dir(p)
    over = option("--overwrite", "overwrite=True")
    if not overwrite and not restart:
        if kind == "run" and (
            have == "run" or (p / "checkpoints").exists() or (p / "metrics.jsonl").exists()
        ):
            raise error(
                f"{option('--out', 'out_dir')}: {p} already holds a run; use "
                f"{option('--resume', 'resume=True')} to "
                f"continue it, {over} to start it over, or choose a new directory"
            )
        raise error(
            f"{p}: already exists and is not empty; pass {over} to replace it (only tokendrop's "
            f"own {kind} output is replaced) or choose another directory"
        )
    if have is None:
        raise error(
            f"{p}: not written by tokendrop (no {MARKER}); {over} replaces only tokendrop's "
            "own output: remove it yourself or choose another directory"
        )
    if have != kind:
        raise error(
            f"{p}: holds tokendrop {have} output, not {kind} output; {over} replaces only the "
            "same kind: choose another directory"
        )
    real = p.resolve()
    for inp in inputs:
        if inp is None or str(inp) == "":
            continue
        ip = Path(inp)
        if ip.exists() and _inside(ip.resolve(), real):
            raise error(
                f"{p}: contains {ip}, an input of this command; {over} would delete it: "
                "choose another output directory"
            )
    return "restart" if restart else "replace"


def has_checkpoint_dir(run: str | os.PathLike) -> bool:
    """``run/checkpoints`` holds a finished checkpoint directory (``step-*``; verified only when
    used)."""
    try:
        return any(
            c.name.startswith("step-") and c.is_dir() for c in (Path(run) / "checkpoints").iterdir()
        )
    except OSError:
        return False


def discard(path: str | os.PathLike) -> None:
    """Remove a marked output directory before it is written again (see :func:`prepare_output`)."""
    p = Path(path)
    # the last line of defence: never delete what tokendrop did not write
    if read_marker(p) is None:
        raise RunDirError(f"{p}: not written by tokendrop (no {MARKER}); not removed")
    discard_dir(p)


def abandon(path: str | os.PathLike, existed: bool) -> None:
    """Undo a new output that was interrupted before it held anything worth keeping: remove the
    directory (or, if it existed empty before the command, only what the command put in it)."""
    p = Path(path)
    if not p.is_dir() or read_marker(p) is None:
        return
    if not existed:
        discard_dir(p)
        return
    for child in p.iterdir():
        if child.is_dir() and not child.is_symlink():
            discard_dir(child)
        else:
            child.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------
# one writer per directory


_HELD: dict[str, int] = {}  # lock files this process holds -> nesting depth
_FDS: dict[str, int] = {}  # lock files this process holds -> the descriptor holding the flock


def _forget_locks_in_child() -> None:
    """After a fork, in the child: close the descriptors of the parent's locks.  A flock belongs to
    the open file, which a forked child shares; a child that kept it (a data worker, a pool
    process) would hold the run's lock after its parent died.  Closing the child's copy leaves the
    parent's lock as it is."""
    for fd in _FDS.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _FDS.clear()
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def lock_path(path: str | os.PathLike) -> Path:
    p = Path(os.path.abspath(os.fspath(path)))
    return p.parent / f".{p.name}.tokendrop.lock"


def _holder(lf: Path) -> str:
    for _ in range(20):  # the holder writes its pid right after it takes the lock
        try:
            pid = lf.read_text().strip()
        except OSError:
            pid = ""
        if pid:
            return pid
        time.sleep(0.01)
    return "?"


def _running(pid: str) -> bool:
    """Whether process ``pid`` (as written in a lock file) exists; an unreadable pid counts as
    running (nothing is claimed about it)."""
    if not pid.isdigit() or int(pid) <= 0:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _openers(lf: Path) -> list[int]:
    """The pids whose open descriptors name the lock file ``lf`` (Linux /proc; [] elsewhere)."""
    out = []
    want = os.path.realpath(lf)
    with contextlib.suppress(OSError):
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{d}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{d}/fd/{fd}") == want:
                            out.append(int(d))
                            break
    return out


def _busy_message(path: str | os.PathLike, lf: Path) -> str:
    pid = _holder(lf)
    if _running(pid):
        return (
            f"{path} is in use by pid {pid} (another tokendrop command is writing it); "
            "wait for it to finish or stop it"
        )
    # the pid that took the lock is gone, but a process it started still holds it
    left = " ".join(str(p) for p in _openers(lf))
    if not left:  # not found (another user's process, no /proc): say how to find it
        return (
            f"{path} is locked by another process, though its lock file names pid {pid}, which is "
            f"no longer running (a process it started?); find it with `fuser {lf}`, stop it and "
            "run the command again"
        )
    return (
        f"{path} is locked by pid {left}, left over from pid {pid}, which is no longer running; "
        f"stop it (kill {left}) and run the command again"
    )


@contextlib.contextmanager
def lock(path: str | os.PathLike, error: type[TokendropError] = RunDirError) -> Iterator[Path]:
    """Hold the write lock of ``path`` (which need not exist yet) for the block; reentrant within a
    process.  Another process holding it: ``error("PATH is in use by pid N ...")`` at once, nothing
    touched."""
    lf = lock_path(path)
    key = str(lf)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield Path(path)
        finally:
            _HELD[key] -= 1
        return
    try:
        lf.parent.mkdir(parents=True, exist_ok=True)
    # a parent is a file, not writable, ...: the output cannot be created there
    except OSError as e:
        fix = (
            "choose an output directory whose parents are directories"
            if e.errno in (errno.ENOTDIR, errno.EEXIST)
            else os_error_fix(e)
        )
        raise error(f"{path}: cannot be created ({e.filename}: {e.strerror or e}); {fix}") from None
    while True:
        fd = os.open(lf, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise error(_busy_message(path, lf)) from None
        try:
            # not unlinked by a holder releasing it meanwhile
            same = os.stat(lf).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    owner = os.getpid()
    try:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            left = os.pread(fd, 32, 0).decode().strip()
            if left and left != str(owner) and not _running(left):
                print(
                    f"note: {path}: the lock left by pid {left}, which is no longer "
                    "running, is taken over",
                    file=sys.stderr,
                )
        os.ftruncate(fd, 0)
        os.write(fd, f"{owner}\n".encode())
        _HELD[key] = 1
        _FDS[key] = fd
        yield Path(path)
    finally:
        if os.getpid() == owner:  # not in a forked child unwinding: the lock is its parent's
            _HELD.pop(key, None)
            _FDS.pop(key, None)
            with contextlib.suppress(OSError):
                os.unlink(lf)
            os.close(fd)


# ----------------------------------------------------------------------------------------------
# metrics (the newest verified checkpoint of a run: tokendrop.runs.checkpoint.latest_checkpoint)


def hold(paths: Iterable[str | os.PathLike], seconds: float = 600.0) -> None:
    """Hold the write locks of ``paths``, print ``held``, and sleep until SIGTERM (or ``seconds``):
    the "another writer" that tests and the fault matrix start to check that a second writer is
    refused -- ``python -c "import sys; from tokendrop.runs.rundir import hold; hold(sys.argv[1:])"
    PATH...``."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.ExitStack() as stack:
        for path in paths:
            stack.enter_context(lock(path))
        print("held", flush=True)
        time.sleep(seconds)


# python -c HOLD_COMMAND PATH...
HOLD_COMMAND = "import sys; from tokendrop.runs.rundir import hold; hold(sys.argv[1:])"


__all__ = [
    "MARKER",
    "KINDS",
    "RunDirError",
    "Interrupted",
    "read_marker",
    "run_id",
    "write_marker",
    "create",
    "prepare_output",
    "discard",
    "abandon",
    "lock",
    "lock_path",
]
