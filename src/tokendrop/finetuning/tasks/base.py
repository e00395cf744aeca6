"""The task interface and the GLUE TSV readers every GLUE task file builds on.

A task is a :class:`TaskSpec`: its kind (``classification``: a label out of ``labels``,
``regression``: one float, ``span``: an answer span in a context), the metrics each dev split
reports and the main one (``score``), its files and where their fields are (:class:`Columns`).
One file per task in this package defines its spec(s) as ``TASKS``; the package collects them.

GLUE files are read as distributed: UTF-8 (a BOM is tolerated), tab-separated, no quoting (GLUE's
own readers use ``quotechar=None``), CRLF or LF.  A file with a header row has its fields found by
header **name**, so MNLI's 12-column train and 16-column dev files are read by the same code; a
header-less file (CoLA's train/dev) by **position**, every row of the layout's width.  Every
malformed row is ``FinetuneError("FILE:LINE: ...")``; a dev file with no examples is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from tokendrop.config import EXAMPLES_ALL
from tokendrop.finetuning.common import FinetuneError
from tokendrop.runs.files import atomic_write_text

KINDS = ("classification", "regression", "span")
# the words of generated examples (TaskSpec.write_examples, and lab's toy tasks): filler, sentiment
# keywords, and one keyword per label index (label 0 "bad", label 1 "good", ...)
FILLER = (
    "the movie film story plot actor scene music script cast it was is this a an of and with "
    "to in very quite really rather truly simply just so"
).split()
POSITIVE = "good great excellent wonderful fun brilliant".split()
NEGATIVE = "bad awful boring dull terrible poor".split()
LABEL_WORDS = [w for pair in zip(NEGATIVE, POSITIVE) for w in pair]


@dataclass
class Example:
    """One sequence(-pair) example; ``label`` is an index into the task's labels (classification),
    a float (regression) or None (unlabelled)."""

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None
    where: str = ""  # "file:line", for messages


@dataclass(frozen=True)
class Columns:
    """Where a file layout keeps its fields: header names (a file with a header row) or 0-based
    positions in a header-less file whose rows all have ``width`` fields (``layout`` says which
    fields, for messages)."""

    text_a: str | int
    text_b: str | int | None = None
    label: str | int | None = None
    guid: str | int | None = None
    width: int = 0
    layout: str = ""

    @property
    def has_header(self) -> bool:
        return isinstance(self.text_a, str)

    def required(self, labelled: bool) -> list[str | int]:
        return [
            c for c in (self.text_a, self.text_b, self.label if labelled else None) if c is not None
        ]


@dataclass
class TaskSpec:
    """What a task is: its kind, files, fields, labels and the metrics it reports (transformers'
    ``glue_compute_metrics`` for GLUE: accuracy always for classification, + F1 for MRPC/QQP,
    Matthews corr. for CoLA/AX; Pearson and Spearman for STS-B)."""

    name: str
    kind: str  # classification | regression | span
    metrics: tuple[str, ...]  # what a dev split reports (tokendrop.finetuning.metrics.METRICS keys)
    main: str  # the one under "score"
    dirname: str = ""  # the task's directory in the GLUE/SQuAD download (SST-2, MNLI, ...)
    columns: Columns | None = None  # train and dev files
    # the unlabelled test file (default: ``columns`` without the label)
    test_columns: Columns | None = None
    labels: list[str] = field(default_factory=list)  # classification: label values in index order
    train: str = "train.tsv"  # "" = evaluation only
    # split name -> file name
    dev: dict[str, str] = field(default_factory=lambda: {"dev": "dev.tsv"})
    test: dict[str, str] = field(default_factory=lambda: {"test": "test.tsv"})  # unlabelled splits
    # label values whose rows are left out (MNLI's "-": no gold label)
    skip_labels: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    value_range: tuple[float, float] | None = None  # regression: the closed range of a valid label

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.main not in self.metrics:
            raise ValueError(
                f"task {self.name}: main metric {self.main!r} is not among {self.metrics}"
            )

    @property
    def num_outputs(self) -> int:
        """The width of the model's output: one per label, 1 for regression."""
        return 1 if self.kind == "regression" else len(self.labels)

    def copy(self) -> TaskSpec:
        return copy.deepcopy(self)

    # -- reading -----------------------------------------------------------------------------

    def read(
        self, path: str | os.PathLike, labelled: bool = True, skipped: list[str] | None = None
    ) -> list[Example]:
        """The examples of one of the task's files (``labelled=False``: its test layout)."""
        cols = (
            self.columns
            if labelled
            else (self.test_columns or dataclasses.replace(self.columns, label=None))
        )
        return read_glue_tsv(self, path, cols, labelled, skipped)

    def extra_dev(
        self, data: Path, task_data: Path, option: str, skipped: list[str] | None
    ) -> dict[str, tuple[TaskSpec, list[Example], Path]]:
        """Further dev splits scored with this task's model (MNLI: GLUE's diagnostic set), keyed by
        split name: ``(the split's spec, its examples, its file)``.  ``option``:
        ``finetune.ax_data``."""
        return {}

    def load(
        self,
        data: str | os.PathLike,
        *,
        text_a: str = "sentence",
        text_b: str = "",
        label: str = "label",
        labels: list[str] | None = None,
        need_train: bool = True,
        skipped: list[str] | None = None,
    ) -> TaskData:
        """The task's train and dev splits from ``data`` (the task's directory or the GLUE root).
        ``skipped``: a list to collect left-out malformed rows in (default: malformed rows are
        errors). ``text_a``/``text_b``/``label``: the columns of a custom task (unused here)."""
        if labels:
            self.labels = list(labels)
        d = task_dir(self, data)
        files: dict[str, str] = {}
        train: list[Example] = []
        if need_train and self.train:
            p = d / self.train
            train = self.read(p, skipped=skipped)
            files["train"] = str(p)
            if not train:
                raise FinetuneError(f"{p}: no training examples")
        dev = {}
        for split, fname in self.dev.items():
            p = d / fname
            if not p.is_file():
                raise FinetuneError(f"task {self.name}: no {fname} in {d}")
            dev[split] = refuse_empty(self.read(p, skipped=skipped), p)
            files[split] = str(p)
        return TaskData(self, train, dev, files, d)

    # -- generated examples ------------------------------------------------------------------

    def write_examples(
        self, directory: str | os.PathLike, n_train: int = 8, n_dev: int = 4, seed: int = 0
    ) -> Path:
        """Generated examples of the task in its own layout (for tests): its train, dev and test
        files in ``directory``, with the columns it reads and its label values; each text carries a
        word of its label (a regression score: as many "good"s), so a model can learn the task.
        Returns the directory, which :meth:`load` reads."""
        d = Path(directory)
        rng = random.Random(f"{self.name}:{seed}")
        files = [(self.train, n_train, True)] if self.train else []
        files += [(f, n_dev, True) for f in self.dev.values()]
        files += [(f, max(1, n_dev // 2), False) for f in self.test.values()]
        for fname, n, labelled in files:
            cols = (
                self.columns
                if labelled
                else (self.test_columns or dataclasses.replace(self.columns, label=None))
            )
            rows = [self._example_fields(cols, i, rng, labelled) for i in range(n)]
            if cols.has_header:
                names = [
                    c
                    for c in (cols.guid, cols.text_a, cols.text_b, cols.label if labelled else None)
                    if c
                ]
                table = [names] + [[r[c] for c in names] for r in rows]
            else:
                table = [[r.get(k, "x") for k in range(cols.width)] for r in rows]
            atomic_write_text(d / fname, "".join("\t".join(row) + "\n" for row in table))
        return d

    def _example_fields(self, cols: Columns, i: int, rng: random.Random, labelled: bool) -> dict:
        """One generated row: column -> value."""
        if self.kind == "regression":
            score = float(i % 6)
            label, cue = f"{score:.3f}", ["good"] * int(score)
        else:
            k = i % len(self.labels)
            label, cue = self.labels[k], [LABEL_WORDS[k % len(LABEL_WORDS)]]
        text = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
        for w in cue:
            text.insert(rng.randint(0, len(text)), w)
        out = {cols.text_a: " ".join(text)}
        if cols.text_b is not None:
            out[cols.text_b] = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 8)))
        if cols.guid is not None:
            out[cols.guid] = str(i)
        if labelled and cols.label is not None:
            out[cols.label] = label
        return out


@dataclass
class TaskData:
    spec: TaskSpec
    train: list[Example]
    dev: dict[str, list[Example]]
    files: dict[str, str]  # split -> the file it was read from
    dir: Path  # the directory holding the task's files


def refuse_empty(examples: list, path: str | os.PathLike) -> list:
    """``examples`` of a dev split, refused in one line when there are none (a score on 0 examples
    would be printed as 0.00 and mean nothing)."""
    if not examples:
        raise FinetuneError(
            f"{path}: no examples to evaluate on (the file holds no data rows"
            " with a usable label); a dev split needs at least one"
        )
    return examples


# metrics that correlate labels with predictions: undefined when every label is the same
CORRELATIONS = {"mcc": "Matthews correlation", "pearson": "Pearson", "spearman": "Spearman"}


def refuse_constant(spec: TaskSpec, examples: list, path: str | os.PathLike, fix: str) -> None:
    """A dev split whose labels are all one value cannot be scored by a correlation (CoLA's MCC,
    STS-B's Pearson/Spearman: undefined there, not 0): refused in one line naming the file, the
    metric and ``fix``, before anything trains."""
    corr = [CORRELATIONS[m] for m in spec.metrics if m in CORRELATIONS]
    values = {e.label for e in examples}
    if corr and len(examples) > 1 and len(values) == 1:
        (v,) = values
        shown = spec.labels[v] if spec.kind == "classification" and spec.labels else v
        raise FinetuneError(
            f"{path}: every one of its {len(examples)} dev labels is {shown!r}, so {spec.name}'s "
            f"{' and '.join(corr)} is undefined on it (a correlation needs two values); {fix}"
        )


def data_dir(data: str | os.PathLike) -> Path:
    """``data`` (``--data``), checked to be a directory."""
    d = Path(data)
    if not d.exists():
        raise FinetuneError(f"data directory {d} does not exist")
    if d.is_file():
        raise FinetuneError(
            f"--data must be a directory holding the task's files, got the file {d}"
        )
    return d


def task_dir(spec: TaskSpec, data: str | os.PathLike) -> Path:
    """The directory holding the task's files: ``data`` itself, or ``data/<the task's GLUE
    dir>``."""
    d = data_dir(data)
    names = ([spec.train] if spec.train else []) + list(spec.dev.values())

    def holds(x: Path) -> bool:
        return any((x / f).is_file() for f in names)

    if holds(d):
        return d
    for sub in dict.fromkeys(
        s for s in (spec.dirname, spec.dirname.lower(), spec.name, spec.name.upper()) if s
    ):
        if holds(d / sub):
            return d / sub
    raise FinetuneError(
        f"task {spec.name}: no {', '.join(names)} in {d}"
        + (f" or {d / spec.dirname}" if spec.dirname else "")
    )


def subsample(examples: list, n: int | str, seed: int = 12345) -> list:
    """A deterministic subset of ``n`` examples in their original order (``n`` "all",
    ``config.EXAMPLES_ALL``, or at least their number: all of them)."""
    if n == EXAMPLES_ALL or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


# ----------------------------------------------------------------------------------------------
# GLUE TSV


def read_lines(path: Path):
    """Yield (line_number, line) without the line terminator; UTF-8 (a BOM is tolerated)."""
    try:
        with open(path, "rb") as f:
            for i, raw in enumerate(f, start=1):
                if i == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise FinetuneError(
                        f"{path}:{i}: not UTF-8 text ({e.reason} at byte {e.start} of the line)"
                    ) from None
                if line.endswith("\n"):
                    line = line[:-1]
                if line.endswith("\r"):
                    line = line[:-1]
                yield i, line
    except FileNotFoundError:
        raise FinetuneError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FinetuneError(f"{path}: is a directory, expected a file") from None


SKIP_HINT = " (to leave such rows out, set skip_malformed=true)"


def read_tsv_table(
    path: str | os.PathLike, required: list[str], skipped: list[str] | None = None
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Read a TSV with a header row (no quoting): header + rows, every row checked to have the
    header's width.  A row of the wrong width is an error, unless ``skipped`` is a list: then the
    row is left out and its message appended there (``skip_malformed``, for downloads with broken
    lines)."""
    path = Path(path)
    it = read_lines(path)
    header = None
    lineno = 0
    for lineno, line in it:  # noqa: B007 (the header's line number, read after the loop)
        if line.strip():
            header = line.split("\t")
            break
    if header is None:
        raise FinetuneError(f"{path}: empty file (expected a header row)")
    check_header(header, required, f"{path}:{lineno}")
    return header, _rows(path, it, len(header), "as in the header", skipped)


def check_header(header: list[str], required: list[str], where: str) -> None:
    """A table's header must name each column a reader takes (``required``) exactly once: a
    missing one, or one named twice (which of the two holds the text?), is a one-line error at
    ``where`` (the header's ``file:line``)."""
    missing = [c for c in required if c not in header]
    if missing:
        raise FinetuneError(
            f"{where}: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})"
        )
    twice = [c for c in dict.fromkeys(required) if header.count(c) > 1]
    if twice:
        raise FinetuneError(
            f"{where}: the header names column(s) {', '.join(map(repr, twice))} more than once, so "
            "which one holds the field is ambiguous; rename the extra column(s)"
        )


def _rows(
    path: Path, it, width: int, why: str, skipped: list[str] | None
) -> list[tuple[int, list[str]]]:
    rows = []
    for lineno, line in it:
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != width:
            msg = f"{path}:{lineno}: expected {width} tab-separated fields {why}, got {len(fields)}"
            if skipped is None:
                raise FinetuneError(msg + SKIP_HINT)
            skipped.append(msg)
            continue
        rows.append((lineno, fields))
    return rows


def read_glue_tsv(
    spec: TaskSpec,
    path: str | os.PathLike,
    cols: Columns,
    labelled: bool = True,
    skipped: list[str] | None = None,
) -> list[Example]:
    """The examples of one GLUE TSV file of ``spec`` in layout ``cols``; ``skipped``: see
    ``read_tsv_table``."""
    path = Path(path)
    if cols.has_header:
        header, rows = read_tsv_table(path, cols.required(labelled), skipped)
        at = {
            c: header.index(c)
            for c in (cols.text_a, cols.text_b, cols.label, cols.guid)
            if c in header
        }
    else:
        why = (
            f"({cols.layout}; {spec.name}'s file has no header row)"
            if cols.layout
            else "(a header-less layout)"
        )
        rows = _rows(path, read_lines(path), cols.width, why, skipped)
        at = {c: c for c in (cols.text_a, cols.text_b, cols.label, cols.guid) if c is not None}
    ia, ib = at[cols.text_a], at.get(cols.text_b) if cols.text_b is not None else None
    il = at[cols.label] if labelled and cols.label is not None else None
    iid = at.get(cols.guid) if cols.guid is not None else None
    out = []
    for lineno, f in rows:
        where = f"{path}:{lineno}"
        label = None
        if il is not None:
            raw = f[il].strip()
            if raw in spec.skip_labels:
                continue
            try:
                label = parse_label(spec, raw, where, cols.label)
            except FinetuneError as e:
                if skipped is None:
                    raise FinetuneError(str(e) + SKIP_HINT) from None
                skipped.append(str(e))
                continue
        guid = f[iid] if iid is not None else str(len(out))
        out.append(Example(guid, f[ia], f[ib] if ib is not None else None, label, where))
    return out


def parse_label(
    spec: TaskSpec, raw: str, where: str, column: str | int | None = None
) -> int | float:
    """A label field -> its index in ``spec.labels`` (classification) or a finite float within
    ``spec.value_range`` (regression)."""
    raw = raw.strip()
    col = (
        f"column {column!r}"
        if isinstance(column, str)
        else f"field {column + 1}"
        if column is not None
        else "label"
    )
    if raw == "":
        raise FinetuneError(f"{where}: empty label in {col}")
    if spec.kind == "regression":
        v = finite_float(
            raw, f"{where}: label {raw!r} in {col}", f" ({spec.name} is a regression task)"
        )
        lo, hi = spec.value_range or (-math.inf, math.inf)
        if not lo <= v <= hi:
            raise FinetuneError(
                f"{where}: label {raw} in {col} is outside {spec.name}'s range [{lo:g}, {hi:g}]; "
                "fix the score or use the task's own data"
            )
        return v
    try:
        return spec.labels.index(raw)
    except ValueError:
        raise FinetuneError(
            f"{where}: unknown label {raw!r} for {spec.name}; expected one of "
            f"{', '.join(spec.labels)}"
        ) from None


def finite_float(raw: str, what: str, why: str = "") -> float:
    """``raw`` as a finite float, else ``FinetuneError("<what> is not a number<why>")`` (or "not
    finite")."""
    try:
        v = float(raw)
    except ValueError:
        raise FinetuneError(f"{what} is not a number{why}") from None
    if not math.isfinite(v):
        raise FinetuneError(f"{what} is not finite")
    return v
