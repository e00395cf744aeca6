"""A full disk (RLIMIT_FSIZE) and a read-only file system."""

from __future__ import annotations

from faultlib.case import Case
from faultlib.commands import prepare
from faultlib.files import metrics
from faultlib.setups import write_corpus


def rows() -> list[Case]:
    """A write that fails: one line, earlier files intact, nothing half-written."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "disk-full-checkpoint",
            "bad input, full disk",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "one-line error; earlier checkpoints intact, no temp dir",
            needs=("run",),
            fsize=300_000,
            watch=("run/checkpoints",),
            says=("checkpoint",),
            check=lambda c, o: (
                None
                if any(r.get("step", 0) > 4 for r in metrics(c / "run") if "loss" in r)
                else "it never trained up to the checkpoint write"
            ),
        )
    )
    add(
        Case(
            "disk-full-shards",
            "bad input, full disk",
            prepare("{C}/big.txt", "{C}/out", "--vocab-size", "150"),
            "one-line error; no output",
            setup=lambda c: write_corpus(c / "big.txt", 3000),
            fsize=60_000,
            absent=("out",),
        )
    )
    add(
        Case(
            "disk-full-export",
            "bad input, full disk",
            ["export", "{C}/run", "{C}/out"],
            "one-line error; no output",
            needs=("run",),
            fsize=300_000,
            absent=("out",),
            watch=("run",),
        )
    )
    # a read-only file system is named as such (never "free space")
    not_free_space = lambda c, o: "says 'free space'" if "free space" in o.stderr else None  # noqa: E731
    add(
        Case(
            "resume-on-read-only-fs",
            "bad input, full disk",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "one-line error naming the read-only file system; run untouched",
            needs=("run",),
            read_only=True,
            watch=("run",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    add(
        Case(
            "export-onto-read-only-fs",
            "bad input, full disk",
            ["export", "{C}/run", "{C}/out"],
            "one-line error naming the read-only file system; no output",
            needs=("run",),
            read_only=True,
            absent=("out",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    add(
        Case(
            "prepare-onto-read-only-fs",
            "bad input, full disk",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150"),
            "one-line error naming the read-only file system; no output",
            needs=("corpus.txt",),
            read_only=True,
            absent=("out",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    return C
