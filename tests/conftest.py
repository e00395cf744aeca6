import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def small_cfg():
    from tokendrop.config import ModelConfig

    return ModelConfig(vocab_size=97, hidden_size=32, num_layers=6, num_heads=4, intermediate_size=64,
                       max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A prepared packed dataset (T=64, WordPiece trained on a generated corpus)."""
    from tokendrop.data.testing import write_corpus
    from tokendrop.data import prepare

    root = tmp_path_factory.mktemp("tinydata")
    corpus = write_corpus(root / "corpus.txt", docs=300)
    out = root / "packed-64"
    prepare([corpus], out, seq_len=64, vocab_size=200, eval_fraction=0.1, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_data_unpacked(tmp_path_factory, tiny_data):
    from tokendrop.data import prepare

    root = tiny_data.parent
    out = root / "unpacked-64"
    prepare([root / "corpus.txt"], out, seq_len=64, vocab=tiny_data / "vocab.txt", packed=False, eval_fraction=0.1,
            workers=1, progress=False)
    return out
