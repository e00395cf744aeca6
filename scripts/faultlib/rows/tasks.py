"""What fine-tuning reads and evaluation groups: a task's own files (``finetune --task custom``:
labels read by value, a label only the dev split has, a header that names a column twice), and
the models ``evaluate`` averages as seeds of one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome
from faultlib.commands import EV, finetune
from faultlib.setups import chain_checks, says_in_output


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


def one_label(rel: str, column: int, label: str) -> Callable[[Path], None]:
    """CASE/REL (a TSV file without a header) with every row's label column set to ``label``."""

    def setup(c: Path) -> None:
        p = c / rel
        rows = [ln.split("\t") for ln in p.read_text().splitlines()]
        for r in rows:
            r[column] = label
        p.write_text("".join("\t".join(r) + "\n" for r in rows))

    return setup


def rows() -> list[Case]:
    """Custom tasks, and a GLUE dev split whose correlation is undefined."""
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
    add(
        Case(
            "finetune-cola-dev-of-one-label",
            "empty scores",
            finetune("{C}/run", "{C}/ft", task="cola", data="{C}/glue"),
            "refused before anything trains, naming the file: a correlation of one label is "
            "undefined, not 0",
            needs=("run", "glue"),
            setup=one_label("glue/CoLA/dev.tsv", column=1, label="1"),
            absent=("ft",),
            says=("{C}/glue/CoLA/dev.tsv", "Matthews correlation is undefined"),
        )
    )
    return C


SEED_MODELS = ("drop-s1000", "drop-s2000", "m-seed1", "m-seed2")


def copies_of_run(c: Path) -> None:
    for name in SEED_MODELS:
        shutil.copytree(c / "run", c / name)


def grouped_by_seed_suffix(c: Path, o: Outcome) -> str | None:
    """results.json: drop-s1000 and drop-s2000 two methods, m-seed1 and m-seed2 the seeds of m."""
    methods = json.loads((c / "ev" / "results.json").read_text())["methods"]
    got = {k: len(v["models"]) for k, v in methods.items()}
    want = {"drop-s1000": 1, "drop-s2000": 1, "m": 2}
    return None if got == want else f"methods and their models: {got}, expected {want}"


def seed_groups() -> list[Case]:
    """Only a spelled-out -seedN suffix makes models the seeds of one method."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "evaluate-groups-only-seed-suffixes",
            "edge settings",
            ["evaluate", "--models", *("{C}/" + m for m in SEED_MODELS), "--out", "{C}/ev", *EV],
            "runs; drop-s1000 and drop-s2000 stay two methods, m-seed1 and m-seed2 are m's "
            "seeds, and the log says so",
            rc=0,
            needs=("run", "glue", "squad"),
            setup=copies_of_run,
            one_line=False,
            check=chain_checks(
                grouped_by_seed_suffix,
                says_in_output("m: 2 models averaged as its seeds (m-seed1, m-seed2)"),
            ),
        )
    )
    return C
