"""Task readers check each label's value: in the task's label set (classification) or within its
range (regression: STS-B's scores in [0, 5]); a value outside is one line naming file:line, the
value and what the task takes.  The grid is the task registry: every GLUE-format task with a label
column in its own files (SQuAD's spans and the custom task, whose labels the user declares, have
their own checks)."""

import pytest
from toydata import write_glue_examples

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.tasks import TASKS, task_dir

GLUE = sorted(
    n for n, s in TASKS.items() if s.kind != "span" and s.columns is not None and s.dirname
)


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue_examples(tmp_path_factory.mktemp("glue"), n_train=8, n_dev=4)


def _bad_value(spec) -> str:
    if spec.kind == "regression":
        lo, hi = spec.value_range
        return f"{hi + 2.5:g}"
    return "not-a-label"


def test_the_grid_covers_the_tasks_with_labels():
    assert {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"} <= set(GLUE)
    assert all(TASKS[n].value_range is not None for n in GLUE if TASKS[n].kind == "regression")


@pytest.mark.parametrize("name", GLUE)
def test_a_label_outside_the_task_is_refused_with_file_and_line(name, glue, tmp_path):
    spec = TASKS[name].copy()
    src = task_dir(spec, glue) / (spec.train or next(iter(spec.dev.values())))
    lines = src.read_text(encoding="utf-8").splitlines()
    cols = spec.columns
    row = 1 if cols.has_header else 0  # the first example
    fields = lines[row].split("\t")
    at = lines[0].lstrip("\ufeff").split("\t").index(cols.label) if cols.has_header else cols.label
    bad = _bad_value(spec)
    fields[at] = bad
    lines[row] = "\t".join(fields)
    p = tmp_path / src.name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(FinetuneError) as e:
        spec.read(p)
    msg = str(e.value)
    assert "\n" not in msg and f"{p}:{row + 1}:" in msg and bad in msg, msg
    if spec.kind == "regression":
        lo, hi = spec.value_range
        assert f"[{lo:g}, {hi:g}]" in msg, msg
    else:
        assert all(lab in msg for lab in spec.labels), msg


def test_the_range_ends_are_valid_scores(glue, tmp_path):
    spec = TASKS["stsb"].copy()
    src = task_dir(spec, glue) / spec.train
    lines = src.read_text(encoding="utf-8").splitlines()
    at = lines[0].split("\t").index(spec.columns.label)
    for i, v in ((1, "0"), (2, "5.0")):
        f = lines[i].split("\t")
        f[at] = v
        lines[i] = "\t".join(f)
    p = tmp_path / "train.tsv"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ex = spec.read(p)
    assert ex[0].label == 0.0 and ex[1].label == 5.0
