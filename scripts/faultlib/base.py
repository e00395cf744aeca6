"""The base: the generated inputs and the built items (a prepared dataset, a tiny run, its export,
...) made once under the work directory and copied into the cases that need them."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case
from faultlib.commands import FIXTURES, PT, SRC, cli, prepare

# what each built base item needs first (the generated files are always written: they are cheap)
BASE_DEPS = {
    "data": (),
    "data-other": (),
    "run": ("data",),
    "hf": ("run",),
    "relrun": ("data",),
    "run-moved": ("data",),
    "data-moved": ("run-moved",),
}


GENERATED = ("corpus.txt", "other-vocab.txt", "sst2", "glue", "squad")


def base_items(selected: list[Case]) -> set[str]:
    """The built base items the selected cases use (copied in, or named as {B}/ITEM), with their
    deps."""
    want = {n for c in selected for n in c.needs}
    want |= {
        m.group(1) for c in selected for a in c.argv for m in re.finditer(r"\{B\}/([\w.-]+)", a)
    }
    todo, out = [w for w in want if w in BASE_DEPS], set()
    while todo:
        item = todo.pop()
        if item not in out:
            out.add(item)
            todo.extend(BASE_DEPS[item])
    return out


def build_base(base: Path, items: set[str], log: Callable[[str], None]) -> None:
    sys.path[:0] = [str(SRC), str(FIXTURES)]
    import toydata as F

    from tokendrop.lab import toydata as T

    base.mkdir(parents=True, exist_ok=True)
    log(f"building the base in {base}: {', '.join(sorted(items)) or 'generated files only'}")
    F.write_corpus(base / "corpus.txt", docs=150)
    F.write_toy_vocab(base / "other-vocab.txt")
    T.write_keyword_sentiment(base / "sst2", n_train=32, n_dev=16)
    T.write_toy_glue(base / "glue", n_train=16, n_dev=8)
    T.write_toy_squad(base / "squad", n_train=16, n_dev=8)
    if "data" in items:
        cli(
            prepare(
                str(base / "corpus.txt"),
                str(base / "data"),
                "--vocab-size",
                "150",
                "--eval-fraction",
                "0.1",
            ),
            base,
        )
    if "data-other" in items:
        cli(
            prepare(
                str(base / "corpus.txt"),
                str(base / "data-other"),
                "--vocab",
                str(base / "other-vocab.txt"),
                "--eval-fraction",
                "0.1",
            ),
            base,
        )
    # 4 steps, checkpoints at 2 and 4, token dropping (an importance vector for inspect)
    if "run" in items:
        cli(
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(base / "run"),
                "--set",
                f'data.path="{base / "data"}"',
                *PT,
                "--set",
                "train.steps=4",
                "--set",
                "drop.method=cumulative",
            ],
            base,
        )
    if "hf" in items:
        cli(["export", str(base / "run"), str(base / "hf")], base)
    if "relrun" in items:  # a run whose data.path is relative ("data", from BASE): row 5
        cli(
            ["pretrain", "--config", "tiny", "--out", "relrun", "--set", 'data.path="data"', *PT],
            base,
        )
    # a run whose data moved away after it was made: data-gone -> data-moved
    if "run-moved" in items:
        shutil.copytree(base / "data", base / "data-gone")
        cli(
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(base / "run-moved"),
                "--set",
                f'data.path="{base / "data-gone"}"',
                *PT,
            ],
            base,
        )
        (base / "data-gone").rename(base / "data-moved")
    log("base built")
