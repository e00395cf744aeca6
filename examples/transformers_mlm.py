#!/usr/bin/env python
"""Masked-language-model (continued) pretraining with transformers' Trainer -- shaped like
transformers' examples/pytorch/language-modeling/run_mlm.py -- plus token dropping from tokendrop.

    python examples/transformers_mlm.py --model_name_or_path answerdotai/ModernBERT-base \\
        --train_file corpus.txt --output_dir out --max_steps 10000 \\
        --per_device_train_batch_size 32 --token_dropping --token_dropping_rate 0.5

The model is a name on the Hugging Face Hub or a local directory (BertForMaskedLM or
ModernBertForMaskedLM); the training text is a .txt file (one example per line), a .jsonl file or a
.parquet file (the ``--text_column`` field).  Every TrainingArguments flag works (``--save_steps``,
``--resume_from_checkpoint``, ``--bf16``, ...).  Token dropping is the three marked lines below;
``--mask_rate_end`` adds a masking-rate schedule (``--mlm_probability`` at the start).  The saved
model (``--output_dir`` and every ``checkpoint-N``) is a plain transformers model; the checkpoints
also hold ``token_dropping.safetensors`` / ``.json``, which ``--resume_from_checkpoint`` reads.
docs/transformers.md explains the options.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from tokendrop.errors import TokendropError
from tokendrop.transformers import (  # (1) token dropping
    MaskingRateCollator,
    TokenDroppingCallback,
    apply_token_dropping,
)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "A model on the Hub or a local directory (BERT or ModernBERT MLM)."}
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "eager, sdpa, flex_attention, ..."}
    )


@dataclass
class DataArguments:
    train_file: str = field(
        metadata={"help": "Training text: .txt (one example per line), .jsonl or .parquet."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "Held-out text, same formats."}
    )
    text_column: str = field(
        default="text", metadata={"help": "The text field of a .jsonl or .parquet file."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per training sequence."})
    line_by_line: bool = field(
        default=False,
        metadata={
            "help": "One sequence per line (padded) instead of "
            "concatenating the texts into full-length blocks."
        },
    )
    mlm_probability: float = field(
        default=0.15, metadata={"help": "Masking rate (at the start of a schedule)."}
    )
    mask_rate_end: float | None = field(
        default=None, metadata={"help": "Masking rate at the end of the run."}
    )
    mask_schedule: str = field(
        default="linear", metadata={"help": "linear or cosine (with --mask_rate_end)."}
    )


@dataclass
class TokenDroppingArguments:
    token_dropping: bool = field(default=False, metadata={"help": "Train with token dropping."})
    token_dropping_method: str = field(
        default="cumulative",
        metadata={"help": "cumulative, half_random, random, frequency or random_ltd."},
    )
    token_dropping_rate: float = field(
        default=0.5, metadata={"help": "Share of the tokens the half layers drop."}
    )
    token_dropping_variant: str = field(
        default="drop", metadata={"help": "drop, pass, avg or layer_rearranged."}
    )
    token_dropping_option: list[str] = field(
        default_factory=list,
        metadata={
            "help": "More options as KEY=VALUE (a JSON value or a string), e.g. start=4 "
            "end=11 beta=0.99."
        },
    )


def read_texts(path: str, column: str) -> list[str]:
    """The texts of a .txt (non-empty lines), .jsonl or .parquet file."""
    p = Path(path)
    if not p.is_file():
        raise TokendropError(f"{p}: not found; pass an existing --train_file/--validation_file")
    if p.suffix == ".txt":
        return [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    if p.suffix == ".jsonl":
        rows = [
            json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        if rows and column not in rows[0]:
            raise TokendropError(
                f"{p}: no field {column!r} in its records (fields: {', '.join(rows[0])}); "
                "pass --text_column"
            )
        return [str(r[column]) for r in rows]
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(p)
        if column not in table.column_names:
            raise TokendropError(
                f"{p}: no column {column!r} (columns: {', '.join(table.column_names)}); "
                "pass --text_column"
            )
        return [str(t) for t in table.column(column).to_pylist()]
    raise TokendropError(
        f"{p}: expected a .txt, .jsonl or .parquet file, got {p.suffix or 'no suffix'!r}"
    )


def tokenize(texts: list[str], tokenizer, data: DataArguments) -> list[dict]:
    """run_mlm.py's two ways: one example per line (truncated), or every text tokenized, the results
    concatenated and cut into blocks of --max_seq_length tokens (the remainder dropped)."""
    if data.line_by_line:
        enc = tokenizer(
            texts, truncation=True, max_length=data.max_seq_length, return_special_tokens_mask=True
        )
        return [
            {"input_ids": i, "special_tokens_mask": s}
            for i, s in zip(enc["input_ids"], enc["special_tokens_mask"])
        ]
    enc = tokenizer(texts, return_special_tokens_mask=True)
    ids = [t for row in enc["input_ids"] for t in row]
    special = [t for row in enc["special_tokens_mask"] for t in row]
    n = data.max_seq_length
    if len(ids) < n:
        raise TokendropError(
            f"{data.train_file}: {len(ids)} tokens, fewer than one block of --max_seq_length {n}; "
            "lower it or use --line_by_line"
        )
    return [
        {"input_ids": ids[i : i + n], "special_tokens_mask": special[i : i + n]}
        for i in range(0, len(ids) - n + 1, n)
    ]


def token_dropping_options(td: TokenDroppingArguments) -> dict:
    opts = {
        "method": td.token_dropping_method,
        "rate": td.token_dropping_rate,
        "variant": td.token_dropping_variant,
    }
    for item in td.token_dropping_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise TokendropError(f"--token_dropping_option {item!r}: expected KEY=VALUE")
        try:
            opts[key] = json.loads(value)
        except json.JSONDecodeError:
            opts[key] = value
    return opts


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, TokenDroppingArguments, TrainingArguments)
    )
    model_args, data, td, training_args = parser.parse_args_into_dataclasses(args=argv)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    kw = (
        {"attn_implementation": model_args.attn_implementation}
        if model_args.attn_implementation
        else {}
    )
    model = AutoModelForMaskedLM.from_pretrained(model_args.model_name_or_path, **kw)
    if td.token_dropping:
        # (2)
        model = apply_token_dropping(model, tokenizer=tokenizer, **token_dropping_options(td))
    train = tokenize(read_texts(data.train_file, data.text_column), tokenizer, data)
    evaluation = (
        tokenize(read_texts(data.validation_file, data.text_column), tokenizer, data)
        if data.validation_file
        else None
    )
    collator = DataCollatorForLanguageModeling(
        tokenizer,
        mlm_probability=data.mlm_probability,
        pad_to_multiple_of=8 if data.line_by_line else None,
    )
    if data.mask_rate_end is not None:
        collator = MaskingRateCollator(
            collator, data.mlm_probability, data.mask_rate_end, data.mask_schedule
        )
    callbacks = [TokenDroppingCallback()] if td.token_dropping else []  # (3)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    resume = training_args.resume_from_checkpoint
    if resume == "last":
        resume = get_last_checkpoint(training_args.output_dir)
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model()  # the unpatched model's tensors: loads with AutoModelForMaskedLM
    metrics = dict(result.metrics)
    if evaluation is not None:
        # eval mode: the full model, exactly the unpatched forward
        metrics.update(trainer.evaluate())
    trainer.log_metrics("train", metrics)
    return metrics


if __name__ == "__main__":
    try:
        main()
    except TokendropError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
