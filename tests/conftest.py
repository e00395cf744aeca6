import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def small_cfg():
    from tokendrop.config import ModelConfig

    return ModelConfig(vocab_size=97, hidden_size=32, num_layers=6, num_heads=4, intermediate_size=64,
                       max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)


SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
