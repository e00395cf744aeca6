"""The one encoder forward (tokendrop.models.encoder.EncoderModel): every registered family's bare
encoder plugs its parts into it and writes no forward of its own; the cos/sin of a forward are
computed once per (rows, base)."""

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.config.model import MODEL_PRESETS
from tokendrop.dropping.engine import Rows
from tokendrop.models.encoder import EncoderModel
from tokendrop.models.families import FAMILIES, build_model
from tokendrop.models.rotary import RowRopes


def _tiny(family: str) -> ModelConfig:
    def size(name: str) -> int:
        return MODEL_PRESETS[name]["num_layers"] * MODEL_PRESETS[name]["hidden_size"] ** 2

    return ModelConfig(
        preset=min(FAMILIES[family].presets, key=size), vocab_size=64, sep_token_id=3
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_runs_the_one_forward(family):
    cfg = _tiny(family)
    enc = build_model(cfg).encoder
    assert isinstance(enc, EncoderModel)
    # the skeleton is not written again: no class between the family's and EncoderModel has one
    for cls in type(enc).__mro__[: type(enc).__mro__.index(EncoderModel)]:
        assert "forward" not in vars(cls), f"{cls.__name__} writes its own forward"
    assert list(enc.layers) and all(hasattr(layer, "window") for layer in enc.layers)
    assert (enc.rotary is not None) == cfg.schema.rotary


def test_row_ropes_computes_once_per_rows_and_base():
    calls = []

    def compute(rows, base):
        calls.append((id(rows), base))
        return rows.pos * base, rows.pos

    ropes = RowRopes(compute)
    a, b = Rows(pos=torch.arange(4)[None]), Rows(pos=torch.arange(2)[None])
    first = ropes(a, 2)
    assert ropes(a, 2) is first and ropes(a, 3)[0].tolist() == [[0, 3, 6, 9]]
    ropes(b, 2)
    assert len(calls) == 3
