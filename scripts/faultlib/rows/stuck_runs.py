"""Stuck runs: a run that failed before its first checkpoint never blocks the corrected command."""

from __future__ import annotations

import resource
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome, text_lines
from faultlib.commands import ENV, PY, cli, pretrain
from faultlib.files import checkpoints
from faultlib.setups import chain_checks, rerun_succeeds, says_in_output


def failed_before_checkpoint(*extra: str, fsize: int = 0) -> Callable[[Path], None]:
    """CASE/r: a run that failed before its first checkpoint (the command exits 2, leaving
    config.toml): an impossible setting in ``extra``, or a disk that was full (``fsize``:
    RLIMIT_FSIZE) then."""

    def limit() -> None:
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    def setup(c: Path) -> None:
        r = subprocess.run(
            [
                PY,
                "-m",
                "tokendrop",
                *[a.replace("{C}", str(c)) for a in pretrain("{C}/r", "{C}/data", *extra)],
            ],
            cwd=c,
            env=ENV,
            capture_output=True,
            text=True,
            preexec_fn=limit,
        )
        if r.returncode != 2 or not (c / "r" / "config.toml").is_file():
            raise RuntimeError(
                f"the failing run did not fail as planned (exit {r.returncode}): {r.stderr[-200:]}"
            )

    return setup


def suggestion_works(made: str) -> Callable[[Path, Outcome], str | None]:
    """The `tokendrop ...` command the (one-line) message ends with, run: exit 0 and ``made``
    there."""

    def check(c: Path, o: Outcome) -> str | None:
        line = text_lines(o.stderr)[-1]
        if "tokendrop " not in line:
            return "the message suggests no command"
        r = cli(shlex.split(line.rsplit("tokendrop ", 1)[1]), c, check=False)
        if r.returncode != 0:
            return (
                f"the suggested command failed (exit {r.returncode}): "
                f"{(text_lines(r.stderr) or [''])[-1][:200]}"
            )
        return None if (c / made).exists() else f"the suggested command made no {made}"

    return check


def rows() -> list[Case]:
    """A failed run, a full disk before the first checkpoint: the suggested command works."""
    C: list[Case] = []
    add = C.append
    # stuck runs: a run that failed before its first checkpoint never blocks the
    # corrected command
    add(
        Case(
            "pretrain-after-an-impossible-batch",
            "stuck runs",
            pretrain("{C}/r", "{C}/data"),
            "the corrected command takes the failed run over (a note says so) and finishes",
            rc=0,
            needs=("data",),
            setup=failed_before_checkpoint("--set", "train.batch_size=4096"),
            one_line=False,
            check=chain_checks(
                says_in_output("stopped before its first checkpoint", "starting it over"),
                lambda c, o: None if checkpoints(c / "r") else "no checkpoint",
            ),
        )
    )
    add(
        Case(
            "resume-a-run-without-checkpoint",
            "stuck runs",
            ["pretrain", "--resume", "{C}/r", "--quiet"],
            "refused: nothing to resume; the command it suggests works",
            needs=("data",),
            setup=failed_before_checkpoint(fsize=300_000),
            says=("{C}/r has no checkpoint", "nothing to resume"),
            check=suggestion_works("r/checkpoints"),
        )
    )
    full_first = pretrain("{C}/r", "{C}/data")
    add(
        Case(
            "disk-full-first-checkpoint",
            "stuck runs",
            full_first,
            "one-line error that suggests the same command (not --resume: there is no checkpoint); "
            "run again, it finishes",
            needs=("data",),
            fsize=300_000,
            says=("run the same command again",),
            check=chain_checks(
                lambda c, o: "suggests --resume" if "--resume" in o.stderr else None,
                rerun_succeeds(full_first, "r/checkpoints"),
            ),
        )
    )
    return C
    return C
