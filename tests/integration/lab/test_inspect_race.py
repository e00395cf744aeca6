"""docs/reliability.md, category "locks": ``tokendrop inspect``'s reader (``lab.inspect.load_run``,
``selection_trace``) holds the checkpoint it reads (``runs.checkpoint.reading``), so rotation by a
run that is training never removes it mid-read, and a checkpoint rotated away before it is held is
passed over for the next newest (the export's race: tests/integration/faults/
test_export_race.py)."""

import os
import shutil
from pathlib import Path

import pytest
from fixtures.processes import reads_during_rotation, rotate_after_listing

from tokendrop.lab import inspect as insp
from tokendrop.runs import checkpoint as ckpt_mod


def _steps(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step-"))


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
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    left = _rotated_while_read(monkeypatch, run)
    rv = insp.load_run(run / "checkpoints" / "step-00000002")
    assert rv.step == 2 and left == ["step-00000002", "step-00000004"]
    ckpt_mod.prune(run / "checkpoints", 1)
    assert sorted(os.listdir(run / "checkpoints")) == ["step-00000004"]


def test_inspect_passes_over_a_checkpoint_removed_before_its_lease(tiny_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    rotate_after_listing(monkeypatch)
    assert insp.load_run(run).step == 2


def test_selection_trace_leaves_out_a_checkpoint_rotated_after_the_listing(
    tiny_run, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    real = insp.read_metrics

    def rotated_then_read(r):
        shutil.rmtree(run / "checkpoints" / "step-00000002")
        return real(r)

    monkeypatch.setattr(insp, "read_metrics", rotated_then_read)
    trace = insp.selection_trace(run, num_batches=1, batch_size=4)
    assert [t["step"] for t in trace] == [4], trace


@pytest.mark.slow
def test_inspect_during_training_with_rotation_never_fails(tiny_data, tmp_path):
    """A run that checkpoints every step and keeps one checkpoint, read by ``inspect``'s reader
    over and over while it trains: every read succeeds."""

    def read(run: Path, i: int) -> None:
        assert insp.load_run(run).step >= 1

    reads_during_rotation(tiny_data, tmp_path, read)
