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


def test_no_public_name_is_shadowed_by_a_module():
    """Importing a submodule binds it on its package: a public name that is also a module's name
    (``tokendrop.verify``) would turn into that module once anything imported it."""
    import importlib
    import pkgutil
    import types

    for info in pkgutil.walk_packages(tokendrop.__path__, "tokendrop."):
        if ".lab" not in info.name and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    for name in tokendrop.__all__:
        assert not isinstance(getattr(tokendrop, name), types.ModuleType), name
    top = {info.name for info in pkgutil.iter_modules(tokendrop.__path__)}
    assert not top & set(tokendrop.__all__), (
        f"modules of tokendrop named as public names: {sorted(top & set(tokendrop.__all__))}"
    )


def test_an_unknown_name_is_an_attribute_error():
    try:
        _ = tokendrop.no_such_name
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_forward_example_runs(capsys):
    exec(compile(_blocks()[0], "docs/api.md", "exec"), {})
    assert "best speed-up" in capsys.readouterr().out


def test_the_run_example_runs(tmp_path, capsys):
    code = _blocks()[1].replace("/tmp/td-api", str(tmp_path))
    exec(compile(code, "docs/api.md", "exec"), {})
    assert (tmp_path / "export" / "config.json").is_file()
    # the selection shown is the run's: its newest checkpoint, learned scores
    out = capsys.readouterr().out
    assert f"{tmp_path / 'run'} at step 4 (drop.method = cumulative" in out, out
    assert "keeps 6 of the 12 tokens of the text" in out, out


def _minilm_like(tiny_data, root):
    """A small checkpoint in MiniLM's layout (sentence-transformers: a bare ``BertModel``, no MLM
    head, no ``bert.`` prefix), with tiny_data's tokenizer."""
    from toydata import write_hf_bert

    return write_hf_bert(root / "all-MiniLM-L6-v2", tiny_data, positions=128, mlm=False)


def test_the_notebook_example_continues_a_checkpoint_without_a_head_and_fills_a_mask(
    tiny_data, tmp_path, capsys
):
    source = _minilm_like(tiny_data, tmp_path)
    code = (
        _blocks()[2]
        .replace(".cache/all-MiniLM-L6-v2", str(source))
        .replace("/tmp/td-nb", str(tmp_path))
        .replace('["my-text.txt"]', repr([str(tiny_data.parent / "corpus.txt")]))
    )
    exec(compile(code, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 32 MLM head fresh: True", out
    filled = eval(out[-1])  # the five best tokens for the mask
    assert len(filled) == 5 and all(isinstance(t, str) for t in filled)
    assert (tmp_path / "run" / "source" / "config.json").is_file()
    # its export's model card: the source by its name, how it was trained, the measured eval loss
    tokendrop.export(tmp_path / "run", tmp_path / "export")
    card = (tmp_path / "export" / "README.md").read_text(encoding="utf-8")
    (source,) = [line for line in card.splitlines() if line.startswith("| source |")]
    assert (
        source.startswith("| source | continued from `all-MiniLM-L6-v2` (weights sha256 ")
        and str(tmp_path) not in source
    )
    assert (
        "| trained with | `tokendrop.pretrain` from Python (its settings: the run's `config.toml`, "
        "preset `continue`) |" in card
    )
    assert "| final eval MLM loss | " in card


def test_build_model_of_an_unresolved_source_says_how_in_one_line(tiny_data, tmp_path):
    import pytest

    source = _minilm_like(tiny_data, tmp_path)
    cfg = tokendrop.load_config("continue", [f"model.init={str(source)!r}"])
    with pytest.raises(
        tokendrop.ConfigError,
        match=r"model.init: the shape of .* is not resolved yet; "
        r"build_model\(resolve_model\(cfg.model\)",
    ) as e:
        tokendrop.build_model(cfg.model, cfg.drop)
    assert "\n" not in str(e.value)
    model = tokendrop.build_model(tokendrop.resolve_model(cfg.model), cfg.drop)
    assert model.config.num_layers == 2 and model.config.init == str(source)
    with pytest.raises(
        tokendrop.InteropError, match="task 'mlmx' is not one of mlm, classification, qa"
    ):
        tokendrop.load_pretrained(source, "mlmx")
    clf, info = tokendrop.load_pretrained(source, "classification", num_labels=3)
    assert info["head_fresh"] is False and "classifier.weight" in info["fresh"]
