#!/usr/bin/env python
"""The fault matrix (and the bad `--init` sources): every bad input and fault, run as a
subprocess of the real CLI (``python -m tokendrop ...``), each in its own directory, with the disk
compared before and after.  Writes ``docs/reliability.md`` (and ``docs/reliability.json``).

    python scripts/fault_matrix.py                      # every case, docs/reliability.{md,json}
    python scripts/fault_matrix.py --only 'lock|sigint' --jobs 2 --md /tmp/r.md --json ''

A case passes when the exit code is the expected one, stderr holds no traceback, an error is one
line of stderr (naming what the case says it must name), and the disk is intact: every watched
file or directory has the same names, sizes and sha256 as before, what must not exist does not, no
temp / ``.old-*`` / lock entry is left anywhere in the case's directory, and the case's own check
(e.g. "no step twice in metrics.jsonl") holds.

Everything is generated (``tests/fixtures/toydata.py``, ``tokendrop.lab.toydata``): one prepared
directory, one tiny pretraining run, its export and a few variants are built once under the work
directory ("BASE") and copied into each case's directory ("CASE").  Commands and messages in the
report show those two as BASE and CASE.

The parts are in ``scripts/faultlib/``: the commands' pieces (``commands``), the base (``base``),
the disk's snapshots and edits (``files``), a case (``case``), running one (``runner``), the report
(``report``), and the rows, one module per area (``rows/``: outputs, corrupt files, kills and
locks, resumed runs, settings, ...); ``cases()`` below puts them in the report's order."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from faultlib.base import base_items, build_base
from faultlib.case import Case
from faultlib.commands import REPO
from faultlib.files import snapshot
from faultlib.report import load_line, machine_line, read_records, write_markdown
from faultlib.rows import (
    campaign,
    corpus,
    corrupt,
    disk,
    edge,
    empty_scores,
    init_sources,
    interrupts,
    outputs,
    paths,
    resume,
    settings,
    stuck_runs,
    tasks,
)
from faultlib.runner import run_case

from tokendrop.errors import TokendropError
from tokendrop.lab.machine import loadavg


def cases() -> list[Case]:
    """Every case, in the report's order (its # column, the case directories' numbers)."""
    return [
        *outputs.rows(),
        *corrupt.rows(),
        *interrupts.rows(),
        *resume.rows(),
        *settings.rows(),
        *corrupt.hand_edited_meta(),
        *disk.rows(),
        *corpus.long_records(),
        *settings.flags_and_values(),
        *edge.rows(),
        *init_sources.sources(),
        *campaign.rows(),
        *corrupt.verified_outputs(),
        *init_sources.config_shapes(),
        *settings.attention(),
        *corpus.cut_and_walked(),
        *paths.rows(),
        *settings.bounds(),
        *empty_scores.rows(),
        *stuck_runs.rows(),
        *settings.as_written(),
        *init_sources.one_source(),
        *corrupt.edited_consistently(),
        *corpus.read_as_meant(),
        *tasks.rows(),
        *tasks.seed_groups(),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only the cases whose name matches this regular expression")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    ap.add_argument(
        "--md",
        default=str(REPO / "docs" / "reliability.md"),
        help="the Markdown report ('' = none)",
    )
    ap.add_argument(
        "--json",
        default=str(REPO / "docs" / "reliability.json"),
        help="the JSON records ('' = none)",
    )
    ap.add_argument("--work", help="work directory (default: a temp dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        type=Path,
        help="another run's JSON records (e.g. on a loaded machine), summarised in the report",
    )
    ap.add_argument(
        "--render",
        type=Path,
        help="run nothing: write the Markdown report (--md) from this run's JSON records",
    )
    a = ap.parse_args(argv)
    try:  # the records --also and --render name, read before any case runs
        rendered = read_records(a.render) if a.render else None
        for p in a.also:
            read_records(p)
    except TokendropError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if rendered is not None:
        write_markdown(
            Path(a.md),
            rendered["results"],
            rendered["command"],
            rendered["seconds"],
            None,
            rendered["load"],
            tuple(a.also),
        )
        return 0
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    all_cases = cases()
    names = [c.name for c in all_cases]
    assert len(set(names)) == len(names), "duplicate case names"
    sel = [(i, c) for i, c in enumerate(all_cases, 1) if not a.only or re.search(a.only, c.name)]
    if a.list:
        for i, c in sel:
            print(f"{i:3d} {c.row:20s} {c.name}")
        return 0
    if not sel:
        print(f"error: no case matches --only {a.only!r}", file=sys.stderr)
        return 2
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    work = Path(a.work).resolve() if a.work else Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    t0 = time.time()
    load0 = loadavg()
    try:
        base = work / "base"
        build_base(base, base_items([c for _, c in sel]), log)
        base_snap = snapshot(base)
        cases_dir = work / "cases"
        cases_dir.mkdir(exist_ok=True)
        recs: dict[int, dict] = {}
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
            futs = {ex.submit(run_case, c, i, cases_dir, base): i for i, c in sel}
            for f in cf.as_completed(futs):
                r = f.result()
                recs[futs[f]] = r
                log(
                    f"[{len(recs)}/{len(sel)}] {'pass' if r['passed'] else 'FAIL'} {r['case']} "
                    f"({r['seconds']} s){'' if r['passed'] else ': ' + r['why']}"
                )
        ordered = [recs[i] for i, _ in sel]
        if snapshot(base) != base_snap:
            log("warning: a case changed the shared BASE inputs")
        seconds = time.time() - t0
        cmd = (
            "python scripts/fault_matrix.py"
            + (f" --jobs {a.jobs}" if a.jobs != 1 else "")
            + (f" --only {shlex.quote(a.only)}" if a.only else "")
        )
        load = load_line(load0)
        if a.md:
            write_markdown(Path(a.md), ordered, cmd, seconds, a.only, load, tuple(a.also))
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(
                json.dumps(
                    {
                        "command": cmd,
                        "machine": machine_line(),
                        "load": load,
                        "seconds": round(seconds, 1),
                        "cases": len(ordered),
                        "passed": sum(r["passed"] for r in ordered),
                        "results": ordered,
                    },
                    indent=1,
                )
                + "\n"
            )
        n_ok = sum(r["passed"] for r in ordered)
        print(
            f"{len(ordered)} cases: {n_ok} pass, {len(ordered) - n_ok} fail ({seconds:.0f} s)"
            + (f"; report: {a.md}" if a.md else "")
        )
        return 0 if n_ok == len(ordered) else 1
    finally:
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
