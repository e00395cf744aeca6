"""QNLI (GLUE): does the sentence answer the question; 2 classes; accuracy.

Files: ``train.tsv`` / ``dev.tsv`` with header ``index  question  sentence  label`` (label
entailment / not_entailment); ``test.tsv``: ``index  question  sentence``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "qnli",
        "classification",
        ("accuracy",),
        "accuracy",
        dirname="QNLI",
        columns=Columns("question", "sentence", "label", guid="index"),
        labels=["entailment", "not_entailment"],
    )
]
