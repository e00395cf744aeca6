"""A task's own files (``finetune --task custom``): labels read by value, a label only the dev
split has, a header that names a column twice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome
from faultlib.commands import finetune


def custom_task(train: list, dev: list, ext: str = ".jsonl") -> Callable[[Path], None]:
    """CASE/task/train.EXT and dev.EXT: JSON Lines of (sentence, label) pairs, or (``.tsv``) the
    rows as given, the header first."""

    def setup(c: Path) -> None:
        d = c / "task"
        d.mkdir()
        for split, rows in (("train", train), ("dev", dev)):
            if ext == ".jsonl":
                text = "".join(json.dumps({"sentence": s, "label": y}) + "\n" for s, y in rows)
            else:
                text = "".join("\t".join(map(str, r)) + "\n" for r in rows)
            (d / f"{split}{ext}").write_text(text)

    return setup


def pairs(n: int, label: Callable[[int], object]) -> list[tuple[str, object]]:
    return [(f"good movie {i}" if i % 2 else f"bad film {i}", label(i)) for i in range(n)]


def two_classes(c: Path, o: Outcome) -> str | None:
    labels = json.loads((c / "ft" / "metrics.json").read_text())["labels"]
    return None if labels == ["0", "1"] else f"the labels are {labels}, expected ['0', '1']"


def rows() -> list[Case]:
    """Custom tasks."""
    C: list[Case] = []
    add = C.append
    custom = finetune("{C}/run", "{C}/ft", task="custom", data="{C}/task")
    add(
        Case(
            "finetune-custom-labels-1-and-1.0",
            "edge settings",
            custom,
            "runs; 1 in train and 1.0 in dev are one class (two labels, not four)",
            rc=0,
            needs=("run",),
            setup=custom_task(pairs(16, lambda i: i % 2), pairs(8, lambda i: float(i % 2))),
            check=two_classes,
            one_line=False,
        )
    )
    add(
        Case(
            "finetune-custom-dev-only-label",
            "bad input, full disk",
            custom,
            "refused at the dev file's line, naming the label and train's labels; no output",
            needs=("run",),
            setup=custom_task(
                pairs(16, lambda i: i % 2), pairs(8, lambda i: 2 if i == 3 else i % 2)
            ),
            absent=("ft",),
            says=("{C}/task/dev.jsonl:4: label '2' does not occur in", "its labels: 0, 1"),
        )
    )
    header = [("sentence", "sentence", "label")]
    add(
        Case(
            "finetune-custom-header-column-twice",
            "bad input, full disk",
            custom,
            "refused at the header's line, naming the column; no output",
            needs=("run",),
            setup=custom_task(
                header + [(s, s, y) for s, y in pairs(16, lambda i: i % 2)],
                [("sentence", "label"), *pairs(8, lambda i: i % 2)],
                ext=".tsv",
            ),
            absent=("ft",),
            says=("{C}/task/train.tsv:1", "names column(s) 'sentence' more than once"),
        )
    )
    return C
