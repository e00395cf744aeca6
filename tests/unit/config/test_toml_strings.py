"""Every string a config holds reads back from the TOML tokendrop writes, whatever it contains."""

import tomllib

import pytest
from config_strings import HOSTILE, string_fields

from tokendrop.config import (
    Config,
    FinetuneConfig,
    from_dict,
    load_config,
    to_dict,
    to_toml,
    toml_string,
)
from tokendrop.errors import ConfigError
from tokendrop.finetuning.suite import SuiteConfig


@pytest.mark.parametrize("cls", [Config, FinetuneConfig, SuiteConfig])
@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_string_field_round_trips(cls, hostile):
    cfg = cls()
    fields = list(string_fields(cfg))
    assert fields, cls  # the walk found the config's strings
    for obj, name, is_list, _ in fields:
        object.__setattr__(obj, name, [hostile, "plain"] if is_list else hostile)
    text = to_toml(cfg)
    assert tomllib.loads(text) == to_dict(cfg)


def test_the_walk_sees_every_kind_of_string_field():
    paths = {p for *_, p in string_fields(Config())}
    # a plain str, an int | str size, a list[str], in each section
    assert {"name", "data.path", "train.threads", "train.report_to", "model.init"} <= paths
    assert "drop.pinned_tokens" in paths


def test_a_setting_with_a_newline_reads_back_through_the_config():
    cfg = load_config("tiny", ['name="a\\nb\\u0001c"', 'data.path="d\\tir\\\\x"'])
    assert cfg.name == "a\nb\x01c" and cfg.data.path == "d\tir\\x"
    assert from_dict(Config, tomllib.loads(to_toml(cfg))) == cfg


@pytest.mark.parametrize(
    "s,want",
    [
        ("a\nb", '"a\\nb"'),
        ("\x00\x1b\x7f", '"\\u0000\\u001B\\u007F"'),
        ('\\"', '"\\\\\\""'),
        ("\b\t\f\r", '"\\b\\t\\f\\r"'),
        ("é", '"é"'),
    ],
)
def test_toml_string_escapes(s, want):
    assert toml_string(s) == want
    assert tomllib.loads(f"v = {want}")["v"] == s


def test_a_string_toml_cannot_hold_is_named():
    cfg = Config()
    object.__setattr__(cfg.data, "path", "bad\udcffname")
    with pytest.raises(ConfigError, match=r"^data\.path: .* not a character TOML can hold"):
        to_toml(cfg)
