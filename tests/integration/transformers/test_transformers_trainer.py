"""tokendrop.transformers with a real transformers.Trainer: a 20-step run with token dropping that
checkpoints and is resumed ends with the weights and importance state of the uninterrupted run; its
checkpoint loads with AutoModelForMaskedLM (no missing or unexpected keys) and holds the state
files; the callback logs and schedules; the masking-rate collator."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from toydata import toy_documents, write_toy_vocab  # noqa: E402

from tokendrop.transformers import (  # noqa: E402
    MaskingRateCollator,
    TokenDroppingCallback,
    TokenDroppingError,
    apply_token_dropping,
    token_dropping_state,
)
from tokendrop.transformers.state import STATE_JSON, STATE_TENSORS  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    write_toy_vocab(d / "vocab.txt", num_words=200)
    tok = transformers.BertTokenizerFast.from_pretrained(str(d))
    assert len(tok) > 200
    return tok


@pytest.fixture(scope="module")
def dataset(tokenizer):
    docs = [
        d.replace("\n", " ")
        for d in toy_documents(40, seed=3, min_words=8, max_words=40, num_words=200)
    ]
    return [{"input_ids": tokenizer(d, truncation=True, max_length=48)["input_ids"]} for d in docs]


def _model(tokenizer, family: str = "bert"):
    torch.manual_seed(0)
    if family == "bert":
        cfg = transformers.BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=tokenizer.pad_token_id,
        )
        return transformers.BertForMaskedLM(cfg)
    cfg = transformers.ModernBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=2,
        max_position_embeddings=64,
        local_attention=8,
        pad_token_id=tokenizer.pad_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        mlp_dropout=0.1,
        attention_dropout=0.1,
    )
    return transformers.ModernBertForMaskedLM(cfg)


def _trainer(model, tokenizer, dataset, out, collator=None, steps: int = 20, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=2e-3,
        warmup_steps=2,
        save_strategy="steps",
        save_steps=10,
        logging_steps=5,
        report_to=[],
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        **kw,
    )
    collator = collator or transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=0.15
    )
    return transformers.Trainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=collator,
        callbacks=[TokenDroppingCallback()],
    )


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_resumed_run_equals_the_uninterrupted_one(family, tokenizer, dataset, tmp_path):
    """40 sequences, 4 per step: a checkpoint every 10 steps (an epoch); half_random exercises both
    the learned importance and the selector's generator."""
    out = tmp_path / "run"
    opts = dict(tokenizer=tokenizer, method="half_random", rate=0.5)
    a = apply_token_dropping(_model(tokenizer, family), **opts)
    _trainer(a, tokenizer, dataset, out).train()
    st_a = token_dropping_state(a)
    assert st_a.step == 20 and st_a.total_steps == 20
    weights_a = {k: v.detach().clone() for k, v in a.state_dict().items()}
    ckpt = out / "checkpoint-10"
    assert (ckpt / STATE_TENSORS).is_file() and (ckpt / STATE_JSON).is_file()
    assert json.loads((ckpt / STATE_JSON).read_text())["step"] == 10

    b = apply_token_dropping(_model(tokenizer, family), **opts)
    trainer = _trainer(b, tokenizer, dataset, out)
    trainer.train(resume_from_checkpoint=str(ckpt))
    st_b = token_dropping_state(b)
    assert st_b.step == 20
    assert torch.equal(st_a.importance, st_b.importance)
    assert not torch.equal(st_a.importance, st_a.initial)
    for k, v in b.state_dict().items():
        assert torch.equal(v, weights_a[k]), k
    logged = [r for r in trainer.state.log_history if "token_dropping/kept_fraction" in r]
    assert logged and logged[-1]["token_dropping/kept_fraction"] == pytest.approx(0.5, abs=0.05)
    assert logged[-1]["token_dropping/importance_ids"] > 0

    final = out / "checkpoint-20"
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(final, output_loading_info=True)
    assert type(back) is type(a)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    for k, v in back.state_dict().items():
        assert torch.equal(v, weights_a[k]), k


def test_resume_needs_the_state_and_the_same_options(tokenizer, dataset, tmp_path):
    out = tmp_path / "run"
    a = apply_token_dropping(_model(tokenizer), tokenizer=tokenizer, rate=0.5)
    _trainer(a, tokenizer, dataset, out, steps=10).train()
    other = apply_token_dropping(_model(tokenizer), tokenizer=tokenizer, rate=0.25)
    with pytest.raises(TokenDroppingError, match="rate=0.5"):
        _trainer(other, tokenizer, dataset, out, steps=20).train(
            resume_from_checkpoint=str(out / "checkpoint-10")
        )
    (out / "checkpoint-10" / STATE_JSON).unlink()
    same = apply_token_dropping(_model(tokenizer), tokenizer=tokenizer, rate=0.5)
    with pytest.raises(TokenDroppingError, match="no token_dropping.json"):
        _trainer(same, tokenizer, dataset, out, steps=20).train(
            resume_from_checkpoint=str(out / "checkpoint-10")
        )


def test_masking_rate_collator_follows_the_run(tokenizer, dataset, tmp_path):
    base = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    collator = MaskingRateCollator(base, 0.4, 0.1)
    torch.manual_seed(0)
    examples = dataset * 4
    masked = {}
    for p in (0.0, 0.5, 1.0):
        collator.set_progress(p)
        batch = collator(examples)
        real = batch["attention_mask"].bool() & ~torch.isin(
            batch["input_ids"], torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id])
        )
        masked[p] = float((batch["labels"] != -100).sum() / real.sum())
    assert masked[0.0] == pytest.approx(0.4, abs=0.05) and masked[1.0] == pytest.approx(
        0.1, abs=0.03
    )
    assert masked[0.0] > masked[0.5] > masked[1.0]
    # in a Trainer run the callback moves the rate with the steps and logs it
    model = apply_token_dropping(_model(tokenizer), tokenizer=tokenizer)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=10,
        per_device_train_batch_size=4,
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    rates = MaskingRateCollator(base, 0.4, 0.1)
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=rates,
        callbacks=[TokenDroppingCallback()],
    )
    trainer.train()
    logged = [
        r["token_dropping/mask_rate"]
        for r in trainer.state.log_history
        if "token_dropping/mask_rate" in r
    ]
    # set as steps 5 and 10 end
    assert logged == pytest.approx([0.4 - 0.3 * 5 / 10, 0.4 - 0.3 * 10 / 10])
    with pytest.raises(TokenDroppingError, match="mlm=True"):
        MaskingRateCollator(
            transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False), 0.3, 0.15
        )
    with pytest.raises(TokenDroppingError, match="start must be a masking rate"):
        MaskingRateCollator(base, 1.5, 0.15)
