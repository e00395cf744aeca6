"""Typed records of a study's results: per run, per method (over seeds), the source checkpoint's
row, the evaluation suite's summary and the whole study.  ``study.json`` is their ``asdict``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokendrop.lab.study.common import isnum, mean


@dataclass
class Stat:
    """A quantity over pretraining seeds: the mean of the finite values, and every seed's value
    (None / NaN where a seed has none), in seed order."""

    mean: float
    per_seed: list[Any]

    @classmethod
    def of(cls, values: list[Any]) -> Stat:
        return cls(mean([v for v in values if isnum(v)]), list(values))

    def spread(self) -> float | None:
        """max - min over the seeds with a value; None with fewer than two."""
        vals = [v for v in self.per_seed if isnum(v)]
        return max(vals) - min(vals) if len(vals) > 1 else None


@dataclass
class TargetHit:
    """When a run's held-out MLM loss first reached the reference arm's final loss
    (interpolated)."""

    wall_time: float
    flops: float
    step: float
    rel_wall: float = float("nan")
    rel_flops: float = float("nan")


@dataclass
class RunResult:
    """The measured numbers of one finished pretraining run (metrics.jsonl + config; FLOPs
    analytic). ``curve`` points: {step, wall_time, flops, eval_loss, eval_acc}."""

    run_dir: str
    method: str
    seed: int
    steps: int
    git_revision: str | None
    seq_len: int
    batch_size: int
    tokens: int
    wall_time_s: float
    tokens_per_s: float
    flops_per_step: dict[str, float]
    stage2_start: int
    total_flops: float
    final_eval_loss: float
    final_eval_acc: float
    curve: list[dict[str, Any]]
    params: int | None
    drop: dict[str, Any]
    model: dict[str, Any]  # num_layers, hidden_size, num_heads, vocab_size
    init: str = ""  # model.init: the checkpoint the run continued from ("" = from scratch)
    init_sha256: str = ""
    # before step 1, not in wall_time_s: loading the source, head warm-up, importance init
    init_s: float = 0.0
    own_split_final_eval_loss: float | None = None  # runs scored on another split than their own
    # "unpacked": the curve is on the run's own (unpacked) eval split
    curve_split: str | None = None
    elapsed_s: float | None = None  # as recorded by the study (incl. evaluation and checkpoints)
    loadavg: list[float | None] | None = None
    cpu_s: float | None = None
    eval: dict[str, float] = field(default_factory=dict)  # suite columns + downstream_avg
    finetune_seconds: float | None = None
    to_target: TargetHit | None = None
    clock: str = "wall"  # train.budget_clock: what wall_time_s and the curve's wall_time count
    unigram_entropy: float | None = None  # of the training split's tokens (its metrics log), nats
    # what the selector kept at each checkpoint the run kept (study.selection_checkpoints;
    # tokendrop.lab.inspect.selection_diagnostics), in step order
    selection: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class MethodResult:
    """A method's runs over seeds; ``rel_*`` relative to the reference arm's mean (None without
    one)."""

    name: str
    label: str
    group: str
    runs: list[str]
    seeds: list[int]
    final_eval_loss: Stat
    final_eval_acc: Stat
    wall_time_s: Stat
    total_flops: Stat
    tokens_per_s: Stat
    steps: Stat
    elapsed_s: Stat
    cpu_s: Stat
    finetune_seconds: Stat
    init_s: Stat
    eval: dict[str, Stat] = field(default_factory=dict)
    rel_wall: float | None = None
    rel_flops: float | None = None


@dataclass
class SourceResult:
    """The starting checkpoint itself ("source, not continued"): no pretraining in this study."""

    label: str
    path: str
    sha256: str
    final_eval_loss: float | None = None  # None: the source has no MLM head (see mlm_note)
    final_eval_acc: float | None = None
    mlm_note: str = ""
    eval: dict[str, float] = field(default_factory=dict)
    finetune_seconds: float | None = None


@dataclass
class ModelEval:
    """One model's best-over-grid suite columns and the fine-tuning time of its cells."""

    columns: dict[str, float]
    best_cell: dict[str, str]
    seconds: float
    cells_done: int | None


@dataclass
class EvalSummary:
    """The evaluation suite over every model of the study; ``models`` keyed by resolved model
    path."""

    models: dict[str, ModelEval]
    computed: int
    skipped: int
    seconds: float
    cpu_s: float
    suite: dict[str, Any]
    note: str
    results_md: str


@dataclass
class StudyResults:
    """Everything the tables, figures and report use."""

    runs: dict[str, RunResult]
    methods: dict[str, MethodResult]
    target_eval_loss: float | None
    order: list[str]  # methods with finished runs, in the study's order
    source: SourceResult | None = None
    baseline: str = "baseline"  # the reference arm (study.baseline_arm): target, rel_* and findings

    def reference(self) -> str:
        """How the findings name the reference arm: "the baseline", or "the <its label>"."""
        m = self.methods.get(self.baseline)
        return "the baseline" if self.baseline == "baseline" or m is None else f"the {m.label}"

    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.runs.values()})


def _stat(d: dict[str, Any] | None) -> Stat | None:
    return Stat(d["mean"], list(d["per_seed"])) if d is not None else None


def results_from_json(d: dict[str, Any]) -> StudyResults:
    """The :class:`StudyResults` a ``study.json`` was written from (its ``methods``, ``runs``,
    ``source``, ``target_eval_loss`` and ``baseline``; methods in the study's order, as written).
    Files from older versions lack some fields: a method's ``name`` is its key, a missing per-seed
    quantity (``init_s``: nothing ran before step 1 then) is 0 for every seed, and the reference arm
    is "baseline"."""
    runs = {}
    for k, r in d["runs"].items():
        hit = r.get("to_target")
        runs[k] = RunResult(**{**r, "to_target": TargetHit(**hit) if hit else None})
    stats = {f.name for f in MethodResult.__dataclass_fields__.values() if f.type in ("Stat", Stat)}
    methods = {}
    for k, m in d["methods"].items():
        vals = {
            "name": k,
            **{f: Stat.of([0.0] * len(m["seeds"])) for f in stats},
            **{f: (_stat(v) if f in stats else v) for f, v in m.items()},
        }
        vals["eval"] = {c: _stat(v) for c, v in (m.get("eval") or {}).items()}
        methods[k] = MethodResult(**vals)
    src = d.get("source")
    return StudyResults(
        runs=runs,
        methods=methods,
        target_eval_loss=d.get("target_eval_loss"),
        order=list(methods),
        source=SourceResult(**src) if src else None,
        baseline=d.get("baseline", "baseline"),
    )
