"""The public API answers arguments of the wrong type with tokendrop's own errors: one line naming
the argument, what it got and what it takes.  The rows are checked against ``tokendrop._API``: a
public function without a row here fails the test."""

import inspect

import pytest

import tokendrop as td


def _tiny():
    return td.load_config("tiny")


BAD_CALLS = {  # public name -> (a call with one argument of the wrong type, the argument it names)
    "Config": (lambda: td.Config(model={}).validate(), "model"),
    "ModelConfig": (
        lambda: td.Config(model=td.ModelConfig(hidden_size="big")).validate(),
        "model.hidden_size",
    ),
    "DropConfig": (lambda: td.Config(drop=td.DropConfig(rate="half")).validate(), "drop.rate"),
    "FinetuneConfig": (
        lambda: td.FinetuneConfig(task="sst2", epochs="3").validate(),
        "finetune.epochs",
    ),
    "load_config": (lambda: td.load_config("tiny", "train.steps=3"), "overrides"),
    "finetune_config": (lambda: td.finetune_config(None, "epochs=1"), "overrides"),
    "TokenSelector": (lambda: td.TokenSelector({"method": "cumulative"}, 100, {}, 64), "drop"),
    "DropPlan": (
        lambda: td.DropPlan({"method": "cumulative"}, {}, num_layers=4, vocab_size=100, seq_len=64),
        "drop",
    ),
    "DropStep": (lambda: td.DropStep("3", 64, True, 32, False), "step"),
    "step_flops": (lambda: td.step_flops({"hidden_size": 64}, 128), "model"),
    "flop_ratio": (lambda: td.flop_ratio(_tiny().model, 128, None), "drop"),
    "build_model": (lambda: td.build_model(dict), "cfg"),
    "load_pretrained": (lambda: td.load_pretrained(None, object), "path"),
    "resolve_model": (lambda: td.resolve_model({"init": "x"}), "cfg"),
    "export": (lambda: td.export(None, "out"), "checkpoint"),
    "prepare": (lambda: td.prepare(5, "out", 64), "corpus_paths"),
    "pretrain": (lambda: td.pretrain(dict, "out"), "cfg"),
    "finetune": (lambda: td.finetune(dict, "model", "out"), "cfg"),
    "evaluate": (lambda: td.evaluate("run", "suite-tiny", "out"), "models"),
    "verify": (lambda: td.verify(None), "path"),
    "text_selection": (lambda: td.text_selection("run", ["a sentence"]), "text"),
}


def _callables() -> set[str]:
    out = set()
    for name in td._API:
        v = getattr(td, name)
        if inspect.isclass(v) and issubclass(v, BaseException):
            assert issubclass(v, td.TokendropError), name
        elif callable(v):
            out.add(name)
        else:
            assert isinstance(v, dict), (
                f"{name}: neither callable nor a registry; give it a row in BAD_CALLS"
            )
    return out


def test_every_public_callable_has_a_bad_call():
    assert set(BAD_CALLS) == _callables()


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_a_wrong_type_is_refused_in_one_line_naming_the_argument(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: checked below
    call, arg = BAD_CALLS[name]
    with pytest.raises(td.TokendropError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and arg in msg and ("expected" in msg), msg
    assert isinstance(e.value, (td.ArgumentError, td.ConfigError)), type(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_preset_name_for_pretrain_is_refused_with_the_way_to_load_it(tmp_path):
    with pytest.raises(td.ArgumentError) as e:
        td.pretrain("tiny", tmp_path / "run")
    assert "got the string 'tiny'" in str(e.value) and "tokendrop.load_config('tiny'" in str(
        e.value
    )
    assert isinstance(e.value, TypeError)  # callers' `except TypeError` still catches it
    assert not (tmp_path / "run").exists()


def test_finetune_is_the_function_whatever_was_imported_first():
    import tokendrop.finetuning.run  # noqa: F401 -- binds the package as tokendrop.finetuning

    assert callable(td.finetune) and td.finetune.__module__ == "tokendrop.finetuning.fit"

    with pytest.raises(td.ArgumentError):
        td.finetune(dict, "model", "out")


def test_sizes_that_cannot_be_are_refused_from_python(tmp_path):
    """The Python API refuses what the command line refuses: a FLOP count of a 0-token step or a
    negative batch, a classifier of no class, a prepare with no worker process."""
    from tokendrop.config.model import ModelConfig
    from tokendrop.data import DataError, prepare
    from tokendrop.dropping.flops import step_flops
    from tokendrop.models.families import build_model

    m = ModelConfig(preset="bert-base", num_layers=2, hidden_size=64, num_heads=2, vocab_size=100)
    with pytest.raises(ValueError, match=r"step_flops: seq_len must be a positive integer, got 0"):
        step_flops(m, 0)
    with pytest.raises(ValueError, match=r"step_flops: batch_size must be a positive integer"):
        step_flops(m, 128, batch_size=-1)
    assert step_flops(m, 128, batch_size=2) is not None
    for n in (0, -3, 2.0):
        with pytest.raises(ValueError, match=r"build_model: num_labels must be a positive integer"):
            build_model(m, task="classification", num_labels=n)
    assert build_model(m, task="classification", num_labels=1) is not None
    with pytest.raises(DataError, match=r"workers: expected a positive number of processes"):
        prepare([tmp_path / "c.txt"], tmp_path / "out", 32, vocab_size=100, workers=0)
