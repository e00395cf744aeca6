"""An export's tokenizer truncates to what its model takes: ``model_max_length`` in
tokenizer_config.json is the model's ``max_position_embeddings``, for both families, both export
paths (``tokendrop export`` and ``tokendrop.export``), the run's own ``RUN/tokenizer`` and the save
helper fine-tuning's ``save_model`` writes through (``tokendrop.models.hf.save_pretrained``), even
where the tokenizer the run read declares more (prepared data records 512).  A text longer than
the model's positions, tokenized by ``AutoTokenizer`` with ``truncation=True``, runs through the
exported model in transformers."""

from __future__ import annotations

import json

import pytest
import torch

import tokendrop as td
from tokendrop.cli import main

transformers = pytest.importorskip("transformers")

PRESETS = {"bert": "tiny", "modernbert": "modern-tiny"}
POSITIONS = 64  # the model's; the prepared data's tokenizer_config.json says 512
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog ."] * 60)  # ~600 tokens


def _declared(directory) -> int:
    return json.loads((directory / "tokenizer_config.json").read_text())["model_max_length"]


@pytest.fixture(scope="module", params=sorted(PRESETS))
def short_run(request, tiny_data, tmp_path_factory):
    assert _declared(tiny_data) == 512  # what the run's tokenizer source declares
    run = tmp_path_factory.mktemp(f"fits-{request.param}") / "run"
    cfg = td.load_config(
        PRESETS[request.param],
        [
            f'data.path="{tiny_data}"',
            f"model.max_position_embeddings={POSITIONS}",
            "train.steps=2",
            "train.batch_size=4",
            "train.warmup_steps=1",
            "train.eval_every=2",
            "train.ckpt_every=2",
            "train.eval_batches=1",
            "train.threads=1",
        ],
    )
    td.pretrain(cfg, run, progress=False)
    return request.param, run


@pytest.mark.parametrize("path", ["cli", "python"])
def test_a_long_text_truncated_by_the_exported_tokenizer_runs_through_the_model(
    short_run, path, tmp_path
):
    family, run = short_run
    assert _declared(run / "tokenizer") == POSITIONS
    out = tmp_path / "export"
    if path == "cli":
        assert main(["export", str(run), str(out)]) == 0
    else:
        td.export(run, out)
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == POSITIONS
    assert _declared(out) == POSITIONS

    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tok(LONG_TEXT)["input_ids"]) > 4 * POSITIONS  # the text is longer than the model
    enc = tok(LONG_TEXT, truncation=True, return_tensors="pt")
    assert enc["input_ids"].shape == (1, POSITIONS)
    model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[:2] == (1, POSITIONS) and torch.isfinite(logits).all()


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_the_save_helper_writes_the_models_position_limit(family, tiny_data, tmp_path):
    """``save_pretrained(model, out, tokenizer=...)``, which ``finetune``'s ``save_model`` calls:
    the copy declares the model's limit, every other field of the source's config kept."""
    from tokendrop.models.hf import save_pretrained

    cfg = td.load_config(
        PRESETS[family], ["model.vocab_size=200", f"model.max_position_embeddings={POSITIONS}"]
    )
    model = td.build_model(cfg.model, task="classification", num_labels=2)
    out = save_pretrained(model, tmp_path / "model", tokenizer=tiny_data)
    source = json.loads((tiny_data / "tokenizer_config.json").read_text())
    written = json.loads((out / "tokenizer_config.json").read_text())
    assert written == {**source, "model_max_length": POSITIONS}
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tok(LONG_TEXT, truncation=True)["input_ids"]) == POSITIONS
