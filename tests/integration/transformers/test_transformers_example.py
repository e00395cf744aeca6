"""examples/transformers_mlm.py (run_mlm.py-shaped) on a local tiny model directory: trains with
--token_dropping, checkpoints with the state files, resumes, saves a model AutoModelForMaskedLM
loads without missing keys; its text/JSONL/Parquet readers and one-line errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from toydata import toy_documents, write_toy_vocab  # noqa: E402

from tokendrop.errors import TokendropError  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "transformers_mlm.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("transformers_mlm_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny BertForMaskedLM saved by transformers, with its WordPiece tokenizer."""
    d = tmp_path_factory.mktemp("tiny-bert")
    write_toy_vocab(d / "vocab.txt", num_words=200)
    tok = transformers.BertTokenizerFast.from_pretrained(str(d))
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    transformers.BertForMaskedLM(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def texts():
    return [
        d.replace("\n", " ")
        for d in toy_documents(30, seed=4, min_words=10, max_words=40, num_words=200)
    ]


def test_the_example_trains_checkpoints_and_resumes(example, model_dir, texts, tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    common = [
        "--model_name_or_path",
        str(model_dir),
        "--train_file",
        str(train),
        "--output_dir",
        str(out),
        "--max_seq_length",
        "32",
        "--per_device_train_batch_size",
        "4",
        "--save_steps",
        "2",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
        "--use_cpu",
        "--disable_tqdm",
        "true",
        "--token_dropping",
        "--token_dropping_rate",
        "0.5",
        "--token_dropping_option",
        "beta=0.99",
        "--mask_rate_end",
        "0.1",
        "--mlm_probability",
        "0.3",
    ]
    metrics = example.main(common + ["--max_steps", "2"])
    assert metrics["train_loss"] > 0
    ckpt = out / "checkpoint-2"
    meta = json.loads((ckpt / "token_dropping.json").read_text())
    assert meta["step"] == 2 and meta["options"]["beta"] == 0.99 and meta["options"]["rate"] == 0.5
    example.main(common + ["--max_steps", "4", "--resume_from_checkpoint", str(ckpt)])
    assert json.loads((out / "checkpoint-4" / "token_dropping.json").read_text())["step"] == 4
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # the final model is a plain transformers model
    assert not (out / "token_dropping.json").exists()


def test_the_example_reads_text_jsonl_and_parquet(example, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.txt").write_text("one two\n\nthree\n", encoding="utf-8")
    (tmp_path / "a.jsonl").write_text('{"text": "one two"}\n{"text": "three"}\n', encoding="utf-8")
    pq.write_table(pa.table({"body": ["one two", "three"]}), tmp_path / "a.parquet")
    assert example.read_texts(str(tmp_path / "a.txt"), "text") == ["one two", "three"]
    assert example.read_texts(str(tmp_path / "a.jsonl"), "text") == ["one two", "three"]
    assert example.read_texts(str(tmp_path / "a.parquet"), "body") == ["one two", "three"]
    for name, column, match in (
        ("a.parquet", "text", "no column 'text'"),
        ("a.jsonl", "body", "no field 'body'"),
        ("a.csv", "text", "not found"),
        ("a.txt.gz", "text", "not found"),
    ):
        with pytest.raises(TokendropError, match=match):
            example.read_texts(str(tmp_path / name), column)
    (tmp_path / "a.csv").write_text("x\n")
    with pytest.raises(TokendropError, match="expected a .txt, .jsonl or .parquet file"):
        example.read_texts(str(tmp_path / "a.csv"), "text")
