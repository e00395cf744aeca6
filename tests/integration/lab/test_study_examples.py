"""Every example of ``tokendrop study --help`` parses and its study config (with the overrides it
names) loads: keys exist, values have their types."""

from __future__ import annotations

import argparse
import shlex

from tokendrop.cli import build_parser
from tokendrop.lab.study.spec import load_study


def test_the_study_help_examples_load():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    text = sub.choices["study"].format_help()
    assert "examples:\n" in text, text
    examples = text.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(examples) >= 2, examples
    for line in examples:
        a = parser.parse_args(shlex.split(line)[1:])
        assert a.cmd == "study", line
        load_study(a.config, a.overrides)
