"""tokendrop.train.runtime: the device a command asks for, its precision, AdamW's parameter
groups."""

import pytest
import torch

from tokendrop.errors import ConfigError
from tokendrop.train.runtime import autocast_dtype, param_groups, resolve_device


def test_cuda_without_cuda_is_one_line_naming_the_field(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        ConfigError,
        match=r"^bench\.device: 'cuda' requested but CUDA is not available .*use "
        r"bench\.device = cpu",
    ) as e:
        resolve_device("cuda", 0, "bench.device", ConfigError)
    assert "\n" not in str(e.value)
    assert resolve_device("auto") == torch.device("cpu")


def test_precision_and_parameter_groups():
    assert (
        autocast_dtype("auto", torch.device("cpu")) is None
        and autocast_dtype("bf16", torch.device("cpu")) is torch.bfloat16
    )
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    decay, no_decay = param_groups(model, 0.01)
    assert [p.ndim for p in decay["params"]] == [2] and all(p.ndim == 1 for p in no_decay["params"])
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
