"""Every registered task writes examples in its own layout that it reads back
(TaskSpec.write_examples): the tests' data come from the task's definition, so a new task file needs
no generator elsewhere."""

from __future__ import annotations

import pytest

from tokendrop.finetuning.tasks import TASKS, get_task
from tokendrop.finetuning.tasks.base import LABEL_WORDS
from tokendrop.finetuning.tasks.squad import read_squad


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_task_reads_the_examples_it_writes(name, tmp_path):
    spec = get_task(name)
    d = spec.write_examples(tmp_path / name, n_train=6, n_dev=5)
    if spec.kind == "span":  # SQuAD's JSON, read as the fine-tuning reads it
        for fname, n in ((spec.train, 6), *((f, 5) for f in spec.dev.values())):
            examples, version = read_squad(d / fname, spec.version)
            assert version == spec.version and len({ex.qid.rstrip("n") for ex in examples}) == n
            assert any(ex.is_impossible for ex in examples) == (spec.version == 2)
        return
    data = spec.load(d)
    assert len(data.train) == (6 if spec.train else 0)
    assert set(data.dev) == set(spec.dev) and all(len(ex) >= 5 for ex in data.dev.values())
    if spec.kind == "classification":  # every label occurs, and its word is in its texts
        labels = {ex.label for ex in data.train or next(iter(data.dev.values()))}
        assert labels == set(range(len(spec.labels)))
        for ex in data.train:
            assert LABEL_WORDS[ex.label % len(LABEL_WORDS)] in ex.text_a.split() or name == "custom"
    elif spec.kind == "regression":
        assert {ex.label for ex in data.train} == {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
        assert all(ex.text_a.split().count("good") == ex.label for ex in data.train)
    for split, fname in spec.test.items():  # the unlabelled test files in their own layout
        examples = spec.read(d / fname, labelled=False)
        assert examples and all(ex.label is None for ex in examples), split
