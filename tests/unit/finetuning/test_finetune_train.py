"""finetune(): a classifier learns a keyword-sentiment task in seconds (from our checkpoint and from
an exported-then-reimported Hugging Face dir); SQuAD end to end on generated data; outputs and
errors."""

import argparse
import json
import math
import shutil

import pytest
import torch
from toydata import sentiment_examples, write_checkpoint, write_squad_examples

from tokendrop.cli import cmd_finetune
from tokendrop.config import FinetuneConfig
from tokendrop.finetuning import FinetuneError, finetune, finetune_config
from tokendrop.finetuning.fit import linear_schedule
from tokendrop.finetuning.tasks import TASKS
from tokendrop.train.runtime import param_groups


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "run-seed0")


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory):
    return TASKS["sst2"].write_examples(tmp_path_factory.mktemp("sst"), n_train=400, n_dev=100)


def _cfg(data, **kw):
    base = dict(
        task="sst2",
        data=str(data),
        epochs=3,
        lr=1e-3,
        batch_size=16,
        log_every=0,
        device="cpu",
        threads=1,
    )
    base.update(kw)
    return FinetuneConfig(**base)


def test_keyword_sentiment_from_our_checkpoint(ckpt, sentiment, tmp_path):
    r = finetune(_cfg(sentiment), ckpt, tmp_path / "out", log=None)
    # the timing record is consistent (no bound on its values: tests assert no timings)
    t = r["timing"]
    assert 0 < t["train_s"] <= t["total_s"] and t["encode_s"] >= 0 and t["eval_s"] >= 0
    # the process's CPU time beside the wall clock, whole run and training loop
    assert 0 < t["train_cpu_s"] <= t["cpu_s"] and r["train"]["cpu_s"] == t["train_cpu_s"]
    assert r["train"]["examples"] == 400 * 3 and r["train"]["examples_per_s"] == pytest.approx(
        1200 / t["train_s"]
    )
    assert r["scores"]["sst2"] >= 90.0, r["metrics"]
    assert r["metrics"]["dev"]["accuracy"] == r["scores"]["sst2"] == r["accuracy"]
    assert r["model_source"] == "tokendrop" and r["precision"] == "fp32"
    assert r["train"]["examples_per_s"] > 0 and r["train"]["steps"] == math.ceil(400 / 16) * 3
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["scores"] == r["scores"] and saved["timing"]["cpu_s"] == t["cpu_s"]
    preds = (tmp_path / "out" / "predictions" / "dev.tsv").read_text().splitlines()
    assert preds[0] == "index\tprediction\tlabel" and len(preds) == 101
    assert not [p for p in (tmp_path / "out").rglob("*") if p.name.endswith(".tmp")]


def test_keyword_sentiment_from_exported_and_reimported_hf_dir(ckpt, sentiment, tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokendrop.models.source import export_hf

    exported = export_hf(ckpt, tmp_path / "hf")
    # re-import with transformers itself and save again: a genuine Hugging Face directory
    # (BertForPreTraining keeps the pooler; a BertForMaskedLM has none)
    pt = transformers.BertForPreTraining.from_pretrained(exported)
    pt.save_pretrained(tmp_path / "hf2", safe_serialization=True)
    shutil.copy(exported / "vocab.txt", tmp_path / "hf2" / "vocab.txt")
    r = finetune(_cfg(sentiment, save_model=True), tmp_path / "hf2", tmp_path / "out", log=None)
    assert r["model_source"] == "huggingface"
    assert r["scores"]["sst2"] >= 90.0, r["metrics"]
    # the fine-tuned classifier loads in transformers and predicts like ours
    clf = transformers.BertForSequenceClassification.from_pretrained(
        tmp_path / "out" / "model"
    ).eval()
    from tokendrop.finetuning.common import load_finetune_tokenizer

    tok = load_finetune_tokenizer(tmp_path / "out" / "model")
    enc = tok.encode("The movie was truly wonderful")
    with torch.no_grad():
        hf_logits = clf(
            input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])
        ).logits
    assert int(hf_logits.argmax()) == 1


def test_squad_end_to_end_on_generated_data(ckpt, tmp_path):
    data = write_squad_examples(tmp_path / "squad", n_train=160, n_dev=40)
    cfg = _cfg(
        data, task="squad1", epochs=4, lr=2e-3, max_seq_len_qa=64, doc_stride=24, max_query_len=16
    )
    r = finetune(cfg, ckpt, tmp_path / "v1", log=None)
    assert r["scores"]["squad1"] >= 80.0, r["metrics"]
    preds = json.loads((tmp_path / "v1" / "predictions" / "dev.json").read_text())
    assert len(preds) == 40 and all(isinstance(v, str) for v in preds.values())
    cfg2 = _cfg(
        data,
        task="squad2",
        epochs=1,
        lr=2e-3,
        max_seq_len_qa=64,
        doc_stride=24,
        max_query_len=16,
        max_train_examples=60,
    )
    r2 = finetune(cfg2, ckpt, tmp_path / "v2", log=None)
    m = r2["metrics"]["dev"]
    assert {"f1", "exact", "null_threshold", "HasAns_f1", "NoAns_f1"} <= set(m)
    assert (tmp_path / "v2" / "predictions" / "dev_null_odds.json").is_file()


def test_mnli_scores_ax_with_the_mnli_model(ckpt, tmp_path):
    from toydata import write_glue_examples

    root = write_glue_examples(tmp_path / "glue", n_train=32, n_dev=16)
    r = finetune(_cfg(root, task="mnli", epochs=1), ckpt, tmp_path / "out", log=None)
    assert set(r["scores"]) == {"mnli_m", "mnli_mm", "ax"}
    assert "mcc" in r["metrics"]["ax"] and (tmp_path / "out" / "predictions" / "ax.tsv").is_file()
    r = finetune(_cfg(root, task="mnli", epochs=1, ax_data=""), ckpt, tmp_path / "out2", log=None)
    assert "ax" not in r["scores"]


def test_optimizer_groups_and_schedule(ckpt):
    from tokendrop.models.bert.model import BertForSequenceClassification
    from tokendrop.models.source import load_pretrained

    model, _ = load_pretrained(ckpt, BertForSequenceClassification, num_labels=2)
    decay, no_decay = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim >= 2 for p in decay["params"]) and decay["weight_decay"] == 0.01
    assert no_decay["weight_decay"] == 0.0
    nd = {names[id(p)] for p in no_decay["params"]}
    assert all(n.endswith(".bias") or ".norm." in n for n in nd)
    assert any("norm.weight" in n for n in nd) and "classifier.bias" in nd
    f = linear_schedule(10, 110)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0) and f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5) and f(110) == 0.0


def test_errors_are_one_line(ckpt, sentiment, tmp_path):
    cases = [
        (dict(task="ax"), "evaluation-only"),
        (dict(task="colab"), "unknown task 'colab'"),
        (dict(data_dir=str(tmp_path / "missing")), "does not exist"),
        (dict(epochs=0), "finetune.epochs"),
    ]
    for kw, msg in cases:
        with pytest.raises(FinetuneError) as e:
            finetune(_cfg(kw.pop("data_dir", sentiment), **kw), ckpt, tmp_path / "o", log=None)
        assert msg in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FinetuneError, match="cannot load model"):
        finetune(_cfg(sentiment), tmp_path, tmp_path / "o", log=None)
    # a vocab.txt with more tokens than the model has embeddings
    import shutil

    bad = tmp_path / "bad-vocab"
    shutil.copytree(ckpt, bad)
    vocab = bad / "tokenizer" / "vocab.txt"
    vocab.write_text(vocab.read_text() + "".join(f"extra{i}\n" for i in range(10)))
    with pytest.raises(FinetuneError, match="wrong vocab.txt for this model"):
        finetune(_cfg(sentiment), bad, tmp_path / "o", log=None)
    assert not (tmp_path / "o").exists()


def test_cli_entry_point(ckpt, sentiment, tmp_path, capsys):
    a = argparse.Namespace(
        model=str(ckpt),
        task="sst2",
        data=str(sentiment),
        out=str(tmp_path / "cli"),
        config=None,
        overrides=[
            "epochs=1",
            "lr=1e-3",
            "batch_size=32",
            "log_every=0",
            "max_train_examples=64",
            "threads=1",
        ],
        overwrite=False,
    )
    assert cmd_finetune(a) == 0
    out = capsys.readouterr().out
    assert "sst2:" in out and "train examples/s" in out
    cfg = finetune_config(None, ["task=qnli", "epochs=2"], task="sst2", data="some/dir")
    assert cfg.task == "sst2" and cfg.epochs == 2.0 and cfg.data == "some/dir"


def test_custom_jsonl_task_and_presets(ckpt, tmp_path):
    from tokendrop.config import load_config

    for seed, (name, n) in enumerate((("train.jsonl", 400), ("dev.jsonl", 100)), 1):
        rows = [
            json.dumps({"text": text, "sentiment": ["neg", "pos"][lab]})
            for text, lab in sentiment_examples(tmp_path / f"sst-{name}", n, seed)
        ]
        (tmp_path / name).write_text("\n".join(rows) + "\n")
    cfg = _cfg(tmp_path, task="custom", text_a="text", label="sentiment")
    r = finetune(cfg, ckpt, tmp_path / "out", log=None)
    assert r["labels"] == ["neg", "pos"] and r["scores"]["custom"] >= 90.0
    demo = load_config("finetune-demo", ['data="somewhere/sst2"'], cls=FinetuneConfig)
    assert demo.task == "sst2" and demo.data == "somewhere/sst2"


def test_tokendrop_cli_finetune_and_error_exit(ckpt, sentiment, tmp_path, capsys):
    from tokendrop.cli import main

    rc = main(
        [
            "finetune",
            "--model",
            str(ckpt),
            "--task",
            "sst2",
            "--data",
            str(sentiment),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "epochs=1",
            "--set",
            "max_train_examples=32",
            "--set",
            "threads=1",
            "--set",
            "log_every=0",
        ]
    )
    assert rc == 0 and (tmp_path / "o" / "metrics.json").is_file()
    io = capsys.readouterr()
    # the banner before any work (from the resolved config), the summary with each phase's time
    banner = io.err[io.err.index("tokendrop finetune: sst2 from") :].splitlines()
    assert banner[1] == "  task      sst2 (classification, accuracy)"
    # one dev split: named once
    assert banner[2].endswith(": 32 train examples, dev 100 (at most 32 train examples)")
    assert banner[3].startswith("  length    1 epochs of batch 32")
    assert "the fine-tuned model: not kept (--set save_model=true keeps it)" in banner[6]
    summary = io.err[io.err.index("tokendrop finetune: sst2 finished") :]
    assert "  phases    encoding" in summary and "training" in summary and "evaluation" in summary
    assert "the model is not kept" in summary and "the fine-tuned model is not kept" in io.out
    rc = main(
        [
            "finetune",
            "--model",
            str(ckpt),
            "--task",
            "sst2",
            "--data",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "o2"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "does not exist" in err
