"""Kills and locks: one writer per directory, honest exit codes on SIGINT / SIGTERM, a SIGKILLed
run's data worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from faultlib.case import DRIVE_NOTES, Case, at_gate
from faultlib.commands import ENV, EV, PY, finetune, prepare, pretrain
from faultlib.files import checkpoints, ckpt_ok
from faultlib.setups import chain_checks, rerun_succeeds, says_in_output, write_corpus


def stale_lock(rel: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        p = c / rel
        (p.parent / f".{p.name}.tokendrop.lock").write_text("999999\n")  # its writer died (SIGKILL)

    return setup


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc; [] elsewhere)."""
    out = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            if (
                d.isdigit()
                and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == pid
            ):
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def killed_with_workers(rel: str) -> Callable[[Path], None]:
    """A pretrain with one data worker, SIGKILLed (the parent only) once its first checkpoint is
    written: its worker must end by itself, holding no lock (one still running after 60 s is
    killed and the case fails)."""

    def setup(c: Path) -> None:
        argv = [PY, "-m", "tokendrop", *pretrain(str(c / rel), str(c / "data"))]
        argv += ["--set", "train.steps=100000", "--set", "data.num_workers=1"]
        argv += ["--set", "train.warmup_steps=1", "--set", "train.eval_every=100000"]
        p = subprocess.Popen(
            argv, cwd=c, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        t0 = time.time()
        while time.time() - t0 < 600 and p.poll() is None and not checkpoints(c / rel):
            time.sleep(0.02)
        workers = _children(p.pid)
        p.kill()
        p.wait()
        p.stderr.close()
        if not workers:
            DRIVE_NOTES[c] = "the run started no data worker (or ended before its checkpoint)"
        t0 = time.time()
        while time.time() - t0 < 60 and not all(map(_gone, workers)):
            time.sleep(0.05)
        left = [w for w in workers if not _gone(w)]
        for w in left:
            os.kill(w, signal.SIGKILL)
        if left:
            DRIVE_NOTES[c] = f"data worker(s) {left} outlived their SIGKILLed parent"

    return setup


def rows() -> list[Case]:
    """Locks held by another process or left by a dead one; signals at a test gate."""
    C: list[Case] = []
    add = C.append
    # one writer per directory
    add(
        Case(
            "resume-locked-run",
            "locks",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused at once: in use by pid N; untouched",
            needs=("run",),
            hold=("run",),
            watch=("run",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "pretrain-locked-out",
            "locks",
            pretrain("{C}/r", "{B}/data"),
            "refused: in use; nothing written",
            hold=("r",),
            absent=("r",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "prepare-locked-out",
            "locks",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150"),
            "refused: in use; nothing written",
            needs=("corpus.txt",),
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "export-locked-out",
            "locks",
            ["export", "{C}/run", "{C}/out"],
            "refused: in use; nothing written",
            needs=("run",),
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "finetune-locked-out",
            "locks",
            finetune("{C}/run", "{C}/ft"),
            "refused: in use; nothing written",
            needs=("run", "sst2"),
            hold=("ft",),
            absent=("ft",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "export-stale-lock-taken-over",
            "locks",
            ["export", "{C}/run", "{C}/out"],
            "a dead writer's lock is taken over: exit 0",
            rc=0,
            needs=("run",),
            setup=stale_lock("out"),
            watch=("run",),
            check=says_in_output("the lock left by pid 999999, which is no longer running"),
        )
    )
    add(
        Case(
            "resume-after-sigkill-with-a-data-worker",
            "locks",
            ["pretrain", "--resume", "{C}/r", "--quiet", "--set", "train.steps=20"],
            "the worker died with its parent; the dead pid's lock is taken over with a note; "
            "resumed: exit 0",
            rc=0,
            needs=("data",),
            setup=killed_with_workers("r"),
            check=says_in_output("which is no longer running, is taken over"),
            timeout=600,
        )
    )

    # honest exit codes on interruption
    long_pt = pretrain(
        "{C}/r",
        "{B}/data",
        "--set",
        "train.steps=100000",
        "--set",
        "train.eval_every=100000",
        "--set",
        "train.ckpt_every=100000",
    )
    add(
        Case(
            "pretrain-sigint",
            "signals",
            long_pt,
            "checkpoint saved, exit 130",
            rc=130,
            gate="pretrain-step",
            drive=at_gate(signal.SIGINT),
            check=lambda c, o: (
                None
                if checkpoints(c / "r") and ckpt_ok(checkpoints(c / "r")[-1])
                else "no valid checkpoint"
            ),
        )
    )
    add(
        Case(
            "pretrain-sigterm",
            "signals",
            long_pt,
            "checkpoint saved, exit 143",
            rc=143,
            gate="pretrain-step",
            drive=at_gate(signal.SIGTERM),
            check=lambda c, o: (
                None
                if checkpoints(c / "r") and ckpt_ok(checkpoints(c / "r")[-1])
                else "no valid checkpoint"
            ),
        )
    )
    prep_big = prepare("{C}/big.txt", "{C}/out", "--vocab-size", "300")
    add(
        Case(
            "prepare-sigint",
            "signals",
            prep_big,
            "exit 130, no output, no temp dir; the finished work units kept in out.partial, and "
            "the same command "
            "run again (as the message says) finishes",
            rc=130,
            setup=lambda c: write_corpus(c / "big.txt", 600),
            gate="prepare-units",
            drive=at_gate(signal.SIGINT),
            absent=("out",),
            watch=("big.txt",),
            check=chain_checks(
                says_in_output("kept in", "run the same command again"),
                rerun_succeeds(prep_big, "out/meta.json"),
            ),
        )
    )
    add(
        Case(
            "finetune-sigint",
            "signals",
            finetune("{C}/run", "{C}/ft", "--set", "epochs=2"),
            "exit 130, no output",
            rc=130,
            needs=("run", "sst2"),
            gate="finetune-step",
            drive=at_gate(signal.SIGINT),
            absent=("ft",),
            watch=("run",),
        )
    )
    add(
        Case(
            "evaluate-sigint",
            "signals",
            ["evaluate", "--models", "{C}/run", "--out", "{C}/ev", *EV],
            "exit 130, no output",
            rc=130,
            needs=("run", "glue", "squad"),
            gate="finetune-step",
            drive=at_gate(signal.SIGINT),
            absent=("ev",),
            watch=("run",),
        )
    )
    add(
        Case(
            "bench-sigint",
            "signals",
            [
                "bench",
                "--preset",
                "smoke",
                "--no-hf",
                "--quiet",
                "--rounds",
                "3",
                "--json",
                "{C}/bench.json",
            ],
            "exit 130, no results file",
            rc=130,
            gate="bench-round",
            drive=at_gate(signal.SIGINT),
            absent=("bench.json", "bench.md"),
        )
    )
    return C
