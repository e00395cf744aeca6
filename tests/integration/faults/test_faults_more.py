"""More reliability cases: ``tokendrop verify`` for finetune / evaluate / study directories,
``finetune --save-model`` keeping its source's config, and a config.json whose shape fields are 0 or
missing.  Each case asserts the exit code, the one-line message and the disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_run import (
    error_lines as _errors,
    one_line_error as _one_line_error,
    run_cli as _run,
    tree as _tree,
)

from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_write_json

REPO = Path(__file__).resolve().parents[3]


def _flip(f: Path, at: int = -30) -> None:
    b = bytearray(f.read_bytes())
    b[at] ^= 0x01
    f.write_bytes(bytes(b))


# ----------------------------------------------------------------------------------------------
# 1. tokendrop verify: finetune, evaluate, study directories


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from toydata import write_checkpoint

    return write_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "m-seed0", hidden_size=32, max_position_embeddings=64
    )


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    from tokendrop.finetuning.tasks import TASKS

    sst2 = tmp_path_factory.mktemp("sst") / "SST-2"
    return TASKS["sst2"].write_examples(sst2, n_train=32, n_dev=16)


@pytest.fixture(scope="module")
def ft_dir(ckpt, sst2, tmp_path_factory):
    from tokendrop.config import FinetuneConfig
    from tokendrop.finetuning import finetune

    out = tmp_path_factory.mktemp("ft") / "ft"
    cfg = FinetuneConfig(
        task="sst2",
        data=str(sst2),
        epochs=1,
        batch_size=16,
        max_seq_len=32,
        device="cpu",
        threads=1,
        log_every=0,
        save_model=True,
    )
    finetune(cfg, ckpt, out, log=None)
    return out


def test_verify_a_finetune_output(ft_dir, tmp_path, capsys):
    before = _tree(ft_dir)
    rc, out, err = _run(capsys, "verify", ft_dir)
    assert rc == 0 and not _errors(err), err
    assert f"{ft_dir}: finetune: task sst2" in out and "sha256 as recorded in metrics.json" in out
    assert out.strip().endswith("ok (finetune)")
    assert _tree(ft_dir) == before  # verify writes nothing
    m = json.loads((ft_dir / "metrics.json").read_text())
    from tokendrop.runs.checkpoint import sha256_file

    assert m["saved_model_sha256"] == sha256_file(ft_dir / "model" / "model.safetensors")


@pytest.mark.parametrize(
    "fault, names",
    [
        ("flip-saved-model", "model/model.safetensors"),
        ("torn-metrics", "metrics.json"),
        ("no-predictions", "predictions/dev.tsv"),
        ("scores-edited", "metrics.json"),
        ("saved-model-gone", "model"),
    ],
)
def test_verify_finds_a_damaged_finetune_output(ft_dir, tmp_path, capsys, fault, names):
    d = tmp_path / "ft"
    shutil.copytree(ft_dir, d)
    if fault == "flip-saved-model":
        _flip(d / "model" / "model.safetensors")
    elif fault == "torn-metrics":
        (d / "metrics.json").write_bytes((d / "metrics.json").read_bytes()[:40])
    elif fault == "no-predictions":
        (d / "predictions" / "dev.tsv").unlink()
    elif fault == "scores-edited":
        m = json.loads((d / "metrics.json").read_text())
        m["scores"] = {"sst2": "high"}
        (d / "metrics.json").write_text(json.dumps(m))
    else:
        shutil.rmtree(d / "model")
    rc, _, err = _run(capsys, "verify", d)
    errs = _errors(err)
    assert rc == 2 and len(errs) == 1 and f"{d / names}:" in errs[0], err
    assert "finetune" in errs[0]  # the fix: fine-tune again


def _fake_finetune(calls):
    def fn(cfg, model_path, out_dir, log=None):
        calls.append(cfg.lr)
        r = {
            "task": cfg.task,
            "scores": {cfg.task: 50.0 + len(calls)},
            "config": __import__("dataclasses").asdict(cfg),
        }
        rundir.create(out_dir, "finetune")
        atomic_write_json(out_dir / "metrics.json", r)
        return r

    return fn


def test_verify_an_evaluation(ckpt, tmp_path, capsys):
    from toydata import write_checkpoint

    from tokendrop.finetuning import evaluate
    from tokendrop.finetuning.suite import SuiteConfig

    model = tmp_path / "m-seed0"
    shutil.copytree(ckpt, model)
    cfg = SuiteConfig(
        tasks=["sst2"],
        glue_epochs=[1.0],
        glue_lrs=[1e-4, 2e-4, 3e-4],
        glue_data=str(tmp_path / "glue"),
    )
    ev = tmp_path / "ev"
    evaluate([str(model)], cfg, ev, finetune_fn=_fake_finetune([]), log=lambda m: None)
    rc, out, err = _run(capsys, "verify", ev)
    assert rc == 0 and not _errors(err), err
    assert (
        "evaluate: 1 model(s), 3 cell(s) checked; 3 of 3 cells of results.json's models finished"
        in out
    )
    assert "stale" not in out and "incomplete" not in out
    cells = sorted(ev.glob("cells/*/sst2/*"))
    # a torn cell: named once, with the fix
    (cells[0] / "metrics.json").write_text('{"task": "sst2", "sco')
    rc, out, err = _run(capsys, "verify", ev)
    errs = _errors(err)
    assert rc == 2 and len(errs) == 1, err
    assert (
        f"{cells[0] / 'metrics.json'}: invalid JSON" in errs[0] and f"remove {cells[0]}" in errs[0]
    )
    assert "2 of 3 cells of results.json's models finished" in out
    # a cell gone: results.json's tables cite a result that is not there any more
    gone = tmp_path / "gone"
    shutil.move(cells[1], gone)
    rc, _, err = _run(capsys, "verify", ev)
    errs = _errors(err)
    assert rc == 2 and len(errs) == 2, err
    assert (
        f"{ev / 'results.json'}: counts 3 finished cell(s) of model m but only 2 are under"
        in errs[1]
    )
    shutil.move(gone, cells[1])
    # evaluate recomputes it; then the model is retrained at the same path: its cells are stale (a
    # note)
    evaluate([str(model)], cfg, ev, finetune_fn=_fake_finetune([]), log=lambda m: None)
    write_checkpoint(model, hidden_size=32, max_position_embeddings=64, seed=1)
    rc, out, err = _run(capsys, "verify", ev)
    assert rc == 0 and "stale: 3 cell(s) of model m" in out, out + err
    # a suite.toml that does not load
    (ev / "suite.toml").write_text("tasks = [\n")
    rc, _, err = _run(capsys, "verify", ev)
    assert rc == 2 and any(
        f"{ev / 'suite.toml'}: does not load as a suite" in e for e in _errors(err)
    )


def test_verify_an_unfinished_evaluation_notes_the_cells_left(ckpt, tmp_path, capsys):
    from tokendrop.finetuning import evaluate
    from tokendrop.finetuning.suite import SuiteConfig

    cfg = SuiteConfig(
        tasks=["sst2"], glue_epochs=[1.0], glue_lrs=[1e-4, 2e-4], glue_data=str(tmp_path / "glue")
    )
    calls = []
    inner = _fake_finetune(calls)

    def stops(cfg, model_path, out_dir, log=None):  # Ctrl-C during the second cell
        if calls:
            raise KeyboardInterrupt
        return inner(cfg, model_path, out_dir, log)

    ev = tmp_path / "ev"
    with pytest.raises(KeyboardInterrupt):
        evaluate([str(ckpt)], cfg, ev, finetune_fn=stops, log=lambda m: None)
    rc, out, err = _run(capsys, "verify", ev)
    assert rc == 0 and not _errors(err), err
    assert (
        "1 of 2 cells of results.json's models finished" in out
        and "incomplete: 1 cell(s) still to compute" in out
    )


def test_verify_a_study_directory(tiny_data, tmp_path, capsys):
    """A study's layout (runs/, data/, eval/, study-state.json, study.json), each part checked."""
    from tokendrop.config import load_config
    from tokendrop.finetuning import evaluate
    from tokendrop.finetuning.suite import SuiteConfig
    from tokendrop.train.trainer import pretrain

    st = tmp_path / "st"
    rundir.create(st, "study")
    shutil.copytree(tiny_data, st / "data" / "packed-64")
    run = st / "runs" / "baseline-seed0"
    pretrain(
        load_config(
            "tiny",
            [
                f'data.path="{st / "data" / "packed-64"}"',
                "train.steps=2",
                "train.ckpt_every=2",
                "train.eval_every=2",
                "train.eval_batches=1",
                "train.log_every=1",
            ],
        ),
        run,
        progress=False,
    )
    evaluate(
        [str(run)],
        SuiteConfig(tasks=["sst2"], glue_epochs=[1.0], glue_lrs=[1e-4], glue_data=str(tmp_path)),
        st / "eval",
        finetune_fn=_fake_finetune([]),
        log=lambda m: None,
    )
    atomic_write_json(st / "study-state.json", {"runs": {"baseline-seed0": {}}, "invocations": []})
    rc, out, err = _run(capsys, "verify", st)
    assert rc == 0 and not _errors(err), err
    assert "study: 1 run(s) (1 finished), 1 prepared dataset(s), an evaluation" in out
    assert "runs/baseline-seed0: run: 1 checkpoint(s), 1 intact, finished" in out
    assert "the study has not finished" in out  # no study.json yet
    assert "eval: evaluate: 1 model(s), 1 cell(s) checked" in out
    # a study.json naming a run that is gone, a corrupt checkpoint of another, a torn state file
    atomic_write_json(st / "study.json", {"runs": {"baseline-seed0": {}, "token-drop-seed0": {}}})
    _flip(run / "checkpoints" / "step-00000002" / "model.safetensors")
    (st / "study-state.json").write_text('{"runs": ')
    rc, _, err = _run(capsys, "verify", st)
    errs = _errors(err)
    assert rc == 2 and len(errs) == 3, err
    assert any(f"{st / 'study-state.json'}: invalid JSON" in e for e in errs)
    assert any(
        f"{run / 'checkpoints' / 'step-00000002' / 'model.safetensors'}: corrupt" in e for e in errs
    )
    assert any(
        f"{st / 'runs' / 'token-drop-seed0'}: missing, but study.json reports it" in e for e in errs
    )


def test_verify_says_what_an_unknown_directory_would_need(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("n\n")
    rc, _, err = _run(capsys, "verify", tmp_path / "x")
    line = _one_line_error(rc, err, str(tmp_path / "x"))
    assert all(k in line for k in ("finetune", "evaluate", "study", "campaign"))


# ----------------------------------------------------------------------------------------------
# 2. finetune --save-model keeps the source's config


def _tiny_hf(family: str, d: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    from toydata import task_vocab_tokens, write_vocab

    from tokendrop.data.tokenizer import SPECIAL_IDS
    from tokendrop.models.hf import copy_tokenizer

    V, CLS, SEP, PAD = (
        len(task_vocab_tokens()),
        SPECIAL_IDS["cls"],
        SPECIAL_IDS["sep"],
        SPECIAL_IDS["pad"],
    )
    torch.manual_seed(0)
    if family == "modernbert":  # every field our ModelConfig carries away from its default
        m = transformers.ModernBertForMaskedLM(
            transformers.ModernBertConfig(
                vocab_size=V,
                hidden_size=32,
                intermediate_size=48,
                num_hidden_layers=4,
                num_attention_heads=2,
                max_position_embeddings=128,
                local_attention=8,
                pad_token_id=PAD,
                sep_token_id=SEP,
                eos_token_id=SEP,
                cls_token_id=CLS,
                bos_token_id=CLS,
                global_rope_theta=5000.0,
                local_rope_theta=777.0,
                norm_bias=True,
                norm_eps=1e-6,
                layer_types=[
                    "full_attention",
                    "sliding_attention",
                    "sliding_attention",
                    "full_attention",
                ],
            )
        )
    else:
        m = transformers.BertForMaskedLM(
            transformers.BertConfig(
                vocab_size=V,
                hidden_size=32,
                intermediate_size=48,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=128,
                layer_norm_eps=1e-7,
                pad_token_id=PAD,
                sep_token_id=SEP,
                classifier_dropout=0.3,
                id2label={0: "a", 1: "b", 2: "c"},
            )
        )
    m.save_pretrained(d)
    copy_tokenizer(write_vocab(d.parent / f"vocab-{family}"), d)
    return d


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_save_model_keeps_the_source_config_and_reloads_identically(family, sst2, tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokendrop.config import FinetuneConfig
    from tokendrop.finetuning import finetune
    from tokendrop.models.bert.model import BertForSequenceClassification
    from tokendrop.models.source import load_pretrained, resolve_init_source

    src = _tiny_hf(family, tmp_path / "src")
    cfg = FinetuneConfig(
        task="sst2",
        data=str(sst2),
        epochs=1,
        batch_size=16,
        max_seq_len=32,
        device="cpu",
        threads=1,
        log_every=0,
        save_model=True,
    )
    finetune(cfg, src, tmp_path / "ft", log=None)
    saved = tmp_path / "ft" / "model"
    a, b = (
        json.loads((src / "config.json").read_text()),
        json.loads((saved / "config.json").read_text()),
    )
    head = {"architectures", "id2label", "label2id", "num_labels", "classifier_dropout"}
    assert {k: a[k] for k in a if k not in head} == {k: b[k] for k in a if k not in head}
    assert b["num_labels"] == 2 and len(b["id2label"]) == 2
    assert b["architectures"] == [
        "ModernBertForSequenceClassification"
        if family == "modernbert"
        else "BertForSequenceClassification"
    ]
    if family == "bert":
        assert "classifier_dropout" not in b and b["sep_token_id"] == a["sep_token_id"]
    else:
        assert (b["cls_token_id"], b["bos_token_id"], b["sep_token_id"]) == (
            a["cls_token_id"],
            a["bos_token_id"],
            a["sep_token_id"],
        )
    # our loader reads the same model config back; transformers and ours compute the same logits
    assert resolve_init_source(str(saved)).model == resolve_init_source(str(src)).model
    ours, _ = load_pretrained(saved, BertForSequenceClassification, num_labels=2)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        saved, attn_implementation="eager"
    ).eval()
    ids = torch.randint(5, a["vocab_size"], (2, 20))
    ids[:, 0] = 2
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(ids), hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_saved_model_base_leaves_out_the_source_head():
    from tokendrop.finetuning.fit import _saved_model_base

    base = {
        "model_type": "bert",
        "id2label": {"0": "x"},
        "label2id": {"x": 0},
        "num_labels": 1,
        "problem_type": "regression",
        "classifier_dropout": 0.3,
        "sep_token_id": 102,
        "_name_or_path": "m",
    }
    assert _saved_model_base(base) == {
        "model_type": "bert",
        "sep_token_id": 102,
        "_name_or_path": "m",
    }
    mb = dict(base, model_type="modernbert")
    # ModernBERT's is an architecture field (ours written)
    assert _saved_model_base(mb)["classifier_dropout"] == 0.3
    assert _saved_model_base(None) is None


# ----------------------------------------------------------------------------------------------
# 3. config.json shape fields 0 / missing: one line naming config.json and the field


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfsrc")
    return {f: _tiny_hf(f, root / f) for f in ("bert", "modernbert")}


@pytest.mark.parametrize("family", ["bert", "modernbert"])
@pytest.mark.parametrize(
    "field, value",
    [
        ("num_hidden_layers", 0),
        ("hidden_size", 0),
        ("num_attention_heads", 0),
        ("intermediate_size", 0),
        ("num_hidden_layers", None),
        ("hidden_size", -64),
        ("num_hidden_layers", 2.5),
        ("hidden_size", "32"),
        ("hidden_size", "missing"),
        ("num_hidden_layers", "missing"),
    ],
)
def test_config_json_shape_field_zero_or_missing_is_one_line(
    hf_dirs, tmp_path, capsys, family, field, value
):
    from tokendrop.errors import InteropError
    from tokendrop.models.source import read_hf_dir

    d = tmp_path / "hf"
    shutil.copytree(hf_dirs[family], d)
    cj = d / "config.json"
    c = json.loads(cj.read_text())
    if value == "missing":
        del c[field]
    else:
        c[field] = value
    cj.write_text(json.dumps(c))
    before = _tree(d)
    with pytest.raises(InteropError, match=field):
        read_hf_dir(d)
    # every consumer: one line naming config.json and the field; nothing written
    data = tmp_path / "SST-2"
    from tokendrop.finetuning.tasks import TASKS

    TASKS["sst2"].write_examples(data, n_train=8, n_dev=4)
    rc, _, err = _run(
        capsys,
        "finetune",
        "--model",
        d,
        "--task",
        "sst2",
        "--data",
        data,
        "--out",
        tmp_path / "ft",
        "--set",
        "epochs=1",
        "--set",
        "device=cpu",
    )
    line = _one_line_error(rc, err, str(cj), field)
    assert ("must be an integer > 0" in line) if value != "missing" else ("missing" in line)
    assert not (tmp_path / "ft").exists()
    rc, _, err = _run(capsys, "verify", d)
    assert rc == 2 and any(str(cj) in e and field in e for e in _errors(err))
    assert _tree(d) == before


def test_checkpoint_meta_with_a_zeroed_shape_is_refused(ckpt, tmp_path):
    """A tokendrop checkpoint records its resolved shape: 0 (the preset's) there means an edited
    meta.json."""
    from tokendrop.errors import InitError
    from tokendrop.models.source import resolve_init_source

    ck = tmp_path / "ck"
    shutil.copytree(ckpt, ck)
    meta = json.loads((ck / "meta.json").read_text())
    meta["config"]["model"]["num_layers"] = 0
    (ck / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        InitError, match=r"meta.json: model.num_layers: expected a positive integer, got 0"
    ):
        resolve_init_source(str(ck))


def _poison(ckpt: Path, name: str, key_part: str) -> None:
    """Write a NaN into the first tensor of ``ckpt/name`` whose name holds ``key_part``, and record
    the file's new size and sha256 in meta.json, as a tool that rewrites a checkpoint would."""
    from safetensors.torch import load_file, save_file

    from tokendrop.runs.checkpoint import sha256_file

    f = ckpt / name
    tensors = load_file(str(f))
    key = next(k for k, t in tensors.items() if key_part in k and t.is_floating_point())
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = float("nan")
    save_file(tensors, str(f))
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["files"][name] = {"bytes": f.stat().st_size, "sha256": sha256_file(f)}
    atomic_write_json(ckpt / "meta.json", meta)


@pytest.mark.parametrize(
    "name,key_part", [("model.safetensors", ""), ("state.safetensors", "importance")]
)
def test_nan_in_a_rehashed_checkpoint_is_refused_by_verify_export_and_resume(
    tiny_run, tmp_path, capsys, name, key_part
):
    """Weights (or importance scores) holding NaN pass every hash once the file's hash is rewritten;
    they are refused wherever a checkpoint is read, naming the file and the tensor."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    for ck in sorted((run / "checkpoints").iterdir()):
        _poison(ck, name, key_part)
    rc, out, err = _run(capsys, "verify", run)
    assert rc != 0 and "NaN/inf value(s)" in out + err, (out, err)
    if name == "model.safetensors":
        rc, _, err = _run(capsys, "export", run, tmp_path / "hf")
        _one_line_error(rc, err, "model.safetensors: tensor", "NaN/inf value(s)")
        assert not (tmp_path / "hf").exists()
    rc, _, err = _run(capsys, "pretrain", "--resume", run, "--quiet")
    _one_line_error(rc, err, name, "NaN/inf value(s)")
