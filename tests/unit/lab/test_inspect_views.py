"""What ``tokendrop inspect`` (lab/inspect.py) shows: byte-level BPE pieces as readable text, and
which tokens random-LTD keeps in the checkpoint's step (its kept count read from the run's
length)."""

import pytest

from tokendrop.config import load_config
from tokendrop.dropping.methods import ltd_kept


def test_inspect_shows_byte_level_pieces_as_text():
    from tokendrop.data.tokenizer import readable_token

    assert [
        readable_token(t, True)
        for t in ("\u0120the", "\u00c3\u00a9", "\u00c3", "[CLS]", "    ", "\u010a")
    ] == ["\u2581the", "\u00e9", "<0xC3>", "[CLS]", "\u2581" * 4, "\\n"]
    assert [readable_token(t, False) for t in ("##ing", "\u2581the", "a\tb")] == [
        "##ing",
        "\u2581the",
        "a\\tb",
    ]


def test_inspect_shows_what_random_ltd_keeps(tiny_data, tmp_path):
    import json

    from tokendrop.lab.inspect import inspect_run
    from tokendrop.train.trainer import pretrain

    cfg = load_config(
        "tiny",
        [
            f"data.path={tiny_data}",
            "train.steps=4",
            "train.eval_every=4",
            "train.ckpt_every=4",
            "train.log_every=2",
            "train.eval_batches=1",
            "train.batch_size=4",
            "drop.method=random_ltd",
            "drop.ltd_start_fraction=0.25",
            "drop.ltd_step=8",
        ],
    )
    pretrain(cfg, tmp_path / "run", progress=False)
    out = inspect_run(tmp_path / "run", num_examples=3)
    ex = json.loads((out / "examples.json").read_text())
    T = 64
    # the count of the checkpoint's last step (k = 3 of 4, K = 2: full length)
    m = ltd_kept(cfg.drop, T, 3, 4)
    assert m == T
    assert len(ex) == 3 and all(e["kept_fraction_sequence"] == 1.0 for e in ex)
    cfg2 = load_config(
        "tiny",
        [
            f"data.path={tiny_data}",
            "train.steps=40",
            "drop.method=random_ltd",
            "drop.ltd_start_fraction=0.25",
            "drop.ltd_step=8",
        ],
    )
    import shutil

    # the same checkpoint read as step 4 of a 40-step run
    shutil.copytree(tmp_path / "run", tmp_path / "mid")
    meta = next((tmp_path / "mid" / "checkpoints").iterdir()) / "meta.json"
    mj = json.loads(meta.read_text())
    mj["config"]["train"]["steps"] = 40
    meta.write_text(json.dumps(mj))
    out = inspect_run(tmp_path / "mid", num_examples=3, overwrite=True)
    m = ltd_kept(cfg2.drop, T, 3, 40)
    assert m == 16
    for e in json.loads((out / "examples.json").read_text()):
        n_layers = [int(s) for s in e["scores"]]  # how many of the 2 middle layers keep each token
        assert set(n_layers) <= {0, 1, 2} and all(n >= 1 for k, n in zip(e["kept"], n_layers) if k)
        assert e["kept_fraction_sequence"] == pytest.approx(m / T)
    assert "random-LTD" in (out / "examples.html").read_text()
    assert any("random_ltd" in n for n in json.loads((out / "summary.json").read_text())["notes"])
