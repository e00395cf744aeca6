"""What a trained run keeps of a user's text: ``tokendrop.text_selection`` and ``tokendrop inspect
RUN --text``, on the suite's tiny cumulative run.  The scores are the checkpoint's importance
vector (read here from state.safetensors on its own), the kept positions the top M of them; the
refusals are one line."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file

import tokendrop as td
from tokendrop.cli import main
from tokendrop.runs.checkpoint import CheckpointError

TEXT = "alice buys the new lamp near the window ."


def _importance(run):
    ckpt = sorted((run / "checkpoints").iterdir())[-1]
    return ckpt, load_file(ckpt / "state.safetensors")["importance"].tolist()


def test_the_runs_learned_scores_choose_the_kept_tokens(tiny_run):
    sel = td.text_selection(tiny_run, TEXT)
    ckpt, m = _importance(tiny_run)
    cfg = td.load_config(str(tiny_run / "config.toml"))
    assert sel.checkpoint == str(ckpt) and sel.step == 4 and sel.method == "cumulative"
    assert sel.tokens == ["[CLS]", *TEXT.split(), "[SEP]"]
    n = len(sel.tokens)
    # the learned vector, not a fresh one: ids predicted in the run's 4 steps moved off init_score
    assert sel.scores == [m[i] for i in sel.ids]
    assert any(s != cfg.drop.init_score for s in sel.scores[1:-1])
    # the top M = round(n (1 - rate)) positions by score, ties by position; [CLS]/[SEP] pinned
    kept_n = round(n * (1 - cfg.drop.rate))
    top = sorted(range(n), key=lambda p: (-sel.scores[p], p))[:kept_n]
    assert [p for p, k in enumerate(sel.kept) if k] == sorted(top)
    assert sel.kept[0] and sel.kept[-1] and sum(sel.kept) == kept_n
    d = sel.to_dict()
    assert json.loads(json.dumps(d))["tokens"][1] == {
        "token": "alice",
        "id": sel.ids[1],
        "score": sel.scores[1],
        "kept": sel.kept[1],
    }


def test_inspect_text_prints_the_selection_with_scores(tiny_run, capsys):
    sel = td.text_selection(tiny_run, TEXT)
    assert main(["inspect", str(tiny_run), "--text", TEXT]) == 0
    out = capsys.readouterr().out.splitlines()
    n = len(sel.tokens)
    assert f"keeps {sum(sel.kept)} of the {n} tokens of the text" in out[0]
    assert out[1] == "kept:    " + " ".join(sel.kept_tokens)
    assert out[2] == "dropped: " + " ".join(sel.dropped_tokens)
    rows = out[5 : 5 + n]
    assert rows[0].split() == ["0", "[CLS]", "pin", "kept"]
    for p, row in enumerate(rows[1:-1], 1):
        assert row.split() == [
            str(p),
            sel.tokens[p],
            f"{sel.scores[p]:.3f}",
            "kept" if sel.kept[p] else "dropped",
        ]
    assert not (tiny_run / "inspect").exists()  # --text writes nothing


def test_a_text_past_the_runs_length_is_cut_and_said(tiny_run):
    sel = td.text_selection(tiny_run, " ".join([TEXT] * 20))
    assert len(sel.tokens) == 64 and sel.tokens[-1] == "[SEP]" and sel.truncated > 0
    assert any("longer than the run's 64-token sequences" in n for n in sel.notes)


def test_refusals_are_one_line(tiny_run, tmp_path, capsys):
    with pytest.raises(CheckpointError, match="has no tokens for the run's tokenizer"):
        td.text_selection(tiny_run, "   ")
    with pytest.raises(CheckpointError, match="not a tokendrop run directory"):
        td.text_selection(tmp_path, TEXT)
    with pytest.raises(td.ArgumentError, match="text"):
        td.text_selection(tiny_run, ["alice"])
    # a run whose method keeps no learned selection (its recorded config edited: nothing else read)
    for method, says in (("none", "this is a dense run"), ("random", "uniform random draw")):
        run = tmp_path / f"run-{method}"
        shutil.copytree(tiny_run, run)
        for meta in run.glob("checkpoints/*/meta.json"):
            d = json.loads(meta.read_text())
            d["config"]["drop"]["method"] = method
            meta.write_text(json.dumps(d))
        assert main(["inspect", str(run), "--text", TEXT]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert main(["inspect", str(tiny_run), "--text", TEXT, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--text prints what the run keeps" in err[0], err


def test_undropped_reason_names_the_dense_phases():
    from tokendrop.dropping.config import DropConfig
    from tokendrop.train.selection import undropped_reason

    d = DropConfig(method="cumulative", dense_start_share=0.25)
    assert undropped_reason(d, 100, 25).startswith("step 25 is inside the run's dense start")
    assert undropped_reason(d, 100, 26) is None
    assert undropped_reason(d, 0, 3) is None  # a time budget: not known from the steps
    assert undropped_reason(DropConfig(method="none"), 100, 3) is None  # said elsewhere
    whole = DropConfig(method="cumulative", dense_start_share=0.5, stage2_fraction=0.5)
    assert undropped_reason(whole, 10, 10) == (
        "every step of the run is dense (drop.dense_start_share = 0.5 and drop.stage2_fraction = "
        "0.5 cover its 10 steps): it never dropped a token, so there are no kept tokens to show"
    )
