"""``tokendrop verify`` for the directories ``finetune``, ``evaluate``, ``study`` and ``bench --campaign``
write (the kinds of :mod:`tokendrop.runs.verify` beyond runs, checkpoints, prepared data and exports).

What each records and what is checked is in :mod:`tokendrop.runs.verify`'s module doc.  Problems are
one line each, naming the file and the fix; states that are not damage (an evaluation or a study
still to finish, cells computed from weights the model no longer has) are notes.  Nothing is written.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from tokendrop.train.budget import RunLength, parse_duration
from tokendrop.errors import TokendropError
from tokendrop.runs.verify_runs import VerifyReport, _line, _verify_export, _verify_prepared, _verify_run


def legacy_kind(p: Path) -> str | None:
    """The kind of an unmarked directory of these commands (written before output markers), or None."""
    if (p / "study-state.json").is_file():
        return "study"
    if (p / "suite.toml").is_file() and ((p / "cells").is_dir() or (p / "results.json").is_file()):
        return "evaluate"
    if (p / "metrics.json").is_file() and (p / "predictions").is_dir():
        return "finetune"
    from tokendrop.lab.bench.campaign.config import PARTS

    for name in PARTS:
        d = _json_or_none(p / f"{name}.json")
        if isinstance(d, dict) and d.get("part") == name and "complete" in d:
            return "campaign"
    return None


def _json_or_none(f: Path) -> Any:
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_json(f: Path, rep: VerifyReport, what: str, fix: str) -> Any:
    """``f`` parsed, or None with a problem naming it (missing / unreadable / invalid JSON)."""
    if not f.is_file():
        rep.problems.append(f"{f}: missing; {what}; {fix}")
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        rep.problems.append(f"{f}: not UTF-8 text (corrupt); {fix}")
    except ValueError as e:
        rep.problems.append(f"{f}: invalid JSON ({_line(e)}); the file is torn or was edited; {fix}")
    except OSError as e:
        rep.problems.append(f"{f}: unreadable ({e.strerror or e}); {fix}")
    return None


def _sha256(f: Path) -> str:
    from tokendrop.train.checkpoint import sha256_file

    return sha256_file(f)


def _merge(rep: VerifyReport, sub: VerifyReport, prefix: str, notes: bool = True) -> None:
    rep.problems.extend(sub.problems)
    if notes:
        rep.notes.extend(f"{prefix}: {n}" for n in sub.notes)


# ----------------------------------------------------------------------------------------------
# finetune


def verify_finetune(p: Path, rep: VerifyReport, fix: str = "") -> dict | None:
    """A ``finetune`` output (or an evaluation cell: ``fix`` says how to recompute it); -> its
    metrics.json when that and everything it implies is intact."""
    fix = fix or f"fine-tune again (`tokendrop finetune ... --out {p} --overwrite`)"
    r = _read_json(p / "metrics.json", rep, "a finetune output holds metrics.json, written when it finished", fix)
    if r is None:
        return None
    mf = p / "metrics.json"
    if not isinstance(r, dict) or not isinstance(r.get("task"), str) or not isinstance(r.get("scores"), dict) \
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r["scores"].values()):
        rep.problems.append(f"{mf}: not a finetune record (needs 'task' and numeric 'scores'); the file was edited; {fix}")
        return None
    bad = False
    metrics = r.get("metrics") if isinstance(r.get("metrics"), dict) else {}
    kind = _task_kind(r["task"])
    if kind == "squad":
        want = [p / "predictions" / "dev.json"]
    elif kind == "classification":
        want = [p / "predictions" / f"{split}.tsv" for split in metrics]
    else:
        want = []
    for f in want:
        if not f.is_file():
            rep.problems.append(f"{f}: missing (metrics.json reports its split); {fix}")
            bad = True
        elif f.suffix == ".json" and _json_or_none(f) is None:
            rep.problems.append(f"{f}: invalid JSON; the file is torn or was edited; {fix}")
            bad = True
        elif f.suffix == ".tsv" and not _tsv_ok(f):
            rep.problems.append(f"{f}: not a predictions table (first line 'index<TAB>prediction<TAB>label'); {fix}")
            bad = True
    saved = p / "model"
    if "saved_model" in r or saved.is_dir():
        if not saved.is_dir():
            rep.problems.append(f"{saved}: missing, but metrics.json records a saved model; {fix}")
            bad = True
        else:
            sub = VerifyReport(saved, "export")
            recorded = r.get("saved_model_sha256")
            wf = saved / "model.safetensors"
            if isinstance(recorded, str) and wf.is_file():
                now = _sha256(wf)
                if now != recorded:
                    sub.problems.append(f"{wf}: corrupt (sha256 {now[:12]}... differs from {recorded[:12]}... recorded "
                                        f"in {mf}); {fix}")
                else:
                    sub.notes.append("sha256 as recorded in metrics.json")
            elif not isinstance(recorded, str):
                sub.notes.append("metrics.json records no sha256 of the saved model (written by an older tokendrop): "
                                 "only its structure is checked")
            if not sub.problems:
                _verify_export(saved, sub)
            bad = bad or bool(sub.problems)
            _merge(rep, sub, "model")
    scores = ", ".join(f"{k} {v:.2f}" for k, v in r["scores"].items())
    rep.notes.insert(0, f"finetune: task {r['task']} ({scores}); checked metrics.json"
                        + (f", {len(want)} prediction file(s)" if want else "")
                        + (", the saved model" if saved.is_dir() else ""))
    return None if bad else r


def _task_kind(task: str) -> str | None:
    from tokendrop.finetune.tasks import get_task

    try:
        return get_task(task).kind
    except (TokendropError, ValueError, KeyError):
        return None


def _tsv_ok(f: Path) -> bool:
    try:
        with open(f, encoding="utf-8") as fh:
            return fh.readline().rstrip("\n").split("\t")[:2] == ["index", "prediction"]
    except (OSError, UnicodeDecodeError):
        return False


# ----------------------------------------------------------------------------------------------
# evaluate


def verify_evaluate(p: Path, rep: VerifyReport) -> None:
    from tokendrop.finetune.suite import SuiteConfig, cells_for, load_suite

    fix = "run the same `tokendrop evaluate` command again (it recomputes what is missing)"
    suite: SuiteConfig | None = None
    st = p / "suite.toml"
    if not st.is_file():
        rep.problems.append(f"{st}: missing; an evaluation records its suite there; {fix}")
    else:
        try:
            suite = load_suite(st)
            suite.validate()
        except (TokendropError, ValueError, tomllib.TOMLDecodeError) as e:
            rep.problems.append(f"{st}: does not load as a suite ({_line(e)}); {fix}")
    cells_root = p / "cells"
    # every cell directory: cells/<model>/<task>/<cell>
    found: dict[str, dict[str, dict | None]] = {}
    temps = 0
    if cells_root.is_dir():
        for mdir in sorted(cells_root.iterdir()):
            if not mdir.is_dir():
                continue
            for tdir in sorted(t for t in mdir.iterdir() if t.is_dir()):
                for cdir in sorted(c for c in tdir.iterdir() if c.is_dir()):
                    if cdir.name.startswith("."):
                        temps += 1
                        continue
                    sub = VerifyReport(cdir, "finetune")
                    r = verify_finetune(cdir, sub, fix=f"remove {cdir} and run the same `tokendrop evaluate` command "
                                                       "again (it recomputes the cell)")
                    rep.problems.extend(sub.problems)
                    found.setdefault(mdir.name, {})[f"{tdir.name}/{cdir.name}"] = r
    res = None
    if (p / "results.json").is_file() or found:
        res = _read_json(p / "results.json", rep, "an evaluation rewrites it after every cell", fix)
        if res is not None and (not isinstance(res, dict) or not isinstance(res.get("models"), dict)):
            rep.problems.append(f"{p / 'results.json'}: not an evaluation summary (no 'models'); {fix}")
            res = None
    models = res["models"] if res else {}
    per_model = len(cells_for(suite)) if suite is not None else None
    done_all = total = 0
    for key, info in models.items():
        info = info if isinstance(info, dict) else {}
        label = info.get("label", key)
        present = found.get(key, {})  # a damaged cell is reported above, once
        intact = {c: r for c, r in present.items() if r is not None}
        recorded = info.get("cells_done", 0)
        if isinstance(recorded, int) and recorded > len(present):
            rep.problems.append(f"{p / 'results.json'}: counts {recorded} finished cell(s) of model {label} but only "
                                f"{len(present)} are under {cells_root / key}; its tables cite lost results; {fix}")
        done_all += len(intact)
        total += per_model if per_model is not None else len(intact)
        _check_weights(p, key, info, intact, rep)
    others = sorted(set(found) - set(models))
    if others:
        rep.notes.append(f"{len(others)} model(s) with cells not in results.json ({others[0]}, ...): an earlier "
                         "evaluate call on other models; checked, not tabled")
    if temps:
        rep.notes.append(f"{temps} unfinished cell temp dir(s) from a killed fine-tuning: ignored, removed by the next "
                         "evaluate")
    n_cells = sum(len(v) for v in found.values())
    head = f"evaluate: {len(models)} model(s), {n_cells} cell(s) checked"
    if res is None and not found:
        head += "; no cell finished yet (nothing to tabulate)"
    elif total:
        head += f"; {done_all} of {total} cells of results.json's models finished"
        if done_all < total:
            rep.notes.append(f"incomplete: {total - done_all} cell(s) still to compute; run the same `tokendrop "
                             "evaluate` command again to compute them")
    rep.notes.insert(0, head)


def _check_weights(p: Path, key: str, info: dict, cells: dict[str, dict], rep: VerifyReport) -> None:
    """Note cells computed from weights other than those the model has now (``evaluate`` recomputes them)."""
    from tokendrop.finetune.suite import model_weights

    path = info.get("path")
    if not isinstance(path, str) or not Path(path).exists():
        rep.notes.append(f"model {info.get('label', key)}: {path} not reachable from here; the weights its cells "
                         "record were not compared")
        return
    try:
        sha, _ = model_weights(path)
    except (TokendropError, OSError) as e:
        rep.notes.append(f"model {info.get('label', key)}: its weights do not verify ({_line(e)})")
        return
    stale = [c for c, r in cells.items() if "model_sha256" in r and r["model_sha256"] != sha]
    unhashed = [c for c, r in cells.items() if "model_sha256" not in r]
    if stale:
        rep.notes.append(f"stale: {len(stale)} cell(s) of model {info.get('label', key)} ({stale[0]}, ...) were computed "
                         f"from other weights than {path} holds now (sha256 {(sha or 'none')[:12]}...); `tokendrop "
                         "evaluate` recomputes them")
    if unhashed:
        rep.notes.append(f"{len(unhashed)} cell(s) of model {info.get('label', key)} record no weights hash (older "
                         "tokendrop): not compared")


# ----------------------------------------------------------------------------------------------
# study


def verify_study(p: Path, rep: VerifyReport) -> None:
    from tokendrop.lab.study.plan import load_study

    fix = "run the same `tokendrop study` command again"
    state = _read_json(p / "study-state.json", rep, "a study records its state there from the start", fix)
    if state is not None and not isinstance(state, dict):
        rep.problems.append(f"{p / 'study-state.json'}: not a JSON object; {fix}")
    st = p / "study.toml"
    if st.is_file():
        try:
            load_study(st)
        except (TokendropError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            rep.problems.append(f"{st}: does not load as a study config ({_line(e)}); {fix}")
    report = None
    if (p / "study.json").is_file():
        report = _read_json(p / "study.json", rep, "", fix)
    else:
        rep.notes.append("no study.json / study.md yet: the study has not finished (run it again to finish it)")
    # runs
    runs = sorted(d for d in (p / "runs").iterdir() if d.is_dir() and not d.name.startswith(".")) \
        if (p / "runs").is_dir() else []
    finished = 0
    for run in runs:
        sub = VerifyReport(run, "run")
        _verify_run(run, sub)
        _merge(rep, sub, f"runs/{run.name}", notes=False)
        state_ = _run_finished(run)
        finished += state_ is True
        rep.notes.append(f"runs/{run.name}: {sub.notes[0] if sub.notes else 'checked'}"
                         + ("" if state_ is None else ", finished" if state_ else ", not finished"))
    if isinstance(report, dict) and isinstance(report.get("runs"), dict):
        missing = [n for n in report["runs"] if not (p / "runs" / n).is_dir()]
        if missing:
            rep.problems.append(f"{p / 'runs' / missing[0]}: missing, but study.json reports it ({len(missing)} such "
                                f"run(s)); {fix} (it retrains what is missing)")
    # prepared data
    datasets = [d for d in sorted((p / "data").iterdir()) if d.is_dir() and (d / "meta.json").is_file()] \
        if (p / "data").is_dir() else []
    for d in datasets:
        sub = VerifyReport(d, "prepared")
        _verify_prepared(d, sub)
        _merge(rep, sub, f"data/{d.name}", notes=False)
        rep.notes.append(f"data/{d.name}: {sub.notes[0] if sub.notes else 'checked'}")
    # evaluation
    ev = p / "eval"
    if ev.is_dir():
        sub = VerifyReport(ev, "evaluate")
        verify_evaluate(ev, sub)
        _merge(rep, sub, "eval")
    rep.notes.insert(0, f"study: {len(runs)} run(s) ({finished} finished), {len(datasets)} prepared dataset(s)"
                        + (", an evaluation" if ev.is_dir() else ", no evaluation yet")
                        + ("; report study.md" if (p / "study.md").is_file() else ""))


def _run_finished(run: Path) -> bool | None:
    """Whether the newest checkpoint reached the end of the run (its train.steps, or its
    train.time_budget of training time) (None: cannot tell; the checkpoints themselves are verified
    by the run's check)."""
    try:
        cfg = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
        budget = str(cfg["train"].get("time_budget", ""))
        length = RunLength(0, parse_duration(budget)) if budget else RunLength(int(cfg["train"]["steps"]))
        cks = sorted(c for c in (run / "checkpoints").glob("step-*") if c.is_dir()) if (run / "checkpoints").is_dir() else []
        if not cks:
            return False
        meta = json.loads((cks[-1] / "meta.json").read_text(encoding="utf-8"))
        return length.finished(int(meta["step"]), float(meta.get("wall_time", 0.0)))
    except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None


# ----------------------------------------------------------------------------------------------
# campaign


def verify_campaign(p: Path, rep: VerifyReport) -> None:
    from tokendrop.lab.bench.campaign import IN_PROGRESS
    from tokendrop.lab.bench.campaign.config import PARTS

    fix = "run that part again (`tokendrop bench --campaign PART --out DIR`)"
    running = _running_part(p / IN_PROGRESS)
    parts = []
    for name in PARTS:
        f = p / f"{name}.json"
        if not f.exists():
            continue
        d = _read_json(f, rep, "", fix.replace("PART", name))
        if d is None:
            continue
        if not isinstance(d, dict) or d.get("part") != name:
            rep.problems.append(f"{f}: not the result of part {name}; the file was edited; {fix.replace('PART', name)}")
            continue
        parts.append(name)
        if not d.get("complete", False):
            if running == name:
                rep.notes.append(f"{name}: running now (pid {_pid(p / IN_PROGRESS)}); {name}.json holds what it finished so far")
            else:
                rep.problems.append(f"{f}: part {name} did not finish (complete: false: the campaign was killed or "
                                    f"interrupted during it); it holds only what it finished; {fix.replace('PART', name)}")
        elif not d.get("ok", False):
            rep.notes.append(f"{name}: finished, FAILED ({(d.get('error') or 'a check failed')[:160]})")
        for rel in d.get("files") or []:
            if isinstance(rel, str) and not (p / rel).is_file():
                rep.problems.append(f"{p / rel}: missing, but {name}.json lists it; {fix.replace('PART', name)}")
        if not (p / f"{name}.md").is_file():
            rep.problems.append(f"{p / (name + '.md')}: missing ({name}.json is there); {fix.replace('PART', name)}")
    if (p / IN_PROGRESS).is_file() and running is None:
        rep.notes.append(f"{IN_PROGRESS}: left by a campaign killed during a part (the next campaign into this "
                         "directory reports and removes it)")
    rep.notes.insert(0, f"campaign: {len(parts)} part(s) ({', '.join(parts) or 'none yet'})")


def _pid(f: Path) -> Any:
    d = _json_or_none(f)
    return d.get("pid") if isinstance(d, dict) else None


def _running_part(f: Path) -> str | None:
    """The part a live campaign on this host is running (its in-progress record), else None."""
    import socket

    d = _json_or_none(f)
    if not isinstance(d, dict) or d.get("host") != socket.gethostname() or not isinstance(d.get("pid"), int):
        return None
    try:
        os.kill(d["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return str(d.get("part"))


VERIFIERS = {"finetune": verify_finetune, "evaluate": verify_evaluate, "study": verify_study,
             "campaign": verify_campaign}
