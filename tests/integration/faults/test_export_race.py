"""docs/reliability.md, category "locks": a reader of a run that is training holds the checkpoint it
reads (``runs.checkpoint.reading``), and rotation (``prune``) leaves a held checkpoint in place, so
an export never fails because training is running."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.processes import wait_for_training

from tokendrop.runs import checkpoint as ckpt_mod


def _steps(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step-"))


def test_rotation_leaves_a_held_checkpoint_until_it_is_released(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert _steps(run) == ["step-00000002", "step-00000004"]
    with ckpt_mod.reading(run / "checkpoints" / "step-00000002") as ck:
        ckpt_mod.prune(run / "checkpoints", 1)  # step 2 is due; held, it stays
        assert _steps(run) == ["step-00000002", "step-00000004"]
        assert ckpt_mod.verify(ck)["step"] == 2
    ckpt_mod.prune(run / "checkpoints", 1)
    assert sorted(os.listdir(run / "checkpoints")) == ["step-00000004"]  # no lease file left


def test_a_reader_passes_over_a_checkpoint_removed_before_its_lease(
    tiny_run, tmp_path, monkeypatch
):
    """The newest checkpoint listed, then removed before the reader holds it: the next newest is
    read."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    real = ckpt_mod._candidates

    def listed_then_rotated(p):
        cands = real(p)
        if len(cands) > 1:
            shutil.rmtree(cands[0])
        return cands

    monkeypatch.setattr(ckpt_mod, "_candidates", listed_then_rotated)
    with ckpt_mod.reading(run) as ck:
        assert ck.name == "step-00000002"


def _rotated_while_read(monkeypatch, run: Path) -> list[str]:
    """Rotation (keep 1) runs the moment a checkpoint's state file is read; -> what was left."""
    real, left = ckpt_mod.read_tensors, []

    def rotate_then_read(ckpt, name="model.safetensors", meta=None):
        ckpt_mod.prune(run / "checkpoints", 1)
        left.extend(_steps(run))
        return real(ckpt, name, meta)

    monkeypatch.setattr(ckpt_mod, "read_tensors", rotate_then_read)
    return left


def test_inspect_holds_the_checkpoint_it_reads(tiny_run, tmp_path, monkeypatch):
    """``lab.inspect.load_run`` reads a checkpoint under the lease: rotation that runs while the
    older checkpoint is read leaves it in place, and removes it after."""
    from tokendrop.lab.inspect import load_run

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    left = _rotated_while_read(monkeypatch, run)
    rv = load_run(run / "checkpoints" / "step-00000002")
    assert rv.step == 2 and left == ["step-00000002", "step-00000004"]
    ckpt_mod.prune(run / "checkpoints", 1)
    assert sorted(os.listdir(run / "checkpoints")) == ["step-00000004"]


def test_inspect_passes_over_a_checkpoint_removed_before_its_lease(tiny_run, tmp_path, monkeypatch):
    from tokendrop.lab.inspect import load_run

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    real = ckpt_mod._candidates

    def listed_then_rotated(p):
        cands = real(p)
        if len(cands) > 1:
            shutil.rmtree(cands[0])
        return cands

    monkeypatch.setattr(ckpt_mod, "_candidates", listed_then_rotated)
    assert load_run(run).step == 2


def test_selection_trace_leaves_out_a_checkpoint_rotated_after_the_listing(
    tiny_run, tmp_path, monkeypatch
):
    from tokendrop.lab import inspect as insp

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    real = insp.read_metrics

    def rotated_then_read(r):
        shutil.rmtree(run / "checkpoints" / "step-00000002")
        return real(r)

    monkeypatch.setattr(insp, "read_metrics", rotated_then_read)
    trace = insp.selection_trace(run, num_batches=1, batch_size=4)
    assert [t["step"] for t in trace] == [4], trace


def test_reading_latest_holds_the_newest_that_verifies(tiny_run, tmp_path, monkeypatch, capsys):
    """``runs.checkpoint.reading_latest`` (the study's readers): the newest checkpoint that
    verifies, held; a corrupt newest one skipped with a warning; None for a run without one."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with ckpt_mod.reading_latest(run) as ck:
        assert ck.name == "step-00000004"
        ckpt_mod.prune(run / "checkpoints", 1)  # step 2 goes; step 4 is held (and newest)
        with ckpt_mod.reading_latest(run) as again:  # a second reader of the same one
            assert again == ck
    (run / "checkpoints" / "step-00000004" / "state.safetensors").write_bytes(b"x")
    shutil.copytree(
        tiny_run / "checkpoints" / "step-00000002", run / "checkpoints" / "step-00000002"
    )
    with ckpt_mod.reading_latest(run) as ck:
        assert ck.name == "step-00000002"
        ckpt_mod.prune(run / "checkpoints", 1)  # step 2 is held; step 4 is newest
        assert _steps(run) == ["step-00000002", "step-00000004"]
    assert "warning: skipping" in capsys.readouterr().err
    (run / "empty").mkdir()
    with ckpt_mod.reading_latest(run / "empty") as ck:
        assert ck is None
    assert not (run / ".empty.reading").exists()


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["export", "inspect"])
def test_readers_during_training_with_rotation_never_fail(reader, tiny_data, tmp_path):
    """A run that checkpoints every step and keeps one checkpoint, exported (or read by
    ``tokendrop inspect``'s reader) over and over while it trains: every read succeeds."""
    from tokendrop.errors import TokendropError
    from tokendrop.lab.inspect import load_run
    from tokendrop.models.source import export_hf

    run = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokendrop",
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(run),
            "--quiet",
            "--set",
            f'data.path="{tiny_data}"',
            "--set",
            "train.steps=100000",
            "--set",
            "train.ckpt_every=1",
            "--set",
            "train.keep_checkpoints=1",
            "--set",
            "train.eval_every=100000",
            "--set",
            "train.log_every=1",
            "--set",
            "train.batch_size=4",
            "--set",
            "train.threads=1",
            "--set",
            "drop.method=cumulative",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    failed, done, steps = [], 0, set()
    try:
        wait_for_training(p, run, 2)
        for i in range(int(os.environ.get("TOKENDROP_EXPORT_RACE_N", "20"))):
            try:
                if reader == "export":
                    export_hf(run, tmp_path / f"hf{i}")
                    steps.add((tmp_path / f"hf{i}" / "model.safetensors").stat().st_size)
                else:
                    steps.add(load_run(run).step)
                done += 1
            except TokendropError as e:
                failed.append(str(e))
            assert p.poll() is None, p.communicate()
    finally:
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1]
    assert failed == [] and done >= 20, failed
    assert p.returncode == 143, err
    assert len(_steps(run)) == 1 and ckpt_mod.verify(run / "checkpoints" / _steps(run)[0])
    assert not [n for n in os.listdir(run / "checkpoints") if n.startswith(".")]
