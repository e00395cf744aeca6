"""A transformers MLM model from a checkpoint without an MLM head (MiniLM's layout): the integration
says so in one line with the remedy, and ``warm_up_mlm_head`` trains the head alone, as pretrain
does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tokendrop.transformers import (  # noqa: E402
    TokenDroppingCallback,
    apply_token_dropping,
    mlm_head_is_fresh,
    warm_up_mlm_head,
)


def _headless(tmp_path):
    """A trained-looking BertModel saved without its MLM head, loaded as AutoModelForMaskedLM."""
    conf = transformers.BertConfig(
        vocab_size=60,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    enc = transformers.BertModel(conf)
    with torch.no_grad():  # "trained": LayerNorms away from their initial 1 / 0
        for m in enc.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.add_(0.1 * torch.randn_like(m.weight))
    enc.save_pretrained(tmp_path / "minilm-like")
    return transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "minilm-like"), conf


def _batches(n=4):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(5, 60, (4, 16), generator=g)
        labels = torch.full_like(ids, -100)
        labels[:, 3:6] = ids[:, 3:6]
        out.append({"input_ids": ids, "labels": labels})
    return out


def test_a_headless_checkpoint_is_recognised_and_its_head_warmed_up_alone(tmp_path):
    model, conf = _headless(tmp_path)
    assert mlm_head_is_fresh(model)
    # from scratch: everything is fresh
    assert not mlm_head_is_fresh(transformers.BertForMaskedLM(conf))
    encoder = {n: p.detach().clone() for n, p in model.bert.named_parameters()}
    losses = warm_up_mlm_head(model, _batches(), steps=12, lr=1e-2)
    assert len(losses) == 12 and losses[-1] < losses[0]
    # the tied decoder too
    assert all(torch.equal(p, encoder[n]) for n, p in model.bert.named_parameters())
    assert not mlm_head_is_fresh(model) and all(p.requires_grad for p in model.parameters())
    with pytest.raises(Exception, match="steps must be a positive integer"):
        warm_up_mlm_head(model, _batches(), steps=0)


def test_the_callback_names_a_fresh_head_and_the_remedy_in_one_line(tmp_path, capsys):
    model, _ = _headless(tmp_path)
    apply_token_dropping(model, special_ids={"pad": 0, "cls": 1, "sep": 2, "mask": 3})
    args = SimpleNamespace(should_log=True, output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=0, max_steps=10)
    capsys.readouterr()  # transformers' own loading output
    TokenDroppingCallback().on_train_begin(args, state, None, model=model, train_dataloader=None)
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "MLM head is untrained" in err[0] and "warm_up_mlm_head(model" in err[0]
    ), err
    # eval mode: the patch does not drop; the head moves
    warm_up_mlm_head(model.eval(), _batches(), steps=2)
    TokenDroppingCallback().on_train_begin(args, state, None, model=model, train_dataloader=None)
    assert capsys.readouterr().err == ""


def test_the_token_dropping_state_prints_in_one_readable_line(tmp_path):
    from tokendrop.transformers import token_dropping_state

    model, _ = _headless(tmp_path)
    apply_token_dropping(
        model, special_ids={"pad": 0, "cls": 1, "sep": 2, "mask": 3}, total_steps=10
    )
    text = repr(token_dropping_state(model))
    assert text == (
        "TokenDroppingState(bert, cumulative/drop rate 0.5 in layers [0, 1) of 2, "
        "step 0/10, on, "
        "sparse_prediction=True, importance=<60 scores>)"
    ), text
