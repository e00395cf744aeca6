"""MRPC (GLUE): is one sentence a paraphrase of the other; 2 classes; accuracy and F1 of
"paraphrase" (F1 is the main number, as in BERT's tables).

Files: ``train.tsv`` / ``dev.tsv`` with header ``Quality  #1 ID  #2 ID  #1 String  #2 String``
(Quality 0/1; the download's train file starts with a byte-order mark); ``test.tsv``: ``index
#1 ID  #2 ID  #1 String  #2 String``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "mrpc",
        "classification",
        ("accuracy", "f1"),
        "f1",
        dirname="MRPC",
        columns=Columns("#1 String", "#2 String", "Quality"),
        test_columns=Columns("#1 String", "#2 String", guid="index"),
        labels=["0", "1"],
    )
]
