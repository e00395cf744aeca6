"""An export loads in transformers with no report at all: ``AutoModelForMaskedLM`` and
``pipeline("fill-mask")`` say nothing, ``AutoModelForSequenceClassification`` names only the head it
starts (and the MLM head it does not use), for both families and both export paths (the CLI's
``tokendrop export`` and the Python ``tokendrop.export``).  transformers' logging and Python's
warnings are captured while each loads."""

from __future__ import annotations

import logging
import warnings

import pytest

import tokendrop as td
from tokendrop.cli import main

transformers = pytest.importorskip("transformers")

PRESETS = {"bert": "tiny", "modernbert": "modern-tiny"}
# what a classifier built from an MLM export starts fresh: its classifier, and BERT's pooler
# (pretraining has no NSP to train it, so the MLM export leaves it out); and the MLM head it does
# not use
NEW_HEAD = {"bert": ("classifier.", "bert.pooler."), "modernbert": ("classifier.",)}
MLM_HEAD = {"bert": ("cls.predictions.",), "modernbert": ("decoder.",)}


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
def test_export_loads_with_no_report(family_run, path, tmp_path):
    family, run = family_run
    out = tmp_path / "export"
    if path == "cli":
        assert main(["export", str(run), str(out)]) == 0
    else:
        td.export(run, out)

    mlm, said = _said_while(lambda: transformers.AutoModelForMaskedLM.from_pretrained(out))
    assert said == [], said
    assert type(mlm).__name__ == transformers.AutoConfig.from_pretrained(out).architectures[0]

    fill, said = _said_while(lambda: transformers.pipeline("fill-mask", model=str(out)))
    assert said == [], said
    assert len(fill(f"a {fill.tokenizer.mask_token} b")) == 5

    (clf, info), said = _said_while(
        lambda: transformers.AutoModelForSequenceClassification.from_pretrained(
            out, num_labels=2, output_loading_info=True
        )
    )
    assert info["missing_keys"] and all(
        k.startswith(NEW_HEAD[family]) for k in info["missing_keys"]
    ), info
    assert all(k.startswith(MLM_HEAD[family]) for k in info["unexpected_keys"]), info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    # its one report names exactly those keys, nothing else
    assert len(said) == 1 and "LOAD REPORT" in said[0], said
    named = {
        line.split("|")[0].strip()
        for line in said[0].splitlines()
        if "| MISSING" in line or "| UNEXPECTED" in line
    }
    assert named == set(info["missing_keys"]) | set(info["unexpected_keys"]), said
