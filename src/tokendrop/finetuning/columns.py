"""The evaluation table's columns, the one table the suite's results.md and the study's tables
share: the paper's Table 1 (AX, MNLI-mm, MNLI-m, QNLI, QQP, SST | SQuAD v1, v2) and the other GLUE
tasks' columns, which are shown when a suite runs them and never averaged (the paper's GLUE-avg
covers its six columns).  Each column is one number of a fine-tuning result: ``metric`` of dev split
``split``.  A task's main column is the one of its main metric on its first dev split.  A task
without a row here (a custom task, a new one) still gets one column, its main metric on its first
dev split under the task's own name, shown when a suite runs it and never averaged; a row here
gives it the paper's table order, a title and a unit."""

from __future__ import annotations

from dataclasses import dataclass

from tokendrop.finetuning.tasks import TASKS


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    unit: str
    task: str
    group: str  # glue | squad | extra (shown when run, never averaged)
    metric: str  # a key of the split's metrics
    split: str = "dev"

    @property
    def header(self) -> str:
        return f"{self.title} ({self.unit})"


COLUMNS = [
    Column("ax", "AX", "corr.", "mnli", "glue", "mcc", "ax"),
    Column("mnli_mm", "MNLI-mm", "acc.", "mnli", "glue", "accuracy", "dev_mismatched"),
    Column("mnli_m", "MNLI-m", "acc.", "mnli", "glue", "accuracy", "dev_matched"),
    Column("qnli", "QNLI", "acc.", "qnli", "glue", "accuracy"),
    Column("qqp", "QQP", "F1", "qqp", "glue", "f1"),
    Column("sst2", "SST", "acc.", "sst2", "glue", "accuracy"),
    Column("cola", "CoLA", "MCC", "cola", "extra", "mcc"),
    Column("mrpc", "MRPC", "F1", "mrpc", "extra", "f1"),
    Column("mrpc_acc", "MRPC", "acc.", "mrpc", "extra", "accuracy"),
    Column("stsb", "STS-B", "Spearman", "stsb", "extra", "spearman"),
    Column("stsb_pearson", "STS-B", "Pearson", "stsb", "extra", "pearson"),
    Column("rte", "RTE", "acc.", "rte", "extra", "accuracy"),
    Column("wnli", "WNLI", "acc.", "wnli", "extra", "accuracy"),
    Column("squad1", "SQuAD v1", "F1", "squad1", "squad", "f1"),
    Column("squad2", "SQuAD v2", "F1", "squad2", "squad", "f1"),
]
GLUE_AVG, SQUAD_AVG = "glue_avg", "squad_avg"
# key -> (header, group averaged)
AVERAGES = {
    GLUE_AVG: ("GLUE-avg", "glue"),
    SQUAD_AVG: ("SQuAD-avg", "squad"),
}
# a task's main column: its main metric on its first dev split (MNLI-m for MNLI, F1 for SQuAD)
MAIN_COLUMN = {
    c.task: c.key
    for c in COLUMNS
    if c.metric == TASKS[c.task].main and c.split == next(iter(TASKS[c.task].dev))
}
# the average across downstream tasks (the paper's Table 3): the columns of its Table 1
DOWNSTREAM_KEYS = [c.key for c in COLUMNS if c.group != "extra"]


def columns_of(task: str) -> list[Column]:
    """A task's columns: its rows in COLUMNS, else its main metric on its first dev split, under the
    task's name (group "extra")."""
    listed = [c for c in COLUMNS if c.task == task]
    spec = TASKS.get(task)
    if listed or spec is None or not spec.dev or any(c.key == task for c in COLUMNS):
        return listed  # AX: a split of the MNLI model, its column is MNLI's
    return [Column(task, task, spec.main, task, "extra", spec.main, next(iter(spec.dev)))]


def main_column(task: str) -> str:
    """The key of a task's main column (MNLI-m for MNLI; a task without a row: its own name)."""
    return MAIN_COLUMN.get(task, task)


def suite_columns(tasks: list[str] | tuple[str, ...] = ()) -> list[Column]:
    """COLUMNS, then the column of each of ``tasks`` (registry names) that has no row there."""
    return COLUMNS + [c for t in tasks for c in columns_of(t) if c not in COLUMNS]


def task_scores(task: str, metrics: dict[str, dict]) -> dict[str, float]:
    """A fine-tuning result's numbers under its task's columns (those whose split it has), from its
    ``metrics`` ({split: {metric: value}})."""
    return {c.key: metrics[c.split][c.metric] for c in columns_of(task) if c.split in metrics}


def table_columns(
    keys: set[str] | None = None, tasks: list[str] | tuple[str, ...] = ()
) -> list[tuple[str, str]]:
    """``(key, header)`` in table order: the GLUE and extra columns (those of ``tasks`` without a
    row last), GLUE-avg, the SQuAD columns, SQuAD-avg; only those in ``keys`` when given."""
    cols = suite_columns(tasks)
    out = [(c.key, c.header) for c in cols if c.group != "squad"] + [
        (GLUE_AVG, AVERAGES[GLUE_AVG][0])
    ]
    out += [(c.key, c.header) for c in cols if c.group == "squad"] + [
        (SQUAD_AVG, AVERAGES[SQUAD_AVG][0])
    ]
    return [kh for kh in out if keys is None or kh[0] in keys]
