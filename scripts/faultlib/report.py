"""The report: docs/reliability.md from the cases' records, and the records of other runs."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

from tokendrop.errors import TokendropError
from tokendrop.lab.machine import cpu_model, loadavg
from tokendrop.runs.files import read_json


def machine_line() -> str:
    cpu = cpu_model()
    try:
        import torch

        tv = torch.__version__
    except ImportError:
        tv = "?"
    return (
        f"{datetime.date.today().isoformat()}, {cpu}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, torch {tv}"
    )


def md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def load_line(start: list[float] | None) -> str:
    """The load average when the matrix started and when it ended (the cases' timing and any race
    they had depend on it; none should)."""
    end = loadavg()
    fmt = lambda la: "/".join(f"{x:.1f}" for x in la) if la else "?"  # noqa: E731
    return f"load average (1/5/15 min) {fmt(start)} at the start, {fmt(end)} at the end"


RECORD_KEYS = ("command", "machine", "load", "seconds", "cases", "passed", "results")


def read_records(path: Path) -> dict:
    """A run's JSON records (what ``--json`` wrote), for ``--also`` and ``--render``; TokendropError
    with one line naming the file otherwise."""
    d = read_json(path, hint="expected the --json records of a fault-matrix run")
    missing = [k for k in RECORD_KEYS if k not in d]
    if missing:
        raise TokendropError(
            f"{path}: not the records of a fault-matrix run (no {', '.join(missing)}); "
            "give the file its --json wrote"
        )
    return d


def other_run_line(path: Path) -> str:
    """One line summarising another run of the matrix from its JSON records (``--also``)."""
    d = read_records(path)
    failing = [r["case"] for r in d["results"] if not r["passed"]]
    return (
        f"* `{d['command']}` on {d['machine']}; {d['load']}; {d['seconds']:.0f} s: **{d['passed']} "
        f"of {d['cases']} pass**"
        + (f" (failing: {', '.join(failing)})" if failing else "")
        + f" -- records: `{path.name}`"
    )


def write_markdown(
    path: Path,
    recs: list[dict],
    command: str,
    seconds: float,
    only: str | None,
    load: str = "",
    also: tuple[Path, ...] = (),
) -> None:
    n, ok = len(recs), sum(r["passed"] for r in recs)
    rows = [
        "| # | category | case | command | exit (expected) | first line of stderr | traceback | "
        "disk | result |",
        "|---:|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(recs, 1):
        exp = (
            r["expected_rc"]
            if not isinstance(r["expected_rc"], list)
            else "/".join(map(str, r["expected_rc"]))
        )
        rows.append(
            "| "
            + " | ".join(
                md_cell(x)
                for x in (
                    i,
                    r["row"],
                    r["case"],
                    f"`{r['command']}`",
                    f"{r['rc']} ({exp})",
                    r["stderr_first"] or "-",
                    "yes" if r["traceback"] else "no",
                    r["disk"] or "-",
                    "pass" if r["passed"] else "**FAIL**: " + r["why"],
                )
            )
            + " |"
        )
    failing = [r for r in recs if not r["passed"]]
    text = [
        "# Reliability: the fault matrix",
        "",
        "Every bad input and fault we test, by category (the `category` column), the bad `--init` "
        "sources and the bad",
        "`model.attention_backend` settings, each run as",
        "a subprocess of the real CLI in its own directory built from small generated data.  "
        "The categories:",
        "outputs (never deleting what tokendrop did not write), corrupt files (checkpoints, "
        "prepared data, every",
        "output `verify` checks), corrupt inputs (each corpus format cut short), directory walks "
        "(tokendrop's own",
        "outputs skipped, broken links), locks, signals, moved runs, reuse, logs, bad input / full "
        "disk, bad paths",
        "(`--out` under a file, a hand-broken config, sizes that cannot fit in memory), empty "
        "scores (nothing scored",
        "on n = 0), stuck runs (a run that failed before its first checkpoint never blocks the "
        "corrected command;",
        "every suggested command is run), edge settings, `--init` and attention.  A case that "
        "signals or kills",
        "its command does so only once the command waits at a test gate "
        "(`tokendrop.runs.gate`), so no case",
        "depends on the machine's speed.  A case passes",
        "when the exit code is the expected one, there is no traceback, an error is "
        "one line of stderr",
        "(naming what the case says it must name), and the disk is intact: the watched files "
        "and directories",
        "have the same names, sizes and sha256 as before, what must not exist does not, no "
        "temp / `.old-*` /",
        "lock entry is left, and the case's own check holds.  `CASE` is the case's "
        "directory, `BASE` the",
        "shared inputs (a prepared dataset, a 4-step `tiny` run, its export).",
        "",
        f"Generated by: `{command}`" + (f" (subset: `--only {only}`)" if only else ""),
        "",
        f"Machine: {machine_line()}; {seconds:.0f} s in all" + (f"; {load}." if load else "."),
        "",
        f"**{n} cases: {ok} pass, {n - ok} fail.**",
        "",
        *(
            [
                "The same matrix, run again on another machine state:",
                "",
                *map(other_run_line, also),
                "",
            ]
            if also
            else []
        ),
        *rows,
        "",
    ]
    if failing:
        text += (
            ["## Failing cases", ""]
            + [
                f"* `{r['case']}` (row {r['row']}): {md_cell(r['why'])}"
                + (f" -- `{md_cell(r['exception'])}`" if r.get("exception") else "")
                for r in failing
            ]
            + [""]
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n")
