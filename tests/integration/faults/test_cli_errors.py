"""One error base: every error class of the package is a TokendropError, and the CLI prints any of
them as one line ``error: ...`` with exit status 2 (docs/design.md §4.5)."""

import ast
import importlib
from pathlib import Path

import pytest

import tokendrop
from tokendrop.cli import main
from tokendrop.errors import TokendropError

PKG = Path(tokendrop.__file__).resolve().parent


def _error_classes() -> list[type]:
    """Every class named ``*Error`` defined anywhere in the package's source, imported."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        names = [
            n.name
            for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef) and n.name.endswith("Error")
        ]
        if not names:
            continue
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mod = importlib.import_module(".".join(parts))
        found += [getattr(mod, n) for n in names]
    return found


def test_every_error_class_is_a_tokendrop_error():
    classes = _error_classes()
    names = {c.__name__ for c in classes}
    # the ones the CLI and the docs name must be among those found (the scan itself works)
    assert {
        "ConfigError",
        "DataError",
        "InteropError",
        "TrainingError",
        "CheckpointError",
        "FinetuneError",
        "FetchError",
    } <= names
    not_ours = [
        f"{c.__module__}.{c.__name__}" for c in classes if not issubclass(c, TokendropError)
    ]
    assert not_ours == [], f"error classes outside the TokendropError hierarchy: {not_ours}"


def test_error_classes_keep_their_builtin_bases():
    from tokendrop.errors import ConfigError, TrainingError

    assert issubclass(ConfigError, ValueError) and issubclass(TrainingError, RuntimeError)


def test_multi_line_message_is_printed_on_one_line(monkeypatch, capsys):
    import tokendrop.cli as cli
    from tokendrop.data import DataError

    def boom(a):
        raise DataError("corpus.txt: no documents\n  (blocks must be separated by a blank line)")

    monkeypatch.setattr(cli, "cmd_inspect", boom)
    rc = main(["inspect", "some-run"])
    err = capsys.readouterr().err
    assert (
        rc == 2
        and err == "error: corpus.txt: no documents (blocks must be separated by a blank line)\n"
    )


def test_config_error_through_the_cli(capsys):
    rc = main(["flops", "--config", "no-such-preset-xyz"])
    err = capsys.readouterr().err
    assert (
        rc == 2
        and len(err.splitlines()) == 1
        and err.startswith("error: ")
        and "no-such-preset-xyz" in err
    )


def test_a_bug_is_not_swallowed(monkeypatch):
    import tokendrop.cli as cli

    def bug(a):
        raise KeyError("internal")

    monkeypatch.setattr(cli, "cmd_inspect", bug)
    with pytest.raises(KeyError):
        main(["inspect", "some-run"])
