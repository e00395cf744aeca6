"""docs/reliability.md, categories "logs", "bad input, full disk" and "edge settings": logs that
survive a kill, one-line errors for bad input and full disks, and the numerical / distributed edge
cases.  Each test asserts the exit code, the one-line message and what is left on disk
afterwards."""

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import one_line_error as _one_line_error, run_cli as _run, tree as _tree
from safetensors.torch import load_file

from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.metrics import append_record, read_metrics, truncate_metrics


def _pretrain_args(data, out, *sets):
    args = ["pretrain", "--config", "tiny", "--out", out, "--quiet", "--set", f'data.path="{data}"']
    for s in sets:
        args += ["--set", s]
    return args


# ----------------------------------------------------------------------------------------------
# row 7: logs that survive a kill


def test_torn_last_metrics_line_is_tolerated_by_reader_report_and_appender(tmp_path, capsys):
    from tokendrop.train.report import write_run_report

    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2):
        append_record(
            run / "metrics.jsonl",
            {
                "step": s,
                "loss": 5.0 - s,
                "wall_time": float(s),
                "tokens_per_s": 10.0,
                "step_time": 0.1,
            },
        )
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss": 2.')  # a writer killed mid-line
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert capsys.readouterr().err == ""  # a torn *last* line is expected after a kill: no noise
    write_run_report(run)
    assert (run / "report.md").is_file()
    append_record(run / "metrics.jsonl", {"step": 3, "loss": 1.5})  # starts on a fresh line
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]
    # the torn fragment, now mid-file
    assert "line 3 is not a JSON record" in capsys.readouterr().err
    assert truncate_metrics(run, 2) == 2  # the fragment and step 3
    assert (run / "metrics.jsonl").read_text().count("\n") == 2 and [
        r["step"] for r in read_metrics(run)
    ] == [1, 2]


def test_resume_drops_rows_past_the_checkpoint(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    ov = [
        "train.steps=6",
        "train.log_every=1",
        "train.ckpt_every=3",
        "train.eval_every=3",
        "train.eval_batches=1",
    ]
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    pretrain(load_config("tiny", [f'data.path="{tiny_data}"', *ov]), run, progress=False, stop_at=3)
    # what a run SIGKILLed at step 5 (after logging, before its next checkpoint) leaves behind
    for s in (4, 5):
        append_record(run / "metrics.jsonl", {"step": s, "loss": 99.0})
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "lo')
    rc, out, err = _run(capsys, "pretrain", "--resume", run, "--quiet")
    assert rc == 0, err
    rows = read_metrics(run)
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6] and 99.0 not in [r["loss"] for r in rows if "loss" in r]
    assert [r["step"] for r in rows if "eval_loss" in r] == [0, 3, 6]
    assert (run / "metrics.jsonl").read_text().endswith("\n")


def test_empty_eval_split_turns_evaluation_off_with_a_warning(tmp_path, capsys):
    from toydata import toy_prepared

    from tokendrop.errors import TrainingError
    from tokendrop.train.step import evaluate_mlm

    data = toy_prepared(tmp_path / "data", seq_len=32, eval_fraction=0.0)
    rc, out, err = _run(
        capsys, *_pretrain_args(data, tmp_path / "run", "train.steps=2", "train.eval_every=1")
    )
    assert rc == 0, err
    assert "warning:" in err and "eval split is empty" in err and "not evaluated" in err
    rows = read_metrics(tmp_path / "run")
    assert not [r for r in rows if "eval_loss" in r]  # never a reported eval loss of 0.0
    assert "eval loss" not in out
    with pytest.raises(TrainingError, match="no prediction slots"):
        evaluate_mlm(torch.nn.Module(), [], torch.device("cpu"), None, 0)


# ----------------------------------------------------------------------------------------------
# row 8: one-line errors


@pytest.mark.parametrize("lr", ["nan", "inf", "-1e-4"])
def test_lr_not_finite_or_negative(tiny_data, tmp_path, capsys, lr):
    rc, _, err = _run(capsys, *_pretrain_args(tiny_data, tmp_path / "run", f"train.lr={lr}"))
    _one_line_error(rc, err, "train.lr", "positive, finite")
    assert not (tmp_path / "run").exists()


OUT_COMMANDS = {
    "prepare": lambda f: [
        "prepare",
        "--corpus",
        "x.txt",
        "--out",
        f,
        "--seq-len",
        "32",
        "--vocab-size",
        "200",
    ],
    "pretrain": lambda f: ["pretrain", "--config", "tiny", "--out", f],
    "finetune": lambda f: ["finetune", "--model", "m", "--task", "sst2", "--data", "d", "--out", f],
    "evaluate": lambda f: ["evaluate", "--models", "m", "--suite", "s.toml", "--out", f],
    "export": lambda f: ["export", "run", f],
    "inspect": lambda f: ["inspect", "run", "--out", f],
    "study": lambda f: ["study", "--config", "study-tiny", "--out", f],
    "demo": lambda f: ["demo", "--out", f],
    "bench": lambda f: ["bench", "--campaign", "env", "--dry-run", "--out", f],
}


@pytest.mark.parametrize("command", sorted(OUT_COMMANDS))
def test_out_naming_a_regular_file_is_refused(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "precious.txt"
    f.write_text("keep me\n")
    before = _tree(tmp_path)
    rc, _, err = _run(capsys, *OUT_COMMANDS[command](str(f)))
    _one_line_error(rc, err, str(f), "exists and is not a directory")
    assert _tree(tmp_path) == before  # the file untouched, nothing else written


def _copy_data(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("fault", ["missing", "invalid", "wrong-type"])
def test_bad_meta_json_of_prepared_data(tiny_data, tmp_path, capsys, fault):
    data = _copy_data(tiny_data, tmp_path / "data")
    meta = data / "meta.json"
    if fault == "missing":
        meta.unlink()
    elif fault == "invalid":
        meta.write_text('{"seq_len": 64,')
    else:
        m = json.loads(meta.read_text())
        m["vocab_size"] = "many"
        meta.write_text(json.dumps(m))
    rc, _, err = _run(capsys, *_pretrain_args(data, tmp_path / "run"))
    _one_line_error(rc, err, str(data))
    assert not (tmp_path / "run").exists()


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device", str(a[1]) if len(a) > 1 else "x")


def test_disk_full_while_writing_a_checkpoint_keeps_the_previous_one(
    tiny_data, tmp_path, capsys, monkeypatch
):
    import safetensors.torch as st

    real = st.save_file
    calls = {"n": 0}

    def filling(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] >= 3:  # the second checkpoint's first file
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(tensors, path, metadata=metadata)

    monkeypatch.setattr(st, "save_file", filling)
    run = tmp_path / "run"
    rc, _, err = _run(
        capsys, *_pretrain_args(tiny_data, run, "train.steps=4", "train.ckpt_every=2")
    )
    _one_line_error(rc, err, "No space left on device", "step-00000002", "is intact")
    # no temp dir left
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000002"]
    assert ckpt_mod.verify(run / "checkpoints" / "step-00000002")["step"] == 2


def test_safetensors_io_errors_are_os_errors(tmp_path, monkeypatch):
    """safetensors reports a full disk / a file-size limit as its own SafetensorError: the one
    writer turns it into the OSError (with errno) that the disk-full handling of every command
    catches."""
    import safetensors.torch as st
    from safetensors import SafetensorError

    from tokendrop.runs.files import write_safetensors

    def too_large(tensors, path, metadata=None):
        raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")

    monkeypatch.setattr(st, "save_file", too_large)
    with pytest.raises(OSError) as e:
        write_safetensors({"x": torch.zeros(2)}, tmp_path / "w.safetensors")
    assert e.value.errno == errno.EFBIG and e.value.filename == str(tmp_path / "w.safetensors")
    monkeypatch.setattr(
        st, "save_file", lambda *a, **k: (_ for _ in ()).throw(SafetensorError("bad dtype"))
    )
    with pytest.raises(SafetensorError):  # not an I/O error: left as it is (a bug to see)
        write_safetensors({"x": torch.zeros(2)}, tmp_path / "w.safetensors")


def test_disk_full_while_writing_shards(tmp_path, capsys, monkeypatch):
    from toydata import write_corpus

    from tokendrop.data import shards

    corpus = write_corpus(tmp_path / "corpus.txt", docs=30)
    monkeypatch.setattr(shards.ShardWriter, "write", lambda self, rows: _enospc(self, self.path))
    before = _tree(tmp_path)
    rc, _, err = _run(
        capsys,
        "prepare",
        "--corpus",
        corpus,
        "--out",
        tmp_path / "data",
        "--seq-len",
        "32",
        "--vocab-size",
        "150",
        "--workers",
        "1",
        "--quiet",
    )
    _one_line_error(rc, err, "No space left on device", "nothing was written")
    assert _tree(tmp_path) == before


def test_disk_full_while_exporting(tiny_run, tmp_path, capsys, monkeypatch):
    import safetensors.torch as st

    monkeypatch.setattr(
        st, "save_file", lambda tensors, path, metadata=None: _enospc(tensors, path)
    )
    rc, _, err = _run(capsys, "export", tiny_run, tmp_path / "hf")
    _one_line_error(rc, err, "No space left on device")
    assert list(tmp_path.iterdir()) == []  # no export dir, no temp dir


def test_export_of_a_run_whose_newest_checkpoint_lost_its_meta_json(tiny_run, tmp_path, capsys):
    """It is not "not a tokendrop run": the checkpoint is named, with the older one that verifies,
    and exporting that one works (the run dir and the checkpoint dir give the same line)."""
    run = shutil.copytree(tiny_run, tmp_path / "run")
    newest, older = run / "checkpoints" / "step-00000004", run / "checkpoints" / "step-00000002"
    (newest / "meta.json").unlink()
    says = (
        f"error: {newest}: not a complete checkpoint (no meta.json); restore it from a backup, or "
        f"use the older checkpoint {older}\n"
    )
    for path in (run, newest):
        rc, _, err = _run(capsys, "export", path, tmp_path / "hf")
        assert rc == 2 and err == says
    assert not (tmp_path / "hf").exists()
    assert _run(capsys, "export", older, tmp_path / "hf")[0] == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file()


@pytest.mark.parametrize("threads", ["0", "-2"])
def test_bench_threads_not_positive(tmp_path, capsys, threads):
    rc, _, err = _run(capsys, "bench", "--threads", threads, "--json", tmp_path / "r.json")
    _one_line_error(rc, err, "--threads")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seq_len", ["0", "-128"])
def test_flops_seq_len_not_positive(capsys, seq_len):
    rc, out, err = _run(capsys, "flops", "--config", "tiny", "--seq-len", "128", seq_len)
    _one_line_error(rc, err, "--seq-len", seq_len)
    assert out == ""


def test_prepare_workers_below_one(tmp_path, capsys):
    rc, _, err = _run(
        capsys,
        "prepare",
        "--corpus",
        "x.txt",
        "--out",
        tmp_path / "d",
        "--seq-len",
        "32",
        "--vocab-size",
        "200",
        "--workers",
        "0",
    )
    _one_line_error(rc, err, "--workers", "0")
    assert not (tmp_path / "d").exists()


def test_vocab_size_larger_than_the_corpus_supports_is_reported(tmp_path, capsys):
    from toydata import write_corpus

    corpus = write_corpus(tmp_path / "corpus.txt", docs=40)
    rc, out, err = _run(
        capsys,
        "prepare",
        "--corpus",
        corpus,
        "--out",
        tmp_path / "d",
        "--seq-len",
        "32",
        "--vocab-size",
        "20000",
        "--workers",
        "1",
        "--quiet",
    )
    assert rc == 0, err
    trained = json.loads((tmp_path / "d" / "meta.json").read_text())["vocab_size"]
    assert trained < 20000 and json.loads(out)["vocab_size"] == trained
    assert (
        f"warning: vocab_size: the corpus supports only {trained} word pieces; trained a "
        f"vocabulary of {trained}, "
        "not the 20000 asked for" in err
    )


def test_squad_answer_start_mismatch_names_file_and_id(tmp_path, capsys):
    from toydata import write_squad_examples

    root = write_squad_examples(tmp_path / "squad", n_train=4, n_dev=2)
    train = root / "train-v1.1.json"
    d = json.loads(train.read_text())
    qa = d["data"][1]["paragraphs"][0]["qas"][0]
    qa["answers"][0]["answer_start"] += 2
    train.write_text(json.dumps(d))
    before = _tree(tmp_path)
    rc, _, err = _run(
        capsys,
        "finetune",
        "--model",
        tmp_path / "no-model",
        "--task",
        "squad1",
        "--data",
        root,
        "--out",
        tmp_path / "out",
    )
    _one_line_error(
        rc, err, str(train), f"(id {qa['id']!r})", "answer_start", "does not point at the answer"
    )
    assert _tree(tmp_path) == before


def test_finetune_max_seq_len_clamp_is_reported_with_the_value_used(tmp_path, capsys):
    from toydata import write_checkpoint

    from tokendrop.finetuning.tasks import TASKS

    model = write_checkpoint(
        tmp_path / "model",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=24,
    )
    task = TASKS["sst2"].write_examples(tmp_path / "sst", n_train=32, n_dev=16)
    rc, _, err = _run(
        capsys,
        "finetune",
        "--model",
        model,
        "--task",
        "sst2",
        "--data",
        task,
        "--out",
        tmp_path / "out",
        "--set",
        "max_seq_len=128",
        "--set",
        "epochs=1",
        "--set",
        "log_every=0",
        "--set",
        'device="cpu"',
    )
    assert rc == 0, err
    assert (
        "warning: finetune.max_seq_len=128 is more than the model's max_position_embeddings=24; "
        "using max_seq_len 24" in err
    )
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["seq_len"] == {"field": "max_seq_len", "requested": 128, "used": 24}


# ----------------------------------------------------------------------------------------------
# row 9: numerical and distributed edge cases


def test_half_random_with_more_random_than_kept_slots_is_a_config_error(
    tiny_data, tmp_path, capsys
):
    rc, _, err = _run(
        capsys,
        *_pretrain_args(tiny_data, tmp_path / "run", "drop.method=half_random", "drop.rate=0.97"),
    )
    _one_line_error(rc, err, "drop.half_random_frac", "0.03")
    assert not (tmp_path / "run").exists()
    from tokendrop.dropping.config import DropConfig
    from tokendrop.dropping.importance import TokenSelector

    ok = DropConfig(method="half_random", rate=0.95)
    ok.validate(4)
    sel = TokenSelector(ok, 50, {"cls": 2, "sep": 3, "mask": 4, "pad": 0}, 128)
    keep = sel.select(torch.randint(5, 50, (2, 128)))
    assert keep.shape == (2, sel.num_kept) and sel.num_random <= sel.num_kept
    assert all(len(set(row.tolist())) == sel.num_kept for row in keep)


def _final_weights(run):
    return load_file(str(ckpt_mod.latest(run) / "model.safetensors"))


def test_grad_clip_zero_means_off(tiny_data, tmp_path):
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    def run(name, clip):
        cfg = load_config(
            "tiny",
            [
                f'data.path="{tiny_data}"',
                "train.steps=2",
                "train.log_every=1",
                "train.eval_every=100",
                "train.eval_batches=1",
                f"train.grad_clip={clip}",
                "train.threads=1",
            ],
        )
        pretrain(cfg, tmp_path / name, progress=False)
        return _final_weights(tmp_path / name), [
            r for r in read_metrics(tmp_path / name) if "loss" in r
        ]

    off, rows = run("off", 0)
    huge, _ = run("huge", 1e9)
    clipped, _ = run("clipped", 1e-3)
    assert rows[0]["grad_norm"] > 1e-3  # so the 1e-3 run really clipped
    for k in off:
        torch.testing.assert_close(off[k], huge[k], rtol=0, atol=0)
    assert any(not torch.equal(off[k], clipped[k]) for k in off)


def _poison(monkeypatch, bad_steps):
    """Make the training NLL NaN on the given (1-based) optimizer steps (one micro-batch per
    step)."""
    from tokendrop.models.bert.model import BertForMaskedLM

    real = BertForMaskedLM.mlm_nll
    n = {"train_calls": 0}

    def poisoned(self, logits, labels):
        out = real(self, logits, labels)
        if self.training:
            n["train_calls"] += 1
            if n["train_calls"] in bad_steps:
                return out * float("nan")
        return out

    monkeypatch.setattr(BertForMaskedLM, "mlm_nll", poisoned)


def test_a_nonfinite_step_is_skipped_counted_and_logged(tiny_data, tmp_path, capsys, monkeypatch):
    _poison(monkeypatch, {3})
    run = tmp_path / "run"
    rc, _, err = _run(
        capsys,
        *_pretrain_args(
            tiny_data,
            run,
            "train.steps=6",
            "train.log_every=1",
            "train.ckpt_every=3",
            "train.eval_every=100",
            "train.eval_batches=1",
            "drop.method=cumulative",
        ),
    )
    assert rc == 0, err
    rows = read_metrics(run)
    logs = [r for r in rows if "loss" in r]
    assert [r["skipped_steps"] for r in logs] == [0, 0, 1, 1, 1, 1]
    assert not np.isfinite(logs[2]["grad_norm"]) and all(
        np.isfinite(r["grad_norm"]) for r in logs[3:]
    )
    assert [r for r in rows if r.get("event") == "end"][0]["skipped_steps"] == 1
    for t in _final_weights(run).values():
        assert torch.isfinite(t).all()
    state = load_file(str(ckpt_mod.latest(run) / "state.safetensors"))
    assert torch.isfinite(state["importance"]).all()


def test_consecutive_nonfinite_steps_stop_the_run_without_saving_them(
    tiny_data, tmp_path, capsys, monkeypatch
):
    _poison(monkeypatch, set(range(5, 100)))
    run = tmp_path / "run"
    rc, _, err = _run(
        capsys,
        *_pretrain_args(
            tiny_data,
            run,
            "train.steps=12",
            "train.log_every=1",
            "train.ckpt_every=2",
            "train.eval_every=100",
            "train.eval_batches=1",
            "train.max_nonfinite_steps=2",
        ),
    )
    _one_line_error(
        rc, err, "non-finite loss or gradient norm in 2 consecutive steps", "step-00000004"
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-00000002",
        "step-00000004",
    ]
    before = _final_weights(run)
    assert all(torch.isfinite(t).all() for t in before.values())


def test_attention_mask_fill_is_safe_under_autocast():
    from tokendrop.config import ModelConfig
    from tokendrop.models.attention import attention_bias
    from tokendrop.models.bert.model import BertModel

    mask = torch.tensor([[1, 1, 1, 0, 0]])
    b = attention_bias(mask, torch.float32)
    assert (
        b.dtype == torch.float32
        and b[0, 0, 0, 3] == torch.finfo(torch.float32).min
        and b[0, 0, 0, 0] == 0
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bb = attention_bias(mask, torch.float32)
    assert (
        bb.dtype == torch.bfloat16
        and torch.isfinite(bb).all()
        and bb[0, 0, 0, 4] == torch.finfo(torch.bfloat16).min
    )
    torch.manual_seed(0)
    model = BertModel(
        ModelConfig(
            vocab_size=40,
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            intermediate_size=64,
            max_position_embeddings=16,
        )
    ).eval()
    ids = torch.randint(5, 40, (2, 8))
    m = torch.ones(2, 8, dtype=torch.long)
    m[1, 1:] = 0  # a row with a single real token
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        h = model(ids, m)
        ids2 = ids.clone()
        ids2[1, 1:] = 7  # other padding ids: the real token's output must not move
        h2 = model(ids2, m)
    assert torch.isfinite(h.float()).all()
    torch.testing.assert_close(h[1, 0].float(), h2[1, 0].float(), rtol=0, atol=0)


def test_avg_variant_pools_real_rows_only():
    from tokendrop.dropping.engine import Rows, avg_pool_mask, avg_pool_rows

    m = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    # (real, pad) holds a real row: valid
    assert avg_pool_mask(m).tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 1],
    ]
    x = torch.arange(14.0).view(2, 7, 1) + 1
    x[0, 3:] = float("nan")  # a [PAD] state never enters a real row, whatever it is
    pooled = avg_pool_rows(x, m)
    # (real, real) -> mean; (real, pad) -> the real row
    assert pooled[0, :2].flatten().tolist() == [
        1.5,
        3.0,
    ]
    assert pooled[1].flatten().tolist() == [8.5, 10.5, 12.5, 14.0]  # an odd last row pools alone
    assert torch.equal(avg_pool_rows(x[1:]), pooled[1:])  # no mask: the same means
    doc = torch.tensor([[0, 0, 1, -1, -1, -1, -1]])
    assert Rows(m[:1], doc).pooled().doc.tolist() == [[0, 1, -1, -1]]  # the real row's document
    design = (Path(__file__).resolve().parents[3] / "docs" / "design.md").read_text()
    assert "Masking in `avg`" in design and "validity weights" in design


def test_pad_id_comes_from_the_prepared_vocabulary(tmp_path, capsys):
    from toydata import toy_vocab_tokens, write_toy_corpus

    tokens = toy_vocab_tokens()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    rest = [t for t in tokens if t not in specials]
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[UNK]", "[CLS]", "[PAD]", "[SEP]", "[MASK]"] + rest) + "\n"
    )
    corpus = write_toy_corpus(tmp_path / "corpus.txt", num_docs=40)
    rc, _, err = _run(
        capsys,
        "prepare",
        "--corpus",
        corpus,
        "--out",
        tmp_path / "d",
        "--seq-len",
        "32",
        "--vocab",
        tmp_path / "vocab.txt",
        "--workers",
        "1",
        "--quiet",
        "--unpacked",
    )
    assert rc == 0, err
    pad = json.loads((tmp_path / "d" / "meta.json").read_text())["special_ids"]["pad"]
    assert pad == 2
    rc, _, err = _run(
        capsys,
        *_pretrain_args(tmp_path / "d", tmp_path / "run", "train.steps=1", "train.eval_batches=1"),
    )
    assert rc == 0, err
    import tomllib

    assert (
        tomllib.loads((tmp_path / "run" / "config.toml").read_text())["model"]["pad_token_id"] == 2
    )
    rc, _, err = _run(
        capsys,
        *_pretrain_args(tmp_path / "d", tmp_path / "run2", "train.steps=1", "model.pad_token_id=5"),
    )
    _one_line_error(rc, err, "model.pad_token_id: 5", "[PAD] is id 2")
    assert not (tmp_path / "run2").exists()


def test_packing_never_emits_sep_sep(tmp_path):
    from tokendrop.data.prepare import prepare
    from tokendrop.data.shards import PackedWriter, ShardWriter

    rng = np.random.default_rng(0)
    for T in (6, 7, 8, 12):
        shard = ShardWriter(str(tmp_path / f"s{T}.bin"), T, np.dtype(np.uint16))
        w = PackedWriter(shard, 2, 3)
        total = 0
        for _ in range(200):
            n = int(rng.choice([0, 0, 1, 1, 2, T - 3, T - 2, T - 1]))
            total += n
            w.add(rng.integers(5, 60, n).astype(np.uint16))
        info = w.finish()
        shard.close()
        rows = np.fromfile(shard.path, dtype=np.uint16).reshape(-1, T)
        assert len(rows) > 10 and (rows[:, 0] == 2).all() and (rows[:, -1] == 3).all()
        assert not ((rows[:, 1:] == 3) & (rows[:, :-1] == 3)).any(), T
        used = int(np.count_nonzero(rows[:, 1:-1] != 3))
        # every token accounted
        assert used + info["dropped_tail_tokens"] + info["dropped_boundary_tokens"] == total
        assert info["empty_documents"] > 0
    # end to end: one-word documents (a window ending right after a document is common)
    words = "alpha beta gamma delta".split()
    (tmp_path / "c.txt").write_text("\n\n".join(words[i % 4] for i in range(300)) + "\n")
    (tmp_path / "v.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n"
    )
    prepare(
        [tmp_path / "c.txt"],
        tmp_path / "p",
        8,
        vocab=tmp_path / "v.txt",
        eval_fraction=0.0,
        workers=1,
        progress=False,
    )
    rows = np.fromfile(tmp_path / "p" / "train.bin", dtype=np.uint16).reshape(-1, 8)
    assert len(rows) > 50 and not ((rows[:, 1:] == 3) & (rows[:, :-1] == 3)).any()


def test_written_files_honour_the_umask(tiny_run, tmp_path, capsys):
    old = os.umask(0o022)
    try:
        rc, _, err = _run(capsys, "export", tiny_run, tmp_path / "hf")
        assert rc == 0, err
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "hf").rglob("*") if p.is_file()]
    files += [p for p in ckpt_mod.latest(tiny_run).iterdir() if p.is_file()]
    assert any(p.suffix == ".safetensors" for p in files)
    modes = {str(p): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {"0o644"}, modes


DDP_RNG = textwrap.dedent(
    """
    import sys
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    cfg = load_config("tiny", [f'data.path="{sys.argv[1]}"', "train.steps=2", "train.batch_size=8",
                               "train.eval_batches=1", "drop.method=random"])
    pretrain(cfg, sys.argv[2], progress=False)
    """
)


@pytest.mark.slow
def test_ddp_ranks_draw_their_own_random_streams(tiny_data, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_RNG)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(tiny_data),
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    st = load_file(str(ckpt_mod.latest(tmp_path / "run") / "state.safetensors"))
    for key in ("rng.torch", "rng.selector"):
        # dropout and random selection differ
        assert not torch.equal(st[f"{key}.rank0"], st[f"{key}.rank1"]), key
        assert torch.equal(st[f"{key}.rank0"], st[key])  # rank 0's are also the single-process keys
    from tokendrop.train.resume import rank_rng as _rank_rng

    assert torch.equal(_rank_rng(st, 1)["rng.selector"], st["rng.selector.rank1"])
    assert _rank_rng({k: v for k, v in st.items() if ".rank" not in k}, 1) is None
