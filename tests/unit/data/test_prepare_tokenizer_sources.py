"""`prepare --tokenizer SOURCE` takes what `pretrain --init` takes: a Hugging Face checkpoint dir, a
tokendrop run or checkpoint dir, a Hub name (online only; one line offline), and also a vocab.txt or
a tokenizer.json.  Each gives the same shards as the library's prepare on the tokenizer's
directory."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from toydata import write_bpe_tokenizer_dir, write_corpus  # noqa: E402

from tokendrop.cli import main  # noqa: E402
from tokendrop.data import prepare  # noqa: E402

T = 32
COMMON = ["--seq-len", str(T), "--eval-fraction", "0", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c.txt", docs=60)


def shards(d) -> bytes:
    return (d / "train.bin").read_bytes()


def reference(tok_dir, corpus, out):
    prepare([corpus], out, T, tokenizer=tok_dir, eval_fraction=0.0, workers=1, progress=False)
    return shards(out)


def cli_prepare(source, corpus, out) -> int:
    return main(
        ["prepare", "--corpus", str(corpus), "--out", str(out), "--tokenizer", str(source), *COMMON]
    )


def test_checkpoint_dir_vocab_txt_and_tokenizer_json(tiny_bert_dir, tiny_data, corpus, tmp_path):
    want = reference(tiny_data, corpus, tmp_path / "ref")
    assert cli_prepare(tiny_bert_dir, corpus, tmp_path / "hf") == 0
    assert shards(tmp_path / "hf") == want
    # a vocab.txt with its tokenizer_config.json beside it (no tokenizer.json): the same WordPiece
    # ids
    vdir = tmp_path / "vocab-dir"
    vdir.mkdir()
    for n in ("vocab.txt", "tokenizer_config.json"):
        shutil.copyfile(tiny_data / n, vdir / n)
    assert cli_prepare(vdir / "vocab.txt", corpus, tmp_path / "vocab") == 0
    assert shards(tmp_path / "vocab") == want
    # a tokenizer.json (ModernBERT-style byte-level BPE with its configs beside it)
    bpe = write_bpe_tokenizer_dir(tmp_path / "bpe")
    assert cli_prepare(bpe / "tokenizer.json", corpus, tmp_path / "bpe-out") == 0
    assert shards(tmp_path / "bpe-out") == reference(bpe, corpus, tmp_path / "bpe-ref")
    meta = json.loads((tmp_path / "bpe-out" / "meta.json").read_text())
    assert meta["tokenizer"]["backend"] == "file" and meta["tokenizer"]["model"] == "BPE"


def test_bare_vocab_txt_is_one_line(tiny_data, corpus, tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    shutil.copyfile(tiny_data / "vocab.txt", tmp_path / "bare" / "vocab.txt")
    assert cli_prepare(tmp_path / "bare" / "vocab.txt", corpus, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no tokenizer_config.json beside it" in err and "--vocab FILE" in err
    assert not (tmp_path / "out").exists()


def test_tokendrop_run_and_checkpoint_dir(tiny_data, corpus, tmp_path):
    run = tmp_path / "run"
    assert (
        main(
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(run),
                "--set",
                f"data.path={json.dumps(str(tiny_data))}",
                "--set",
                "train.steps=1",
                "--set",
                "train.ckpt_every=1",
                "--set",
                "train.eval_every=1",
                "--set",
                "train.eval_batches=1",
                "--set",
                "train.batch_size=2",
                "--set",
                "train.warmup_steps=0",
                "--quiet",
            ]
        )
        == 0
    )
    want = reference(tiny_data, corpus, tmp_path / "ref")
    assert cli_prepare(run, corpus, tmp_path / "from-run") == 0
    assert shards(tmp_path / "from-run") == want
    # no tokenizer in it: resolved like --init (the run's)
    ckpt = next((run / "checkpoints").iterdir())
    assert not (ckpt / "tokenizer.json").exists() and not (ckpt / "vocab.txt").exists()
    assert cli_prepare(ckpt, corpus, tmp_path / "from-ckpt") == 0
    assert shards(tmp_path / "from-ckpt") == want


def test_hub_name(tiny_bert_dir, tiny_data, corpus, tmp_path, monkeypatch, capsys):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.chdir(tmp_path)  # "org/name" is not a local path here

    def offline(**kw):
        raise OSError("We couldn't connect to 'https://huggingface.co' (offline mode)")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert cli_prepare("org/name", corpus, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        "error: org/name: no such local directory, and it could not be fetched"
    )
    assert not (tmp_path / "out").exists()
    # online: the snapshot's tokenizer (the resolver of pretrain --init)
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, allow_patterns: str(tiny_bert_dir)
    )
    assert cli_prepare("org/tiny-bert", corpus, tmp_path / "hub") == 0
    assert shards(tmp_path / "hub") == reference(tiny_data, corpus, tmp_path / "ref")
    assert np.array_equal(
        np.load(tmp_path / "hub" / "token_counts.npy"),
        np.load(tmp_path / "ref" / "token_counts.npy"),
    )
