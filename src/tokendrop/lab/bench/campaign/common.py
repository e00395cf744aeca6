"""What every campaign part shares: the time budget, checks, and ``OUT/PART.json`` + ``.md``."""

from __future__ import annotations

import datetime as _dt
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tokendrop.lab.bench.fields import record_dict
from tokendrop.runs.files import atomic_write_text, json_text

Log = Callable[[str], None]


@dataclass
class Budget:
    """A part's wall-clock budget; phases ask ``allows(seconds)`` before they start."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def allows(self, seconds: float) -> bool:
        return self.left() >= seconds

    @property
    def deadline(self) -> float:
        return self.start + self.seconds


@dataclass
class Check:
    name: str
    ok: bool | None  # None: not applicable here (e.g. a GPU-only expectation in a CPU dry run)
    detail: str = ""

    @property
    def mark(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.ok]


@dataclass
class PartResult:
    """One part's outcome: checks, a short summary, tables for the Markdown, and its data."""

    part: str
    dry_run: bool
    device: str
    started: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )
    wall_s: float = 0.0
    budget_s: float = 0.0
    error: str = ""  # set when the part stopped on an exception (or was interrupted)
    # False until the part has ended (finished, or stopped on an error): a PART.json that still says
    # false was left by a campaign killed or interrupted during the part, and holds only what it
    # finished
    complete: bool = False
    skipped: list[str] = field(default_factory=list)  # phases left out for the time budget
    checks: list[Check] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    # (title, header, rows)
    tables: list[tuple[str, list[str], list[list[Any]]]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # other files written under OUT
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.complete and not self.error and all(c.ok is not False for c in self.checks)

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("FAILED" if self.complete else "INCOMPLETE")

    def check(self, name: str, ok: bool | None, detail: str = "") -> Check:
        c = Check(name, ok, detail)
        self.checks.append(c)
        return c

    def skip(self, what: str, log: Log | None = None) -> None:
        self.skipped.append(what)
        if log:
            log(f"  skipped (time budget): {what}")

    def summary_text(self) -> str:
        head = f"[{self.part}] {self.status} in {self.wall_s:.0f}s on {self.device}" + (
            " (dry run)" if self.dry_run else ""
        )
        lines = [head] + [f"  {s}" for s in self.summary]
        lines += [
            f"  {c.mark}: {c.name}" + (f" -- {c.detail}" if c.detail else "") for c in self.checks
        ]
        lines += [f"  skipped (time budget): {s}" for s in self.skipped]
        if self.error:
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        d["ok"] = self.ok
        d["tables"] = [{"title": t, "header": h, "rows": r} for t, h, r in self.tables]
        return d


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "-"
        return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"
    return str(x).replace("|", "\\|")


def markdown(r: PartResult, title: str) -> str:
    out = [
        f"# GPU campaign, part `{r.part}`: {title}",
        "",
        f"- {'dry run on ' if r.dry_run else ''}{r.device}; started {r.started}; wall "
        f"{r.wall_s:.0f} s of a "
        f"{r.budget_s:.0f} s budget; result: **{r.status}**",
    ]
    if not r.complete:
        out += [
            "- **incomplete**: the part had not finished when this was written (it is still "
            "running, or the "
            "campaign was killed or interrupted during it); what is here is only what it finished"
        ]
    out += [f"- {s}" for s in r.summary]
    if r.error:
        out += [f"- error: `{r.error}`"]
    if r.skipped:
        out += [f"- skipped for the time budget: {', '.join(r.skipped)}"]
    if r.checks:
        out += ["", "## Checks", "", "| check | result | detail |", "|---|---|---|"]
        out += [f"| {c.name} | {c.mark} | {_cell(c.detail)} |" for c in r.checks]
    for t, header, rows in r.tables:
        out += ["", f"## {t}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in rows]
    if r.files:
        out += ["", "Files: " + ", ".join(f"`{f}`" for f in r.files)]
    return "\n".join(out) + "\n"


def write_part(r: PartResult, out: Path, title: str) -> tuple[Path, Path]:
    """``OUT/PART.json`` and ``OUT/PART.md``, each replaced atomically (``tokendrop.runs.rundir``;
    parts rewrite them after every phase, so a part stopped from outside still leaves what it
    finished, marked ``complete: false``)."""
    paths = (out / f"{r.part}.json", out / f"{r.part}.md")
    texts = (json_text(r.to_dict()), markdown(r, title))
    for p, text in zip(paths, texts):
        atomic_write_text(p, text)
    return paths


def free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
