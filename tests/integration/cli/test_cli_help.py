"""One CLI convention: every command's --help runs and every example in it parses (arguments and the
config overrides they name; the study's in tests/integration/lab/test_study_examples.py),
--version, user errors exit 2, a run's length given on the command line replaces the preset's,
finetune --set takes KEY and finetune.KEY, the task list comes from the task registry."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli_commands, help_examples

from tokendrop.cli import build_parser, main
from tokendrop.config import Config, FinetuneConfig, from_dict, load_config
from tokendrop.errors import ConfigError


def _check_example(argv: list[str]) -> None:
    """The parsed command's config (with its overrides) loads: keys exist, values have their
    types."""
    a = build_parser().parse_args(argv)
    if a.cmd in ("pretrain", "flops") and getattr(a, "config", None):
        init = [f'model.init="{a.init}"'] if getattr(a, "init", None) else []
        load_config(a.config, [*a.overrides, *init])
    elif a.cmd == "finetune":
        from tokendrop.finetuning import finetune_config
        from tokendrop.finetuning.tasks import get_task

        get_task(a.task)
        finetune_config(a.config, a.overrides, task=a.task, data=a.data)
    elif a.cmd == "evaluate":
        from tokendrop.finetuning import load_suite

        load_suite(a.suite, a.overrides)


@pytest.mark.parametrize("name", list(cli_commands()), ids=lambda n: n or "tokendrop")
def test_help_runs_and_each_example_parses(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"] if name else ["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    examples = help_examples(text)
    assert examples, f"tokendrop {name} --help shows no example"
    for ex in examples:
        argv = shlex.split(ex)[1:]
        assert argv[0] in cli_commands(), ex
        _check_example(argv)


def test_a_wrong_example_would_fail():
    """The check above is not vacuous: the old finetune example's section key is refused."""
    with pytest.raises(ConfigError, match="unknown config key 'drop'"):
        _check_example(
            shlex.split("finetune --model m --task sst2 --data d --out o --set drop.rate=0.25")
        )
    with pytest.raises(SystemExit):
        build_parser().parse_args(shlex.split("pretrain --config tiny --no-such-flag"))


def test_version(capsys):
    from tokendrop import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"tokendrop {__version__}"


def test_finetune_task_list_is_the_registry(capsys):
    from tokendrop.finetuning.tasks import TASKS

    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(t in text for t in TASKS)


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["pretrain", "--out", "r"], "pretrain needs --config and --out"),
        (
            ["pretrain", "--config", "tiny", "--out", "r", "--resume", "r", "--resume-if-exists"],
            "--resume-if-exists goes",
        ),
        (
            ["pretrain", "--config", "tiny", "--resume", "r", "--overwrite"],
            "--overwrite starts a new run",
        ),
        (["bench", "--campaign", "env"], "bench --campaign needs --out"),
        (
            [
                "finetune",
                "--model",
                "m",
                "--task",
                "sst2",
                "--data",
                "d",
                "--out",
                "o",
                "--set",
                "drop.rate=0.25",
            ],
            "unknown config key 'drop'",
        ),
        (
            ["flops", "--config", "tiny", "--set", "train.steps=5", "--set", "train.tokens=2M"],
            "train.steps and train.tokens: both set",
        ),
        (  # tiny takes its vocabulary from the data: without data the fix is named
            ["flops", "--config", "tiny", "--set", "drop.method=cumulative", "--seq-len", "128"],
            'model.vocab_size: "data" (the prepared data\'s vocabulary), but no prepared data is '
            "given; --set data.path=DIR (a prepared directory) or --set model.vocab_size=N",
        ),
    ],
)
def test_user_errors_exit_2_with_one_line(argv, fragment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err


# argument errors the command line answers before it imports torch (a typo costs no torch import)
_EARLY_ERRORS = [
    (["pretrain", "--confg", "x"], "unrecognized arguments: --confg"),
    (["pretrain", "--config", "tny", "--out", "r"], "did you mean 'tiny'"),
    (["pretrain", "--config", "tiny", "--out", "r", "--set", "drop.rat=0.5"], "'drop.rate'"),
    (["pretrain", "--config", "tiny", "--resume", "r", "--overwrite"], "not both"),
    (["pretrain", "--resume", "r", "--out", "other"], "continues the run in its own directory"),
    (
        ["pretrain", "--config", "tiny", "--out", "r", "--init", "a", "--set", "model.init='b'"],
        "--init and --set model.init both name",
    ),
    (
        ["pretrain", "--config", "tiny", "--out", "r", "--resume-if-exists", "--set", "drop.rat=1"],
        "rate",
    ),
    (["pretrain", "--config", "tiny", "--out", "a-file"], "is not a directory"),
    (["flops", "--config", "tny"], "did you mean 'tiny'"),
]

_EARLY_SCRIPT = """
import sys
from tokendrop.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:  # argparse's own usage errors
    code = e.code
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(code, len(loaded), loaded[:3])
"""


@pytest.mark.parametrize("argv,fragment", _EARLY_ERRORS)
def test_argument_errors_come_before_torch_is_imported(argv, fragment, tmp_path):
    (tmp_path / "a-file").write_text("x")
    src = Path(__file__).resolve().parents[3] / "src"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run(
        [sys.executable, "-c", _EARLY_SCRIPT, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.split()[:2] == ["2", "0"], (r.stdout, r.stderr[-2000:])
    assert fragment in r.stderr, r.stderr


@pytest.mark.parametrize(
    "preset_len,cli_len,field,value",
    [
        ("steps", "train.time_budget='20s'", "time_budget", "20s"),
        ("steps", "train.tokens='2M'", "tokens", "2M"),
        ("steps", "train.epochs=1.5", "epochs", 1.5),
    ],
)
def test_a_length_on_the_command_line_replaces_the_presets(preset_len, cli_len, field, value):
    cfg = load_config("tiny", [cli_len])  # tiny sets train.steps = 40
    assert getattr(cfg.train, field) == value and cfg.train.steps == "unset"
    # steps given again on the command line replace the budget of a preset that has one
    base = {"train": {"time_budget": "1h"}}
    assert from_dict(Config, base, ["train.steps=7"]).train.steps == 7
    assert from_dict(Config, base, ["train.steps=7"]).train.time_budget == ""
    with pytest.raises(ConfigError, match="both set"):  # two in the same layer stay an error
        from_dict(Config, {}, ["train.steps=7", "train.tokens='2M'"])


def test_a_presets_length_replaces_the_one_it_extends(tmp_path):
    (tmp_path / "short.toml").write_text('extends = "tiny"\n[train]\ntime_budget = "30s"\n')
    cfg = load_config(tmp_path / "short.toml")
    assert (cfg.train.steps, cfg.train.time_budget) == ("unset", "30s")
    (tmp_path / "both.toml").write_text(
        'extends = "tiny"\n[train]\ntime_budget = "30s"\ntokens = "1M"\n'
    )
    with pytest.raises(ConfigError, match="both set"):
        load_config(tmp_path / "both.toml")
    # tiny: warmup_steps = 4
    (tmp_path / "ratio.toml").write_text('extends = "tiny"\n[train]\nwarmup_ratio = 0.1\n')
    assert load_config(tmp_path / "ratio.toml").train.warmup_ratio == 0.1


def test_finetune_set_takes_key_and_finetune_key():
    from tokendrop.finetuning import finetune_config

    a = finetune_config(
        None, ["epochs=1", "finetune.lr=3e-5", " finetune.save_model=true"], task="sst2", data="d"
    )
    assert (a.epochs, a.lr, a.save_model) == (1.0, 3e-5, True)
    with pytest.raises(ConfigError, match="finetune.epochs"):
        finetune_config(None, ["finetune.epochs=0"], task="sst2", data="d")
    assert isinstance(a, FinetuneConfig)


def test_flops_takes_init(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    conf = transformers.BertConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=64,
    )
    transformers.BertModel(conf).save_pretrained(tmp_path / "src")
    capsys.readouterr()
    assert (
        main(["flops", "--config", "continue", "--init", str(tmp_path / "src"), "--seq-len", "64"])
        == 0
    )
    out = capsys.readouterr().out
    assert "bert: 3 layers, d=32" in out, out


def test_flops_resolves_the_vocabulary_and_t_from_data_path(tiny_data, capsys):
    """flops resolves the config as pretrain does: model.vocab_size = "data" and the default T
    come from data.path; the head's FLOPs follow the vocabulary."""
    from tokendrop.config import load_config
    from tokendrop.dropping.flops import step_flops
    from tokendrop.train.run_config import resolve_config

    argv = ["flops", "--config", "tiny", "--set", "drop.method=cumulative"]
    capsys.readouterr()
    assert main([*argv, "--set", f'data.path="{tiny_data}"']) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[2:]]
    vocab = len((tiny_data / "vocab.txt").read_text(encoding="utf-8").splitlines())
    cfg, data = resolve_config(
        load_config("tiny", [f'data.path="{tiny_data}"']), None, fix="unused"
    )
    assert (cfg.model.vocab_size, data.seq_len) == (vocab, 64)
    dense = step_flops(cfg.model, 64, cfg.train.batch_size, None).total
    assert [r[:2] for r in rows] == [["64", f"{dense:.4g}"]]
    # the same numbers from the vocabulary given by hand
    assert main([*argv, "--set", f"model.vocab_size={vocab}", "--seq-len", "64"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["64", f"{dense:.4g}"]
