"""``tokendrop verify`` for the directories the harnesses write: a study (``study --out``) and a GPU
campaign (``bench --campaign --out``).  What each gets is in :mod:`tokendrop.verification`'s module
doc; the command passes :data:`VERIFIERS` to :func:`tokendrop.verification.verify_path`.  Nothing is
written.
"""

from __future__ import annotations

import json
import os
import socket
import tomllib
from pathlib import Path
from typing import Any

from tokendrop.config.quantities import parse_duration
from tokendrop.errors import TokendropError
from tokendrop.lab.bench.campaign import IN_PROGRESS
from tokendrop.lab.bench.campaign.config import PARTS
from tokendrop.lab.study.spec import load_study
from tokendrop.runs.files import read_json
from tokendrop.train.budget import RunLength
from tokendrop.verification import (
    VerifyReport,
    error_line,
    merge_report,
    read_checked_json,
    verify_evaluate,
    verify_prepared,
    verify_run,
)


def verify_study(p: Path, rep: VerifyReport) -> None:
    fix = "run the same `tokendrop study` command again"
    state = read_checked_json(
        p / "study-state.json", rep, "a study records its state there from the start", fix
    )
    if state is not None and not isinstance(state, dict):
        rep.problems.append(f"{p / 'study-state.json'}: not a JSON object; {fix}")
    st = p / "study.toml"
    if st.is_file():
        try:
            load_study(st, recorded=True)
        except (
            TokendropError,
            ValueError,
            KeyError,
            TypeError,
            tomllib.TOMLDecodeError,
            UnicodeDecodeError,
        ) as e:
            rep.problems.append(f"{st}: does not load as a study config ({error_line(e)}); {fix}")
    report = None
    if (p / "study.json").is_file():
        report = read_checked_json(p / "study.json", rep, "", fix)
    else:
        rep.notes.append(
            "no study.json / study.md yet: the study has not finished (run it again to finish it)"
        )
    # runs
    runs = (
        sorted(d for d in (p / "runs").iterdir() if d.is_dir() and not d.name.startswith("."))
        if (p / "runs").is_dir()
        else []
    )
    finished = 0
    for run in runs:
        sub = VerifyReport(run, "run")
        verify_run(run, sub)
        merge_report(rep, sub, f"runs/{run.name}", notes=False)
        state_ = _run_finished(run)
        finished += state_ is True
        rep.notes.append(
            f"runs/{run.name}: {sub.notes[0] if sub.notes else 'checked'}"
            + ("" if state_ is None else ", finished" if state_ else ", not finished")
        )
    if isinstance(report, dict) and isinstance(report.get("runs"), dict):
        missing = [n for n in report["runs"] if not (p / "runs" / n).is_dir()]
        if missing:
            rep.problems.append(
                f"{p / 'runs' / missing[0]}: missing, but study.json reports it ({len(missing)} "
                f"such run(s)); {fix} (it retrains what is missing)"
            )
    # prepared data
    datasets = (
        [d for d in sorted((p / "data").iterdir()) if d.is_dir() and (d / "meta.json").is_file()]
        if (p / "data").is_dir()
        else []
    )
    for d in datasets:
        sub = VerifyReport(d, "prepared")
        verify_prepared(d, sub)
        merge_report(rep, sub, f"data/{d.name}", notes=False)
        rep.notes.append(f"data/{d.name}: {sub.notes[0] if sub.notes else 'checked'}")
    # evaluation
    ev = p / "eval"
    if ev.is_dir():
        sub = VerifyReport(ev, "evaluate")
        verify_evaluate(ev, sub)
        merge_report(rep, sub, "eval")
    rep.notes.insert(
        0,
        f"study: {len(runs)} run(s) ({finished} finished), {len(datasets)} prepared dataset(s)"
        + (", an evaluation" if ev.is_dir() else ", no evaluation yet")
        + ("; report study.md" if (p / "study.md").is_file() else ""),
    )


def _run_finished(run: Path) -> bool | None:
    """Whether the newest checkpoint reached the end of the run (its train.steps, or its
    train.time_budget of training time) (None: cannot tell; the checkpoints themselves are verified
    by the run's check)."""
    try:
        cfg = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
        budget = str(cfg["train"].get("time_budget", ""))
        length = (
            RunLength(0, parse_duration(budget))
            if budget
            else RunLength(int(cfg["train"]["steps"]))
        )
        cks = (
            sorted(c for c in (run / "checkpoints").glob("step-*") if c.is_dir())
            if (run / "checkpoints").is_dir()
            else []
        )
        if not cks:
            return False
        meta = json.loads((cks[-1] / "meta.json").read_text(encoding="utf-8"))
        return length.finished(int(meta["step"]), float(meta.get("wall_time", 0.0)))
    except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None


def verify_campaign(p: Path, rep: VerifyReport) -> None:
    fix = "run that part again (`tokendrop bench --campaign PART --out DIR`)"
    running = _running_part(p / IN_PROGRESS)
    parts = []
    for name in PARTS:
        f = p / f"{name}.json"
        if not f.exists():
            continue
        d = read_checked_json(f, rep, "", fix.replace("PART", name))
        if d is None:
            continue
        if not isinstance(d, dict) or d.get("part") != name:
            rep.problems.append(
                f"{f}: not the result of part {name}; the file was edited; "
                f"{fix.replace('PART', name)}"
            )
            continue
        parts.append(name)
        if not d.get("complete", False):
            if running == name:
                rep.notes.append(
                    f"{name}: running now (pid {_pid(p / IN_PROGRESS)}); {name}.json holds what it "
                    "finished so far"
                )
            else:
                rep.problems.append(
                    f"{f}: part {name} did not finish (complete: false: the campaign was killed or "
                    "interrupted during it); it holds only what it finished; "
                    f"{fix.replace('PART', name)}"
                )
        elif not d.get("ok", False):
            rep.notes.append(
                f"{name}: finished, FAILED ({(d.get('error') or 'a check failed')[:160]})"
            )
        for rel in d.get("files") or []:
            if isinstance(rel, str) and not (p / rel).is_file():
                rep.problems.append(
                    f"{p / rel}: missing, but {name}.json lists it; {fix.replace('PART', name)}"
                )
        if not (p / f"{name}.md").is_file():
            rep.problems.append(
                f"{p / (name + '.md')}: missing ({name}.json is there); {fix.replace('PART', name)}"
            )
    if (p / IN_PROGRESS).is_file() and running is None:
        rep.notes.append(
            f"{IN_PROGRESS}: left by a campaign killed during a part (the next campaign into this "
            "directory reports and removes it)"
        )
    rep.notes.insert(0, f"campaign: {len(parts)} part(s) ({', '.join(parts) or 'none yet'})")


def _pid(f: Path) -> Any:
    d = _json_or_none(f)
    return d.get("pid") if isinstance(d, dict) else None


def _running_part(f: Path) -> str | None:
    """The part a live campaign on this host is running (its in-progress record), else None."""
    d = _json_or_none(f)
    if (
        not isinstance(d, dict)
        or d.get("host") != socket.gethostname()
        or not isinstance(d.get("pid"), int)
    ):
        return None
    try:
        os.kill(d["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return str(d.get("part"))


def _json_or_none(f: Path) -> Any:
    try:
        return read_json(f)
    except TokendropError:
        return None


VERIFIERS = {"study": verify_study, "campaign": verify_campaign}
