"""Task definitions and readers for GLUE-style classification data.

Readers accept the *original* GLUE TSV layouts (UTF-8, a header row, tab-separated, no quoting —
GLUE's own readers use ``quotechar=None``): columns are found by **header name**, so MNLI's 12-column
train and 16-column dev files (and the real downloads) are read by the same code.  Custom tasks are
JSONL (one object per line) or CSV/TSV with a header, with configurable column names.

Every malformed row raises ``FinetuneError("FILE:LINE: ...")``.
"""

from __future__ import annotations

import csv
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from tokendrop.finetune.common import FinetuneError

MNLI_LABELS = ["contradiction", "entailment", "neutral"]  # the order of transformers' GLUE processors


@dataclass
class Example:
    """One classification example; ``label`` is an index into the task's label list (None: unlabelled)."""

    guid: str
    text_a: str
    text_b: str | None
    label: int | None
    where: str = ""  # "file:line", for messages


@dataclass
class TaskSpec:
    """What a task is: its files, columns, labels and the metric the paper reports for it."""

    name: str
    kind: str  # "classification" | "squad"
    dirname: str = ""  # GLUE sub-directory (SST-2, MNLI, ...)
    text_a: str = ""
    text_b: str = ""
    label: str = ""
    labels: list[str] = field(default_factory=list)
    metric: str = "accuracy"  # accuracy | f1 | mcc | squad
    train: str = "train.tsv"
    dev: dict[str, str] = field(default_factory=dict)  # split name -> file name
    squad_version: int = 0  # 1 or 2 for SQuAD


TASKS: dict[str, TaskSpec] = {
    "sst2": TaskSpec("sst2", "classification", "SST-2", "sentence", "", "label", ["0", "1"],
                     "accuracy", dev={"dev": "dev.tsv"}),
    "mnli": TaskSpec("mnli", "classification", "MNLI", "sentence1", "sentence2", "gold_label", MNLI_LABELS,
                     "accuracy", dev={"dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"}),
    "qnli": TaskSpec("qnli", "classification", "QNLI", "question", "sentence", "label",
                     ["entailment", "not_entailment"], "accuracy", dev={"dev": "dev.tsv"}),
    "qqp": TaskSpec("qqp", "classification", "QQP", "question1", "question2", "is_duplicate", ["0", "1"],
                    "f1", dev={"dev": "dev.tsv"}),
    "rte": TaskSpec("rte", "classification", "RTE", "sentence1", "sentence2", "label",
                    ["entailment", "not_entailment"], "accuracy", dev={"dev": "dev.tsv"}),
    # AX: evaluation only, scored with the MNLI model (Matthews correlation); GLUE's labelled file.
    "ax": TaskSpec("ax", "classification", "AX", "Premise", "Hypothesis", "Label", MNLI_LABELS, "mcc",
                   train="", dev={"ax": "diagnostic-full.tsv"}),
    "squad1": TaskSpec("squad1", "squad", metric="squad", train="train-v1.1.json",
                       dev={"dev": "dev-v1.1.json"}, squad_version=1),
    "squad2": TaskSpec("squad2", "squad", metric="squad", train="train-v2.0.json",
                       dev={"dev": "dev-v2.0.json"}, squad_version=2),
    # JSONL / CSV / TSV with named columns (FinetuneConfig.text_a/text_b/label/labels)
    "custom": TaskSpec("custom", "classification", metric="accuracy", train="train", dev={"dev": "dev"}),
}

TASK_ALIASES = {"sst-2": "sst2", "sst": "sst2", "squad": "squad1", "squad-v1": "squad1", "squad-v2": "squad2",
                "squad_v1": "squad1", "squad_v2": "squad2", "squad1.1": "squad1", "squad2.0": "squad2",
                "diagnostic": "ax", "mnli-m": "mnli"}

MNLI_SKIP_LABEL = "-"  # MultiNLI's "no gold label" marker: such pairs are skipped (the dataset's own advice)


def get_task(name: str) -> TaskSpec:
    key = name.strip().lower()
    key = TASK_ALIASES.get(key, key)
    if key not in TASKS:
        raise FinetuneError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    spec = TASKS[key]
    return TaskSpec(**{k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                       for k, v in spec.__dict__.items()})


def task_dir(spec: TaskSpec, data: str | os.PathLike) -> Path:
    """The directory holding the task's files: ``data`` itself, or ``data/<GLUE dir name>``."""
    d = Path(data)
    if not d.exists():
        raise FinetuneError(f"data directory {d} does not exist")
    if d.is_file():
        raise FinetuneError(f"--data must be a directory holding the task's files, got the file {d}")
    probe = spec.train or next(iter(spec.dev.values()))
    if spec.name == "custom":
        return d
    if (d / probe).is_file() or any((d / f).is_file() for f in spec.dev.values()):
        return d
    if spec.dirname:
        for sub in (spec.dirname, spec.dirname.lower(), spec.name, spec.name.upper()):
            if (d / sub / probe).is_file() or any((d / sub / f).is_file() for f in spec.dev.values()):
                return d / sub
    if spec.kind == "squad":
        if (d / "squad" / probe).is_file():
            return d / "squad"
    expected = ", ".join([probe] + list(spec.dev.values()))
    raise FinetuneError(f"task {spec.name}: no {expected} in {d}" + (f" or {d / spec.dirname}" if spec.dirname else ""))


# ----------------------------------------------------------------------------------------------
# GLUE TSV


def _read_lines(path: Path):
    """Yield (line_number, line) without the line terminator; UTF-8 (a BOM is tolerated)."""
    try:
        with open(path, "rb") as f:
            for i, raw in enumerate(f, start=1):
                if i == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise FinetuneError(f"{path}:{i}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
                if line.endswith("\n"):
                    line = line[:-1]
                if line.endswith("\r"):
                    line = line[:-1]
                yield i, line
    except FileNotFoundError:
        raise FinetuneError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FinetuneError(f"{path}: is a directory, expected a file") from None


def read_tsv_table(path: str | os.PathLike, required: list[str], skipped: list[str] | None = None
                   ) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Read a GLUE TSV (no quoting): header + rows, every row checked to have the header's width.

    A row of the wrong width is an error, unless ``skipped`` is a list: then the row is left out and
    its message appended there (``skip_malformed``, for downloads with a few broken lines).
    """
    path = Path(path)
    it = _read_lines(path)
    header = None
    for lineno, line in it:
        if line.strip():
            header = line.split("\t")
            break
    if header is None:
        raise FinetuneError(f"{path}: empty file (expected a header row)")
    missing = [c for c in required if c not in header]
    if missing:
        raise FinetuneError(
            f"{path}:{lineno}: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})"
        )
    rows = []
    for lineno, line in it:
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            msg = f"{path}:{lineno}: expected {len(header)} tab-separated fields as in the header, got {len(fields)}"
            if skipped is None:
                raise FinetuneError(msg + _SKIP_HINT)
            skipped.append(msg)
            continue
        rows.append((lineno, fields))
    return header, rows


_SKIP_HINT = " (to leave such rows out, set skip_malformed=true)"


def _label_index(spec: TaskSpec, raw: str, where: str) -> int:
    raw = raw.strip()
    try:
        return spec.labels.index(raw)
    except ValueError:
        raise FinetuneError(f"{where}: unknown label {raw!r} for {spec.name}; expected one of {', '.join(spec.labels)}") from None


def read_glue_tsv(spec: TaskSpec, path: str | os.PathLike, labelled: bool = True,
                  skipped: list[str] | None = None) -> list[Example]:
    """Read one GLUE TSV file of ``spec`` (columns by header name); ``skipped``: see ``read_tsv_table``."""
    path = Path(path)
    cols = [spec.text_a] + ([spec.text_b] if spec.text_b else []) + ([spec.label] if labelled else [])
    header, rows = read_tsv_table(path, cols, skipped)
    ia = header.index(spec.text_a)
    ib = header.index(spec.text_b) if spec.text_b else None
    il = header.index(spec.label) if labelled else None
    iid = next((header.index(c) for c in ("index", "id", "pairID") if c in header), None)
    out = []
    for lineno, f in rows:
        where = f"{path}:{lineno}"
        label = None
        if il is not None:
            raw = f[il].strip()
            if spec.name == "mnli" and raw == MNLI_SKIP_LABEL:
                continue
            try:
                if raw == "":
                    raise FinetuneError(f"{where}: empty label in column {spec.label!r}")
                label = _label_index(spec, raw, where)
            except FinetuneError as e:
                if skipped is None:
                    raise FinetuneError(str(e) + _SKIP_HINT) from None
                skipped.append(str(e))
                continue
        guid = f[iid] if iid is not None else str(len(out))
        out.append(Example(guid, f[ia], f[ib] if ib is not None else None, label, where))
    return out


# ----------------------------------------------------------------------------------------------
# JSONL / CSV with named columns


def _find_custom_file(d: Path, stem: str) -> Path:
    for ext in (".jsonl", ".json", ".csv", ".tsv"):
        p = d / f"{stem}{ext}"
        if p.is_file():
            return p
    raise FinetuneError(f"no {stem}.jsonl / {stem}.csv / {stem}.tsv in {d}")


def read_named_columns(path: str | os.PathLike, text_a: str, text_b: str = "", label: str = "label",
                       labelled: bool = True) -> list[tuple[str, str, str | None, str | None]]:
    """Rows ``(where, text_a, text_b, raw_label)`` of a JSONL, CSV or TSV file with named columns."""
    path = Path(path)
    cols = [text_a] + ([text_b] if text_b else []) + ([label] if labelled else [])
    out = []
    if path.suffix in (".jsonl", ".json"):
        for lineno, line in _read_lines(path):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise FinetuneError(f"{where}: invalid JSON ({e.msg}); expected one object per line") from None
            if not isinstance(obj, dict):
                raise FinetuneError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            missing = [c for c in cols if c not in obj]
            if missing:
                raise FinetuneError(f"{where}: missing key(s) {', '.join(missing)}")
            vals = []
            for c in cols:
                v = obj[c]
                if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                    raise FinetuneError(f"{where}: key {c!r} must be a string or number, got {type(v).__name__}")
                vals.append(str(v))
            a = vals[0]
            b = vals[1] if text_b else None
            lab = vals[-1] if labelled else None
            out.append((where, a, b, lab))
        return out
    if path.suffix == ".tsv":
        header, rows = read_tsv_table(path, cols)
        for lineno, f in rows:
            d = dict(zip(header, f))
            out.append((f"{path}:{lineno}", d[text_a], d[text_b] if text_b else None, d[label] if labelled else None))
        return out
    if path.suffix == ".csv":
        try:
            with open(path, encoding="utf-8-sig", newline="") as fh:
                reader = csv.reader(fh)
                header = None
                for row in reader:
                    if not row:
                        continue
                    if header is None:
                        header = row
                        missing = [c for c in cols if c not in header]
                        if missing:
                            raise FinetuneError(f"{path}:{reader.line_num}: header lacks column(s) "
                                                f"{', '.join(missing)} (found: {', '.join(header)})")
                        continue
                    where = f"{path}:{reader.line_num}"
                    if len(row) != len(header):
                        raise FinetuneError(f"{where}: expected {len(header)} comma-separated fields as in the header, got {len(row)}")
                    d = dict(zip(header, row))
                    out.append((where, d[text_a], d[text_b] if text_b else None, d[label] if labelled else None))
        except csv.Error as e:
            raise FinetuneError(f"{path}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise FinetuneError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if header is None:
            raise FinetuneError(f"{path}: empty file (expected a header row)")
        return out
    raise FinetuneError(f"{path}: unsupported file type {path.suffix!r} (expected .jsonl, .csv or .tsv)")


# ----------------------------------------------------------------------------------------------
# loading a task


@dataclass
class ClassificationData:
    spec: TaskSpec
    train: list[Example]
    dev: dict[str, list[Example]]
    files: dict[str, str]


def subsample(examples: list, n: int, seed: int = 12345) -> list:
    """A deterministic subset of ``n`` examples in their original order (``n <= 0``: all)."""
    if n <= 0 or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


def load_classification(spec: TaskSpec, data: str | os.PathLike, *, text_a: str = "sentence", text_b: str = "",
                        label: str = "label", labels: list[str] | None = None, need_train: bool = True,
                        skipped: list[str] | None = None) -> ClassificationData:
    """A task's train and dev splits.  ``skipped``: a list to collect left-out malformed GLUE rows in
    (default: malformed rows are errors)."""
    d = task_dir(spec, data)
    files: dict[str, str] = {}
    if spec.name == "custom":
        spec.text_a, spec.text_b, spec.label = text_a, text_b, label
        train_path = _find_custom_file(d, "train") if need_train else None
        dev_paths = {"dev": _find_custom_file(d, "dev")}
        raw_train = read_named_columns(train_path, text_a, text_b, label) if train_path else []
        raw_dev = {k: read_named_columns(p, text_a, text_b, label) for k, p in dev_paths.items()}
        if labels:
            spec.labels = list(labels)
        else:
            seen = sorted({r[3] for r in raw_train} | {r[3] for rows in raw_dev.values() for r in rows})
            spec.labels = seen
        if len(spec.labels) < 2:
            raise FinetuneError(f"{d}: a classification task needs at least 2 distinct labels, found {spec.labels}")

        def conv(rows):
            return [Example(str(i), a, b, _label_index(spec, lab, w), w) for i, (w, a, b, lab) in enumerate(rows)]

        train = conv(raw_train)
        dev = {k: conv(v) for k, v in raw_dev.items()}
        if train_path:
            files["train"] = str(train_path)
        files.update({k: str(p) for k, p in dev_paths.items()})
        return ClassificationData(spec, train, dev, files)
    if labels:
        spec.labels = list(labels)
    train = []
    if need_train and spec.train:
        p = d / spec.train
        train = read_glue_tsv(spec, p, skipped=skipped)
        files["train"] = str(p)
    dev = {}
    for split, fname in spec.dev.items():
        p = d / fname
        if not p.is_file():
            raise FinetuneError(f"task {spec.name}: no {fname} in {d}")
        dev[split] = read_glue_tsv(spec, p, skipped=skipped)
        files[split] = str(p)
    if need_train and spec.train and not train:
        raise FinetuneError(f"{files['train']}: no training examples")
    return ClassificationData(spec, train, dev, files)


def find_ax_file(data: str | os.PathLike, mnli_dir: Path | None = None) -> Path | None:
    """GLUE's labelled diagnostic set next to MNLI: ``<glue>/AX/diagnostic-full.tsv`` (or in ``data``)."""
    cands = []
    for base in [Path(data)] + ([mnli_dir] if mnli_dir else []):
        cands += [base / "AX" / "diagnostic-full.tsv", base / "diagnostic-full.tsv",
                  base.parent / "AX" / "diagnostic-full.tsv", base.parent / "diagnostic" / "diagnostic-full.tsv"]
    for c in cands:
        if c.is_file():
            return c
    return None
