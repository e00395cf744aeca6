"""Golden loss curves (torchtitan-style): the tiny preset, dense and with token dropping, must
reproduce the per-step training losses, the eval losses and the final importance scores committed in
``golden/tiny-curves.json``; the ModernBERT-architecture family's tiny preset (``modern-tiny``:
rotary positions, GeGLU, a 16-token window shorter than T=64, per-document attention in the packed
rows) those in ``golden/modern-tiny-curves.json``.

Everything that feeds the curves is fixed here: a generated corpus, a vocabulary written from its
word list (no WordPiece training, so a new ``tokenizers`` release cannot move it), the seed, one
torch thread.  A change to initialisation, masking, the loader, the importance update, the
optimizer or the schedule moves these numbers far beyond the tolerance; float reordering between
CPUs/torch builds should not (the tolerance, RTOL below, is 2e-4 relative).

Regenerate after an intended change (and say why in the commit):
    # both files
    TOKENDROP_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/integration/golden/test_golden.py
    # the modern family's only
    TOKENDROP_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/integration/golden/test_golden.py \
        -k modern
"""

import json
import os
from pathlib import Path

import pytest
import torch
from toydata import ADJS, NAMES, NOUNS, NUMBERS, VERBS, write_corpus

from tokendrop.config import load_config
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.trainer import pretrain

GOLDEN = Path(__file__).parent / "data" / "tiny-curves.json"
GOLDEN_MODERN = Path(__file__).parent / "data" / "modern-tiny-curves.json"
UPDATE = os.environ.get("TOKENDROP_UPDATE_GOLDEN") == "1"
RTOL = 2e-4  # relative, per value (a 1% change of the learning rate moves the curve by ~6e-4)
# beta = 0.9 so the importance scores leave their initial value within these 24 steps and the
# selection depends on them (with the default 0.995 it is still mostly "rarely seen ids first")
CASES = {
    "dense": ["drop.method=none"],
    "token-drop": ["drop.method=cumulative", "drop.beta=0.9"],
    "token-drop-stage2": ["drop.method=cumulative", "drop.beta=0.9", "drop.stage2_fraction=0.25"],
}


@pytest.fixture(scope="module")
def golden_data(tmp_path_factory):
    from tokendrop.data import prepare

    root = tmp_path_factory.mktemp("golden")
    words = sorted(
        set(
            NAMES
            + VERBS
            + ADJS
            + NOUNS
            + NUMBERS
            + "the near counting and then stop is today .".split()
        )
    )
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    corpus = write_corpus(root / "corpus.txt", docs=200, seed=1)
    out = root / "packed-64"
    prepare([corpus], out, seq_len=64, vocab=vocab, eval_fraction=0.1, workers=1, progress=False)
    return out


def _curves(data, run_dir, overrides, preset="tiny"):
    cfg = load_config(
        preset,
        [
            f'data.path="{data}"',
            "train.steps=24",
            "train.log_every=1",
            "train.eval_every=8",
            "train.ckpt_every=24",
            "train.threads=1",
            "train.seed=0",
            "train.warmup_steps=4",  # the curves' warm-up (the presets give a share of the run)
            *overrides,
        ],
    )
    res = pretrain(cfg, run_dir, progress=False)
    rows = read_metrics(run_dir)
    return {
        "loss": [r["loss"] for r in rows if "loss" in r],
        "eval_loss": [r["eval_loss"] for r in rows if "eval_loss" in r],
        # the importance vector at the end: the selection's state, which the loss barely shows
        "importance": res.importance.tolist() if res.importance is not None else [],
    }


def _compare(got, golden: Path, cases):
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(
            json.dumps({"torch": torch.__version__, "cases": cases, "curves": got}, indent=1) + "\n"
        )
        pytest.skip(f"wrote {golden}")
    want = json.loads(golden.read_text())
    assert want["cases"] == cases, (
        f"tests/golden/{golden.name} was made with other cases: regenerate it"
    )
    for name in cases:
        for key in ("loss", "eval_loss", "importance"):
            g, w = got[name][key], want["curves"][name][key]
            assert len(g) == len(w), (name, key, len(g), len(w))
            torch.testing.assert_close(
                torch.tensor(g),
                torch.tensor(w),
                rtol=RTOL,
                atol=0.0,
                msg=lambda m, n=name, k=key: f"{n} {k} left the golden curve: {m}",
            )


def test_golden_loss_curves(golden_data, tmp_path):
    got = {name: _curves(golden_data, tmp_path / name, ov) for name, ov in CASES.items()}
    _compare(got, GOLDEN, CASES)
    # the curves differ from each other: dropping changes the computation (a no-op would pass above)
    assert got["dense"]["loss"][3:] != got["token-drop"]["loss"][3:]
    # stage 2 switches to the dense model for the last 25% of the steps: its curve leaves token
    # drop's
    assert got["token-drop-stage2"]["loss"][:18] == got["token-drop"]["loss"][:18]
    assert got["token-drop-stage2"]["loss"][18:] != got["token-drop"]["loss"][18:]


# the modern family: dense, token drop (the two dropped layers are both sliding-window layers), and
# per-document attention off (one case, so the document masks are shown to move the curve)
MODERN_CASES = {
    "dense": ["drop.method=none"],
    "token-drop": ["drop.method=cumulative", "drop.beta=0.9"],
    "dense-no-document-attention": ["drop.method=none", 'model.document_attention="off"'],
}


def test_golden_loss_curves_modern(golden_data, tmp_path):
    got = {
        name: _curves(golden_data, tmp_path / name, ov, "modern-tiny")
        for name, ov in MODERN_CASES.items()
    }
    _compare(got, GOLDEN_MODERN, MODERN_CASES)
    assert got["dense"]["loss"][3:] != got["token-drop"]["loss"][3:]
    assert got["dense"]["loss"][3:] != got["dense-no-document-attention"]["loss"][3:]
    assert got["token-drop"]["importance"] and not got["dense"]["importance"]
