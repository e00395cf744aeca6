"""A run's metrics: ``metrics.jsonl`` (one JSON object per line) plus the trackers of
``train.report_to``.

The one reader and writer of ``metrics.jsonl`` (``tokendrop.runs.rundir`` re-exports them):

* ``MetricsLog`` appends records on rank 0 only (``append_record``: one write per line; a line is
  started on a fresh line even when the file ends in a torn write);
* ``read_metrics`` reads them back (reports, the study, resume checks).  A torn last line -- a
  writer killed in the middle of a write -- is ignored; any other line that is not JSON is skipped
  with a warning on stderr naming the file and the line;
* ``truncate_metrics`` is what ``--resume`` does before it appends: rows past the step of the
  checkpoint it resumes from (and a torn line) are dropped, the file rewritten atomically, so no
  step appears twice.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tokendrop.runs.files import atomic_write_text
from tokendrop.runs.trackers import Trackers

FILENAME = "metrics.jsonl"


class MetricsLog:
    """metrics.jsonl + the trackers of ``report_to`` (``tokendrop.runs.trackers``: TensorBoard, W&B,
    MLflow), rank 0 only.  ``tracker_args``: ``trackers.Trackers``'s keywords (a resumed run's
    ``purge_step`` makes TensorBoard discard the events a killed run had written from that step
    on)."""

    # rundir.close_on_error closes it with ok=False: its trackers record a failed run
    closes_failed = True

    def __init__(
        self,
        run_dir: Path,
        enabled: bool,
        report_to: list[str] | tuple[str, ...] = ("tensorboard",),
        **tracker_args: Any,
    ):
        self.enabled = enabled
        self.path = Path(run_dir) / FILENAME
        self.trackers = None
        if enabled:
            self.trackers = Trackers(
                run_dir, [t for t in report_to if t != "jsonl"], **tracker_args
            )

    @property
    def tracker_ids(self) -> dict[str, str]:
        return self.trackers.ids if self.trackers is not None else {}

    def write(self, rec: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_record(self.path, rec)
        if self.trackers is not None:
            self.trackers.write(rec)

    def close(self, ok: bool = True) -> None:
        if self.trackers is not None:
            self.trackers.close(ok)
            self.trackers = None


def _path(run_dir_or_file: str | os.PathLike) -> Path:
    p = Path(run_dir_or_file)
    return p if p.name.endswith(".jsonl") and not p.is_dir() else p / FILENAME


def append_record(path: str | os.PathLike, rec: dict[str, Any]) -> None:
    """Append one JSON line to ``path`` (a ``metrics.jsonl``) in a single write.  A file that ends
    in a torn line (no final newline) gets one first, so the new record never merges with it."""
    line = (json.dumps(rec) + "\n").encode("utf-8")
    with open(path, "a+b") as f:
        if f.seek(0, os.SEEK_END) > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line)


def scan_lines(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[int, str]], bool]:
    """metrics.jsonl text -> ([(raw line, record)], [(line number, why) of bad lines], whether the
    last line is torn (no newline and not a record: a killed writer's, tolerated)).  The one parser
    of the log (the readers here, ``tokendrop verify``)."""
    lines = text.split("\n")
    unterminated = not text.endswith("\n")  # the last element is "" when the file ends in a newline
    out, bad, torn = [], [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as e:
            if unterminated and i == len(lines) - 1:
                torn = True
            else:
                bad.append((i + 1, str(e).split("\n")[0][:80]))
            continue
        out.append((line, rec))
    return out, bad, torn


def _parse(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    """-> [(raw line, record)]: a torn last line is dropped, other bad lines skipped with a
    warning."""
    out, bad, _ = scan_lines(text)
    for i, _why in bad:
        print(f"warning: {path}: line {i} is not a JSON record; skipped", file=sys.stderr)
    return out


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``RUN_DIR/metrics.jsonl`` (or of a ``.jsonl`` path), in order; [] when there
    is none.  Tolerates a torn last line (see the module doc)."""
    p = _path(run_dir)
    if not p.is_file():
        return []
    return [rec for _, rec in _parse(p, p.read_text(encoding="utf-8", errors="replace"))]


def truncate_metrics(run_dir: str | os.PathLike, step: int) -> int:
    """Drop the records with ``step`` greater than ``step`` (and a torn or unreadable line) from
    ``RUN_DIR/metrics.jsonl``, rewriting it atomically; -> the number of lines dropped."""
    p = _path(run_dir)
    if not p.is_file():
        return 0
    text = p.read_text(encoding="utf-8", errors="replace")
    raw = [ln for ln in text.split("\n") if ln.strip()]
    keep = [line for line, rec in _parse(p, text) if not _after(rec, step)]
    if len(keep) != len(raw) or (text and not text.endswith("\n")):
        atomic_write_text(p, "".join(line + "\n" for line in keep))
    return len(raw) - len(keep)


def _after(rec: dict[str, Any], step: int) -> bool:
    s = rec.get("step", 0)
    return isinstance(s, (int, float)) and not isinstance(s, bool) and s > step


__all__ = ["MetricsLog", "append_record", "read_metrics", "truncate_metrics", "FILENAME"]
