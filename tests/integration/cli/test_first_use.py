"""What a new user meets first: every subcommand's --help says what it does, a misspelt preset or
key gets a did-you-mean, lab commands check their optional dependencies before any compute, and
results print readably."""

from __future__ import annotations

import argparse
import sys

import pytest

from tokendrop.cli import build_parser, main
from tokendrop.config import load_config
from tokendrop.errors import ConfigError


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_help_has_a_description(name, capsys):
    parser = _subcommands()[name]
    assert parser.description and len(parser.description.split()) >= 8, name
    with pytest.raises(SystemExit):
        main([name, "--help"])
    first = " ".join(parser.description.split()[:4])
    assert first in " ".join(capsys.readouterr().out.split()), name


@pytest.mark.parametrize(
    "given, meant", [("contineu", "continue"), ("tinny", "tiny"), ("moden-tiny", "modern-tiny")]
)
def test_a_misspelt_preset_gets_a_did_you_mean(given, meant, capsys):
    with pytest.raises(
        ConfigError,
        match=rf"no such file or preset '{given}' .*; did you mean '{meant}'\?$",
    ):
        load_config(given)
    assert main(["pretrain", "--config", given, "--out", "/nonexistent/never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"did you mean '{meant}'?" in err[0], err


@pytest.mark.parametrize(
    "key, meant",
    [
        ("datapath", "data.path"),
        ("batch_size", "train.batch_size"),
        ("trian.steps", "train.steps"),
        ("data.pth", "data.path"),
        ("drop.rat", "drop.rate"),
    ],
)
def test_a_misspelt_key_gets_the_full_dotted_key(key, meant):
    with pytest.raises(ConfigError, match=rf"unknown config key .*; did you mean '{meant}'\?$"):
        load_config("tiny", [f"{key}=1"])


def test_lab_commands_check_matplotlib_before_any_compute(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "study"
    assert main(["study", "--config", "study-tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "figures need matplotlib, which is not installed" in err[0], err
    assert not out.exists()
    assert main(["inspect", str(tmp_path / "no-run")]) == 2
    assert "matplotlib" in capsys.readouterr().err


def test_pretrain_result_prints_in_one_readable_line(tiny_run):
    import torch

    from tokendrop.train.trainer import PretrainResult

    r = PretrainResult(
        tiny_run,
        4,
        False,
        1.5,
        1234.0,
        {"eval_loss": 5.0, "eval_acc": 0.1},
        {},
        importance=torch.zeros(30522),
        history=[{}] * 7,
    )
    text = repr(r)
    assert "\n" not in text and len(text) < 300, text
    assert "finished at step 4" in text and "<30522 scores>" in text and "<7 records>" in text
    assert "eval_loss=5.0000" in text and "1,234 tokens/s" in text
