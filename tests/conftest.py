import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def small_cfg():
    from tokendrop.config import ModelConfig

    return ModelConfig(
        vocab_size=97,
        hidden_size=32,
        num_layers=6,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A prepared packed dataset (T=64, WordPiece trained on a generated corpus)."""
    from toydata import write_corpus

    from tokendrop.data import prepare

    root = tmp_path_factory.mktemp("tinydata")
    corpus = write_corpus(root / "corpus.txt", docs=300)
    out = root / "packed-64"
    prepare([corpus], out, seq_len=64, vocab_size=200, eval_fraction=0.1, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_run(tiny_data, tmp_path_factory):
    """One finished tiny token-dropping run shared by the suite: 4 steps of 8 sequences, cumulative
    importance, checkpoints at steps 2 and 4 (both kept), evaluation at 2 and 4, a metrics row per
    step.  Read-only: a test that changes a run works on ``copy_run(tiny_run, ...)``."""
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    run = tmp_path_factory.mktemp("tinyrun") / "run"
    cfg = load_config(
        "tiny",
        [
            f'data.path="{tiny_data}"',
            "train.steps=4",
            "train.ckpt_every=2",
            "train.eval_every=2",
            "train.log_every=1",
            "train.keep_checkpoints=3",
            "train.eval_batches=1",
            "train.batch_size=8",
            "train.threads=1",
            "drop.method=cumulative",
        ],
    )
    n = torch.get_num_threads()
    try:
        pretrain(cfg, run, progress=False)
    finally:
        torch.set_num_threads(n)
    return run


@pytest.fixture(scope="session")
def tiny_data_unpacked(tmp_path_factory, tiny_data):
    from tokendrop.data import prepare

    root = tiny_data.parent
    out = root / "unpacked-64"
    prepare(
        [root / "corpus.txt"],
        out,
        seq_len=64,
        vocab=tiny_data / "vocab.txt",
        packed=False,
        eval_fraction=0.1,
        workers=1,
        progress=False,
    )
    return out


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, tiny_data):
    """A small BertForMaskedLM saved by transformers (a Hugging Face checkpoint dir), with
    tiny_data's tokenizer."""
    from toydata import write_hf_bert

    pytest.importorskip("transformers")
    return write_hf_bert(tmp_path_factory.mktemp("hf") / "bert", tiny_data)
