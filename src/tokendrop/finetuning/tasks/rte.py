"""RTE (GLUE): textual entailment, 2 classes; accuracy.

Files: ``train.tsv`` / ``dev.tsv`` with header ``index  sentence1  sentence2  label`` (label
entailment / not_entailment); ``test.tsv``: ``index  sentence1  sentence2``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "rte",
        "classification",
        ("accuracy",),
        "accuracy",
        dirname="RTE",
        columns=Columns("sentence1", "sentence2", "label", guid="index"),
        labels=["entailment", "not_entailment"],
    )
]
