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


@pytest.mark.slow
def test_exports_during_training_with_rotation_never_fail(tiny_data, tmp_path):
    """A run that checkpoints every step and keeps one checkpoint, exported over and over while it
    trains: every export succeeds and holds a model."""
    from tokendrop.errors import TokendropError
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
                export_hf(run, tmp_path / f"hf{i}")
                done += 1
                steps.add((tmp_path / f"hf{i}" / "model.safetensors").stat().st_size)
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
