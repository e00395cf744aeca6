"""A study's prepared data reused by another study (the recipe in the headers of
configs/study-scratch-global.toml and study-scratch-remedies.toml): ``mkdir -p OUT; cp -r
MAIN/data OUT/data``, then ``study --out OUT``.  The new OUT is accepted when the copy's
fingerprint is the study's (nothing re-prepared, the copy's own paths recorded), and refused in one
line, before anything is written, when it is not."""

import json
import shutil

import pytest
import torch

from tokendrop.cli import main
from tokendrop.lab.study import load_study, run_study
from tokendrop.lab.study.common import StudyError
from tokendrop.lab.study.data import data_fingerprint
from tokendrop.runs.rundir import read_marker


@pytest.fixture(autouse=True)
def _keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def main_study(tmp_path_factory):
    """study-tiny's data, prepared by a study that trains nothing (``--only`` with no name)."""
    out = tmp_path_factory.mktemp("main") / "out"
    run_study("study-tiny", out, only=[], progress=False)
    return out


def _copy_data(main: object, tmp_path, name: str = "reuse"):
    out = tmp_path / name
    out.mkdir()
    shutil.copytree(main / "data", out / "data")
    return out


def test_the_scratch_studies_share_their_data_fingerprint():
    """The premise of the recipe: study-scratch-global and -remedies prepare what study-scratch
    prepares."""
    main = data_fingerprint(load_study("study-scratch"))
    for other in ("study-scratch-global", "study-scratch-remedies"):
        assert data_fingerprint(load_study(other)) == main, other


def test_a_new_out_holding_a_copied_data_dir_reuses_it(main_study, tmp_path):
    out = _copy_data(main_study, tmp_path)
    vocab = (out / "data" / "packed-32" / "vocab.txt").read_bytes()
    meta = (out / "data" / "packed-32" / "meta.json").stat().st_mtime_ns
    assert main(["study", "--config", "study-tiny", "--out", str(out), "--only"]) == 0
    assert read_marker(out)["kind"] == "study" and (out / "study.md").is_file()
    # nothing re-prepared, and the study reads its own copy, not MAIN's
    assert (out / "data" / "packed-32" / "vocab.txt").read_bytes() == vocab
    assert (out / "data" / "packed-32" / "meta.json").stat().st_mtime_ns == meta
    info = json.loads((out / "data" / "prepared.json").read_text())
    assert info["packed"]["path"] == str((out / "data" / "packed-32").resolve())
    assert info["corpus"]["path"] == str((out / "data" / "corpus.txt").resolve())
    # an OUT made so is a study's from here on: the same command continues it
    assert main(["study", "--config", "study-tiny", "--out", str(out), "--only"]) == 0


def test_a_copied_data_dir_of_another_study_is_refused_before_any_write(
    main_study, tmp_path, capsys
):
    out = _copy_data(main_study, tmp_path)
    code = main(
        ["study", "--config", "study-tiny", "--out", str(out), "--only", "--set", "seq_len=16"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "prepared for a different study config (seq_len changed)" in err[0], err
    assert sorted(p.name for p in out.iterdir()) == ["data"] and read_marker(out) is None
    # a data/ that is not a study's (no prepared.json): one line saying what to copy
    bare = tmp_path / "bare"
    (bare / "data").mkdir(parents=True)
    with pytest.raises(StudyError, match=r"no prepared\.json, so it is not a study's data"):
        run_study("study-tiny", bare, only=[], progress=False)
    assert sorted(p.name for p in bare.iterdir()) == ["data"] and read_marker(bare) is None
    # anything beside data/ is still refused as a non-empty directory
    other = _copy_data(main_study, tmp_path, "other")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(StudyError, match="already exists and is not empty"):
        run_study("study-tiny", other, only=[], progress=False)
