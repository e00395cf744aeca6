"""tokendrop inspect: histogram, top/bottom tokens and example sentences of a run; error cases."""

import json
import shutil

import numpy as np
import pytest
import torch

from tokendrop.config import SEQ_LEN_FROM_DATA, load_config
from tokendrop.lab.inspect import InspectError, inspect_run, load_run
from tokendrop.train.trainer import pretrain

FILES = [
    "importance-hist.png",
    "tokens.md",
    "tokens.json",
    "examples.html",
    "examples.png",
    "examples.json",
    "summary.json",
    "README.md",
]


def _run(tmp_path_factory, data, name, *overrides):
    out = tmp_path_factory.mktemp("inspect") / name
    n = torch.get_num_threads()
    cfg = load_config(
        "tiny",
        [
            f"data.path={data}",
            "train.steps=6",
            "train.eval_every=6",
            "train.ckpt_every=6",
            "train.log_every=3",
            "train.eval_batches=1",
            "train.batch_size=8",
            "train.threads=1",
            *overrides,
        ],
    )
    try:
        pretrain(cfg, out, progress=False)
    finally:
        torch.set_num_threads(n)
    return out


@pytest.fixture(scope="module")
def drop_run(tiny_run, tmp_path_factory):
    """A copy of the shared tiny run (cumulative, 50%, 4 steps): inspect writes into the run."""
    return shutil.copytree(tiny_run, tmp_path_factory.mktemp("inspect") / "drop")


def test_inspect_writes_everything(drop_run):
    out = inspect_run(drop_run, num_examples=3)
    assert out == drop_run / "inspect"
    for f in FILES:
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    rv = load_run(drop_run)
    tok = json.loads((out / "tokens.json").read_text())
    seen = set(np.flatnonzero(rv.seen).tolist())
    ranked = tok["top"] + tok["bottom"]
    assert ranked and all(r["id"] in seen for r in ranked)
    # only ids seen in training: moved away from the initial 10.0, and never a pinned id
    assert all(r["score"] != 10.0 and abs(r["score"]) < 1e4 for r in ranked)
    assert [r["score"] for r in tok["top"]] == sorted(
        (r["score"] for r in tok["top"]), reverse=True
    )
    assert [r["score"] for r in tok["bottom"]] == sorted(r["score"] for r in tok["bottom"])
    assert "train_count" in tok["top"][0]
    ex = json.loads((out / "examples.json").read_text())
    assert len(ex) == 3
    T = 64 if rv.cfg.data.seq_len == SEQ_LEN_FROM_DATA else rv.cfg.data.seq_len
    for e in ex:
        assert e["split"] == "eval" and len(e["tokens"]) == len(e["scores"]) == len(e["kept"]) > 0
        assert e["kept_fraction_sequence"] == pytest.approx(round(T * 0.5) / T, abs=1e-6)
        # kept = the selector's top-M: every kept score >= every dropped score (ties broken by
        # position)
        ks = [s for s, k in zip(e["scores"], e["kept"]) if k]
        ds = [s for s, k in zip(e["scores"], e["kept"]) if not k]
        if ks and ds:
            assert min(ks) >= max(ds) - 1e-6
    html = (out / "examples.html").read_text()
    assert html.count("<b class='tok kept'>") == sum(sum(e["kept"]) for e in ex)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stats"]["seen"] == len(seen) and summary["drop"]["method"] == "cumulative"
    # rerun into the same place: refused without overwrite (one run-directory API), then replaced
    # atomically; --out elsewhere works too
    with pytest.raises(InspectError, match="already exists and is not empty; pass overwrite=True"):
        inspect_run(drop_run, num_examples=1)
    assert len(json.loads((out / "examples.json").read_text())) == 3
    assert inspect_run(drop_run, num_examples=1, overwrite=True) == out
    assert len(json.loads((out / "examples.json").read_text())) == 1
    assert not [p for p in drop_run.iterdir() if p.name.startswith(".inspect")]
    other = drop_run.parent / "elsewhere"
    assert inspect_run(drop_run / "checkpoints" / "step-00000004", other, num_examples=0) == other
    assert (other / "importance-hist.png").is_file()


def test_inspect_without_the_prepared_data(drop_run, tmp_path):
    moved = tmp_path / "run"
    shutil.copytree(drop_run, moved, ignore=shutil.ignore_patterns("inspect"))
    meta = moved / "checkpoints" / "step-00000004" / "meta.json"
    m = json.loads(meta.read_text())
    m["config"]["data"]["path"] = str(tmp_path / "gone")
    meta.write_text(json.dumps(m))  # meta.json is not hashed; the tensor files are
    out = inspect_run(moved)
    s = json.loads((out / "summary.json").read_text())
    assert s["examples"] == 0 and any("not available" in n for n in s["notes"])
    assert "No held-out examples" in (out / "examples.html").read_text()
    assert (out / "importance-hist.png").is_file()


def test_inspect_errors(tmp_path_factory, tiny_data, tmp_path, capsys):
    from tokendrop.cli import main

    with pytest.raises(InspectError, match="no such directory"):
        inspect_run(tmp_path / "nope")
    with pytest.raises(InspectError, match="not a tokendrop run directory"):
        inspect_run(tmp_path)
    (tmp_path / "config.toml").write_text("")
    with pytest.raises(InspectError, match="no complete checkpoint"):
        inspect_run(tmp_path)
    dense = _run(tmp_path_factory, tiny_data, "dense")
    with pytest.raises(InspectError, match="dense run"):
        inspect_run(dense)
    assert main(["inspect", str(dense)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no importance vector" in err and err.count("\n") == 1
    avg = _run(tmp_path_factory, tiny_data, "avg", "drop.variant=avg", "drop.rate=0.5")
    with pytest.raises(InspectError, match="averaging"):
        inspect_run(avg)
    assert not (dense / "inspect").exists() and not (avg / "inspect").exists()


def _set_drop(run, **fields):
    """Rewrite the drop settings every checkpoint of ``run`` records (a run trained with them)."""
    for meta in (run / "checkpoints").glob("step-*/meta.json"):
        mj = json.loads(meta.read_text())
        mj["config"]["drop"].update(fields)
        meta.write_text(json.dumps(mj))


def test_inspect_of_a_checkpoint_that_never_dropped_says_so(tiny_run, tmp_path, capsys):
    """Kept-token examples of steps that all ran dense would show a selection that never happened:
    one line instead, naming the dense phase; a later checkpoint of the same run is inspected."""
    from tokendrop.cli import main

    run = shutil.copytree(tiny_run, tmp_path / "run")
    _set_drop(run, dense_start_share=0.5)  # steps 0 and 1 of 4 dense
    early = run / "checkpoints" / "step-00000002"
    assert main(["inspect", str(early)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {early}: step 2 is inside the run's dense start (its first 2 of 4 steps, "
        "drop.dense_start_share = 0.5): no step so far dropped a token, so there are no kept "
        "tokens to show; inspect a checkpoint after step 2\n"
    )
    assert not (early / "inspect").exists() and not (run / "inspect").exists()
    assert (inspect_run(run, num_examples=2) / "examples.json").is_file()  # step 4: steps 2, 3 drop
    # a recorded run whose phases cover every step: its config is refused, saying so
    _set_drop(run, dense_start_share=0.75, stage2_fraction=0.25)
    with pytest.raises(InspectError, match="covers every step, so nothing would drop"):
        inspect_run(run, overwrite=True)
