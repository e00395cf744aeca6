"""A 2-step fine-tune through the CLI for every task of the registry, on a tiny model and the
examples each task writes in its own layout (``TaskSpec.write_examples``: a new task file needs no
generator elsewhere): exit 0, 2 optimizer steps, the task's columns scored, its predictions written
(floats for regression), the output verified; one run as a real ``python -m tokendrop finetune``
process; a header-only dev file refused in one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from toydata import write_checkpoint

from tokendrop.cli import main
from tokendrop.finetuning.columns import columns_of
from tokendrop.finetuning.tasks import TASKS

TRAINABLE = [n for n, t in TASKS.items() if t.train]
FAST = [
    "--set",
    "epochs=1",
    "--set",
    "batch_size=4",
    "--set",
    "max_train_examples=8",
    "--set",
    "threads=1",
    "--set",
    "log_every=0",
    "--set",
    "eval_batch_size=8",
    "--set",
    "max_seq_len_qa=128",
    "--set",
    "doc_stride=64",
    "--set",
    "max_query_len=16",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft-every-task")
    ck = write_checkpoint(
        root / "model",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    # every task in its directory under one root, as GLUE is distributed (MNLI finds AX)
    tasks = root / "tasks"
    return {
        "model": ck,
        "tasks": {
            name: spec.write_examples(tasks / (spec.dirname or name))
            for name, spec in TASKS.items()
        },
    }


def _data(world, task: str) -> Path:
    return world["tasks"][task]


@pytest.mark.parametrize("task", TRAINABLE)
def test_two_step_finetune_through_the_cli(task, world, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "finetune",
            "--model",
            str(world["model"]),
            "--task",
            task,
            "--data",
            str(_data(world, task)),
            "--out",
            str(out),
            *FAST,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    r = json.loads((out / "metrics.json").read_text())
    spec = TASKS[task]
    assert r["task"] == task and r["train"]["steps"] == 2 and r["train"]["examples"] == 8
    cols = {c.key for c in columns_of(task) if c.split in r["metrics"]}
    assert set(r["scores"]) == (cols or {task}) | ({f"{task}_em"} if spec.kind == "span" else set())
    if task == "mnli":
        assert set(r["metrics"]) == {"dev_matched", "dev_mismatched", "ax"} and "ax" in r["scores"]
    for split, m in r["metrics"].items():
        split_spec = TASKS["ax"] if split == "ax" else spec
        assert (
            set(split_spec.metrics) <= set(m)
            and m["score"] == m[split_spec.main]
            and m.get("n", m.get("total")) >= 1
        )
        if spec.kind == "span":
            continue
        rows = (out / "predictions" / f"{split}.tsv").read_text().splitlines()
        assert rows[0] == "index\tprediction\tlabel" and len(rows) == 1 + m["n"]
        preds = [row.split("\t")[1] for row in rows[1:]]
        if spec.kind == "regression":
            vals = [float(p) for p in preds]  # the output itself, no argmax
            assert len(set(vals)) > 1 and not set(vals) <= {0.0, 1.0}
        else:
            assert set(preds) <= set(split_spec.labels or r["labels"])
    if spec.kind == "span":
        assert (out / "predictions" / "dev.json").is_file()
    assert main(["verify", str(out)]) == 0, capsys.readouterr()


def test_evaluation_only_task_is_refused(world, tmp_path, capsys):
    rc = main(
        [
            "finetune",
            "--model",
            str(world["model"]),
            "--task",
            "ax",
            "--data",
            str(_data(world, "ax")),
            "--out",
            str(tmp_path / "o"),
            *FAST,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "evaluation-only" in err and not (tmp_path / "o").exists()


def test_stsb_as_a_process(world, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[3] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "tokendrop",
        "finetune",
        "--model",
        str(world["model"]),
        "--task",
        "stsb",
        "--out",
        str(tmp_path / "ok"),
        "--data",
        str(_data(world, "stsb")),
        *FAST,
        "--set",
        "save_model=true",
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (
        p.stdout.startswith("stsb: stsb ") and "stsb_pearson" in p.stdout and "2 steps" in p.stdout
    )
    saved = json.loads((tmp_path / "ok" / "model" / "config.json").read_text())
    assert saved["num_labels"] == 1  # one output: transformers reads it as a regression head


def test_header_only_dev_file_is_refused_in_one_line(world, tmp_path, capsys):
    bad = tmp_path / "STS-B"
    bad.mkdir()
    (bad / "train.tsv").write_bytes((_data(world, "stsb") / "train.tsv").read_bytes())
    header = (_data(world, "stsb") / "dev.tsv").read_text().splitlines()[0]
    (bad / "dev.tsv").write_text(header + "\n")
    rc = main(
        [
            "finetune",
            "--model",
            str(world["model"]),
            "--task",
            "stsb",
            "--data",
            str(bad),
            "--out",
            str(tmp_path / "no"),
            *FAST,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"error: {bad / 'dev.tsv'}: no examples to evaluate on (the file holds "
        "no data rows with a usable label); a dev split needs at least one"
    ]
    assert not (tmp_path / "no").exists()
