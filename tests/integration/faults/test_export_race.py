"""docs/reliability.md, category "locks": a reader of a run that is training holds the checkpoint it
reads (``runs.checkpoint.reading``), and rotation (``prune``) leaves a held checkpoint in place, so
an export never fails because training is running."""

import os
import shutil
from pathlib import Path

import pytest
from fixtures.processes import reads_during_rotation, rotate_after_listing

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
    rotate_after_listing(monkeypatch)
    with ckpt_mod.reading(run) as ck:
        assert ck.name == "step-00000002"


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
def test_exports_during_training_with_rotation_never_fail(tiny_data, tmp_path):
    """A run that checkpoints every step and keeps one checkpoint, exported over and over while it
    trains: every export succeeds and holds a model (``inspect``'s reader: tests/integration/lab/
    test_inspect_race.py)."""
    from tokendrop.models.source import export_hf

    def export(run: Path, i: int) -> None:
        export_hf(run, tmp_path / f"hf{i}")
        assert (tmp_path / f"hf{i}" / "model.safetensors").stat().st_size > 0

    reads_during_rotation(tiny_data, tmp_path, export)
