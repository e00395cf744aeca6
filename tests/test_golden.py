"""Golden loss curves (torchtitan-style): the tiny preset, dense and with token dropping, must
reproduce the per-step training losses, the eval losses and the final importance scores committed in ``golden/tiny-curves.json``.

Everything that feeds the curves is fixed here: a generated corpus, a vocabulary written from its
word list (no WordPiece training, so a new ``tokenizers`` release cannot move it), the seed, one
torch thread.  A change to initialisation, masking, the loader, the importance update, the
optimizer or the schedule moves these numbers far beyond the tolerance; float reordering between
CPUs/torch builds should not (the tolerance, RTOL below, is 2e-4 relative).

Regenerate after an intended change (and say why in the commit):
    TOKENDROP_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

import json
import os
from pathlib import Path

import pytest
import torch

from tokendrop.data.testing import ADJS, NAMES, NOUNS, NUMBERS, VERBS, write_corpus
from tokendrop.config import load_config
from tokendrop.train import pretrain, read_metrics

GOLDEN = Path(__file__).parent / "golden" / "tiny-curves.json"
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
    words = sorted(set(NAMES + VERBS + ADJS + NOUNS + NUMBERS +
                       "the near counting and then stop is today .".split()))
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    corpus = write_corpus(root / "corpus.txt", docs=200, seed=1)
    out = root / "packed-64"
    prepare([corpus], out, seq_len=64, vocab=vocab, eval_fraction=0.1, workers=1, progress=False)
    return out


def _curves(data, run_dir, overrides):
    cfg = load_config("tiny", [f'data.path="{data}"', "train.steps=24", "train.log_every=1", "train.eval_every=8",
                               "train.ckpt_every=24", "train.threads=1", "train.seed=0", *overrides])
    res = pretrain(cfg, run_dir, progress=False)
    rows = read_metrics(run_dir)
    return {"loss": [r["loss"] for r in rows if "loss" in r],
            "eval_loss": [r["eval_loss"] for r in rows if "eval_loss" in r],
            # the importance vector at the end: the selection's state, which the loss barely shows
            "importance": res.importance.tolist() if res.importance is not None else []}


def test_golden_loss_curves(golden_data, tmp_path):
    got = {name: _curves(golden_data, tmp_path / name, ov) for name, ov in CASES.items()}
    if UPDATE:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({"torch": torch.__version__, "cases": CASES, "curves": got}, indent=1) + "\n")
        pytest.skip(f"wrote {GOLDEN}")
    want = json.loads(GOLDEN.read_text())
    assert want["cases"] == CASES, "tests/golden/tiny-curves.json was made with other cases: regenerate it"
    for name in CASES:
        for key in ("loss", "eval_loss", "importance"):
            g, w = got[name][key], want["curves"][name][key]
            assert len(g) == len(w), (name, key, len(g), len(w))
            torch.testing.assert_close(torch.tensor(g), torch.tensor(w), rtol=RTOL, atol=0.0,
                                       msg=lambda m, n=name, k=key: f"{n} {k} left the golden curve: {m}")
    # the curves differ from each other: dropping changes the computation (a no-op would pass above)
    assert got["dense"]["loss"][3:] != got["token-drop"]["loss"][3:]
    # stage 2 switches to the dense model for the last 25% of the steps: its curve leaves token drop's
    assert got["token-drop-stage2"]["loss"][:18] == got["token-drop"]["loss"][:18]
    assert got["token-drop-stage2"]["loss"][18:] != got["token-drop"]["loss"][18:]
