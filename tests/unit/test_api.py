"""The public API: what ``tokendrop/__init__.py`` exports loads, and docs/api.md's examples run."""

import re
from pathlib import Path

import tokendrop

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_public_name_loads_and_is_documented():
    text = DOC.read_text(encoding="utf-8")
    for name in tokendrop.__all__:
        if name == "__version__":
            continue
        assert getattr(tokendrop, name) is not None
        assert f"`{name}" in text, f"docs/api.md does not document tokendrop.{name}"
    assert sorted(dir(tokendrop)) == sorted(tokendrop.__all__)


def test_an_unknown_name_is_an_attribute_error():
    try:
        tokendrop.no_such_name
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_forward_example_runs(capsys):
    exec(compile(_blocks()[0], "docs/api.md", "exec"), {})
    assert "best speed-up" in capsys.readouterr().out


def test_the_run_example_runs(tmp_path):
    code = _blocks()[1].replace("/tmp/td-api", str(tmp_path))
    exec(compile(code, "docs/api.md", "exec"), {})
    assert (tmp_path / "export" / "config.json").is_file()
