"""The evaluation table's columns (the paper's Table 1): which task and metric each column shows, its
group (GLUE, SQuAD, or extra columns that are never averaged), and each task's main column.  A new
fine-tuning task that gets a column is one row here (and its ``TaskSpec`` in ``finetune/tasks.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    unit: str
    task: str
    group: str  # glue | squad | extra


COLUMNS = [
    Column("ax", "AX", "corr.", "mnli", "glue"),
    Column("mnli_mm", "MNLI-mm", "acc.", "mnli", "glue"),
    Column("mnli_m", "MNLI-m", "acc.", "mnli", "glue"),
    Column("qnli", "QNLI", "acc.", "qnli", "glue"),
    Column("qqp", "QQP", "F1", "qqp", "glue"),
    Column("sst2", "SST", "acc.", "sst2", "glue"),
    Column("rte", "RTE", "acc.", "rte", "extra"),  # not in the paper's table; never averaged
    Column("squad1", "SQuAD v1", "F1", "squad1", "squad"),
    Column("squad2", "SQuAD v2", "F1", "squad2", "squad"),
]
MAIN_COLUMN = {"mnli": "mnli_m", "qnli": "qnli", "qqp": "qqp", "sst2": "sst2", "rte": "rte",
               "squad1": "squad1", "squad2": "squad2"}
GLUE_AVG, SQUAD_AVG = "glue_avg", "squad_avg"
