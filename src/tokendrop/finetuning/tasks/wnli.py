"""WNLI (GLUE): Winograd-schema entailment, 2 classes; accuracy.

Files: ``train.tsv`` / ``dev.tsv`` with header ``index  sentence1  sentence2  label`` (label 0/1);
``test.tsv``: ``index  sentence1  sentence2``.  (GLUE's dev set is adversarial to the train set:
a model that learns the train set scores below the majority class on dev.)
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "wnli",
        "classification",
        ("accuracy",),
        "accuracy",
        dirname="WNLI",
        columns=Columns("sentence1", "sentence2", "label", guid="index"),
        labels=["0", "1"],
    )
]
