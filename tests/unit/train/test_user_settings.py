"""Settings a user changes and the ones a preset derives from them: warm-ups follow the user's batch
and length (shares), every warm-up counted in steps or tokens fits in its run (else one line naming
both settings), and a model size is given or comes from a preset or a source (0 is refused)."""

import pytest

from tokendrop.cli import main
from tokendrop.config import load_config
from tokendrop.errors import ConfigError
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
    assert (tc.batch_warmup_share, tc.batch_warmup_tokens) == (0.0, 4096)


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
            r"run "
            r"\(4 steps x 8 x 64 = "
            r"2,048 tokens\); set train.batch_warmup_tokens <= 2048, or a share of the run: "
            r"train.batch_warmup_share$",
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
        match=rf"^model.{key}: expected a positive integer, got "
        rf"{value}; a size is given, "
        r"or comes from model.preset \(e.g. \"bert-base\"\) or "
        r"model.init",
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
