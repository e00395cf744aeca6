"""What transformers says when it loads an export, for both families and both export paths (the
CLI's ``tokendrop export`` and the Python ``tokendrop.export``), with transformers' logging and
Python's warnings captured while each loads:

* the MLM export (the default): ``AutoModelForMaskedLM`` and ``pipeline("fill-mask")`` say
  nothing; ``AutoModelForSequenceClassification`` reports exactly what transformers' own MLM
  checkpoint of the family reports (``BertForMaskedLM.save_pretrained`` has no pooler): the
  classifier (and BERT's pooler) MISSING, the MLM head it does not use UNEXPECTED;
* the classification export (``--task classification`` / ``task="classification"``):
  ``AutoModelForSequenceClassification`` reports only the classifier it starts."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import tokendrop as td
from tokendrop.cli import main
from tokendrop.models.source import EXPORT_TASKS

transformers = pytest.importorskip("transformers")

PRESETS = {"bert": "tiny", "modernbert": "modern-tiny"}
NEW_HEAD = {"classifier.weight", "classifier.bias"}
# AutoModelForSequenceClassification on an MLM export, as on the family's own MLM checkpoint
MLM_EXPORT_AS_CLASSIFIER = {
    "bert": {
        "missing": NEW_HEAD | {"bert.pooler.dense.weight", "bert.pooler.dense.bias"},
        "unexpected": {
            "cls.predictions.bias",
            "cls.predictions.transform.dense.weight",
            "cls.predictions.transform.dense.bias",
            "cls.predictions.transform.LayerNorm.weight",
            "cls.predictions.transform.LayerNorm.bias",
        },
    },
    "modernbert": {"missing": NEW_HEAD, "unexpected": {"decoder.bias"}},
}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _said_while(load):
    """Run ``load()``; -> (its result, the transformers log lines and Python warnings it
    produced)."""
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = load()
    finally:
        logger.removeHandler(handler)
    return out, handler.lines + [str(w.message) for w in caught]


def _reported(said: list[str]) -> dict[str, set[str]]:
    """The keys transformers' one LOAD REPORT names, by status."""
    assert len(said) == 1 and "LOAD REPORT" in said[0], said
    out: dict[str, set[str]] = {"missing": set(), "unexpected": set()}
    for line in said[0].splitlines():
        for status in ("MISSING", "UNEXPECTED"):
            if f"| {status}" in line:
                out[status.lower()].add(line.split("|")[0].strip())
    return out


def _export(run, out, path, task):
    if path == "cli":
        assert main(["export", str(run), str(out), "--task", task]) == 0
    else:
        td.export(run, out, task=task)


def _classifier(out):
    return _said_while(
        lambda: transformers.AutoModelForSequenceClassification.from_pretrained(
            out, num_labels=3, output_loading_info=True
        )
    )


@pytest.fixture(scope="module", params=sorted(PRESETS))
def family_run(request, tiny_data, tmp_path_factory):
    run = tmp_path_factory.mktemp(f"silent-{request.param}") / "run"
    cfg = td.load_config(
        PRESETS[request.param],
        [
            f'data.path="{tiny_data}"',
            "train.steps=2",
            "train.batch_size=4",
            "train.warmup_steps=1",
            "train.log_every=1",
            "train.eval_every=2",
            "train.ckpt_every=2",
            "train.eval_batches=1",
            "train.threads=1",
        ],
    )
    td.pretrain(cfg, run, progress=False)
    return request.param, run


@pytest.mark.parametrize("path", ["cli", "python"])
def test_mlm_export_loads_with_no_report(family_run, path, tmp_path):
    family, run = family_run
    out = tmp_path / "export"
    _export(run, out, path, "mlm")

    mlm, said = _said_while(lambda: transformers.AutoModelForMaskedLM.from_pretrained(out))
    assert said == [], said
    assert type(mlm).__name__ == transformers.AutoConfig.from_pretrained(out).architectures[0]

    fill, said = _said_while(lambda: transformers.pipeline("fill-mask", model=str(out)))
    assert said == [], said
    assert len(fill(f"a {fill.tokenizer.mask_token} b")) == 5

    # a classifier from the MLM export: what the family's own MLM checkpoint gives, named exactly
    (clf, info), said = _classifier(out)
    want = MLM_EXPORT_AS_CLASSIFIER[family]
    assert set(info["missing_keys"]) == want["missing"], info
    assert set(info["unexpected_keys"]) == want["unexpected"], info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    assert _reported(said) == want, said


@pytest.mark.parametrize("path", ["cli", "python"])
def test_classification_export_reports_only_the_new_classifier(family_run, path, tmp_path):
    family, run = family_run
    out = tmp_path / "export-clf"
    _export(run, out, path, "classification")

    (clf, info), said = _classifier(out)
    assert set(info["missing_keys"]) == NEW_HEAD, info
    assert not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert _reported(said) == {"missing": NEW_HEAD, "unexpected": set()}, said
    assert clf.config.num_labels == 3 and type(clf).__name__.endswith("ForSequenceClassification")
    # what it loaded is the checkpoint's encoder and pooling layers: with the same classifier,
    # tokendrop's own classifier from the run (`tokendrop finetune --model RUN`'s start) agrees
    ours, _ = td.load_pretrained(run, task="classification", num_labels=3)
    ours.classifier.load_state_dict(clf.classifier.state_dict())
    ours.eval(), clf.eval()
    ids = torch.tensor([[2, 5, 7, 9, 3, 4]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = ours(ids, mask)
        got = clf(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    # tokendrop reads it back too (`tokendrop finetune --model OUT`): only the classifier is fresh
    _, back = td.load_pretrained(out, task="classification", num_labels=3)
    assert sorted(back["fresh"]) == sorted(NEW_HEAD)
    # the model card says how to load it, and what starts fresh
    card = (out / "README.md").read_text()
    assert "AutoModelForSequenceClassification" in card and "classifier.*" in card


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_transformers_own_mlm_checkpoint_reports_the_same_to_a_classifier(family, tmp_path):
    """The MLM export's report to a classifier is transformers' own for its MLM class (saved by
    transformers, random weights): the expected sets above are not ours to choose."""
    kw = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "pad_token_id": 0}
    kw.update(num_attention_heads=2, intermediate_size=64)
    if family == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(**kw))
    else:
        kw.update(bos_token_id=None, cls_token_id=None, eos_token_id=2, sep_token_id=2)
        model = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**kw))
    model.save_pretrained(tmp_path / "hf")
    (_, info), said = _classifier(tmp_path / "hf")
    assert _reported(said) == MLM_EXPORT_AS_CLASSIFIER[family], said


def test_export_tasks_are_the_clis_choices():
    from tokendrop.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    task = next(a for a in sub.choices["export"]._actions if a.dest == "task")
    assert tuple(task.choices) == EXPORT_TASKS


def test_an_unknown_export_task_is_one_line(family_run, tmp_path):
    _, run = family_run
    with pytest.raises(td.TokendropError, match="task 'qa' is not one of mlm, classification"):
        td.export(run, tmp_path / "x", task="qa")
    assert not (tmp_path / "x").exists()
