"""docs/reliability.md, category "corrupt files": a checkpoint is checked against itself and its run
(``train.resume.check_checkpoint``, the one place ``--resume`` and ``tokendrop verify`` share): its
meta.json step, its directory name, the optimizer's step counters and the data position count the
same steps, and its model shape and seed are the run's.  Each inconsistency: verify exits 1 naming
it, ``--resume`` refuses in one line, nothing is written."""

import json
import shutil
from pathlib import Path

import pytest

from tokendrop.cli import main as cli


def _edit_meta(ck: Path, fn) -> None:
    m = json.loads((ck / "meta.json").read_text())
    fn(m)
    (ck / "meta.json").write_text(json.dumps(m))


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


def _step_edited(run: Path) -> None:
    _edit_meta(run / "checkpoints" / "step-00000004", lambda m: m.update(step=3))


def _renamed(run: Path) -> None:  # name and meta.json agree, the optimizer made 4 updates
    ck = run / "checkpoints" / "step-00000004"
    _edit_meta(ck, lambda m: m.update(step=5))
    ck.rename(run / "checkpoints" / "step-00000005")


def _position_edited(run: Path) -> None:
    _edit_meta(
        run / "checkpoints" / "step-00000004",
        lambda m: m["data_position"].update(position=3, consumed=24),
    )


CASES = {
    "step-vs-directory": (
        _step_edited,
        "step-00000004/meta.json: records step 3 but its directory is step-00000004",
    ),
    "optimizer-updates": (_renamed, "the optimizer made 4 update(s) but meta.json records step 5"),
    "data-position": (
        _position_edited,
        "data_position is 3 batch(es) of 8 into the data but the checkpoint records step 4",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inconsistent_checkpoint_fails_verify_and_resume(case, tiny_run, tmp_path, capsys):
    edit, says = CASES[case]
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    edit(run)
    rc = cli(["verify", str(run)])
    out, err = capsys.readouterr()
    assert rc in (1, 2) and says in out + err, out + err
    before = _tree(run)
    rc = cli(["pretrain", "--resume", str(run), "--quiet", "--set", "train.steps=6"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err
    assert _tree(run) == before


def test_a_checkpoint_of_another_run_fails_verify_and_resume(tiny_data, tiny_run, tmp_path, capsys):
    """A checkpoint copied in from a run of another shape and seed: verify names the field and the
    run's value (it verified "ok" before), export of the run would have given the other shape."""
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    other = tmp_path / "other"
    cfg = load_config(
        "tiny",
        [
            f'data.path="{tiny_data}"',
            "train.steps=4",
            "train.ckpt_every=4",
            "train.seed=7",
            "train.eval_every=4",
            "train.eval_batches=1",
            "train.batch_size=8",
            "train.threads=1",
            "model.num_layers=2",
            "drop.method=cumulative",
        ],
    )
    pretrain(cfg, other, progress=False)
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    ck = run / "checkpoints" / "step-00000004"
    shutil.rmtree(ck)
    shutil.copytree(other / "checkpoints" / "step-00000004", ck)
    rc = cli(["verify", str(ck)])
    out, err = capsys.readouterr()
    assert rc in (1, 2) and "model.num_layers is 2 but the run's config.toml has 4" in out + err, (
        out + err
    )
    rc = cli(["pretrain", "--resume", str(run), "--quiet", "--set", "train.steps=6"])
    err = capsys.readouterr().err
    assert rc == 2 and "written by another run" in err, err
    assert "its model.num_layers is 2 but the run's config.toml has 4" in err, err


def test_a_checkpoint_of_another_run_of_the_same_shape_is_named(tiny_data, tmp_path, capsys):
    """Two runs that differ only in train.lr (a setting a resume may change): the other's
    checkpoint copied in is told apart by the run id every checkpoint records, and named with the
    setting that differs, by verify and by --resume; nothing is written."""
    from tokendrop.config import load_config
    from tokendrop.runs.rundir import run_id
    from tokendrop.train.trainer import pretrain

    def train(out, lr):
        cfg = load_config(
            "tiny",
            [
                f'data.path="{tiny_data}"',
                "train.steps=2",
                "train.ckpt_every=2",
                "train.eval_every=2",
                "train.eval_batches=1",
                "train.batch_size=8",
                "train.threads=1",
                f"train.lr={lr}",
            ],
        )
        pretrain(cfg, out, progress=False)
        return out

    run, other = train(tmp_path / "run", 0.002), train(tmp_path / "other", 0.001)
    ck = run / "checkpoints" / "step-00000002"
    assert json.loads((ck / "meta.json").read_text())["run_id"] == run_id(run)
    shutil.rmtree(ck)
    shutil.copytree(other / "checkpoints" / "step-00000002", ck)
    a, b = run_id(other)[:12], run_id(run)[:12]
    says = (
        f"{ck / 'meta.json'}: written by another run (run id {a}, this run's {b}): its train.lr "
        "is 0.001 but the run's config.toml has 0.002; move it away, or restore this run's own"
    )
    rc = cli(["verify", str(run)])
    out, err = capsys.readouterr()
    assert rc in (1, 2) and says in out + err, out + err
    before = _tree(run)
    rc = cli(["pretrain", "--resume", str(run), "--quiet", "--set", "train.steps=4"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"error: {says}\n"
    assert _tree(run) == before


def test_a_consistent_run_verifies_with_the_checks_named(tiny_run, capsys):
    assert cli(["verify", str(tiny_run)]) == 0
    out = capsys.readouterr().out
    assert (
        "step-00000004: step 4, sha256 of both tensor files as recorded, consistent with itself "
        "and the run's config" in out
    ), out
