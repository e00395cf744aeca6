"""The setups and checks the rows of more than one area use."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Outcome
from faultlib.commands import FIXTURES, SRC, cli, pretrain, run_cli


def write_corpus(path: Path, docs: int) -> None:
    sys.path[:0] = [str(SRC), str(FIXTURES)]
    from toydata import write_corpus as wc

    wc(path, docs=docs)


def fresh_run(name: str = "r", *extra: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        run_cli([a.replace("{C}", str(c)) for a in pretrain("{C}/" + name, "{C}/data", *extra)], c)

    return setup


def chain(*fns: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        for f in fns:
            f(c)

    return setup


def make_dir(rel: str, files: dict[str, bytes] | None = None) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        d = c / rel
        d.mkdir(parents=True, exist_ok=True)
        for n, b in (files or {}).items():
            (d / n).parent.mkdir(parents=True, exist_ok=True)
            (d / n).write_bytes(b)

    return setup


def make_file(rel: str, data: bytes = b"precious\n") -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        (c / rel).parent.mkdir(parents=True, exist_ok=True)
        (c / rel).write_bytes(data)

    return setup


MINE = {"notes.txt": b"my notes\n", "sub/data.bin": b"\x00\x01\x02"}


def says_in_output(*needles: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        text = (o.stdout + o.stderr).lower()
        miss = [n for n in needles if n.lower() not in text]
        return f"output does not mention {', '.join(miss)}" if miss else None

    return check


def chain_checks(
    *checks: Callable[[Path, Outcome], str | None],
) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        return next((m for m in (f(c, o) for f in checks) if m), None)

    return check


def rerun_succeeds(argv: list[str], made: str) -> Callable[[Path, Outcome], str | None]:
    """The same command run again (what the interrupted one's message says to do) exits 0 and makes
    ``made``."""

    def check(c: Path, o: Outcome) -> str | None:
        r = cli([a.replace("{C}", str(c)) for a in argv], c, check=False)
        if r.returncode != 0:
            return (
                f"the same command run again failed (exit {r.returncode}): "
                f"{(r.stderr.strip().splitlines() or [''])[-1][:200]}"
            )
        return None if (c / made).exists() else f"the same command run again made no {made}"

    return check
