"""MNLI (GLUE): entailment / contradiction / neutral; accuracy on the matched and the mismatched
dev sets (MNLI-m, MNLI-mm); GLUE's diagnostic set AX (Matthews corr.) scored with the MNLI model.

Files: ``train.tsv`` (12 columns: ``index promptID pairID genre sentence1_binary_parse
sentence2_binary_parse sentence1_parse sentence2_parse sentence1 sentence2 label1 gold_label``),
``dev_matched.tsv`` / ``dev_mismatched.tsv`` (16: ``label1`` .. ``label5`` then ``gold_label``),
``test_matched.tsv`` / ``test_mismatched.tsv`` (the first 10).  Pairs whose gold label is ``-`` (no
annotator majority) are left out, as the dataset advises.  AX: the labelled
``diagnostic-full.tsv`` (header ``Lexical Semantics  Predicate-Argument Structure  Logic
Knowledge  Domain  Premise  Hypothesis  Label``), found at ``<glue>/AX/`` beside the MNLI dir.
"""

from __future__ import annotations

from pathlib import Path

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.tasks.base import Columns, Example, TaskSpec, refuse_empty

LABELS = ["contradiction", "entailment", "neutral"]  # the order of transformers' GLUE processors


class MnliTask(TaskSpec):
    def extra_dev(
        self, data: Path, task_data: Path, option: str, skipped: list[str] | None
    ) -> dict[str, tuple[TaskSpec, list[Example], Path]]:
        """AX when ``option`` (``finetune.ax_data``) is "auto" and the file is found, or a path."""
        if not option:
            return {}
        f = find_ax_file(data, task_data) if option == "auto" else Path(option)
        if f is None:
            return {}
        if f.is_dir():
            f = f / AX.dev["ax"]
        if not f.is_file():
            raise FinetuneError(f"ax_data: no such file {option}")
        return {"ax": (AX, refuse_empty(AX.read(f, skipped=skipped), f), f)}


def find_ax_file(data: str | Path, mnli_dir: Path | None = None) -> Path | None:
    """GLUE's labelled diagnostic set next to MNLI: ``<glue>/AX/diagnostic-full.tsv`` (or in
    ``data``)."""
    cands = []
    for base in [Path(data)] + ([mnli_dir] if mnli_dir else []):
        cands += [
            base / "AX" / "diagnostic-full.tsv",
            base / "diagnostic-full.tsv",
            base.parent / "AX" / "diagnostic-full.tsv",
            base.parent / "diagnostic" / "diagnostic-full.tsv",
        ]
    return next((c for c in cands if c.is_file()), None)


MNLI = MnliTask(
    "mnli",
    "classification",
    ("accuracy",),
    "accuracy",
    dirname="MNLI",
    columns=Columns("sentence1", "sentence2", "gold_label", guid="index"),
    labels=list(LABELS),
    dev={"dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"},
    test={"test_matched": "test_matched.tsv", "test_mismatched": "test_mismatched.tsv"},
    skip_labels=("-",),
    aliases=("mnli-m",),
)
# AX: evaluation only (no train file), scored by the MNLI model over its 3 classes (K-class MCC).
AX = TaskSpec(
    "ax",
    "classification",
    ("accuracy", "mcc"),
    "mcc",
    dirname="AX",
    columns=Columns("Premise", "Hypothesis", "Label"),
    test_columns=Columns("sentence1", "sentence2", guid="index"),
    labels=list(LABELS),
    train="",
    dev={"ax": "diagnostic-full.tsv"},
    test={"ax": "AX.tsv"},
    aliases=("diagnostic",),
)
TASKS = [MNLI, AX]
