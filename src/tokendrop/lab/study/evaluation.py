"""Fine-tuning every pretrained model (and the source checkpoint) with the evaluation suite
(``tokendrop.finetuning.evaluate``, resumable per cell), in worker processes when
``parallel > 1``."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokendrop.config import from_dict, to_dict
from tokendrop.finetuning import SuiteConfig, evaluate, load_suite
from tokendrop.finetuning.suite import parse_models
from tokendrop.lab.study.common import cpu_s
from tokendrop.lab.study.records import EvalSummary, ModelEval
from tokendrop.lab.study.spec import StudyConfig
from tokendrop.lab.study.workers import run_parallel
from tokendrop.runs.files import read_json


def suite_config(study: StudyConfig, data_info: dict[str, Any]):
    ov = []
    toy = data_info.get("toy_tasks")
    if toy:
        ov += [f"glue_data={json.dumps(toy['glue'])}", f"squad_data={json.dumps(toy['squad'])}"]
    ov += list(study.suite_overrides)
    if study.suite:
        return load_suite(study.suite, ov)
    return from_dict(SuiteConfig, {}, ov)


def forget_cells(out: Path, run_dir: Path) -> None:
    """A (re)trained run invalidates fine-tuning cells cached for an earlier model in its
    directory."""
    cells = out / "eval" / "cells"
    if not cells.is_dir():
        return
    try:
        key = parse_models([str(run_dir)])[0].key
    except Exception:  # noqa: BLE001 -- no suite: nothing cached
        return
    if (cells / key).exists():
        shutil.rmtree(cells / key)


def _print_eval(m: str) -> None:
    print(f"[eval] {m}", file=sys.stderr, flush=True)


def _eval_task(
    study: dict[str, Any], out: str, data_info: dict[str, Any], models: list[tuple[str, str]]
) -> dict:
    """A worker's share of the models (runs in the worker process)."""
    sc = from_dict(StudyConfig, study)
    cpu0 = cpu_s()
    # the study holds OUT's lock; workers share OUT/eval
    r = evaluate(
        [f"{label}={path}" for label, path in models],
        suite_config(sc, data_info),
        Path(out) / "eval",
        log=_print_eval,
        coordinated=True,
    )
    return {
        "computed": r.get("computed", 0),
        "skipped": r.get("skipped", 0),
        "cpu_s": cpu_s() - cpu0,
    }


def run_evaluation(
    study: StudyConfig,
    out: Path,
    data_info: dict[str, Any],
    models: list[tuple[str, Path]],
    evaluate_fn: Callable[..., dict] | None = None,
) -> EvalSummary | None:
    """Fine-tune every (label, model dir) with the suite into OUT/eval; -> the summary, with each
    model's columns keyed by its resolved path.

    ``evaluate_fn`` defaults to ``tokendrop.finetuning.evaluate`` (resumable per cell)."""
    if not study.evaluate or not models:
        return None
    scfg = suite_config(study, data_info)
    t0 = time.perf_counter()
    workers = {"computed": 0, "cpu_s": 0.0}
    cpu0 = cpu_s()
    if study.parallel > 1 and evaluate_fn is None and len(models) > 1:
        # disjoint model subsets in worker processes (cells are separate files); the call below then
        # only reads the cached cells and writes the complete results
        groups = [models[i :: study.parallel] for i in range(study.parallel)]

        def add(_t: tuple, r: dict) -> None:
            workers["computed"] += r["computed"]
            workers["cpu_s"] += r["cpu_s"]

        run_parallel(
            study.parallel,
            _eval_task,
            [
                (to_dict(study), str(out), data_info, [(lab, str(p)) for lab, p in g])
                for g in groups
                if g
            ],
            add,
        )

    evaluate_fn = evaluate_fn or evaluate
    summary = evaluate_fn(
        [f"{label}={path}" for label, path in models], scfg, out / "eval", log=_print_eval
    )
    per_path: dict[str, ModelEval] = {}
    for key, pm in summary.get("models", {}).items():
        p = str(Path(pm["path"]).resolve())
        secs = 0.0
        for mf in (out / "eval" / "cells" / key).glob("*/*/metrics.json"):
            r = read_json(mf, expect=None, default=None) or {}
            secs += float((r.get("timing") or {}).get("total_s", 0.0))
        per_path[p] = ModelEval(
            columns=pm.get("columns", {}),
            best_cell=pm.get("best_cell", {}),
            seconds=secs,
            cells_done=pm.get("cells_done"),
        )
    computed = (summary.get("computed") or 0) + workers["computed"]
    return EvalSummary(
        models=per_path,
        computed=computed,
        skipped=summary.get("skipped", 0) - workers["computed"],
        seconds=time.perf_counter() - t0,
        cpu_s=cpu_s() - cpu0 + workers["cpu_s"],
        suite=summary.get("suite", to_dict(scfg)),
        note=summary.get("note", ""),
        results_md=str(out / "eval" / "results.md"),
    )
