"""Executing a study: resolve the source, prepare the data, pretrain (skip / resume / start) every
run, in worker processes when ``parallel > 1``, evaluate, then write the tables, figures and
report."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tokendrop.config import FROM_DATA, Config, from_dict, recorded_config, to_dict, to_toml
from tokendrop.lab.study.aggregate import aggregate
from tokendrop.lab.study.common import (
    StudyError,
    cpu_s,
    hardware,
    loadavg,
    log,
    resolve_out,
)
from tokendrop.lab.study.data import check_copied_data, holds_only_data, prepare_data
from tokendrop.lab.study.evaluation import forget_cells, run_evaluation
from tokendrop.lab.study.figures import inspect_figures, plot_curves
from tokendrop.lab.study.findings import findings
from tokendrop.lab.study.report import ReportInfo, command_line, export_report, write_report
from tokendrop.lab.study.spec import (
    ARMS,
    MethodSpec,
    RunSpec,
    StudyConfig,
    load_study,
    method_spec,
    plan_runs,
    resolve_source,
)
from tokendrop.lab.study.sweep import arm_runs, choose_lrs, sweep_rows, table_lr_sweep
from tokendrop.lab.study.tables import (
    table1,
    table3,
    table4,
    table_selection,
    table_time_to_quality,
)
from tokendrop.lab.study.workers import run_parallel
from tokendrop.runs import checkpoint as ckpt_mod, rundir
from tokendrop.runs.files import atomic_write_json, atomic_write_text, read_json
from tokendrop.runs.plotting import pyplot
from tokendrop.runs.trackers import flat
from tokendrop.train.budget import RunLength
from tokendrop.train.report import write_run_report
from tokendrop.train.trainer import pretrain

# settings that may differ between invocations without changing what a run computes
_IGNORED = {
    "data.num_workers",
    "data.prefetch",
    "train.threads",
    "train.keep_checkpoints",
    "train.log_every",
    "train.ckpt_every",
    "train.compile",
    "train.device",
    "name",
    # the resolution step's note of how it resolved the length fields, which are compared
    "train.resolved_from",
}


def config_changes(want: Config, have: dict[str, Any]) -> list[str]:
    """Fields (dotted) whose value in the run's saved config differs from ``want``.  Paths (data,
    the source) compare resolved, a size an older tokendrop recorded as 0 as its name
    (``config.recorded_config``); the source not at all when the weights' sha256 is the same; a
    field the saved config does not have (written before the field existed) as its default --
    what that version did (as ``train.resume.config_difference`` reads it)."""
    a = flat(to_dict(want))
    b = {**flat(to_dict(Config())), **flat(recorded_config(have))}
    same_weights = bool(a.get("model.init_sha256")) and a.get("model.init_sha256") == b.get(
        "model.init_sha256"
    )
    out = []
    for k, v in a.items():
        if (
            k in _IGNORED
            or (k in FROM_DATA and v == FROM_DATA[k])
            or (k == "model.init" and same_weights)
        ):
            continue
        if k in ("data.path", "model.init"):
            if Path(str(v)).resolve() != Path(str(b.get(k, ""))).resolve():
                out.append(f"{k}: {b.get(k)!r} -> {v!r}")
            continue
        if b.get(k) != v:
            out.append(f"{k}: {b.get(k)!r} -> {v!r}")
    return out


def run_status(run_dir: Path, cfg: Config) -> tuple[str, int]:
    """-> (state, step): 'new' (no dir), 'empty' (dir without a checkpoint), 'partial',
    'finished'."""
    if not run_dir.exists():
        return "new", 0
    with ckpt_mod.reading_latest(run_dir) as last:  # held: a training run rotates around it
        if last is None:
            return "empty", 0
        meta = read_json(last / "meta.json", expect=None, default=None) or {}
    changes = config_changes(cfg, meta.get("config", {}))
    if changes:
        raise StudyError(
            f"{run_dir} was trained with a different config ({'; '.join(changes[:3])}); "
            "use a new --out, or remove that run directory to retrain it"
        )
    step = int(meta.get("step", 0))
    if RunLength.of(cfg.train).finished(step, float(meta.get("wall_time", 0.0))):
        return "finished", step
    return "partial", step


def train_run(spec: RunSpec, run_dir: Path, progress: bool) -> dict[str, Any]:
    """Skip, resume or start one run; -> {state, seconds, loadavg} (seconds: this call's elapsed
    time)."""
    la0, cpu0 = loadavg(), cpu_s()
    state, step = run_status(run_dir, spec.cfg)
    if state == "finished":
        if not (run_dir / "report.md").is_file():
            write_run_report(run_dir)
        return {"state": "skipped", "seconds": 0.0}
    if state == "empty":
        log(f"{spec.name}: {run_dir} holds no checkpoint; starting it over")
    t0 = time.perf_counter()
    cfg = from_dict(Config, to_dict(spec.cfg))  # a copy: pretrain fills model.vocab_size in place
    # an 'empty' run dir is replaced only if tokendrop marked it as a run (pretrain's overwrite
    # rules)
    res = pretrain(
        cfg, run_dir, resume=state == "partial", progress=progress, overwrite=state == "empty"
    )
    dt = time.perf_counter() - t0
    if res.interrupted:
        raise StudyError(
            f"interrupted during {spec.name} at step {res.steps} (checkpoint saved); "
            "run the same command again to resume"
        )
    return {
        "state": "resumed" if state == "partial" else "trained",
        "seconds": dt,
        "from_step": step,
        "loadavg": [la0, loadavg()],
        "cpu_s": cpu_s() - cpu0,
    }


def _train_task(
    name: str, cfg: dict[str, Any], run_dir: str, method: str, seed: int
) -> dict[str, Any]:
    """One run in a worker process."""
    spec = RunSpec(
        ARMS.get(method) or MethodSpec(method, method, ()), seed, name, from_dict(Config, cfg)
    )
    return train_run(spec, Path(run_dir), progress=False)


def run_study(
    config: str | os.PathLike | StudyConfig,
    out: str | os.PathLike,
    overrides: list[str] | tuple[str, ...] = (),
    only: list[str] | None = None,
    progress: bool | None = None,
    evaluate_fn: Callable[..., dict] | None = None,
    overwrite: bool = False,
) -> Path:
    """Prepare, pretrain every run, evaluate, write the tables/figures/report; -> OUT/study.md.

    ``only``: pretrain just these methods (names as in ``study.methods`` or ``drop-<pct>``; ``[]``:
    none -- the report alone, e.g. over runs copied into OUT from another study); the evaluation
    and the report still cover every finished run of the study in OUT.
    With ``study.parallel > 1`` runs and fine-tuning jobs go to worker processes (forkserver/spawn):
    a script calling this must do so under ``if __name__ == "__main__":``.
    OUT is locked for the call; an existing OUT of a study is continued, and with ``overwrite``
    started over; any other non-empty directory is refused
    (``tokendrop.runs.rundir.prepare_output``)."""
    pyplot()  # the report's figures need matplotlib: refused before any run, not after the last
    threads = torch.get_num_threads()  # pretrain's train.threads sets it process-wide
    try:
        with rundir.lock(Path(out).resolve(), StudyError):
            return _run_study(config, out, overrides, only, progress, evaluate_fn, overwrite)
    finally:
        torch.set_num_threads(threads)


def _pretrain_all(
    study: StudyConfig,
    out: Path,
    runs: list[RunSpec],
    selected: list[str],
    state: dict[str, Any],
    state_path: Path,
    progress: bool,
) -> None:
    todo = [r for r in runs if r.method.arm_name in selected]
    done = [0]

    def record(spec: RunSpec, res: dict[str, Any]) -> None:
        done[0] += 1
        rd = out / "runs" / spec.name
        rec = state["runs"].setdefault(spec.name, {"elapsed_s": 0.0})
        if res["state"] != "skipped":
            forget_cells(out, rd)
            rec["elapsed_s"] = rec.get("elapsed_s", 0.0) + res["seconds"]
            rec["loadavg"] = res.get("loadavg")
            rec["cpu_s"] = rec.get("cpu_s", 0.0) + res.get("cpu_s", 0.0)
            rec["parallel"] = study.parallel
            rec["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
            log(f"[{done[0]}/{len(todo)}] {spec.name}: {res['state']} in {res['seconds']:.0f} s")
        else:
            log(f"[{done[0]}/{len(todo)}] {spec.name}: finished earlier, skipped")
        atomic_write_json(state_path, state)

    pending = [r for r in todo if run_status(out / "runs" / r.name, r.cfg)[0] != "finished"]
    pending_names = {r.name for r in pending}
    for spec in todo:
        if spec.name not in pending_names:
            # writes a missing report.md only
            record(spec, train_run(spec, out / "runs" / spec.name, False))
    if study.parallel > 1 and len(pending) > 1:
        log(f"pretraining {len(pending)} runs in {study.parallel} worker processes ...")
        by_name = {r.name: r for r in pending}
        run_parallel(
            study.parallel,
            _train_task,
            [
                (r.name, to_dict(r.cfg), str(out / "runs" / r.name), r.method.name, r.seed)
                for r in pending
            ],
            lambda t, res: record(by_name[t[0]], res),
        )
    else:
        for spec in pending:
            record(spec, train_run(spec, out / "runs" / spec.name, progress))


def _run_study(
    config, out, overrides, only, progress, evaluate_fn, overwrite: bool = False
) -> Path:
    t_start = time.perf_counter()
    hw = hardware()  # before any run sets train.threads
    study = (
        from_dict(StudyConfig, to_dict(config), list(overrides))
        if isinstance(config, StudyConfig)
        else load_study(config, overrides)
    )
    out = Path(out).resolve()
    source: Path | None = None
    if not overwrite and holds_only_data(out):
        # another study's data copied in to be reused: this study's, or refused before any write
        source = resolve_source(study)
        check_copied_data(study, out, source)
        mode = "new"
    else:
        mode = rundir.prepare_output(
            out,
            "study",
            overwrite,
            error=StudyError,
            inputs=[*study.corpus, study.vocab, study.source, study.docs_dir],
        )
    if mode == "replace":
        rundir.discard(out)
    rundir.create(out, "study")
    if progress is None:
        progress = sys.stderr.isatty()
    names = study.all_methods()
    if only is not None:
        bad = [n for n in only if n not in names]
        if bad:
            raise StudyError(
                f"--only: {', '.join(bad)} not in this study's methods ({', '.join(names)})"
            )
    selected = [n for n in names if only is None or n in only]
    state_path = out / "study-state.json"
    state = read_json(state_path, expect=None, default=None) or {}
    state.setdefault("runs", {})
    state.setdefault("invocations", [])
    cmd = command_line(
        config if not isinstance(config, StudyConfig) else "<StudyConfig>",
        out,
        list(overrides),
        only,
    )
    state["invocations"].append(
        {"command": cmd, "started": _dt.datetime.now().isoformat(timespec="seconds")}
    )

    # the checkpoint to continue (fetched if named), None from scratch
    if source is None:
        source = resolve_source(study)
    # plan (validates every run config before anything expensive happens)
    plan_runs(study, None, out, source)
    need_unpacked = any(method_spec(n, study).unpacked for n in selected)
    t0 = time.perf_counter()
    data_info = prepare_data(study, out, need_unpacked, source)
    state["prepare_s"] = state.get("prepare_s", 0.0) + (time.perf_counter() - t0)
    atomic_write_json(state_path, state)
    runs = plan_runs(study, data_info, out, source)
    _pretrain_all(study, out, runs, selected, state, state_path, progress)
    sweep, chosen = [], {}
    if study.lr_sweep:
        # the sweep done (or as far as it got): each arm's other seeds at its own rate
        chosen = choose_lrs(sweep_rows(study, out))
        if chosen:
            log("learning rates chosen: " + ", ".join(f"{a} {lr:g}" for a, lr in chosen.items()))
        runs = plan_runs(study, data_info, out, source, chosen)
        _pretrain_all(study, out, runs, selected, state, state_path, progress)
        sweep = sweep_rows(study, out)
        chosen = choose_lrs(sweep)
        runs = arm_runs(runs, chosen, study)
    elif study.lr_chosen:
        chosen = dict(study.lr_chosen)
        runs = arm_runs(runs, chosen, study)

    finished = [r for r in runs if (out / "runs" / r.name / "report.md").is_file()]
    evaluation = None
    models = [(r.method.name, out / "runs" / r.name) for r in finished]
    if source is not None and study.evaluate_source and finished:
        models = [(study.source_label, source)] + models
    if study.evaluate and finished:
        log(f"evaluation suite on {len(models)} models ...")
        evaluation = run_evaluation(study, out, data_info, models, evaluate_fn)
        if evaluation:
            state["eval_s"] = state.get("eval_s", 0.0) + evaluation.seconds
    packed = data_info.get("packed", {}).get("path")
    res = aggregate(study, runs, out, evaluation, state, packed, source)
    tables = out / "tables"
    if study.lr_sweep:
        atomic_write_text(tables / "lr-sweep.md", table_lr_sweep(sweep, chosen, study.baseline_arm))
    atomic_write_text(tables / "table1.md", table1(res, study))
    atomic_write_text(tables / "table3.md", table3(res))
    atomic_write_text(tables / "table4.md", table4(res, study))
    atomic_write_text(tables / "time-to-quality.md", table_time_to_quality(res))
    if study.selection_checkpoints:
        atomic_write_text(tables / "selection.md", table_selection(res))
    if res.runs:
        plot_curves(res, out)
    ins = inspect_figures(study, res, out)
    state["total_elapsed_s"] = state.get("total_elapsed_s", 0.0) + (time.perf_counter() - t_start)
    info = ReportInfo(
        command=cmd,
        hardware=hw,
        generated=_dt.datetime.now().isoformat(timespec="seconds"),
        data=data_info,
        evaluation=evaluation,
        inspect=ins,
        total_elapsed_s=state["total_elapsed_s"],
        prepare_s=state.get("prepare_s", 0.0),
        eval_s=state.get("eval_s", 0.0),
        source=str(source) if source is not None else None,
    )
    atomic_write_text(out / "study.toml", to_toml(study))
    report = write_report(study, out, res, info)
    atomic_write_json(
        out / "study.json",
        {
            "study": to_dict(study),
            "command": cmd,
            "hardware": hw,
            "generated": info.generated,
            "data": data_info,
            "evaluation": evaluation,
            "total_elapsed_s": info.total_elapsed_s,
            "prepare_s": info.prepare_s,
            "eval_s": info.eval_s,
            "source": res.source,
            "inspect": {k: v for k, v in (ins or {}).items() if k != "tokens"},
            "findings": findings(res, study),
            "methods": res.methods,
            "runs": res.runs,
            "target_eval_loss": res.target_eval_loss,
            "baseline": res.baseline,
            "lr_sweep": [dataclasses.asdict(r) for r in sweep],
            "chosen_lr": chosen,
        },
    )
    atomic_write_json(state_path, state)
    if study.docs_dir:
        export_report(out, resolve_out(study.docs_dir))
    log(f"done: {len(res.runs)} finished runs; report {report}")
    return report
