"""QQP (GLUE): are two Quora questions duplicates; 2 classes; accuracy and F1 of "duplicate"
(F1 is the paper's column).

Files: ``train.tsv`` / ``dev.tsv`` with header ``id  qid1  qid2  question1  question2
is_duplicate`` (0/1); ``test.tsv``: ``id  question1  question2``.  The download has a few rows of
the wrong width: refused, or left out and counted with ``skip_malformed = true``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "qqp",
        "classification",
        ("accuracy", "f1"),
        "f1",
        dirname="QQP",
        columns=Columns("question1", "question2", "is_duplicate", guid="id"),
        labels=["0", "1"],
    )
]
