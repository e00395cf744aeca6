"""Continued pretraining (``pretrain --init``): the source's weights are really used, exact resume
without the source, the MLM-head warm-up and importance warm start, and the bad-input errors."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tokendrop.cli import main as cli_main
from tokendrop.config import load_config
from tokendrop.errors import ConfigError
from tokendrop.models.source import resolve_init_source, resolve_model_init
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.trainer import pretrain

SMALL = [
    "train.batch_size=8",
    "train.batch_warmup_start=4",
    "train.eval_batches=2",
    "train.eval_every=2",
    "train.log_every=1",
    "train.ckpt_every=2",
    "train.warmup_steps=1",
    "train.device=cpu",
    "train.precision=fp32",
    "data.num_workers=0",
]


def evals(run):
    return [r["eval_loss"] for r in read_metrics(run) if "eval_loss" in r]


def events(run, name):
    return [r for r in read_metrics(run) if r.get("event") == name]


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """The tiny preset trained for 40 steps, and its Hugging Face export."""
    from tokendrop.models.source import export_hf

    root = tmp_path_factory.mktemp("trained")
    pretrain(
        load_config("tiny", [f'data.path="{tiny_data}"', "train.steps=40"]),
        root / "run",
        progress=False,
    )
    export_hf(root / "run", root / "hf")
    return root / "run", root / "hf"


def cont(source, data, *overrides):
    return load_config(
        "continue",
        [
            f"model.init={json.dumps(str(source))}",
            f"data.path={json.dumps(str(data))}",
            *SMALL,
            *overrides,
        ],
    )


@pytest.mark.parametrize("which", ["hf", "run"])
def test_continued_run_starts_at_the_source_loss(trained, tiny_data, tmp_path, which):
    run, hf = trained
    src = hf if which == "hf" else run
    # tiny's eval batches
    cfg = cont(src, tiny_data, "train.steps=2", "train.batch_size=16", "train.eval_batches=4")
    assert cfg.model.shape_pending  # parsing reads nothing; pretrain resolves the source
    m = resolve_model_init(cfg.model, resolve_init_source(str(src)))
    assert (m.num_layers, m.hidden_size) == (4, 64)  # the shape came from the source
    pretrain(cfg, tmp_path / "c", progress=False)
    start = evals(tmp_path / "c")[0]
    assert start == pytest.approx(evals(run)[-1], abs=1e-4)  # same eval batches, same weights
    # a random model of the same shape is far worse
    pretrain(
        load_config("tiny", [f'data.path="{tiny_data}"', "train.steps=1"]),
        tmp_path / "r",
        progress=False,
    )
    assert evals(tmp_path / "r")[0] > start + 1.0
    recorded = (tmp_path / "c" / "config.toml").read_text()
    sha = resolve_init_source(str(src)).sha256
    assert (
        json.dumps(str(src)) in recorded and f'init_sha256 = "{sha}"' in recorded and len(sha) == 64
    )
    assert (tmp_path / "c" / "source" / "init.json").is_file()
    assert (tmp_path / "c" / "source" / "config.json").is_file() == (which == "hf")


def test_resume_of_a_continued_run_is_exact_without_the_source(trained, tiny_data, tmp_path):
    _, hf = trained
    src = tmp_path / "src"
    shutil.copytree(hf, src)
    full = cont(src, tiny_data, "train.steps=4", "drop.method=cumulative")
    pretrain(full, tmp_path / "a", progress=False)
    pretrain(
        cont(src, tiny_data, "train.steps=4", "drop.method=cumulative"),
        tmp_path / "b",
        progress=False,
        stop_at=2,
    )
    shutil.rmtree(src)  # --resume must not need the source any more
    assert cli_main(["pretrain", "--resume", str(tmp_path / "b"), "--quiet"]) == 0
    a = load_file(str(ckpt_mod.latest(tmp_path / "a") / "model.safetensors"))
    b = load_file(str(ckpt_mod.latest(tmp_path / "b") / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sa = load_file(str(ckpt_mod.latest(tmp_path / "a") / "state.safetensors"))["importance"]
    sb = load_file(str(ckpt_mod.latest(tmp_path / "b") / "state.safetensors"))["importance"]
    assert torch.equal(sa, sb)


@pytest.fixture(scope="module")
def headless(tiny_data, tmp_path_factory):
    """A randomly initialised transformers BertModel (no MLM head) using the tiny data's
    vocabulary."""
    transformers = pytest.importorskip("transformers")
    from tokendrop.data import PreparedData

    data = PreparedData.open(tiny_data)
    d = tmp_path_factory.mktemp("headless")
    conf = transformers.BertConfig(
        vocab_size=data.vocab_size,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    transformers.BertModel(conf, add_pooling_layer=True).save_pretrained(d)
    shutil.copyfile(f"{data.tokenizer_path}/vocab.txt", d / "vocab.txt")
    return d


def test_fresh_head_is_warmed_up_and_importance_warm_started(headless, tiny_data, tmp_path):
    # lr 1e-2: the fall is far beyond batch-to-batch noise in 6 steps
    cfg = cont(
        headless,
        tiny_data,
        "train.steps=2",
        "train.head_warmup_steps=6",
        "train.head_warmup_share=off",
        "train.head_warmup_lr=1e-2",
        "drop.method=cumulative",
    )
    pretrain(cfg, tmp_path / "c", progress=False)
    init = events(tmp_path / "c", "init")[0]
    assert init["fresh"] and all(k.startswith("mlm.") for k in init["fresh"])
    hw = events(tmp_path / "c", "head_warmup")[0]
    assert hw["steps"] == 6 and hw["last_loss"] < hw["first_loss"]
    imp = events(tmp_path / "c", "importance_init")[0]
    assert imp["importance_init"] == "dense_pass" and imp["ids_scored"] > 10


def test_head_warmup_moves_only_the_head(headless, tiny_data):
    from tokendrop.data import MLMLoader, PreparedData
    from tokendrop.models.bert.model import BertForMaskedLM
    from tokendrop.models.source import load_init_weights, resolve_init_source
    from tokendrop.train.continued import head_warmup

    src = resolve_init_source(str(headless))
    model = BertForMaskedLM(src.model)
    load_init_weights(src, model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    it = iter(
        MLMLoader(
            PreparedData.open(tiny_data),
            split="train",
            batch_size=4,
            seed=1,
            num_workers=0,
            loop=True,
        )
    )
    losses = head_warmup(model, it, 8, 1e-3, torch.device("cpu"), None)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("mlm.") for k in changed), changed
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("how", ["dense_pass", "frequency", "constant"])
def test_importance_warm_start(tiny_data, tmp_path, how):
    pretrain(
        load_config(
            "tiny",
            [
                f'data.path="{tiny_data}"',
                "train.steps=1",
                "drop.method=cumulative",
                f"drop.importance_init={how}",
                "drop.importance_init_batches=2",
            ],
        ),
        tmp_path / "r",
        progress=False,
    )
    # from scratch a warm start runs only when asked for explicitly (the "auto" default is constant
    # there)
    ev = events(tmp_path / "r", "importance_init")
    assert [e["importance_init"] for e in ev] == ([] if how == "constant" else [how])
    from tokendrop.data import MLMLoader, PreparedData
    from tokendrop.dropping.importance import TokenSelector
    from tokendrop.dropping.methods import PIN_HIGH
    from tokendrop.models.bert.model import BertForMaskedLM
    from tokendrop.train.continued import warm_start_importance

    data = PreparedData.open(tiny_data)
    cfg = load_config("tiny", [f'data.path="{tiny_data}"', "drop.method=cumulative"])
    cfg.model.vocab_size = data.vocab_size
    sel = TokenSelector(cfg.drop, data.vocab_size, data.special_ids, data.seq_len)
    model = BertForMaskedLM(cfg.model)
    it = iter(MLMLoader(data, split="train", batch_size=4, seed=1, num_workers=0, loop=True))
    warm_start_importance(sel, model, it, how, 2, torch.device("cpu"), None, data.token_counts())
    s = sel.scores
    normal = s[(s < PIN_HIGH) & (s > -PIN_HIGH)]
    if how == "constant":
        assert torch.all(normal == cfg.drop.init_score)
    else:
        # real losses / surprisals, not the constant
        assert normal.std() > 0.01 and normal.min() > 0
    assert s[data.special_ids["cls"]] == PIN_HIGH  # pins survive


def test_contradicting_shape_is_an_error(trained, tiny_data, tmp_path):
    """Parsing reads nothing; pretrain resolves the source and refuses before writing anything."""
    _, hf = trained
    cfg = cont(hf, tiny_data, "model.hidden_size=128")
    with pytest.raises(ConfigError, match="model.hidden_size: 128 contradicts the init source"):
        pretrain(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_data_with_another_vocabulary_is_refused(trained, tiny_data, tmp_path, capsys):
    from toydata import write_corpus

    from tokendrop.data import prepare

    _, hf = trained
    other = prepare(
        [write_corpus(tmp_path / "c.txt", docs=60, seed=3)],
        tmp_path / "other",
        seq_len=64,
        vocab_size=150,
        eval_fraction=0.1,
        workers=1,
        progress=False,
    )
    code = cli_main(
        [
            "pretrain",
            "--config",
            "continue",
            "--init",
            str(hf),
            "--out",
            str(tmp_path / "run"),
            "--set",
            f"data.path={json.dumps(str(tmp_path / 'other'))}",
            *sum((["--set", s] for s in SMALL), []),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "vocabulary" in err[0] and str(hf) in err[0], err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("checkpoints/*"))
    del other


def test_seq_len_above_the_checkpoints_positions_is_refused(tiny_data, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from tokendrop.data import PreparedData

    data = PreparedData.open(tiny_data)
    d = tmp_path / "short"
    # tiny data has T=64
    conf = transformers.BertConfig(
        vocab_size=data.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    transformers.BertForMaskedLM(conf).save_pretrained(d)
    shutil.copyfile(f"{data.tokenizer_path}/vocab.txt", d / "vocab.txt")
    capsys.readouterr()  # transformers' own save_pretrained output
    code = cli_main(
        [
            "pretrain",
            "--config",
            "continue",
            "--init",
            str(d),
            "--out",
            str(tmp_path / "run"),
            "--set",
            f"data.path={json.dumps(str(tiny_data))}",
            *sum((["--set", s] for s in SMALL), []),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and "learned position embeddings" in err[0]
        and "T <= 32" in err[0]
    ), err
