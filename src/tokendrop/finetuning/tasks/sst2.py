"""SST-2 (GLUE): sentence sentiment, 2 classes; accuracy.

Files: ``train.tsv`` / ``dev.tsv`` with header ``sentence  label`` (label 0/1); ``test.tsv`` with
header ``index  sentence``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "sst2",
        "classification",
        ("accuracy",),
        "accuracy",
        dirname="SST-2",
        columns=Columns("sentence", label="label"),
        test_columns=Columns("sentence", guid="index"),
        labels=["0", "1"],
        aliases=("sst-2", "sst"),
    )
]
