#!/usr/bin/env python
"""Two outputs of the same command, compared without their timings: a study's ``--out``, a run
directory, an evaluation, or a ``bench --json`` file, made by two versions of the code.

    python scripts/compare_runs.py /tmp/before-study /tmp/after-study
    python scripts/compare_runs.py before-bench.json after-bench.json --md /tmp/bench-diff.md

Every number (and boolean) in every JSON and JSONL file at the same relative path on both sides is
compared exactly, except timings and the host's state: a value whose key (or a key above it) names
a time, a rate per second, a speed-up or ratio of times, a FLOP rate, a load, a date, a path or the
machine (``TIMING``).  Every weights file (``.safetensors``) and every generated data file
(``.txt``, ``.tsv``, ``.npy``, ``.bin`` under a ``data`` folder) is compared byte for byte.  Logs,
reports, figures and TensorBoard events are left out: they hold the same numbers as the JSON, or
the time.  Run both sides with the same ``--out`` path (moving the first aside): the evaluation
names its cells by a hash of the model's path.

Prints a Markdown table (one row per file: how many numbers or bytes were compared, and the first
differences) and exits 0 when everything compared is identical, 1 when something differs, 2 on bad
input (a missing path)."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

# a key that names a time, a rate per second, a ratio of times, the load or the host: not compared
TIMING = re.compile(
    r"time|wall|_s$|^s$|_s_|speedup|tflops|mfu|iqr|util|loadavg|samples|round_median|rss|"
    r"fraction_of_bound|over_hf|^ratio|ratio_cpu|ratio_paired|ratio_of_medians|^eta$|elapsed|"
    r"seconds|^date$|profile|noise|^command$|^env$|machine|^host|^pid$|path|^dir$|cwd|"
    r"^created|^started|^finished|tracker_ids|version",
    re.I,
)
DATA_SUFFIXES = {".txt", ".tsv", ".npy", ".bin", ".idx"}


def leaves(value, path: str = "") -> dict[str, float | bool]:
    """``path -> number`` for every number or boolean in a JSON value, timings left out."""
    out: dict[str, float | bool] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            if not TIMING.search(str(k)):
                out.update(leaves(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}[{i}]"))
    elif isinstance(value, (bool, int, float)):
        out[path] = value
    return out


def read_numbers(p: Path) -> dict[str, float | bool]:
    if p.suffix == ".jsonl":
        lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
        return leaves([json.loads(ln) for ln in lines])
    return leaves(json.loads(p.read_text(encoding="utf-8")))


def _kind(rel: Path) -> str | None:
    if rel.suffix in (".json", ".jsonl"):
        return "numbers"
    if rel.suffix == ".safetensors" or (rel.suffix in DATA_SUFFIXES and "data" in rel.parts):
        return "bytes"
    return None


def _files(root: Path) -> dict[Path, str]:
    if root.is_file():
        return {Path(root.name): _kind(Path(root.name)) or "numbers"}
    return {
        p.relative_to(root): k
        for p in sorted(root.rglob("*"))
        if p.is_file() and (k := _kind(p.relative_to(root)))
    }


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def compare(before: Path, after: Path) -> tuple[list[tuple[str, int, str]], bool]:
    """One row (file, values compared, differences) per file; and whether all are identical."""
    a_files, b_files = _files(before), _files(after)
    if before.is_file():  # two single files: compare them whatever their names
        pairs = [(Path(before.name), before, after)]
    else:
        pairs = [(rel, before / rel, after / rel) for rel in sorted(a_files) if rel in b_files]
    rows, same = [], True
    for rel, pa, pb in pairs:
        if a_files.get(rel) == "bytes":
            equal = _sha256(pa) == _sha256(pb)
            rows.append((rel.as_posix(), pa.stat().st_size, "" if equal else "bytes differ"))
        else:
            na, nb = read_numbers(pa), read_numbers(pb)
            diffs = [
                f"{k}: {na.get(k, '-')} vs {nb.get(k, '-')}"
                for k in sorted(set(na) | set(nb))
                if na.get(k, None) != nb.get(k, None)
            ]
            rows.append((rel.as_posix(), len(set(na) | set(nb)), "; ".join(diffs[:4])))
            equal = not diffs
        same = same and equal
    if not before.is_file():
        for rel in sorted(set(a_files) ^ set(b_files)):
            side = "before" if rel in a_files else "after"
            rows.append((rel.as_posix(), 0, f"only {side}"))
            same = False
    return rows, same


def markdown(rows: list[tuple[str, int, str]]) -> str:
    lines = ["| file | values compared | result |", "|---|---:|---|"]
    for name, n, diff in rows:
        unit = " bytes" if not name.endswith((".json", ".jsonl")) and n else ""
        lines.append(f"| `{name}` | {n:,}{unit} | {diff or 'identical'} |")
    total = sum(n for name, n, _ in rows if name.endswith((".json", ".jsonl")))
    differing = sum(1 for _, _, d in rows if d)
    lines.append(
        f"\n{len(rows)} files, {total:,} numbers compared; "
        + ("all identical." if not differing else f"{differing} files differ.")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--md", type=Path, help="also write the table to this file")
    a = ap.parse_args(argv)
    for p in (a.before, a.after):
        if not p.exists():
            print(
                f"error: {p} does not exist (give two outputs of the same command)", file=sys.stderr
            )
            return 2
    if a.before.is_file() != a.after.is_file():
        print(
            f"error: {a.before} and {a.after} must both be files or both directories",
            file=sys.stderr,
        )
        return 2
    rows, same = compare(a.before, a.after)
    text = markdown(rows)
    print(text)
    if a.md:
        a.md.write_text(text + "\n", encoding="utf-8")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
