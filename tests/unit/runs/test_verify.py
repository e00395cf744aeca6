"""docs/reliability.md, categories "corrupt files" and "reuse": every load of a tokendrop checkpoint
is verified (one shared loader), prepared data is checked (meta.json types, shard sizes, token ids),
``tokendrop verify PATH`` checks a run, checkpoint, prepared or exported directory in full, and
``evaluate`` reuses a cell only for the same model weights.  Each case asserts the exit code, the
one-line message and the disk afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tokendrop.cli import main
from tokendrop.runs import checkpoint as ckpt_mod


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes): the disk state to compare."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("warning:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("error: ")
    return lines[0]


def flip(f: Path, at: int = -20) -> None:
    b = bytearray(f.read_bytes())
    b[at] ^= 0x40
    f.write_bytes(bytes(b))


@pytest.fixture
def run(tiny_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(tiny_run, dst)
    return dst


@pytest.fixture
def data(tiny_data, tmp_path):
    dst = tmp_path / "data"
    shutil.copytree(tiny_data, dst)
    return dst


# ----------------------------------------------------------------------------------------------
# checkpoints: one shared verifying loader


def test_good_run_checkpoint_and_prepared_verify(run, data, capsys):
    before = snapshot(run)
    rc, out, err = run_cli(capsys, "verify", run)
    assert rc == 0, err
    assert out.strip().endswith("ok (run)") and "2 checkpoint(s), 2 intact" in out and err == ""
    rc, out, _ = run_cli(capsys, "verify", run / "checkpoints" / "step-00000004")
    assert rc == 0 and "ok (checkpoint)" in out
    rc, out, _ = run_cli(capsys, "verify", data)
    assert rc == 0 and "ok (prepared)" in out and "sha256 as recorded" in out
    assert snapshot(run) == before  # verify writes nothing
    meta = ckpt_mod.read_meta(run / "checkpoints" / "step-00000004")
    assert meta["data_fingerprint"]["seq_len"] == 64 and meta["data_fingerprint"]["packed"] is True


def test_bit_flipped_weights_refused_by_every_consumer(run, tmp_path, capsys):
    from toydata import write_glue_examples

    bad = run / "checkpoints" / "step-00000004" / "model.safetensors"
    flip(bad)
    before = snapshot(run)
    # export
    rc, _, err = run_cli(capsys, "export", run, tmp_path / "hf")
    line = one_error_line(err)
    assert rc == 2 and f"{bad}: corrupt (sha256" in line
    # the fix names one that verifies
    assert "use the older checkpoint" in line and "step-00000002" in line
    assert not (tmp_path / "hf").exists()
    # fine-tuning
    glue = write_glue_examples(tmp_path / "glue", n_train=16, n_dev=8)
    rc, _, err = run_cli(
        capsys,
        "finetune",
        "--model",
        run,
        "--task",
        "sst2",
        "--data",
        glue / "SST-2",
        "--out",
        tmp_path / "ft",
    )
    assert rc == 2 and str(bad) in one_error_line(err) and not (tmp_path / "ft").exists()
    # inspection
    rc, _, err = run_cli(capsys, "inspect", run, "--out", tmp_path / "insp")
    assert rc == 2 and f"{bad}: corrupt" in one_error_line(err) and not (tmp_path / "insp").exists()
    # a checkpoint dir given directly, and the library loader
    rc, _, err = run_cli(capsys, "export", bad.parent, tmp_path / "hf2")
    assert rc == 2 and str(bad) in one_error_line(err)
    with pytest.raises(ckpt_mod.CheckpointError, match="corrupt"):
        ckpt_mod.load_verified(run)
    # verify names the file; the older checkpoint still verifies
    rc, out, err = run_cli(capsys, "verify", run)
    assert rc == 2 and f"{bad}: corrupt" in one_error_line(err)
    assert "2 checkpoint(s), 1 intact" in out
    assert snapshot(run) == before  # nothing deleted, repaired or added
    # --resume falls back to the newest checkpoint that verifies, with a warning naming the bad file
    ck, meta, model, state = ckpt_mod.load_verified(run, state=True, fallback=True)
    assert ck.name == "step-00000002" and meta["step"] == 2 and "importance" in state
    assert f"warning: skipping {bad}" in capsys.readouterr().err


def test_truncated_file_one_line_no_traceback(run, tmp_path):
    f = run / "checkpoints" / "step-00000004" / "model.safetensors"
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size // 2)
    before = snapshot(run)
    p = subprocess.run(
        [sys.executable, "-m", "tokendrop", "export", str(run), str(tmp_path / "hf")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        f"error: {f}: {size // 2} bytes but meta.json records {size} "
        f"(truncated or corrupt); restore it from a backup, or use the older "
        f"checkpoint {run / 'checkpoints' / 'step-00000002'}"
    ]
    p = subprocess.run(
        [sys.executable, "-m", "tokendrop", "verify", str(run)], capture_output=True, text=True
    )
    assert (
        p.returncode == 2
        and "Traceback" not in p.stderr
        and len(p.stderr.strip().splitlines()) == 1
    )
    assert str(f) in p.stderr
    assert snapshot(run) == before and not (tmp_path / "hf").exists()


def test_corrupt_meta_json(run, tmp_path, capsys):
    mp = run / "checkpoints" / "step-00000004" / "meta.json"
    mp.write_text(mp.read_text()[:50])
    rc, _, err = run_cli(capsys, "export", run, tmp_path / "hf")
    line = one_error_line(err)
    assert rc == 2 and f"{mp}: corrupt (invalid JSON" in line
    mp.write_text(
        json.dumps({"step": 4, "config": {}, "files": {"model.safetensors": {"bytes": "12"}}})
    )
    rc, _, err = run_cli(capsys, "inspect", run)
    assert rc == 2 and f"{mp}: 'files' does not record" in one_error_line(err)
    assert not (run / "inspect").exists()


# ----------------------------------------------------------------------------------------------
# prepared data


def _edit_meta(data: Path, fn) -> None:
    mp = data / "meta.json"
    meta = json.loads(mp.read_text())
    fn(meta)
    mp.write_text(json.dumps(meta, indent=2))


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda m: m.update(seq_len="64"), "seq_len must be a positive integer"),
        (lambda m: m.update(vocab_size=0), "vocab_size must be a positive integer"),
        (lambda m: m.update(dtype="float32"), "dtype must be one of uint16, uint32"),
        (lambda m: m.update(packed="yes"), "packed must be true or false"),
        (
            lambda m: m["splits"]["train"].update(num_sequences=3.0),
            "splits.train.num_sequences must be an integer",
        ),
        (
            lambda m: m["splits"]["eval"].update(file="../x.bin"),
            "splits.eval.file must be a file name",
        ),
        (lambda m: m["special_ids"].update(mask=10**6), "special_ids.mask must be an integer id"),
    ],
)
def test_meta_json_wrong_type(data, tmp_path, capsys, edit, field):
    _edit_meta(data, edit)
    before = snapshot(data)
    rc, _, err = run_cli(
        capsys,
        "pretrain",
        "--config",
        "tiny",
        "--out",
        tmp_path / "r",
        "--quiet",
        "--set",
        f'data.path="{data}"',
    )
    line = one_error_line(err)
    assert rc == 2 and f"{data / 'meta.json'}: {field}" in line
    rc, _, err = run_cli(capsys, "verify", data)
    assert rc == 2 and field in one_error_line(err)
    assert snapshot(data) == before and not (tmp_path / "r").exists()


def test_shard_truncated(data, tmp_path, capsys):
    f = data / "train.bin"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - 128)
    before = snapshot(data)
    rc, _, err = run_cli(
        capsys,
        "pretrain",
        "--config",
        "tiny",
        "--out",
        tmp_path / "r",
        "--quiet",
        "--set",
        f'data.path="{data}"',
    )
    assert rc == 2 and f"{f}: " in one_error_line(err) and "the file is truncated or corrupt" in err
    rc, _, err = run_cli(capsys, "verify", data)
    assert rc == 2 and "truncated" in one_error_line(err)
    assert snapshot(data) == before and not (tmp_path / "r").exists()


def test_out_of_range_token_id(data, tmp_path, capsys):
    from tokendrop.data import DataError, MLMLoader, PreparedData

    pd = PreparedData.open(data)
    V, T = pd.vocab_size, pd.seq_len
    f = data / "train.bin"
    arr = np.fromfile(f, dtype=pd.dtype).reshape(-1, T)
    arr[:, 5] = V + 7  # every sequence: the first batch meets it, whatever the order
    arr.tofile(f)
    # sizes still match, so open succeeds; the loader's per-batch bound check refuses the batch
    loader = MLMLoader(PreparedData.open(data), batch_size=4, num_workers=0)
    with pytest.raises(
        DataError,
        match=rf"train\.bin: sequence \d+ holds token id {V + 7} at position 5, outside "
        rf"the vocabulary of {V} ids",
    ):
        next(iter(loader))
    # the same from a worker process
    loader = MLMLoader(PreparedData.open(data), batch_size=4, num_workers=1)
    with pytest.raises(DataError, match=f"holds token id {V + 7}"):
        next(iter(loader))
    loader.close()
    # verify: the shard no longer matches its sha256; with the hash updated, the id itself is
    # reported
    rc, _, err = run_cli(capsys, "verify", data)
    assert rc == 2 and "train.bin: sha256 does not match meta.json" in one_error_line(err)
    _edit_meta(data, lambda m: m["splits"]["train"].update(sha256=ckpt_mod.sha256_file(f)))
    rc, _, err = run_cli(capsys, "verify", data)
    assert (
        rc == 2
        and f"train.bin: holds token id {V + 7}, outside the vocabulary of {V} ids"
        in one_error_line(err)
    )
    with pytest.raises(DataError, match=f"holds token id {V + 7}"):
        PreparedData.open(data, verify=True)
    # pretraining stops at the first batch with one line and no traceback
    before = snapshot(data)
    rc, _, err = run_cli(
        capsys,
        "pretrain",
        "--config",
        "tiny",
        "--out",
        tmp_path / "r",
        "--quiet",
        "--set",
        f'data.path="{data}"',
    )
    assert rc == 2 and f"holds token id {V + 7}" in one_error_line(err)
    assert snapshot(data) == before


# ----------------------------------------------------------------------------------------------
# verify: each bad kind


def test_verify_bad_kinds(run, data, tmp_path, capsys):
    # a run whose log has a corrupt line in the middle; a torn last line is only a note
    m = run / "metrics.jsonl"
    lines = m.read_text().splitlines()
    m.write_text("\n".join(lines) + '\n{"step": 5, "lo')
    rc, out, err = run_cli(capsys, "verify", run)
    assert rc == 0 and "torn last line" in out
    m.write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    rc, _, err = run_cli(capsys, "verify", run)
    assert rc == 2 and f"{m}:2: not a JSON record" in one_error_line(err)
    m.write_text("\n".join(lines) + "\n")
    (run / "config.toml").write_text("[train\nsteps = ")
    rc, _, err = run_cli(capsys, "verify", run)
    assert rc == 2 and f"{run / 'config.toml'}: invalid TOML" in one_error_line(err)
    # a checkpoint with a corrupt state file
    ck = run / "checkpoints" / "step-00000002"
    flip(ck / "state.safetensors")
    rc, _, err = run_cli(capsys, "verify", ck)
    assert rc == 2 and f"{ck / 'state.safetensors'}: corrupt" in one_error_line(err)
    # an exported model whose weights are cut short
    hf = tmp_path / "hf"
    assert run_cli(capsys, "export", run / "checkpoints" / "step-00000004", hf)[0] == 0
    rc, out, _ = run_cli(capsys, "verify", hf)
    assert rc == 0 and "ok (export)" in out and "records no hashes" in out
    w = hf / "model.safetensors"
    with open(w, "r+b") as fh:
        fh.truncate(w.stat().st_size - 100)
    rc, _, err = run_cli(capsys, "verify", hf)
    assert rc == 2 and f"{w}: not a valid safetensors file" in one_error_line(err)
    # the eval shard of prepared data edited in place (same size)
    flip(data / "eval.bin", at=10)
    rc, _, err = run_cli(capsys, "verify", data)
    assert rc == 2 and "eval.bin: sha256 does not match" in one_error_line(err)
    # not a directory tokendrop knows, a missing path, a regular file
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    for p, msg in (
        (tmp_path / "other", "nothing to verify"),
        (tmp_path / "nope", "no such file or directory"),
        (tmp_path / "other" / "x.txt", "not a directory"),
    ):
        rc, _, err = run_cli(capsys, "verify", p)
        assert rc == 2 and msg in one_error_line(err)


# ----------------------------------------------------------------------------------------------
# evaluate: results keyed by the model's weights


def _fake_finetune(calls):
    def fn(cfg, model_path, out_dir, log=None):
        calls.append((model_path, cfg.task, cfg.lr))
        r = {
            "scores": {cfg.task: 50.0 + len(calls)},
            "config": __import__("dataclasses").asdict(cfg),
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.json").write_text(json.dumps(r))
        return r

    return fn


def test_evaluate_reruns_cells_after_weights_change(tmp_path):
    from toydata import write_checkpoint

    from tokendrop.finetuning import evaluate
    from tokendrop.finetuning.suite import SuiteConfig, model_weights

    model = write_checkpoint(tmp_path / "m-seed0", hidden_size=32, seed=0)
    cfg = SuiteConfig(
        tasks=["sst2"], glue_epochs=[1.0], glue_lrs=[1e-4, 2e-4], glue_data=str(tmp_path / "glue")
    )
    calls, logs = [], []
    s = evaluate(
        [str(model)], cfg, tmp_path / "eval", finetune_fn=_fake_finetune(calls), log=logs.append
    )
    assert s["computed"] == 2 and len(calls) == 2
    cells = sorted((tmp_path / "eval" / "cells").rglob("metrics.json"))
    sha, wfile = model_weights(model)
    assert wfile == model / "model.safetensors" and sha == ckpt_mod.sha256_file(wfile)
    assert all(json.loads(c.read_text())["model_sha256"] == sha for c in cells)
    # same weights: reused, nothing rewritten
    before = snapshot(tmp_path / "eval" / "cells")
    s = evaluate(
        [str(model)], cfg, tmp_path / "eval", finetune_fn=_fake_finetune(calls), log=logs.append
    )
    assert s["computed"] == 0 and s["skipped"] == 2 and len(calls) == 2
    assert snapshot(tmp_path / "eval" / "cells") == before
    # the model retrained at the same path: every cell is evaluated again, and the log says why
    write_checkpoint(model, hidden_size=32, seed=1)
    logs.clear()
    s = evaluate(
        [str(model)], cfg, tmp_path / "eval", finetune_fn=_fake_finetune(calls), log=logs.append
    )
    assert s["computed"] == 2 and s["reevaluated"] == 2 and len(calls) == 4
    assert any(
        "weights changed since this cell was computed" in x and "re-evaluating" in x for x in logs
    )
    assert any("(2 because the model's weights changed)" in x for x in logs)
    new_sha = model_weights(model)[0]
    assert new_sha != sha and all(
        json.loads(c.read_text())["model_sha256"] == new_sha for c in cells
    )
    # a cell from before hashes were recorded: reused while older than the weights, else recomputed
    for c in cells:
        r = json.loads(c.read_text())
        del r["model_sha256"]
        c.write_text(json.dumps(r))
    s = evaluate(
        [str(model)], cfg, tmp_path / "eval", finetune_fn=_fake_finetune(calls), log=logs.append
    )
    assert s["computed"] == 0 and len(calls) == 4
    later = max(c.stat().st_mtime_ns for c in cells) + 10**9
    os.utime(model / "model.safetensors", ns=(later, later))
    s = evaluate(
        [str(model)], cfg, tmp_path / "eval", finetune_fn=_fake_finetune(calls), log=logs.append
    )
    assert s["computed"] == 2 and len(calls) == 6
