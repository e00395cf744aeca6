"""CoLA (GLUE): is the sentence grammatical; 2 classes; Matthews correlation (and accuracy).

GLUE's ``train.tsv`` / ``dev.tsv`` have **no header row**: four fields per row, the sentence's
source (e.g. ``gj04``), the label (0/1), the original author's acceptability mark (``*`` or empty)
and the sentence.  ``test.tsv`` has a header: ``index  sentence``.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "cola",
        "classification",
        ("accuracy", "mcc"),
        "mcc",
        dirname="CoLA",
        columns=Columns(3, label=1, width=4, layout="source, label, original mark, sentence"),
        test_columns=Columns("sentence", guid="index"),
        labels=["0", "1"],
    )
]
