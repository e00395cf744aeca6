"""No score from n = 0: `evaluate` refuses a task whose dev split is empty before its first cell,
pretraining refuses a held-out split that gives no prediction slot before its run directory exists,
and `verify` rejects outputs that were scored on n = 0."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
from toydata import write_glue_examples, write_squad_examples

from tokendrop.cli import main
from tokendrop.verification import verify_path

EV = [
    "--suite",
    "suite-tiny",
    "--set",
    "glue_lrs=[1e-3]",
    "--set",
    "glue_epochs=[1.0]",
    "--set",
    "glue.max_train_examples=16",
    "--set",
    "glue.max_eval_examples=8",
    "--set",
    "squad_lrs=[1e-3]",
    "--set",
    "squad_epochs=[1.0]",
]


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_evaluate_refuses_a_header_only_dev_file_before_the_first_cell(tmp_path, tiny_run, capsys):
    glue, squad = (
        write_glue_examples(tmp_path / "glue", n_train=16, n_dev=8),
        write_squad_examples(tmp_path / "squad", 8, 4),
    )
    dev = glue / "QNLI" / "dev.tsv"
    dev.write_text(dev.read_text().splitlines()[0] + "\n")  # only the header row
    argv = [
        "evaluate",
        "--models",
        str(tiny_run),
        "--out",
        str(tmp_path / "ev"),
        *EV,
        "--set",
        "tasks=['sst2', 'qnli']",
        "--set",
        f'glue_data="{glue}"',
        "--set",
        f'squad_data="{squad}"',
    ]
    assert main(argv) == 2
    msg = one_error(capsys)
    assert str(dev) in msg and ("no examples" in msg or "no questions" in msg)
    assert not (tmp_path / "ev").exists()  # nothing computed for sst2 first, nothing left


def test_evaluate_refuses_an_empty_squad_dev_set(tmp_path, tiny_run, capsys):
    glue, squad = (
        write_glue_examples(tmp_path / "glue", n_train=16, n_dev=8),
        write_squad_examples(tmp_path / "squad", 8, 4),
    )
    dev = next(squad.rglob("dev-v1.1.json"))
    d = json.loads(dev.read_text())
    d["data"] = []
    dev.write_text(json.dumps(d))
    argv = [
        "evaluate",
        "--models",
        str(tiny_run),
        "--out",
        str(tmp_path / "ev"),
        *EV,
        "--set",
        "tasks=['squad1']",
        "--set",
        f'glue_data="{glue}"',
        "--set",
        f'squad_data="{squad}"',
    ]
    assert main(argv) == 2
    msg = one_error(capsys)
    assert str(dev) in msg and ("no examples" in msg or "no questions" in msg)
    assert not (tmp_path / "ev").exists()


def test_pretrain_refuses_a_held_out_split_without_prediction_slots(tmp_path, tiny_data, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    meta = json.loads((data / "meta.json").read_text())
    info = meta["splits"]["eval"]
    shard = data / info["file"]
    a = np.fromfile(shard, dtype=meta["dtype"])
    a[:] = meta["special_ids"]["sep"]  # sequences of separators only: nothing to predict
    a.reshape(-1, meta["seq_len"])[:, 0] = meta["special_ids"]["cls"]  # each a prepared row
    a.tofile(shard)
    info["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (data / "meta.json").write_text(json.dumps(meta, indent=2))
    run = tmp_path / "r"
    rc = main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(run),
            "--set",
            f'data.path="{data}"',
            "--quiet",
            "--set",
            "train.steps=2",
            "--set",
            "train.batch_size=8",
            "--set",
            "train.threads=1",
        ]
    )
    assert rc == 2
    msg = one_error(capsys)
    assert "held-out split" in msg and "no prediction slot (n = 0)" in msg and str(data) in msg
    assert not run.exists()


def _finetune_output(tmp_path, tiny_run, capsys):
    from tokendrop.finetuning.tasks import TASKS

    sst2 = TASKS["sst2"].write_examples(tmp_path / "sst2", n_train=16, n_dev=8)
    out = tmp_path / "ft"
    assert (
        main(
            [
                "finetune",
                "--model",
                str(tiny_run),
                "--task",
                "sst2",
                "--data",
                str(sst2),
                "--out",
                str(out),
                "--set",
                "epochs=1",
                "--set",
                "threads=1",
                "--set",
                "batch_size=8",
                "--set",
                "device=cpu",
            ]
        )
        == 0
    )
    capsys.readouterr()
    return out


def test_verify_rejects_a_finetune_output_scored_on_n_0(tmp_path, tiny_run, capsys):
    out = _finetune_output(tmp_path, tiny_run, capsys)
    assert verify_path(out).ok
    m = json.loads((out / "metrics.json").read_text())
    # what scoring a header-only dev file wrote
    m["metrics"]["dev"].update(n=0, accuracy=0.0, score=0.0)
    m["scores"] = {k: 0.0 for k in m["scores"]}
    (out / "metrics.json").write_text(json.dumps(m))
    rep = verify_path(out)
    assert not rep.ok and any(
        "scored on n = 0" in p and str(out / "metrics.json") in p for p in rep.problems
    )
    assert main(["verify", str(out)]) == 2
    assert "scored on n = 0" in capsys.readouterr().err


def test_verify_rejects_a_run_evaluated_on_0_slots(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert verify_path(run).ok
    lines = (run / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    i = next(i for i, r in enumerate(recs) if "eval_loss" in r)
    recs[i].update(eval_loss=0.0, eval_acc=0.0, eval_slots=0)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rep = verify_path(run)
    assert not rep.ok and any("0 prediction slots" in p for p in rep.problems), rep.problems
