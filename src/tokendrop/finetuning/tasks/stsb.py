"""STS-B (GLUE): how similar are two sentences, a float from 0 to 5; regression (one output, MSE
loss); Pearson and Spearman correlation (Spearman is the main number, as in BERT's tables).

Files: ``train.tsv`` / ``dev.tsv`` with the 10-column header ``index  genre  filename  year
old_index  source1  source2  sentence1  sentence2  score``; ``test.tsv``: the first 9 of them.
"""

from tokendrop.finetuning.tasks.base import Columns, TaskSpec

TASKS = [
    TaskSpec(
        "stsb",
        "regression",
        ("pearson", "spearman"),
        "spearman",
        dirname="STS-B",
        columns=Columns("sentence1", "sentence2", "score", guid="index"),
        aliases=("sts-b", "sts"),
        value_range=(0.0, 5.0),
    )
]
