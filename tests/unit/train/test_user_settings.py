"""Settings a user changes and the ones a preset derives from them: warm-ups follow the user's batch
and length (shares), every warm-up counted in steps or tokens fits in its run (else one line naming
both settings), and a model size is given or comes from a preset or a source (0 is refused)."""

import pytest

from tokendrop.cli import main
from tokendrop.config import (
    EVAL_ALL,
    EXAMPLES_ALL,
    MICRO_BATCH_AUTO,
    NAMED_SIZES,
    SEQ_LEN_FROM_DATA,
    SIZE_TAKES,
    STEPS_UNSET,
    THREADS_AUTO,
    Config,
    from_dict,
    load_config,
    recorded_config,
    recorded_finetune,
)
from tokendrop.errors import ConfigError
from tokendrop.finetuning import finetune_config
from tokendrop.train.run_config import open_run_data
from tokendrop.train.schedules import batch_warmup_line, batch_warmup_start


def test_the_continue_presets_batch_warm_up_follows_the_users_batch():
    for batch, start in ((8, 4), (32, 16), (7, 3)):
        tc = load_config("continue", [f"train.batch_size={batch}"]).train
        assert batch_warmup_start(tc) == start
        assert (
            batch_warmup_line(tc)
            == f"; warm-up from {start} (0.5 of it) over the first 0.25 of the run"
        )
    # sequences, over the preset's share
    tc = load_config("continue", ["train.batch_warmup_start=8"]).train
    assert batch_warmup_start(tc) == 8 and batch_warmup_line(tc).startswith("; warm-up from 8 over")
    # the length's other unit replaces the share
    tc = load_config("continue", ["train.batch_warmup_tokens=4096"]).train
    assert (tc.batch_warmup_share, tc.batch_warmup_tokens) == ("unset", 4096)


def test_the_tiny_presets_lr_warm_up_follows_the_users_length(tiny_data):
    for steps, warm in ((2, 1), (4, 1), (40, 4), (100, 10)):
        cfg, _ = open_run_data(
            load_config("tiny", [f'data.path="{tiny_data}"', f"train.steps={steps}"]), None
        )
        assert (cfg.train.steps, cfg.train.warmup_steps) == (steps, warm)
    # the default: never longer than the run
    assert load_config(None, ["train.steps=4"]).train.warmup_steps == 4
    assert load_config(None, []).train.warmup_steps == 100


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (
            ["train.steps=4", "train.warmup_steps=100"],
            r"^train.warmup_steps: the learning-rate warm-up \(100 steps\) is longer than the run "
            r"\(train.steps = 4\); "
            r"set train.warmup_steps <= 4, or a share of the run: train.warmup_ratio = 0.1$",
        ),
        (
            [
                "train.tokens=2048",
                "train.batch_size=8",
                "train.warmup_steps=20",
            ],  # 2048 tokens = 4 steps of 8 x 64
            r"^train.warmup_steps: the learning-rate warm-up \(20 steps\) is longer than the run "
            r"\(train.steps = 4\)",
        ),
        (
            [
                "train.steps=4",
                "train.batch_size=8",
                "train.batch_warmup_start=4",
                "train.batch_warmup_tokens=100000",
            ],
            r"^train.batch_warmup_tokens: the batch warm-up \(100,000 tokens\) is longer than the "
            r"run \(4 steps x 8 x 64 = 2,048 tokens\); set train.batch_warmup_tokens <= 2048, or a "
            r"share of the run: train.batch_warmup_share$",
        ),
    ],
)
def test_a_warm_up_longer_than_its_run_is_refused_in_one_line(tiny_data, overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        open_run_data(load_config("tiny", [f'data.path="{tiny_data}"', *overrides]), None)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["num_layers", "hidden_size", "num_heads", "intermediate_size"])
@pytest.mark.parametrize("value", [0, -2])
def test_a_model_size_of_zero_or_less_is_refused(key, value, tiny_data, tmp_path, capsys):
    with pytest.raises(
        ConfigError,
        match=rf"^model.{key}: expected a positive integer, got {value}; a size is given, or comes "
        r"from model.preset \(e.g. \"bert-base\"\) or model.init",
    ) as e:
        load_config("tiny", [f"model.{key}={value}"])
    assert "\n" not in str(e.value)
    if value == 0 and key == "num_layers":  # the command line: exit 2, one line, nothing written
        run = tmp_path / "run"
        assert (
            main(
                [
                    "pretrain",
                    "--config",
                    "tiny",
                    "--out",
                    str(run),
                    "--set",
                    f'data.path="{tiny_data}"',
                    "--set",
                    "model.num_layers=0",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "model.num_layers: expected a positive integer, got 0" in err[0], (
            err
        )
        assert not run.exists()


@pytest.mark.parametrize("value", ["0", "-3", "'tokenizer'", "30k"])
def test_a_vocab_size_is_given_or_named_from_the_data(value, tiny_data, tmp_path, capsys):
    """``model.vocab_size`` is a positive size or ``"data"`` (the prepared data's vocabulary,
    filled in when pretraining opens it); 0, a negative size or another word is refused in one
    line naming the field and the fix, from Python and from the command line."""
    shown = {"0": "0", "-3": "-3", "'tokenizer'": "'tokenizer'", "30k": "'30k'"}[value]
    msg = (
        "model.vocab_size: expected a positive integer or 'data' (the prepared data's "
        f'vocabulary), got {shown}; write model.vocab_size = "data" to take it from the data'
    )
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [f"model.vocab_size={value}"])
    assert str(e.value) == msg
    run = tmp_path / "run"
    argv = ["pretrain", "--config", "tiny", "--out", str(run), "--quiet"]
    argv += ["--set", f'data.path="{tiny_data}"', "--set", f"model.vocab_size={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {msg}"] and not run.exists(), err


def test_vocab_size_data_takes_the_prepared_vocabulary(tiny_data):
    """The presets name the source (``vocab_size = "data"``); opening the data fills it in, and
    the run's recorded config holds the number."""
    from tokendrop.data import PreparedData

    cfg = load_config("tiny", [f'data.path="{tiny_data}"', "model.vocab_size=data"])
    assert cfg.model.vocab_size == "data" == load_config("tiny").model.vocab_size
    out = open_run_data(cfg, None)[0]
    assert out.model.vocab_size == PreparedData.open(tiny_data).vocab_size > 0


# each named size's one-line refusal: what the name means and the fix its message ends with
NAMED = {
    "model.vocab_size": ("the prepared data's vocabulary", "take it from the data"),
    "data.seq_len": ("the T the data was prepared with", "take it from the data"),
    "train.micro_batch_size": (
        "the per-rank batch, no gradient accumulation",
        "size it from train.batch_size",
    ),
    "train.threads": ("torch's default", "let torch choose"),
    "train.eval_batches": ("the whole held-out split", "evaluate on all of it"),
    "train.steps": (
        "the length comes from train.tokens, train.epochs or train.time_budget",
        "take the run's length from them",
    ),
    "finetune.max_train_examples": ("every train example", "train on all of them"),
    "finetune.max_eval_examples": ("every dev example", "evaluate on all of them"),
    "finetune.threads": ("torch's default", "let torch choose"),
    "train.tokens": (
        "the run's length is given in another unit",
        "give the run's length another way",
    ),
    "train.epochs": (
        "the run's length is given in another unit",
        "give the run's length another way",
    ),
    "train.warmup_steps": (
        "from train.warmup_ratio, else 100 steps at most the run's",
        "use that rule",
    ),
    "data.seq_len_start": ("no sequence-length warm-up", "train at data.seq_len from the start"),
    "train.batch_warmup_start": ("no batch warm-up", "train at train.batch_size from the start"),
    "train.head_warmup_share": (
        "not scaled: train.head_warmup_steps as they are",
        "take train.head_warmup_steps as they are",
    ),
    "train.batch_warmup_tokens": (
        "the batch warm-up's length is given in the other unit, or there is none",
        "leave the warm-up's length to the other unit",
    ),
    "train.batch_warmup_share": (
        "the batch warm-up's length is given in the other unit, or there is none",
        "leave the warm-up's length to the other unit",
    ),
}


def _first_number_type(field: str) -> type:
    """The first of int / float in the annotation of ``field`` (``section.name``): the type a
    number given to it is converted to."""
    import typing

    from tokendrop.config import FinetuneConfig

    section, name = field.split(".")
    cls = FinetuneConfig if section == "finetune" else typing.get_type_hints(Config)[section]
    return next(t for t in typing.get_args(typing.get_type_hints(cls)[name]) if t in (int, float))


def test_every_named_size_has_its_refusal_here():
    assert set(NAMED) == set(NAMED_SIZES)


@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("field", sorted(NAMED_SIZES))
def test_a_size_of_zero_or_less_is_refused_naming_its_source(
    field, value, tiny_data, tmp_path, capsys
):
    """Every size whose source has a name (``config.NAMED_SIZES``) is a positive integer or that
    name; 0 or a negative size is refused in one line naming the field, the name and the fix, from
    Python and (for 0) from the command line, nothing written."""
    word = NAMED_SIZES[field]
    means, fix = NAMED[field]
    takes = SIZE_TAKES.get(field, "a positive integer")
    msg = (
        f"{field}: expected {takes} or {word!r} ({means}), got {value}; write "
        f'{field} = "{word}" to {fix}'
    )
    finetuning = field.startswith("finetune.")
    if value == 0 and takes.endswith("(0: no warm-up)"):  # a real zero: no warm-up at all
        assert getattr(load_config("tiny", [f"{field}=0"]).train, field.split(".")[1]) == 0
        value = -1
        msg = msg.replace("got 0;", "got -1;")
    if _first_number_type(field) is float:  # the value as the config holds it: -1.0
        msg = msg.replace(f"got {value};", f"got {float(value)};")
    with pytest.raises(ConfigError) as e:
        if finetuning:
            finetune_config(None, [f"{field}={value}"])
        else:
            load_config("tiny", [f"{field}={value}"])
    assert str(e.value) == msg
    if value == 0:
        run = tmp_path / "run"
        if finetuning:
            argv = ["finetune", "--model", str(tiny_data), "--task", "sst2"]
            argv += ["--data", str(tmp_path), "--out", str(run), "--set", f"{field}={value}"]
        else:
            argv = ["pretrain", "--config", "tiny", "--out", str(run), "--quiet"]
            argv += ["--set", f'data.path="{tiny_data}"', "--set", f"{field}={value}"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {msg}"] and not run.exists(), err


def test_the_named_sizes_are_the_defaults_and_run(tiny_data, tmp_path):
    """The defaults name the sources ("data", "auto", "all"); a short run with all of them trains,
    evaluates the whole held-out split and records the names; a data.seq_len given must match."""
    import torch

    from tokendrop.train.resume import load_run_config
    from tokendrop.train.trainer import pretrain

    base = load_config(None)
    assert (base.data.seq_len, base.train.micro_batch_size, base.train.threads) == (
        SEQ_LEN_FROM_DATA,
        MICRO_BATCH_AUTO,
        THREADS_AUTO,
    )
    # (train.steps "unset" gives the run its default length: tested in test_length.py)
    skip = ("finetune.", "train.steps")
    named = [f"{k}={v}" for k, v in NAMED_SIZES.items() if not k.startswith(skip)]
    over = [f'data.path="{tiny_data}"', "train.steps=2", "train.batch_size=8", "train.eval_every=2"]
    cfg = load_config("tiny", [*over, *named])
    n = torch.get_num_threads()
    try:
        pretrain(cfg, tmp_path / "r", progress=False)
    finally:
        torch.set_num_threads(n)
    rec = load_run_config(tmp_path / "r")
    assert (rec.data.seq_len, rec.train.micro_batch_size, rec.train.eval_batches) == (
        SEQ_LEN_FROM_DATA,
        MICRO_BATCH_AUTO,
        EVAL_ALL,
    )
    fixed = open_run_data(load_config("tiny", [*over, "data.seq_len=64"]), None)[0]
    assert fixed.data.seq_len == 64
    with pytest.raises(ConfigError, match=r"^data.seq_len: expected T=32 but .* with T=64$"):
        open_run_data(load_config("tiny", [*over, "data.seq_len=32"]), None)


def test_a_size_an_older_run_recorded_as_zero_reads_as_its_name():
    """A run's config.toml or a checkpoint's meta.json written before these sizes were named holds
    0 for them: read back as the name (so the run resumes, verifies, inspects); a 0 given is not."""
    old = {
        "data": {"seq_len": 0, "seq_len_start": 0},
        "train": {
            "micro_batch_size": 0,
            "threads": 0,
            "eval_batches": 0,
            "steps": 0,
            "tokens": 0,
            "epochs": 0.0,
            "time_budget": "1h",
            "warmup_steps": -1,  # the warm-up a share of the budget
            "warmup_ratio": 0.1,
            "batch_warmup_start": 0,
            "batch_warmup_tokens": 0,
            "batch_warmup_share": 0.0,
            "head_warmup_share": 0.0,
        },
        "drop": {"start": -1, "end": -1},
    }
    cfg = from_dict(Config, recorded_config(old))
    for field, name in NAMED_SIZES.items():  # every one recorded here reads as its name
        section, key = field.split(".")
        if key in old.get(section, {}) and field != "train.steps":
            assert getattr(getattr(cfg, section), key) == name, field
    assert (cfg.drop.start, cfg.drop.end) == ("auto", "auto")  # layer indices: the variant's
    assert (
        cfg.data.seq_len,
        cfg.train.micro_batch_size,
        cfg.train.threads,
        cfg.train.eval_batches,
    ) == (SEQ_LEN_FROM_DATA, MICRO_BATCH_AUTO, THREADS_AUTO, EVAL_ALL)
    assert cfg.train.steps == STEPS_UNSET  # a time-budgeted run's (its config has time_budget)
    assert old["train"]["micro_batch_size"] == 0  # a new dict
    with pytest.raises(ConfigError, match="^drop.start: expected a layer index >= 0 or 'auto'"):
        from_dict(Config, old)  # given, not recorded: the first of them is refused
    del old["drop"]
    with pytest.raises(ConfigError, match="^data.seq_len: expected a positive integer"):
        from_dict(Config, old)


def test_a_finetune_size_an_older_run_recorded_as_zero_reads_as_its_name(tmp_path):
    """A fine-tuning run's recorded config and an evaluation's suite.toml written before these
    sizes were named hold 0 for them: read back as the name, so the suite loads (``tokendrop
    verify``); a suite preset a user writes with 0 is refused.  (A cell's reuse:
    tests/unit/finetuning/test_finetune_suite.py.)"""
    from tokendrop.config import FinetuneConfig, to_toml
    from tokendrop.finetuning import load_suite

    d = FinetuneConfig()
    assert (d.max_train_examples, d.max_eval_examples, d.threads) == ("all", "all", "auto")
    old = {"max_train_examples": 0, "max_eval_examples": 0, "threads": 0, "epochs": 2.0}
    new = recorded_finetune(old)
    assert (new["max_train_examples"], new["max_eval_examples"], new["threads"]) == (
        EXAMPLES_ALL,
        EXAMPLES_ALL,
        THREADS_AUTO,
    )
    assert old["threads"] == 0 and new["epochs"] == 2.0  # a new dict, the rest as recorded
    suite = load_suite("suite-tiny", ['squad.max_train_examples="all"'])
    text = to_toml(suite).replace('max_train_examples = "all"', "max_train_examples = 0")
    text = text.replace('threads = "auto"', "threads = 0")
    assert text.count("max_train_examples = 0") == 1 and text.count("threads = 0") == 2
    (tmp_path / "suite.toml").write_text(text, encoding="utf-8")
    rec = load_suite(tmp_path / "suite.toml", recorded=True)
    assert rec.squad.max_train_examples == EXAMPLES_ALL and rec.glue.threads == THREADS_AUTO
    with pytest.raises(ConfigError, match=r"^finetune\.(max_train_examples|threads): expected a"):
        load_suite(tmp_path / "suite.toml").validate()


@pytest.mark.parametrize("new_run", [True, False])
def test_a_vocabulary_mismatch_names_the_fix(tiny_data, new_run):
    from tokendrop.data.mixture import open_data
    from tokendrop.train.run_config import resolve_run_config

    data = open_data(str(tiny_data), [], [])
    cfg = load_config("tiny", [f'data.path="{tiny_data}"', "model.vocab_size=30522"])
    with pytest.raises(ConfigError) as e:
        resolve_run_config(cfg, data, None, new_run=new_run)
    n = data.vocab_size
    head = f"data.path: {tiny_data} was prepared with a vocabulary of {n} ids but "
    head += "model.vocab_size is 30522; "
    fix = (
        f"set model.vocab_size = {n} (--set model.vocab_size={n}) to train on this data, or "
        "prepare it with a vocabulary of 30522 ids (tokendrop prepare --vocab FILE)"
        if new_run
        else "a resumed run keeps its 30522-id vocabulary: give data prepared with it (tokendrop "
        "prepare --vocab RUN/tokenizer/vocab.txt)"
    )
    assert str(e.value) == head + fix
