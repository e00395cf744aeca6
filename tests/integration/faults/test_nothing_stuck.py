"""Nothing stuck: a pretrain that fails before its first checkpoint leaves no run directory that
blocks its corrected re-run (nothing at all, or a run the same command takes over), and every
command a message suggests works -- each test runs the suggestion."""

from __future__ import annotations

import errno
import json
import shlex

import pytest

from tokendrop.cli import main
from tokendrop.runs import checkpoint as ckpt_mod

PT = [
    "--quiet",
    "--set",
    "train.steps=2",
    "--set",
    "train.ckpt_every=2",
    "--set",
    "train.eval_every=2",
    "--set",
    "train.eval_batches=1",
    "--set",
    "train.log_every=1",
    "--set",
    "train.threads=1",
]


def pretrain(run, data, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--set",
        f'data.path="{data}"',
        *PT,
        *extra,
    ]


def err_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def suggested(msg: str) -> list[str]:
    """The `tokendrop ...` command a message ends with, as argv for main()."""
    assert "tokendrop " in msg, msg
    return shlex.split(msg.rsplit("tokendrop ", 1)[1])


def finished(run) -> bool:
    recs = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    return any(r.get("event") == "end" for r in recs) and ckpt_mod.latest(run) is not None


def test_an_impossible_batch_leaves_a_run_the_corrected_command_takes_over(
    tmp_path, tiny_data, capsys
):
    run = tmp_path / "r"
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=4096")) == 2
    assert "fewer than one global batch" in err_line(capsys)
    assert (run / "config.toml").is_file()  # what the failed run wrote before it failed
    # --resume: nothing to resume, said in one line that names commands that work
    assert main(["pretrain", "--resume", str(run)]) == 2
    msg = err_line(capsys)
    assert "has no checkpoint" in msg and "nothing to resume" in msg
    # the corrected command: takes the run over (said in a note), not "already holds a run; use
    # --resume"
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 0
    assert (
        "stopped before its first checkpoint (nothing to resume); starting it over"
        in capsys.readouterr().err
    )
    assert finished(run)


def test_a_full_disk_at_the_first_checkpoint_then_the_suggested_commands(
    tmp_path, tiny_data, capsys, monkeypatch
):
    run = tmp_path / "r"
    real_save = ckpt_mod.save

    def full(run_dir, step, *a, **k):
        raise OSError(
            errno.ENOSPC,
            "No space left on device",
            str(run_dir / "checkpoints" / f".step-{step:08d}.tmp"),
        )

    monkeypatch.setattr(ckpt_mod, "save", full)
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 2
    msg = err_line(capsys)
    # nothing to resume: not suggested
    assert "No space left on device" in msg and "--resume" not in msg
    assert "run the same command again" in msg
    monkeypatch.setattr(ckpt_mod, "save", real_save)  # space freed
    # what --resume says now names a command that works: run it
    assert main(["pretrain", "--resume", str(run)]) == 2
    cmd = suggested(err_line(capsys))
    assert cmd[:2] == ["pretrain", "--config"]
    assert main(cmd) == 0 and finished(run)


def test_a_full_disk_at_a_later_checkpoint_suggests_a_resume_that_works(
    tmp_path, tiny_data, capsys, monkeypatch
):
    run = tmp_path / "r"
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 0
    capsys.readouterr()
    monkeypatch.setattr(
        ckpt_mod,
        "save",
        lambda run_dir, step, *a, **k: (_ for _ in ()).throw(
            OSError(errno.ENOSPC, "No space left on device", str(run_dir))
        ),
    )
    assert main(["pretrain", "--resume", str(run), "--set", "train.steps=4"]) == 2
    msg = err_line(capsys)
    cmd = suggested(msg)
    assert cmd == ["pretrain", "--resume", str(run)], msg
    monkeypatch.undo()
    # the longer run asked for, from the intact checkpoint
    assert main([*cmd, "--set", "train.steps=4"]) == 0


def test_a_run_with_a_checkpoint_is_still_refused_and_both_suggestions_work(
    tmp_path, tiny_data, capsys
):
    run = tmp_path / "r"
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 0
    capsys.readouterr()
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 2
    msg = err_line(capsys)
    assert "already holds a run; use --resume to continue it, --overwrite to start it over" in msg
    assert main(["pretrain", "--resume", str(run), "--set", "train.steps=3", "--quiet"]) == 0
    assert main([*pretrain(run, tiny_data, "--set", "train.batch_size=8"), "--overwrite"]) == 0


@pytest.mark.parametrize("setting", ["model.num_layers=100000", "train.batch_size=50000000"])
def test_a_model_or_batch_that_cannot_fit_leaves_nothing(tmp_path, tiny_data, capsys, setting):
    run = tmp_path / "r"
    assert main(pretrain(run, tiny_data, "--set", setting)) == 2
    msg = err_line(capsys)
    assert "too large for cpu" in msg and "GiB" in msg and "train.memory_check = false" in msg
    assert not run.exists() and list(tmp_path.iterdir()) == []


def test_a_full_disk_at_the_end_of_run_report_names_it_and_the_suggestion_writes_it(
    tmp_path, tiny_data, capsys, monkeypatch
):
    from tokendrop.train import report

    run = tmp_path / "r"

    def full(path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")  # a write(): no file name

    monkeypatch.setattr(report, "atomic_write_text", full)
    assert main(pretrain(run, tiny_data, "--set", "train.batch_size=8")) == 2
    msg = err_line(capsys)
    assert msg.startswith(f"error: {run / 'report.md'}: not written (No space left on device); ")
    assert "the run itself finished" in msg and finished(run), msg
    assert not (run / "report.md").exists()
    cmd = suggested(msg)
    assert cmd == ["pretrain", "--resume", str(run)], msg
    monkeypatch.undo()  # space freed: the suggestion writes the report, trains nothing
    assert main(cmd) == 0
    assert f"wrote its missing report {run / 'report.md'}" in capsys.readouterr().err
    assert (run / "report.md").is_file()
    assert main(cmd) == 0 and "nothing to do" in capsys.readouterr().err
