"""tokendrop.train.memory: the pre-flight memory check counts parameters exactly, estimates no more
activation memory than autograd really keeps (so it never refuses a run that fits), and refuses
in one line with the numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tokendrop.config import load_config
from tokendrop.errors import ConfigError
from tokendrop.models.families import build_model
from tokendrop.train import memory


def _cfg(*overrides: str):
    return load_config("tiny", ["model.vocab_size=200", "model.sep_token_id=3", *overrides])


def _run(cfg):
    """What the estimate reads of a config: the model and drop sections, the largest masking
    rate."""
    return cfg.model, cfg.drop, cfg.data.mask_prob_max


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_the_parameter_count_is_exact_without_allocating(family):
    cfg = _cfg(f'model.family="{family}"', "model.num_layers=5")
    need = memory.estimate(*_run(cfg), 64, 4)
    assert need.params == sum(p.numel() for p in build_model(cfg.model).parameters())
    # built on the meta device: instant
    big = _cfg(f'model.family="{family}"', "model.num_layers=100000")
    assert memory.estimate(*_run(big), 64, 4).params > 100000 * need.params // 10


def test_an_explicit_layer_list_is_counted_too():
    """A ModernBERT whose config lists its layer types (every Hugging Face one continued with
    --init)."""
    types = ["full_attention", "sliding_attention", "sliding_attention"]
    cfg = _cfg('model.family="modernbert"', "model.num_layers=3", f"model.layer_types={types}")
    assert memory.estimate(*_run(cfg), 64, 4).params == sum(
        p.numel() for p in build_model(cfg.model).parameters()
    )


def _saved_bytes(cfg, batch: int, seq_len: int) -> int:
    """Bytes of the tensors autograd saves for one forward of the MLM loss (distinct storages)."""
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.drop)
    ids = torch.randint(5, cfg.model.vocab_size, (batch, seq_len))
    slots = round(cfg.data.mask_prob * seq_len)
    pos = torch.stack([torch.randperm(seq_len - 2)[:slots] + 1 for _ in range(batch)])
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        except (RuntimeError, NotImplementedError):
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids, pos, torch.ones_like(ids), torch.zeros_like(ids))
        model.mlm_nll(logits, torch.gather(ids, 1, pos)).sum()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


@pytest.mark.parametrize(
    "overrides",
    [(), ('model.family="modernbert"',), ("model.hidden_size=96", "model.intermediate_size=384")],
)
def test_the_activation_estimate_is_a_floor(overrides):
    """Dense forwards (the estimate with dropping counts only the kept rows inside the span, the
    same per-row floor)."""
    cfg = _cfg("model.hidden_dropout=0.0", "model.attention_dropout=0.0", *overrides)
    need = memory.estimate(*_run(cfg), 64, 4)
    real = _saved_bytes(cfg, 4, 64)
    assert 0 < need.activation_bytes <= real, (need.activation_bytes, real)
    assert need.activation_bytes > real / 8  # a floor, not a zero


def test_refused_in_one_line_with_the_numbers(monkeypatch):
    cfg = _cfg("model.num_layers=4")
    monkeypatch.setattr(memory, "available", lambda device: (1 << 20, "RAM available (test)"))
    with pytest.raises(ConfigError) as e:
        memory.check_memory(*_run(cfg), 64, 8, torch.device("cpu"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        "model/batch too large for cpu: a training step needs at least"
    )
    assert "0.0 GiB RAM available (test)" in msg and "train.memory_check = false" in msg
    monkeypatch.setattr(memory, "available", lambda device: (64 << 30, "RAM available (test)"))
    assert memory.check_memory(*_run(cfg), 64, 8, torch.device("cpu")).total < 64 << 30
    # CPU ranks of one run share the host's RAM
    need = memory.estimate(*_run(cfg), 64, 8).total
    monkeypatch.setattr(memory, "available", lambda device: (need * 3 // 2, "RAM available (test)"))
    memory.check_memory(*_run(cfg), 64, 8, torch.device("cpu"), world=2)
    with pytest.raises(ConfigError, match="per process x 2 processes"):
        memory.check_memory(*_run(cfg), 64, 8, torch.device("cpu"), world=2, local_world=2)


def test_available_memory_is_read_from_the_machine():
    have, what = memory.available(torch.device("cpu"))
    assert have > 0 and "RAM" in what
    if torch.cuda.is_available():
        free, _ = memory.available(torch.device("cuda", 0))
        assert 0 < free <= torch.cuda.get_device_properties(0).total_memory


def test_fsdp_shards_the_state():
    cfg = _cfg()
    whole, sharded = (
        memory.estimate(*_run(cfg), 64, 8),
        memory.estimate(*_run(cfg), 64, 8, world=4, sharded=True),
    )
    assert (
        sharded.state_bytes == whole.state_bytes // 4
        and sharded.activation_bytes == whole.activation_bytes
    )
    assert dataclasses.asdict(whole)["params"] == whole.params
