"""Runs that move (docs/reliability.md, category "moved runs").  ``pretrain --resume RUN_DIR`` works
from any working directory (the data path is recorded absolute), and moved data is accepted via
``--set data.path=NEW`` exactly when its fingerprint (vocabulary hash, token count, T, packing,
split sizes and shard hashes) equals the one the checkpoint recorded.  Each case asserts the exit
code, the one-line message and the disk afterwards."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tokendrop.cli import main
from tokendrop.runs import checkpoint as ckpt_mod


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def config_data_path(run: Path) -> str:
    import tomllib

    return tomllib.loads((run / "config.toml").read_text())["data"]["path"]


@pytest.fixture
def paused(tiny_data, tmp_path, monkeypatch):
    """A run started from ``tmp_path/a`` with a *relative* data path, paused at step 2 of 4."""
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    data = tmp_path / "a" / "data"
    shutil.copytree(tiny_data, data)
    monkeypatch.chdir(tmp_path / "a")
    cfg = load_config(
        "tiny",
        [
            'data.path="data"',
            "train.steps=4",
            "train.ckpt_every=2",
            "train.log_every=1",
            "train.eval_every=2",
        ],
    )
    res = pretrain(cfg, "run", progress=False, stop_at=2)
    assert res.interrupted and res.steps == 2
    elsewhere = tmp_path / "b"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return tmp_path / "a" / "run", data


def test_resume_from_another_cwd(paused, capsys):
    run, data = paused
    assert config_data_path(run) == str(data)  # recorded absolute
    fp = ckpt_mod.read_meta(run / "checkpoints" / "step-00000002")["data_fingerprint"]
    assert (
        fp["seq_len"] == 64
        and fp["packed"] is True
        and fp["tokens"] > 0
        and len(fp["vocab_hash"]) == 64
    )
    rc, out, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet")
    assert rc == 0, err
    assert "finished: 4 steps" in out and "--resume continues with" not in err  # nothing changed
    assert ckpt_mod.read_meta(ckpt_mod.find(run))["step"] == 4
    # nothing written here
    assert not (Path.cwd() / "run").exists() and list(Path.cwd().iterdir()) == []


def test_a_resume_names_every_setting_it_changes(paused, capsys):
    """A resume with settings a resume may change (declared ``free``) continues and names each one
    with its old and new value; one it may not change (``fixed``) is refused, naming it."""
    run, _ = paused
    rc, _, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet", "--set", "train.seed=7")
    assert rc == 2 and err.strip().splitlines() == [
        "error: --resume: config field train.seed changed from 0 to 7; start a new run instead"
    ]
    rc, out, err = run_cli(
        capsys,
        "pretrain",
        "--resume",
        run,
        "--quiet",
        "--set",
        "train.steps=6",
        "--set",
        "drop.stage2_fraction=0.5",
    )
    assert rc == 0, err
    notes = [line for line in err.splitlines() if "--resume continues" in line]
    assert notes == [
        "note: --resume continues with settings changed from the checkpoint's: "
        "drop.stage2_fraction 0.0 -> 0.5; train.steps 4 -> 6"
    ]
    assert "finished: 6 steps" in out


def test_every_config_field_says_whether_a_resume_may_change_it():
    """Every field of every section is declared fixed or free (tokendrop.fields): nothing keeps a
    hand list of what a resume may change, and a new field cannot be left out of it."""
    from tokendrop.config import Config
    from tokendrop.fields import RULES, resume_rules

    rules = resume_rules(Config)
    assert len(rules) > 50 and {r for r in rules.values()} == set(RULES)
    assert [k for k, r in rules.items() if r not in RULES] == []
    # what the method and the model are: fixed; execution: free
    assert rules["drop.method"] == rules["model.num_layers"] == rules["train.seed"] == "fixed"
    assert rules["model.attention_backend"] == rules["train.threads"] == "free"


def test_moved_data_same_fingerprint_accepted(paused, tmp_path, capsys):
    run, data = paused
    moved = tmp_path / "moved" / "data"
    moved.parent.mkdir()
    data.rename(moved)
    rc, _, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet")  # the old place is gone
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert (
        f"error: --resume: data.path '{data}' is not there any more; if the data moved, pass --set "
        "data.path=DIR" in err
    )
    rc, out, err = run_cli(
        capsys, "pretrain", "--resume", run, "--quiet", "--set", f'data.path="{moved}"'
    )
    assert rc == 0, err
    assert "finished: 4 steps" in out and config_data_path(run) == str(moved)
    meta = ckpt_mod.read_meta(ckpt_mod.find(run))
    assert meta["step"] == 4 and meta["config"]["data"]["path"] == str(moved)


def test_moved_data_relative_set_is_resolved(paused, tmp_path, capsys, monkeypatch):
    run, data = paused
    shutil.copytree(data, tmp_path / "b" / "copy")  # cwd is tmp_path/b
    rc, _, err = run_cli(
        capsys, "pretrain", "--resume", run, "--quiet", "--set", 'data.path="copy"'
    )
    assert rc == 0, err
    assert config_data_path(run) == str(tmp_path / "b" / "copy")


def test_different_fingerprint_refused(paused, tiny_data_unpacked, tmp_path, capsys):
    from tokendrop.data import prepare

    run, data = paused
    before = snapshot(run)
    # other data with the same vocabulary: another held-out split of the same corpus
    other = tmp_path / "other"
    prepare(
        [tiny_data_unpacked.parent / "corpus.txt"],
        other,
        seq_len=64,
        vocab=data / "vocab.txt",
        eval_fraction=0.3,
        workers=1,
        progress=False,
    )
    for cand, field in ((other, "train_sequences"), (tiny_data_unpacked, "packed")):
        rc, _, err = run_cli(
            capsys, "pretrain", "--resume", run, "--quiet", "--set", f'data.path="{cand}"'
        )
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(
            f"error: --resume: {cand} is not the data this run was trained on ({data}): "
        )
        assert (
            f"{field} " in lines[0] and "recorded" in lines[0] and "--set data.path=DIR" in lines[0]
        )
        assert snapshot(run) == before  # the run is untouched


def test_checkpoint_without_fingerprint_needs_the_same_path(paused, tmp_path, capsys):
    run, data = paused
    mp = run / "checkpoints" / "step-00000002" / "meta.json"
    meta = json.loads(mp.read_text())
    del meta["data_fingerprint"]  # as written by an older version
    mp.write_text(json.dumps(meta))
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    before = snapshot(run)
    rc, _, err = run_cli(
        capsys, "pretrain", "--resume", run, "--quiet", "--set", f'data.path="{copy}"'
    )
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "records no data fingerprint" in err and str(copy) in err and str(data) in err
    assert snapshot(run) == before
    # the original place still works
    rc, _, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet")
    assert rc == 0, err


def test_legacy_relative_path_from_another_cwd(paused, tmp_path, capsys):
    run, data = paused
    ct = run / "config.toml"
    ct.write_text(ct.read_text().replace(f'path = "{data}"', 'path = "data"'))
    assert config_data_path(run) == "data"
    before = snapshot(run)
    rc, _, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "data.path 'data' is relative and not found from" in err and "--set data.path=DIR" in err
    assert snapshot(run) == before
    os.chdir(tmp_path / "a")  # from where it was started it resumes (monkeypatch restores the cwd)
    rc, _, err = run_cli(capsys, "pretrain", "--resume", run, "--quiet")
    assert rc == 0, err


def test_a_run_from_an_older_version_resumes():
    """A checkpoint's config written before fields existed (here the ModernBERT-era model fields) is
    compatible: missing fields count as their defaults, the data-filled [SEP] id is not compared; a
    real change of such a field is still refused, naming it."""
    from tokendrop.config import load_config, to_dict
    from tokendrop.errors import TrainingError
    from tokendrop.train.resume import check_resume_compatible

    new = to_dict(load_config("tiny", ["drop.method=cumulative"]))
    new["model"]["sep_token_id"] = 3  # filled in from the prepared data at open
    old = json.loads(json.dumps(new))
    for k in (
        "family",
        "document_attention",
        "sep_token_id",
        "global_rope_theta",
        "local_rope_theta",
        "local_attention",
        "global_attn_every_n_layers",
        "layer_types",
        "norm_bias",
    ):
        del old["model"][k]
    check_resume_compatible(old, new)  # no error
    new["model"]["document_attention"] = "on"
    with pytest.raises(
        TrainingError, match=r"model\.document_attention changed from 'auto' to 'on'"
    ):
        check_resume_compatible(old, new)
    new["model"]["document_attention"] = "auto"
    old["model"]["sep_token_id"] = 2  # recorded: compared
    with pytest.raises(TrainingError, match=r"model\.sep_token_id changed from 2 to 3"):
        check_resume_compatible(old, new)
