"""``evaluate(models, suite_cfg, out_dir)``: the paper's fine-tuning protocol (section 4;
docs/design.md §2.7).

For every pretrained model and task, fine-tune on a grid of epochs x learning rates (paper:
{3,6} x {1e-5, 2e-5} for GLUE, {4,8} x {2e-5, 4e-5} for SQuAD; the presets scale this down for CPU),
each cell optionally repeated over fine-tuning seeds (cell score = their mean).  A model's number
for a table column is the best dev score over its grid; the method's number is the mean over its
pretraining seeds (the models grouped under one label), reported with per-seed values and spread.

Columns (``finetuning/columns.py``; the paper's Table 1): AX (Matthews corr., the MNLI model on the
diagnostic set), MNLI-mm, MNLI-m, QNLI (acc.), QQP (F1), SST (acc.), GLUE-avg (mean of those six) |
SQuAD v1 (F1), SQuAD v2 (F1), SQuAD-avg; the other GLUE tasks' columns (CoLA MCC, MRPC F1/acc.,
STS-B Spearman/Pearson, RTE, WNLI) when the suite runs them, never averaged.  ``selection =
"column"`` (default) takes each column's best cell on its own, the "best validation score" of the
paper; ``"task"`` picks one cell per task by the task's main column (MNLI-m for MNLI, F1 for SQuAD)
and reports that cell's other columns (MNLI-mm, AX) too.

Resumable: every finished cell is ``OUT/cells/<model>/<task>/<cell>/metrics.json`` (written last,
atomically); a rerun skips cells whose file exists with the same fine-tuning settings *and* the same
model weights: the cell records the sha256 of the weights it fine-tuned (``model_sha256``; a
tokendrop run's newest checkpoint as recorded in its meta.json, a Hugging Face dir's weight files
hashed), so a model retrained at the same path is evaluated again (the log says so).  A cell from
before weight hashes were recorded is reused only while the weights file is older than the cell.
``OUT/results.json`` and ``OUT/results.md`` are rewritten after every cell.

Models are grouped into methods (rows) by label: ``LABEL=PATH`` on the command line, else the run
dir's name with a spelled-out seed suffix removed (``baseline-seed1`` -> ``baseline``; a name such
as ``drop-s1000`` or ``layers6`` stays a model of its own); the log names every label it averages
over several models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokendrop.config import (
    FinetuneConfig,
    config_dir,
    from_dict,
    load_config,
    recorded_finetune,
    to_dict,
    to_toml,
)
from tokendrop.errors import ConfigError, InitError, check_arg, check_path_arg
from tokendrop.finetuning.columns import (
    AVERAGES,
    COLUMNS,
    GLUE_AVG,
    SQUAD_AVG,
    main_column,
    suite_columns,
    table_columns,
)
from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.fit import finetune
from tokendrop.finetuning.tasks import get_task, load_task, refuse_empty, task_dir
from tokendrop.finetuning.tasks.base import refuse_constant
from tokendrop.finetuning.tasks.squad import read_squad
from tokendrop.models.weights import combined_sha, weight_files
from tokendrop.runs import checkpoint as ckpt_mod, rundir
from tokendrop.runs.files import atomic_write_json, atomic_write_text, read_json


def _glue_base() -> FinetuneConfig:
    return FinetuneConfig(batch_size=32, max_seq_len=128, log_every=0)


def _squad_base() -> FinetuneConfig:
    return FinetuneConfig(batch_size=32, log_every=0)


@dataclass
class SuiteConfig:
    """An evaluation suite (``configs/suite-*.toml``); ``[glue]``/``[squad]`` hold the fine-tuning
    settings shared by the cells of those tasks (their epochs/lr/seed/task/data are set per
    cell)."""

    name: str = ""
    # the task data: required for the suite's GLUE / SQuAD tasks (no default location); a relative
    # path is taken from the working dir, else from the repository root (the presets' paths)
    glue_data: str = ""
    squad_data: str = ""
    tasks: list[str] = field(
        default_factory=lambda: ["mnli", "qnli", "qqp", "sst2", "squad1", "squad2"]
    )
    glue_epochs: list[float] = field(default_factory=lambda: [3.0, 6.0])
    glue_lrs: list[float] = field(default_factory=lambda: [1e-5, 2e-5])
    squad_epochs: list[float] = field(default_factory=lambda: [4.0, 8.0])
    squad_lrs: list[float] = field(default_factory=lambda: [2e-5, 4e-5])
    finetune_seeds: list[int] = field(default_factory=lambda: [0])
    selection: str = "column"  # column | task
    note: str = ""  # printed under the table (e.g. which data this is)
    glue: FinetuneConfig = field(default_factory=_glue_base)
    squad: FinetuneConfig = field(default_factory=_squad_base)

    def validate(self) -> SuiteConfig:
        if not self.tasks:
            raise ConfigError("suite.tasks: empty")
        for t in self.tasks:
            try:
                spec = get_task(t)
            except FinetuneError as e:
                raise ConfigError(f"suite.tasks: {e}") from None
            if spec.name in ("ax", "custom"):
                raise ConfigError(
                    f"suite.tasks: {t!r} cannot be a suite task (AX is scored with the mnli task)"
                )
        for name in ("glue_epochs", "glue_lrs", "squad_epochs", "squad_lrs"):
            vals = getattr(self, name)
            if not vals or any(v <= 0 for v in vals):
                raise ConfigError(
                    f"suite.{name}: expected a non-empty list of positive numbers, got {vals}"
                )
        if not self.finetune_seeds:
            raise ConfigError("suite.finetune_seeds: empty")
        if self.selection not in ("column", "task"):
            raise ConfigError(
                f"suite.selection: expected 'column' or 'task', got {self.selection!r}"
            )
        for t in self.tasks:
            key = "squad_data" if get_task(t).kind == "span" else "glue_data"
            if not getattr(self, key):
                raise ConfigError(
                    f"suite.{key}: no data directory given for task {t!r}; "
                    f"set {key} in the suite file or pass --set {key}=DIR"
                )
        self.glue.validate()
        self.squad.validate()
        return self


def load_suite(
    path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = (), recorded: bool = False
) -> SuiteConfig:
    """A suite preset (name or .toml path) with ``key=value`` overrides; ``recorded``: the file is
    the ``suite.toml`` an evaluation wrote (``config.recorded_config``)."""
    return load_config(path, list(overrides), cls=SuiteConfig, recorded=recorded)


# ----------------------------------------------------------------------------------------------
# models and cells


# a pretraining seed's suffix, spelled out: baseline-seed1, baseline_seed2 (not "-s1000", "layers6")
_SEED_RE = re.compile(r"[-_.]seed[-_]?\d+$", re.IGNORECASE)


@dataclass
class ModelEntry:
    label: str
    path: Path
    key: str  # directory name for its cells (stable for a given path)


def _run_name(p: Path) -> str:
    if p.name.startswith("step-") and p.parent.name == "checkpoints":
        return p.parent.parent.name
    return p.name


def parse_models(models: list[str]) -> list[ModelEntry]:
    out, keys = [], set()
    for m in models:
        label = ""
        if "=" in m and not Path(m).exists():
            label, m = m.split("=", 1)
        p = Path(m)
        if not p.exists():
            raise FinetuneError(f"--models: no such model directory {m}")
        name = _run_name(p.resolve())
        label = label or (_SEED_RE.sub("", name) or name)
        h = hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:8]
        key = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] + "-" + h
        if key in keys:
            raise FinetuneError(f"--models: {m} is listed twice")
        keys.add(key)
        out.append(ModelEntry(label, p, key))
    return out


# a cell's own progress (its training steps) reaches the suite's log at most this often
PROGRESS_EVERY_S = 60.0


def step_progress(
    log: Callable[[str], None], seconds: float, prefix: str = "", clock=time.monotonic
) -> Callable[[str], None]:
    """A fine-tuning log for a suite cell: of its lines only the training steps' (``step k/n
    ...``), at most one per ``seconds`` (the first once ``seconds`` have passed since the last, or
    since the start), each after ``prefix``: a long cell says how far it is, a short one nothing
    (the suite logs each cell's scores itself)."""
    last = [clock()]

    def out(line: str) -> None:
        now = clock()
        if line.startswith("step ") and now - last[0] >= seconds:
            last[0] = now
            log(prefix + line)

    return out


def merged_seeds(entries: list[ModelEntry]) -> list[str]:
    """One note per label that several models share (their scores are averaged as seeds of one
    model: a ``-seedN`` suffix, or ``LABEL=DIR`` given twice), naming the directories."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        groups.setdefault(e.label, []).append(_run_name(e.path.resolve()))
    return [
        f"note: {label}: {len(names)} models averaged as its seeds ({', '.join(names)})"
        for label, names in groups.items()
        if len(names) > 1
    ]


def _resolve_data(p: str) -> str:
    """Absolute data path: as given, relative to the working dir, else to the repository root."""
    q = Path(p).expanduser()
    if not q.is_absolute() and not q.exists():
        alt = config_dir().parent / q
        if alt.exists():
            q = alt
    return str(q.resolve())


def _fmt_num(x: float) -> str:
    return f"{x:g}"


@dataclass
class Cell:
    task: str
    epochs: float
    lr: float
    seed: int

    @property
    def name(self) -> str:
        return f"e{_fmt_num(self.epochs)}-lr{_fmt_num(self.lr)}-s{self.seed}"


def cells_for(cfg: SuiteConfig) -> list[Cell]:
    cells = []
    for t in cfg.tasks:
        spec = get_task(t)
        epochs, lrs = (
            (cfg.squad_epochs, cfg.squad_lrs)
            if spec.kind == "span"
            else (cfg.glue_epochs, cfg.glue_lrs)
        )
        for e in epochs:
            for lr in lrs:
                for s in cfg.finetune_seeds:
                    cells.append(Cell(spec.name, float(e), float(lr), int(s)))
    return cells


_IGNORED_KEYS = {"log_every", "threads", "device", "eval_batch_size", "save_model"}


def cell_config(cfg: SuiteConfig, cell: Cell) -> FinetuneConfig:
    spec = get_task(cell.task)
    base = cfg.squad if spec.kind == "span" else cfg.glue
    data = _resolve_data(cfg.squad_data if spec.kind == "span" else cfg.glue_data)
    return dataclasses.replace(
        base, task=spec.name, data=data, epochs=cell.epochs, lr=cell.lr, seed=cell.seed
    )


def _same_settings(stored: dict, wanted: dict) -> bool:
    """Same fine-tuning settings; a field the stored cell predates counts as its default value, so
    adding a config field does not invalidate finished cells, and a size it recorded as 0 as its
    name (``config.recorded_finetune``)."""
    defaults = to_dict(FinetuneConfig())
    full = {**defaults, **recorded_finetune(stored)}
    return all(full.get(k) == v for k, v in wanted.items() if k not in _IGNORED_KEYS)


_SHA_CACHE: dict[tuple, tuple[str, Path]] = {}


def model_weights(path: str | os.PathLike) -> tuple[str | None, Path | None]:
    """(sha256, file) of the weights fine-tuning loads from ``path``: a tokendrop run's newest
    checkpoint (or a checkpoint dir) -- the sha256 its meta.json records, checked against the file
    -- or a Hugging Face dir's weight files, hashed (several shards as ``sha256sum`` of their
    ``sha256sum`` lines), cached per process by size and mtime.  (None, None) for a directory with
    no weights at all."""
    p = Path(path)
    if (p / "checkpoints").is_dir() or (
        (p / "meta.json").is_file()
        and ((p / "model.safetensors").is_file() or (p / "shards").is_dir())
        and not (p / "config.json").is_file()
    ):
        # verified (hashed) here, before any cell starts: a corrupt checkpoint is one error line
        try:
            with ckpt_mod.reading(p) as ck:  # held while hashed: a training run's rotation waits
                ckpt_mod.read_meta(ck)
                # or shards
                f = (
                    ck / "model.safetensors"
                    if (ck / "model.safetensors").is_file()
                    else ck / "meta.json"
                )
                key = (
                    (str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns)
                    if f.is_file()
                    else None
                )
                if key not in _SHA_CACHE:
                    meta = ckpt_mod.read_meta(ck)
                    ckpt_mod.verify(ck, files=ckpt_mod.model_files(meta))
                    if key is not None:
                        _SHA_CACHE[key] = (ckpt_mod.weights_sha256_of(meta), f)
                return _SHA_CACHE[key]
        except ckpt_mod.CheckpointError as e:
            raise FinetuneError(f"cannot evaluate model {p}: {e}") from None
    try:
        hashed, files, _, sharded = weight_files(p)
    except InitError:
        return None, None
    key = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if key not in _SHA_CACHE:
        _SHA_CACHE[key] = (
            combined_sha([(f.name, ckpt_mod.sha256_file(f)) for f in files], sharded),
            hashed,
        )
    return _SHA_CACHE[key]


def _same_weights(r: dict, cdir: Path, sha: str | None, wfile: Path | None) -> str:
    """ "" when cell result ``r`` was computed from these weights, else why not (for the log)."""
    if "model_sha256" in r:
        if r["model_sha256"] == sha:
            return ""
        old = (r["model_sha256"] or "none")[:12]
        return (
            f"the model's weights changed since this cell was computed (sha256 {old}... -> "
            f"{(sha or 'none')[:12]}...)"
        )
    try:  # a cell from before weight hashes were recorded
        if wfile is None or wfile.stat().st_mtime_ns <= (cdir / "metrics.json").stat().st_mtime_ns:
            return ""
    except OSError:
        pass
    return "the model's weights are newer than this cell (which records no weights hash)"


def _finished(path: Path, fcfg: FinetuneConfig) -> dict | None:
    mp = path / "metrics.json"
    if not mp.is_file():
        return None
    try:
        r = read_json(mp, FinetuneError)
    except FinetuneError:
        return None
    if (
        not isinstance(r, dict)
        or "scores" not in r
        or not _same_settings(r.get("config", {}), to_dict(fcfg))
    ):
        return None
    return r


# ----------------------------------------------------------------------------------------------
# aggregation


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _task_names(cfg: SuiteConfig) -> list[str]:
    """The suite's tasks by their registry names (aliases resolved), in its order."""
    return list(dict.fromkeys(get_task(t).name for t in cfg.tasks))


def _model_columns(
    cfg: SuiteConfig, results: dict[str, dict]
) -> tuple[dict[str, float], dict[str, str]]:
    """Best-over-grid column values of one model from ``{cell_name: result}`` (mean over seeds)."""
    # cell (task, epochs, lr) -> mean over fine-tuning seeds of each column
    grid: dict[tuple[str, float, float], dict[str, list[float]]] = {}
    for r in results.values():
        c = r["_cell"]
        d = grid.setdefault((c.task, c.epochs, c.lr), {})
        for k, v in r["scores"].items():
            d.setdefault(k, []).append(float(v))
    means = {g: {k: _mean(v) for k, v in d.items()} for g, d in grid.items()}
    best: dict[str, float] = {}
    where: dict[str, str] = {}
    for col in suite_columns(_task_names(cfg)):
        cands = [(g, m) for g, m in means.items() if g[0] == col.task and col.key in m]
        if not cands:
            continue
        if cfg.selection == "task":
            main = main_column(col.task)
            g, m = max(cands, key=lambda gm: (gm[1].get(main, -math.inf), -gm[0][1], -gm[0][2]))
        else:
            g, m = max(cands, key=lambda gm: (gm[1][col.key], -gm[0][1], -gm[0][2]))
        best[col.key] = m[col.key]
        where[col.key] = f"e{_fmt_num(g[1])}-lr{_fmt_num(g[2])}"
    glue = [best[c.key] for c in COLUMNS if c.group == "glue" and c.key in best]
    squad = [best[c.key] for c in COLUMNS if c.group == "squad" and c.key in best]
    if glue:
        best[GLUE_AVG] = _mean(glue)
    if squad:
        best[SQUAD_AVG] = _mean(squad)
    return best, where


def _stats(xs: list[float]) -> dict[str, Any]:
    return {
        "mean": _mean(xs),
        "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
        "per_seed": xs,
    }


def aggregate(
    cfg: SuiteConfig, models: list[ModelEntry], done: dict[str, dict[str, dict]]
) -> dict[str, Any]:
    per_model = {}
    for m in models:
        cols, where = _model_columns(cfg, done.get(m.key, {}))
        per_model[m.key] = {
            "label": m.label,
            "path": str(m.path),
            "columns": cols,
            "best_cell": where,
            "cells_done": len(done.get(m.key, {})),
        }
    methods: dict[str, dict[str, Any]] = {}
    for m in models:
        methods.setdefault(m.label, {"models": []})["models"].append(m.key)
    keys = [c.key for c in suite_columns(_task_names(cfg))] + [GLUE_AVG, SQUAD_AVG]
    for _label, d in methods.items():
        d["columns"] = {}
        for k in keys:
            xs = [
                per_model[mk]["columns"][k] for mk in d["models"] if k in per_model[mk]["columns"]
            ]
            if xs:
                d["columns"][k] = _stats(xs)
                if len(xs) < len(d["models"]):
                    d["columns"][k]["incomplete"] = True
    present_glue = [
        c.key
        for c in COLUMNS
        if c.group == "glue" and any(c.key in pm["columns"] for pm in per_model.values())
    ]
    return {"methods": methods, "models": per_model, "glue_avg_columns": present_glue}


def render_markdown(
    cfg: SuiteConfig, summary: dict[str, Any], models: list[ModelEntry], total_cells: int
) -> str:
    used_tasks = _task_names(cfg)
    cols = suite_columns(used_tasks)
    shown = {c.key for c in cols if c.group != "extra" or c.task in used_tasks} | set(AVERAGES)
    extra = list(
        dict.fromkeys(c.title for c in cols if c.group == "extra" and c.task in used_tasks)
    )
    layout = table_columns(shown, used_tasks)
    keys = [k for k, _ in layout]
    head = ["Methods"] + [h for _, h in layout]
    methods = summary["methods"]
    best = {}
    for k in keys:
        vals = [d["columns"][k]["mean"] for d in methods.values() if k in d["columns"]]
        if len(methods) > 1 and vals:
            best[k] = max(vals)

    def cell(d: dict, k: str) -> str:
        st = d["columns"].get(k)
        if st is None:
            return "–"
        s = f"{st['mean']:.2f}"
        if best.get(k) is not None and abs(st["mean"] - best[k]) < 1e-9:
            s = f"**{s}**"
        return s + ("*" if st.get("incomplete") else "")

    lines = [f"# Fine-tuning results{f' — suite {cfg.name}' if cfg.name else ''}", ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" + "---:|" * (len(head) - 1))
    for label, d in methods.items():
        lines.append(
            "| "
            + " | ".join([f"{label} (n={len(d['models'])})"] + [cell(d, k) for k in keys])
            + " |"
        )
    lines.append("")
    lines.append(
        f"Each number: best dev score over the grid epochs {cfg.glue_epochs} x lr {cfg.glue_lrs} "
        f"(GLUE), epochs {cfg.squad_epochs} x lr {cfg.squad_lrs} (SQuAD), fine-tuning seeds "
        f"{cfg.finetune_seeds}, selection by "
        f"{'column' if cfg.selection == 'column' else 'task (main column)'}; mean over the "
        "pretraining seeds (n models per row). AX: Matthews corr. of the MNLI model; GLUE-avg: "
        "mean of the GLUE columns shown"
        + (f" ({', '.join(extra)} excluded: not in the paper's table)" if extra else "")
        + "; SQuAD: F1."
    )
    glue_present = summary.get("glue_avg_columns", [])
    n_glue = len([c for c in COLUMNS if c.group == "glue"])
    if 0 < len(glue_present) < n_glue:
        lines.append(
            f"GLUE-avg here covers {len(glue_present)} of the paper's {n_glue} GLUE columns."
        )
    done = sum(pm["cells_done"] for pm in summary["models"].values())
    if done < total_cells:
        lines.append(
            f"**Partial:** {done} of {total_cells} cells finished; `*` marks a mean "
            "over fewer seeds."
        )
    if cfg.note:
        lines.append("")
        lines.append(cfg.note)
    lines.append("")
    lines.append("## Per pretraining seed")
    lines.append("")
    lines.append("| Method | Model | " + " | ".join(h for h in head[1:]) + " |")
    lines.append("|---|---|" + "---:|" * (len(head) - 1))
    for m in models:
        pm = summary["models"][m.key]
        vals = [f"{pm['columns'][k]:.2f}" if k in pm["columns"] else "–" for k in keys]
        lines.append(f"| {m.label} | `{m.path}` | " + " | ".join(vals) + " |")
    lines.append("")
    spread = []
    for label, d in methods.items():
        if len(d["models"]) > 1:
            parts = [f"{k} ±{d['columns'][k]['std']:.2f}" for k in keys if k in d["columns"]]
            spread.append(f"- {label}: std over seeds: " + ", ".join(parts))
    if spread:
        lines += ["Spread:", ""] + spread + [""]
    return "\n".join(lines) + "\n"


def _data_note(cfg: SuiteConfig) -> str:
    """Say so when the data is the offline stand-in set (its README says 'stand-in')."""
    for d in (cfg.glue_data, cfg.squad_data):
        readme = Path(_resolve_data(d)).parent / "README.md"
        try:
            if (
                readme.is_file()
                and "stand-in" in readme.read_text(encoding="utf-8", errors="replace")[:2000]
            ):
                return (
                    "**Data: offline stand-ins in the GLUE/SQuAD file layouts — not the real GLUE "
                    f"or SQuAD; scores are not comparable with published numbers** (see {readme})."
                )
        except OSError:
            pass
    return ""


# ----------------------------------------------------------------------------------------------
# entry point


def evaluate(
    models: list[str | os.PathLike],
    suite_cfg: SuiteConfig | str | os.PathLike,
    out_dir: str | os.PathLike,
    overrides: list[str] | tuple[str, ...] = (),
    log: Callable[[str], None] | None = None,
    finetune_fn: Callable[..., dict] | None = None,
    overwrite: bool = False,
    coordinated: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the suite for ``models``; write ``OUT/results.{json,md}``; return the
    summary.

    ``OUT`` is locked for the call.  An existing ``OUT`` written by ``evaluate`` is continued (its
    finished cells reused); with ``overwrite`` it is started over; any other non-empty directory is
    refused (``tokendrop.runs.rundir.prepare_output``).  Interrupted before any cell finished, a new
    ``OUT`` is removed again.  ``coordinated``: the caller (the study's worker pool, which holds the
    study's lock) runs several calls on disjoint models into one ``OUT`` at once, so ``OUT`` itself
    is not locked.

    The summary has ``methods`` (per label: per column mean/std/min/max/per-seed), ``models``
    (per model: best value per column and the cell it came from), ``computed`` / ``skipped`` cell
    counts and ``markdown``.
    """
    check_arg("evaluate", "models", models, (list, tuple), "a list of model paths")
    for m in models:
        check_path_arg("evaluate", "models", m)
    check_arg(
        "evaluate",
        "suite_cfg",
        suite_cfg,
        (SuiteConfig, str, os.PathLike),
        "a SuiteConfig or a suite preset/path",
    )
    check_path_arg("evaluate", "out_dir", out_dir)
    if log is None:

        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

    finetune_fn = finetune_fn or finetune
    cfg = suite_cfg if isinstance(suite_cfg, SuiteConfig) else load_suite(suite_cfg, overrides)
    if isinstance(suite_cfg, SuiteConfig) and overrides:
        cfg = from_dict(SuiteConfig, to_dict(cfg), list(overrides))
    cfg.validate()
    entries = parse_models([str(m) for m in models])
    for line in merged_seeds(entries):
        log(line)
    out = Path(out_dir)
    with rundir.lock(out, FinetuneError) if not coordinated else contextlib.nullcontext():
        existed = out.exists()
        mode = rundir.prepare_output(
            out,
            "evaluate",
            overwrite,
            error=FinetuneError,
            inputs=[*(e.path for e in entries), cfg.glue_data, cfg.squad_data],
        )
        # before the first cell: a task that cannot be scored fails now, not hours later
        if finetune_fn is finetune:
            check_dev_sets(
                cfg, _tasks_to_compute(cfg, entries, out if mode == "continue" else None)
            )
        if mode == "replace":
            rundir.discard(out)
            existed = False
        rundir.create(out, "evaluate")
        try:
            return _run_suite(cfg, entries, out, log, finetune_fn)
        except BaseException:
            if (
                mode != "continue"
                and not coordinated
                and not any(out.glob("cells/*/*/*/metrics.json"))
            ):
                rundir.abandon(out, existed)  # nothing finished: leave no partial output
            raise


def _tasks_to_compute(cfg: SuiteConfig, entries: list[ModelEntry], out: Path | None) -> list[str]:
    """The suite's tasks with a cell not yet finished in ``out`` (all of them for a new output)."""
    cells = cells_for(cfg)
    if out is None:
        return list(dict.fromkeys(c.task for c in cells))
    return list(
        dict.fromkeys(
            c.task
            for m in entries
            for c in cells
            if _finished(out / "cells" / m.key / c.task / c.name, cell_config(cfg, c)) is None
        )
    )


def check_dev_sets(cfg: SuiteConfig, tasks: list[str] | None = None) -> dict[str, int]:
    """The dev split(s) of the suite's ``tasks`` (default: all) read as fine-tuning reads them: ->
    examples per task/split.  A split with no example (a file holding only its header, an empty
    SQuAD ``data`` list) is refused in one line naming the file (``tasks.refuse_empty``: a score
    over n = 0 examples is no score).  ``evaluate`` runs it (with its own fine-tuning) for the tasks
    it still has cells of, before the first cell: such a task fails at once, not after hours of
    others."""
    counts: dict[str, int] = {}
    for task in dict.fromkeys(cfg.tasks if tasks is None else tasks):
        spec = get_task(task)
        fcfg = cell_config(cfg, Cell(task, 1.0, 1.0, 0))
        if spec.kind == "span":
            path = task_dir(spec, fcfg.data) / spec.dev["dev"]
            splits = {"dev": refuse_empty(read_squad(path, spec.version)[0], path)}
        else:
            splits = load_task(
                spec,
                fcfg.data,
                text_a=fcfg.text_a,
                text_b=fcfg.text_b,
                label=fcfg.label,
                labels=fcfg.labels or None,
                need_train=False,
                skipped=[] if fcfg.skip_malformed else None,
            ).dev
            for split, v in splits.items():
                where = task_dir(spec, fcfg.data) / spec.dev.get(split, "")
                refuse_constant(spec, v, where, "use a dev split holding more than one label")
        counts.update({f"{spec.name}/{split}": len(v) for split, v in splits.items()})
    return counts


def _run_suite(
    cfg: SuiteConfig,
    entries: list[ModelEntry],
    out: Path,
    log: Callable[[str], None],
    finetune_fn: Callable[..., dict],
) -> dict[str, Any]:
    """Every model's cells in order (:class:`_SuiteRun`), results.json / results.md rewritten after
    every computed cell and at the end.  -> the summary, with the suite's ``seconds``."""
    run = _SuiteRun(cfg, entries, out, log, finetune_fn)
    atomic_write_text(out / "suite.toml", to_toml(cfg))
    t_start = time.perf_counter()
    # every model's weights verified before the first cell (cached: not hashed again below)
    for m in entries:
        model_weights(m.path)
    for m in entries:
        run.model(m)
    summary = run.write_summary()
    summary["seconds"] = time.perf_counter() - t_start
    log(
        f"suite {cfg.name or '(unnamed)'}: {run.computed} cells computed"
        + (f" ({run.reevaluated} because the model's weights changed)" if run.reevaluated else "")
        + f", {run.skipped} reused -> {out / 'results.md'}"
    )
    return summary


class _SuiteRun:
    """One run of the suite into ``out``: its cells, the results so far (``done``: model key ->
    task/cell -> result), the cell counts, the seconds per epoch each task took (for the time
    left)."""

    def __init__(
        self,
        cfg: SuiteConfig,
        entries: list[ModelEntry],
        out: Path,
        log: Callable[[str], None],
        finetune_fn: Callable[..., dict],
    ):
        self.cfg, self.entries, self.out, self.log, self.finetune_fn = (
            cfg,
            entries,
            out,
            log,
            finetune_fn,
        )
        self.cells = cells_for(cfg)
        self.total = len(self.cells) * len(entries)
        self.note = "\n\n".join(x for x in (_data_note(cfg), cfg.note) if x)
        self.cfg_out = dataclasses.replace(cfg, note=self.note)
        self.done: dict[str, dict[str, dict]] = {}
        self.i = self.computed = self.skipped = self.reevaluated = (
            0  # i: the cell's number, as the log shows it
        )
        self.spent: dict[str, list[float]] = {}

    def write_summary(self) -> dict[str, Any]:
        """Aggregate what is done; write results.json and results.md; -> the summary."""
        summary = aggregate(self.cfg, self.entries, self.done)
        md = render_markdown(self.cfg_out, summary, self.entries, self.total)
        summary.update(
            {
                "suite": to_dict(self.cfg),
                "computed": self.computed,
                "skipped": self.skipped,
                "total_cells": self.total,
                "reevaluated": self.reevaluated,
                "note": self.note,
                "markdown": md,
            }
        )
        atomic_write_json(
            self.out / "results.json",
            {k: v for k, v in summary.items() if k != "markdown"},
            indent=2,
        )
        atomic_write_text(self.out / "results.md", md)
        return summary

    def model(self, m: ModelEntry) -> None:
        """All cells of model ``m``: a finished cell is reused unless the model's weights changed
        since (then it is re-evaluated); the summary rewritten after every computed cell (an
        interrupted suite keeps it)."""
        self.done[m.key] = {}
        msha, mfile = model_weights(m.path)
        changed = 0
        for cell in self.cells:
            self.i += 1
            fcfg = cell_config(self.cfg, cell)
            cdir = self.out / "cells" / m.key / cell.task / cell.name
            r = _finished(cdir, fcfg)
            why = _same_weights(r, cdir, msha, mfile) if r is not None else ""
            if why:
                if not changed:
                    self.log(f"{m.label} ({m.path}): {why}: re-evaluating its cells")
                changed += 1
                self.reevaluated += 1
                r = None
            fresh = r is None
            if fresh:
                r = self.compute(m, cell, fcfg, cdir, msha, mfile)
            else:
                self.skipped += 1
            self.done[m.key][f"{cell.task}/{cell.name}"] = {**r, "_cell": cell}
            if fresh:
                self.write_summary()

    def compute(
        self,
        m: ModelEntry,
        cell: Cell,
        fcfg: FinetuneConfig,
        cdir: Path,
        msha: str | None,
        mfile: Path | None,
    ) -> dict:
        """Fine-tune ``m`` on ``cell`` into ``cdir``; record the weights it used; log its scores,
        the time left."""
        if cdir.exists() and rundir.read_marker(cdir) is not None:
            # a cell of other settings (or unreadable): this suite's own output
            rundir.discard(cdir)
        t0 = time.perf_counter()
        self.log(f"[{self.i}/{self.total}] {m.label} ({m.path}) {cell.task} {cell.name} ...")
        progress = step_progress(self.log, PROGRESS_EVERY_S, f"[{self.i}/{self.total}]   ")
        if not fcfg.log_every:  # log_every is no part of a cell's identity (_IGNORED_KEYS)
            fcfg = dataclasses.replace(fcfg, log_every=10)
        r = self.finetune_fn(fcfg, str(m.path), cdir, log=progress)
        # the weights the cell was computed from (not recorded if they changed meanwhile: recomputed
        # next time)
        after = model_weights(m.path)[0]
        used = {
            "model_sha256": msha if after == msha else None,
            "model_weights": str(mfile) if mfile else None,
        }
        r = {**r, **used}
        if (cdir / "metrics.json").is_file():
            atomic_write_json(
                cdir / "metrics.json",
                {**read_json(cdir / "metrics.json", FinetuneError), **used},
                indent=2,
            )
        dt = time.perf_counter() - t0
        self.spent.setdefault(cell.task, []).append(dt / cell.epochs)
        self.computed += 1
        left = self.seconds_left(m, cell)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in r["scores"].items())
        self.log(
            f"[{self.i}/{self.total}] {cell.task} {cell.name}: {scores} ({dt:.0f}s; about "
            f"{left / 60:.0f} min left)"
        )
        return r

    def seconds_left(self, m: ModelEntry, cell: Cell) -> float:
        """Estimated seconds for the cells after ``cell`` of model ``m`` and those of the models
        after it."""
        per_epoch = _mean([x for v in self.spent.values() for x in v])

        def est(c: Cell) -> float:  # seconds per epoch of the task (else of any task) x epochs
            return _mean(self.spent.get(c.task, [per_epoch])) * c.epochs

        return sum(est(c) for c in self.cells[self.cells.index(cell) + 1 :]) + sum(
            est(c) for c in self.cells
        ) * (len(self.entries) - self.entries.index(m) - 1)
