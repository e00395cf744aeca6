"""``custom``: a classification task of your own, JSONL (one object per line) or CSV/TSV with a
header, in ``train.*`` / ``dev.*`` of the data directory; the fields are named by
``finetune.text_a`` / ``text_b`` / ``label``, the labels by ``finetune.labels`` (default: the sorted
label values of the training set; a dev label outside them is refused).  A label is read by value:
``1`` and ``1.0`` are one class."""

from __future__ import annotations

import csv
import json
import math
import os
import random
from pathlib import Path

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.tasks.base import (
    FILLER,
    Example,
    TaskData,
    TaskSpec,
    check_header,
    data_dir,
    parse_label,
    read_lines,
    read_tsv_table,
    refuse_empty,
)
from tokendrop.runs.files import atomic_write_text


def _find(d: Path, stem: str) -> Path:
    for ext in (".jsonl", ".json", ".csv", ".tsv"):
        p = d / f"{stem}{ext}"
        if p.is_file():
            return p
    raise FinetuneError(f"no {stem}.jsonl / {stem}.csv / {stem}.tsv in {d}")


def read_named_columns(
    path: str | os.PathLike,
    text_a: str,
    text_b: str = "",
    label: str = "label",
    labelled: bool = True,
) -> list[tuple[str, str, str | None, str | None]]:
    """Rows ``(where, text_a, text_b, raw_label)`` of a JSONL, CSV or TSV file with named
    columns."""
    path = Path(path)
    cols = [text_a] + ([text_b] if text_b else []) + ([label] if labelled else [])
    out = []
    if path.suffix in (".jsonl", ".json"):
        for lineno, line in read_lines(path):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise FinetuneError(
                    f"{where}: invalid JSON ({e.msg}); expected one object per line"
                ) from None
            if not isinstance(obj, dict):
                raise FinetuneError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            missing = [c for c in cols if c not in obj]
            if missing:
                raise FinetuneError(f"{where}: missing key(s) {', '.join(missing)}")
            vals = []
            for c in cols:
                v = obj[c]
                if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                    raise FinetuneError(
                        f"{where}: key {c!r} must be a string or number, got {type(v).__name__}"
                    )
                vals.append(str(v))
            out.append(
                (where, vals[0], vals[1] if text_b else None, vals[-1] if labelled else None)
            )
        return out
    if path.suffix == ".tsv":
        header, rows = read_tsv_table(path, cols)
        for lineno, f in rows:
            d = dict(zip(header, f))
            out.append(
                (
                    f"{path}:{lineno}",
                    d[text_a],
                    d[text_b] if text_b else None,
                    d[label] if labelled else None,
                )
            )
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
                        check_header(header, cols, f"{path}:{reader.line_num}")
                        continue
                    where = f"{path}:{reader.line_num}"
                    if len(row) != len(header):
                        raise FinetuneError(
                            f"{where}: expected {len(header)} comma-separated fields as in the "
                            f"header, got {len(row)}"
                        )
                    d = dict(zip(header, row))
                    out.append(
                        (
                            where,
                            d[text_a],
                            d[text_b] if text_b else None,
                            d[label] if labelled else None,
                        )
                    )
        except csv.Error as e:
            raise FinetuneError(f"{path}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise FinetuneError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if header is None:
            raise FinetuneError(f"{path}: empty file (expected a header row)")
        return out
    raise FinetuneError(
        f"{path}: unsupported file type {path.suffix!r} (expected .jsonl, .csv or .tsv)"
    )


def label_value(raw: str) -> str:
    """A label's one spelling: a number by its value (``1``, ``1.0``, ``+1`` -> ``"1"``; ``0.5``
    -> ``"0.5"``), anything else as written without surrounding space."""
    raw = raw.strip()
    try:
        v = float(raw)
    except ValueError:
        return raw
    if not math.isfinite(v):
        return raw
    return str(int(v)) if v.is_integer() else repr(v)


class CustomTask(TaskSpec):
    def write_examples(
        self, directory: str | os.PathLike, n_train: int = 8, n_dev: int = 4, seed: int = 0
    ) -> Path:
        """Generated examples (for tests): ``train.jsonl`` / ``dev.jsonl`` in ``directory`` with the
        default fields (``sentence``, ``label``: "neg" or "pos", the sentence holding "bad" or
        "good")."""
        d = Path(directory)
        rng = random.Random(f"{self.name}:{seed}")
        for fname, n in (("train.jsonl", n_train), ("dev.jsonl", n_dev)):
            rows = []
            for i in range(n):
                words = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
                words.insert(rng.randint(0, len(words)), "good" if i % 2 else "bad")
                rows.append(
                    json.dumps({"sentence": " ".join(words), "label": "pos" if i % 2 else "neg"})
                    + "\n"
                )
            atomic_write_text(d / fname, "".join(rows))
        return d

    def load(
        self,
        data,
        *,
        text_a: str = "sentence",
        text_b: str = "",
        label: str = "label",
        labels: list[str] | None = None,
        need_train: bool = True,
        skipped: list[str] | None = None,
    ) -> TaskData:
        d = data_dir(data)
        train_path = _find(d, "train") if need_train else None
        dev_path = _find(d, "dev")
        raw_train = read_named_columns(train_path, text_a, text_b, label) if train_path else []
        raw_dev = read_named_columns(dev_path, text_a, text_b, label)
        # one label, however it is spelled: 1, 1.0 and " 1" are the same class
        raw_train, raw_dev = (
            [(w, a, b, label_value(lab)) for w, a, b, lab in rows] for rows in (raw_train, raw_dev)
        )
        if labels:
            self.labels = [label_value(x) for x in labels]
        elif raw_train:  # the classes are the training set's; a dev label beyond them is a typo
            self.labels = sorted({r[3] for r in raw_train})
            for w, _, _, lab in raw_dev:
                if lab not in self.labels:
                    raise FinetuneError(
                        f"{w}: label {lab!r} does not occur in {train_path} (its labels: "
                        f"{', '.join(self.labels)}); fix the label, or list every class in "
                        "finetune.labels"
                    )
        else:
            self.labels = sorted({r[3] for r in raw_dev})
        if len(self.labels) < 2:
            raise FinetuneError(
                f"{d}: a classification task needs at least 2 distinct labels, found {self.labels}"
            )

        def conv(rows):
            return [
                Example(str(i), a, b, parse_label(self, lab, w), w)
                for i, (w, a, b, lab) in enumerate(rows)
            ]

        train = conv(raw_train)
        if train_path and not train:
            raise FinetuneError(f"{train_path}: no training examples")
        files = {"train": str(train_path)} if train_path else {}
        files["dev"] = str(dev_path)
        return TaskData(self, train, {"dev": refuse_empty(conv(raw_dev), dev_path)}, files, d)


# its files are found by stem (train.jsonl, dev.csv, ...)
TASKS = [
    CustomTask(
        "custom",
        "classification",
        ("accuracy",),
        "accuracy",
        train="train",
        dev={"dev": "dev"},
        test={},
    )
]
