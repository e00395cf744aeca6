"""The GPU-sized continued-pretraining presets (continue-gpu, modern-continue-gpu) load, validate,
and run one step from a small local checkpoint of their family with the GPU-only settings
overridden for the CPU (so that they cannot rot unnoticed)."""

from __future__ import annotations

import json

import pytest

from tokendrop.config import load_config

CPU = [
    "train.device=cpu",
    "train.precision=fp32",
    "train.compile=false",
    "train.batch_size=4",
    "train.batch_warmup_start=2",
    "train.steps=2",
    "train.warmup_steps=0",
    "train.log_every=1",
    "train.eval_every=1",
    "train.eval_batches=1",
    "train.ckpt_every=2",
    "train.head_warmup_steps=0",
    "data.num_workers=0",
    "data.seq_len=64",
    "drop.importance_init_batches=1",
]


def test_presets_load_and_validate():
    bert, modern = load_config("continue-gpu"), load_config("modern-continue-gpu")
    for cfg in (bert, modern):
        assert (cfg.drop.method, cfg.drop.variant, cfg.drop.rate) == ("cumulative", "drop", 0.5)
        assert (cfg.train.batch_size, cfg.train.precision, cfg.train.compile, cfg.train.device) == (
            256,
            "auto",
            True,
            "auto",
        )
        # the lr warm-up is a share of the run (500 of its 10,000 steps), resolved when it starts
        assert (cfg.train.warmup_steps, cfg.train.warmup_ratio) == ("auto", 0.05)
        assert cfg.train.ckpt_every <= cfg.train.steps
    for cfg in (bert, modern):  # the strong dense recipe beneath the dropping (docs/results.md)
        assert (cfg.data.mask_prob, cfg.data.mask_schedule) == ([0.3, 0.15], "linear")
        assert (cfg.train.lr_schedule, cfg.train.decay_share, cfg.train.decay_shape) == (
            "wsd",
            0.2,
            "1-sqrt",
        )
        # from half the batch (128 of 256) over the first quarter of the run
        assert (cfg.train.batch_warmup_start, cfg.train.batch_warmup_share) == (0.5, 0.25)
    assert (bert.data.seq_len, modern.data.seq_len) == (512, 1024)
    assert (modern.model.document_attention, modern.model.attention_backend) == ("auto", "auto")


def _pretrain(preset, init, data, out) -> dict:
    from tokendrop.cli import main

    sets = [*CPU, f"data.path={json.dumps(str(data))}"]
    assert (
        main(
            [
                "pretrain",
                "--config",
                preset,
                "--init",
                str(init),
                "--out",
                str(out),
                "--quiet",
                *sum((["--set", s] for s in sets), []),
            ]
        )
        == 0
    )
    return json.loads((out / "meta.json").read_text()) if (out / "meta.json").is_file() else {}


def test_continue_gpu_runs_on_cpu_from_a_bert_checkpoint(tiny_bert_dir, tiny_data, tmp_path):
    _pretrain("continue-gpu", tiny_bert_dir, tiny_data, tmp_path / "run")
    cfg = load_config(tmp_path / "run" / "config.toml")
    assert (
        cfg.drop.method == "cumulative"
        and cfg.model.hidden_size == 32
        and cfg.model.num_layers == 2
    )
    assert any((tmp_path / "run" / "checkpoints").iterdir())


def test_modern_continue_gpu_runs_on_cpu_from_a_modernbert_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    from toydata import write_bpe_tokenizer_dir

    from tokendrop.data import prepare
    from tokendrop.data.tokenizer import load_tokenizer, num_ids
    from tokendrop.finetuning.task_corpus import write_task_corpus

    tok_dir = write_bpe_tokenizer_dir(tmp_path / "tok")
    tok = load_tokenizer(tok_dir)
    torch.manual_seed(0)
    conf = transformers.ModernBertConfig(
        vocab_size=num_ids(tok),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=16,
        pad_token_id=tok.token_to_id("[PAD]"),
        cls_token_id=tok.token_to_id("[CLS]"),
        sep_token_id=tok.token_to_id("[SEP]"),
        bos_token_id=tok.token_to_id("[CLS]"),
        eos_token_id=tok.token_to_id("[SEP]"),
    )
    hf = tmp_path / "modern"
    transformers.ModernBertForMaskedLM(conf).save_pretrained(hf)
    for n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (hf / n).write_bytes((tok_dir / n).read_bytes())
    data = tmp_path / "data"
    prepare(
        [write_task_corpus(tmp_path / "c.txt", num_docs=120)],
        data,
        64,
        tokenizer=hf,
        eval_fraction=0.1,
        workers=1,
        progress=False,
    )
    _pretrain("modern-continue-gpu", hf, data, tmp_path / "run")
    cfg = load_config(tmp_path / "run" / "config.toml")
    assert (
        cfg.model.family == "modernbert"
        and cfg.data.mask_prob == [0.3, 0.15]
        and cfg.model.uses_document_attention
    )
