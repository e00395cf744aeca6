"""Config layers (docs/configuration.md, "Layers"): a preset over the preset it ``extends``,
``--set`` over the preset, the [model] section's keys over its ``model.preset`` (and, with
``model.init``, over the source).  A layer's value counts because its key is there, whatever the
value -- also when it equals the dataclass field's default -- and a key a layer leaves out keeps the
lower layer's value."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from tokendrop.config import Config, ModelConfig, from_dict, load_config, to_dict
from tokendrop.config.model import MODEL_PRESETS


def preset(tmp_path: Path, text: str, name: str = "over.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# the [model] fields modern-tiny's model preset sets to something other than the field's default,
# each given back its default (what bert-base / ModelConfig() has)
DEFAULTS_OVER_MODERN_TINY = {
    "local_attention": 128,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "layer_norm_eps": 1e-12,
}


def test_the_model_preset_sets_these_fields_differently():
    """The premise of the tests below: modern-tiny's values are not the defaults given over them."""
    fields = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    for k, v in DEFAULTS_OVER_MODERN_TINY.items():
        assert MODEL_PRESETS["modern-tiny"][k] != v, k
        assert fields[k] == v, k
    m = load_config("modern-tiny").model
    # the preset file's 16
    assert (m.local_attention, m.hidden_dropout, m.layer_norm_eps) == (
        16,
        0.0,
        1e-5,
    )


def test_set_gives_a_model_field_its_default_over_a_preset():
    m = load_config("modern-tiny", ["model.local_attention=128"]).model
    assert m.local_attention == 128  # was 64: modern-tiny's model preset, as if 128 were not given
    m = load_config(
        "modern-tiny", [f"model.{k}={v}" for k, v in DEFAULTS_OVER_MODERN_TINY.items()]
    ).model
    assert {k: getattr(m, k) for k in DEFAULTS_OVER_MODERN_TINY} == DEFAULTS_OVER_MODERN_TINY
    # what no layer changed stays
    assert m.family == "modernbert" and m.max_position_embeddings == 128


def test_extends_gives_a_model_field_its_default_over_a_preset(tmp_path):
    lines = "\n".join(f"{k} = {v!r}" for k, v in DEFAULTS_OVER_MODERN_TINY.items())
    p = preset(tmp_path, f'extends = "modern-tiny"\n[model]\n{lines}\n')
    m = load_config(p).model
    assert {k: getattr(m, k) for k in DEFAULTS_OVER_MODERN_TINY} == DEFAULTS_OVER_MODERN_TINY
    # two levels: the middle layer gives the default, the top layer gives nothing for it
    preset(tmp_path, 'extends = "modern-tiny"\n[model]\nlocal_attention = 128\n', "mid.toml")
    top = preset(tmp_path, 'extends = "mid.toml"\n[train]\nsteps = 3\n', "top.toml")
    assert load_config(top).model.local_attention == 128
    # and --set over the layered file: the top layer's value again
    assert load_config(top, ["model.local_attention=64"]).model.local_attention == 64


def test_a_model_field_given_in_python_wins_over_the_preset_whatever_its_value():
    assert ModelConfig(preset="modern-tiny", local_attention=128).local_attention == 128
    assert ModelConfig(preset="modern-tiny", hidden_dropout=0.1).hidden_dropout == 0.1
    assert ModelConfig(preset="modern-tiny").local_attention == 64  # not given: the preset's
    # the same rule on every path (tests/unit/train/test_config.py:
    # test_one_precedence_rule_on_every_path)
    assert (
        from_dict(
            Config, {"model": {"preset": "modern-tiny", "local_attention": 128}}
        ).model.local_attention
        == 128
    )


def test_a_resolved_config_round_trips_through_its_dict():
    cfg = load_config("modern-tiny", ["model.local_attention=128"])
    assert from_dict(Config, to_dict(cfg)) == cfg


def test_other_sections_layer_by_key_too(tmp_path):
    """train / drop / data values equal to their defaults replace a lower layer's (tiny sets lr
    2e-3, batch_size 16, warmup_steps 4, data.num_workers 0; the defaults are 1e-4, 32, 100, 1)."""
    base = preset(tmp_path, 'extends = "tiny"\n[drop]\nbeta = 0.9\n', "base.toml")
    assert load_config(base).drop.beta == 0.9
    p = preset(
        tmp_path,
        'extends = "base.toml"\n[train]\nlr = 1e-4\nbatch_size = 32\nwarmup_steps = 100\n'
        "[drop]\nbeta = 0.995\n[data]\nnum_workers = 1\n",
    )
    cfg = load_config(p)
    assert (
        cfg.train.lr,
        cfg.train.batch_size,
        cfg.train.warmup_steps,
        cfg.drop.beta,
        cfg.data.num_workers,
    ) == (1e-4, 32, 100, 0.995, 1)
    assert cfg.train.steps == 40  # what the layer leaves out stays tiny's
    cfg = load_config(
        base,
        [
            "train.lr=1e-4",
            "train.batch_size=32",
            "train.warmup_steps=100",
            "drop.beta=0.995",
            "data.num_workers=1",
        ],
    )
    assert (
        cfg.train.lr,
        cfg.train.batch_size,
        cfg.train.warmup_steps,
        cfg.drop.beta,
        cfg.data.num_workers,
    ) == (1e-4, 32, 100, 0.995, 1)


def test_one_choice_rules_still_hold_across_layers(tmp_path):
    """A later layer's run length replaces an earlier one's, whatever the unit -- also when its
    value is the default's (train.steps = 1000); the warm-up likewise (warmup_steps = 100 over a
    ratio)."""
    budget = preset(
        tmp_path,
        'extends = "tiny"\n[train]\nsteps = "unset"\ntime_budget = "90s"\nwarmup_steps = "auto"\n'
        "warmup_ratio = 0.1\n",
        "budget.toml",
    )
    cfg = load_config(budget)
    assert (cfg.train.steps, cfg.train.time_budget, cfg.train.warmup_ratio) == ("unset", "90s", 0.1)
    cfg = load_config(budget, ["train.steps=1000", "train.warmup_steps=100"])
    assert (
        cfg.train.steps,
        cfg.train.time_budget,
        cfg.train.warmup_steps,
        cfg.train.warmup_ratio,
    ) == (1000, "", 100, 0.0)
    over = preset(tmp_path, 'extends = "budget.toml"\n[train]\nsteps = 1000\n')
    cfg = load_config(over)
    assert (cfg.train.steps, cfg.train.time_budget) == (1000, "")
    cfg = load_config("tiny", ['train.time_budget="2m"'])  # tiny's steps = 40 gives way
    assert (cfg.train.steps, cfg.train.time_budget) == ("unset", "2m")


def _source(model: ModelConfig, tmp_path: Path):
    from tokendrop.models.weights import InitSource

    return InitSource(
        source=str(tmp_path),
        path=tmp_path,
        kind="huggingface",
        layout="ModernBertForMaskedLM",
        model=model,
        weights_file=tmp_path / "model.safetensors",
        sha256="0" * 64,
        tokenizer_dir=None,
        hf_config=None,
    )


def test_a_model_field_given_with_init_wins_over_the_source_whatever_its_value(tmp_path):
    """Continued pretraining: the [model] keys given over the source's (dropout, a position
    extension) count because they are given, also at the field's default (ModernBERT has no
    dropout)."""
    pytest.importorskip("torch")
    from tokendrop.models.source import resolve_model_init

    src = _source(ModelConfig(preset="modern-tiny", vocab_size=100, sep_token_id=3), tmp_path)
    assert src.model.hidden_dropout == 0.0
    parsed = load_config(
        None,
        [f'model.init="{tmp_path}"', "model.hidden_dropout=0.1", "model.attention_dropout=0.0"],
    ).model
    m = resolve_model_init(parsed, src)
    assert (m.hidden_dropout, m.attention_dropout, m.num_layers, m.family) == (
        0.1,
        0.0,
        4,
        "modernbert",
    )
    # not given: the source's
    m = resolve_model_init(load_config(None, [f'model.init="{tmp_path}"']).model, src)
    assert (m.hidden_dropout, m.local_attention, m.max_position_embeddings) == (0.0, 64, 512)


def test_a_section_waiting_for_its_source_round_trips_with_what_it_was_given(tmp_path):
    """to_dict / to_toml of a config whose model.init is not resolved yet keep the [model] keys
    given (a study's run configs and the torchrun workers' job files go through them), so the source
    still fills the rest: read back, it resolves to what the original resolves to."""
    pytest.importorskip("torch")
    import tomllib

    from tokendrop.config import to_toml
    from tokendrop.models.source import resolve_model_init

    src = _source(ModelConfig(preset="modern-tiny", vocab_size=100, sep_token_id=3), tmp_path)
    cfg = load_config(
        "continue",
        [f'model.init="{tmp_path}"', "model.hidden_dropout=0.1", "drop.start=1", "drop.end=3"],
    )
    assert to_dict(cfg)["model"] == {"hidden_dropout": 0.1, "init": str(tmp_path)}
    for again in (
        from_dict(Config, to_dict(cfg)),
        from_dict(Config, tomllib.loads(to_toml(cfg))),
        copy.deepcopy(cfg),
        pickle.loads(pickle.dumps(cfg)),
    ):
        assert again.model.given() == cfg.model.given()
        assert resolve_model_init(again.model, src) == resolve_model_init(cfg.model, src)
    resolved = resolve_model_init(cfg.model, src)
    assert to_dict(resolved) == dataclasses.asdict(resolved)  # resolved: every field


@dataclasses.dataclass
class _Inner:
    a: int = 1
    b: int = 2


@dataclasses.dataclass
class _Outer:
    plain: _Inner = dataclasses.field(default_factory=_Inner)
    tuned: _Inner = dataclasses.field(default_factory=lambda: _Inner(b=20))


def test_a_table_layers_over_its_fields_default_factory():
    """A [section] table given for a field whose default_factory tunes it (a suite's [glue] over
    ``_glue_base``) keeps what the factory set for the keys the table leaves out."""
    o = from_dict(_Outer, {"tuned": {"a": 5}, "plain": {"a": 7}})
    assert o.tuned == _Inner(a=5, b=20) and o.plain == _Inner(a=7, b=2)
    # the default value, given, counts
    assert from_dict(_Outer, {"tuned": {"b": 2}}).tuned == _Inner(a=1, b=2)
    assert from_dict(_Outer, {}, ["tuned.a=3"]).tuned == _Inner(a=3, b=20)

    from tokendrop.finetuning.suite import SuiteConfig

    s = from_dict(
        SuiteConfig, {"glue_data": "glue", "squad_data": "squad", "glue": {"batch_size": 16}}
    )
    assert (s.glue.batch_size, s.glue.log_every, s.glue.max_seq_len) == (16, 0, 128)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"preset": "bert-base", "local_attention": 7, "norm_bias": True},
            "model.local_attention: 7 is a modernbert setting, which a bert model does not have; "
            "remove it (or use a modernbert model: model.family = 'modernbert' "
            "or one of its presets)",
        ),
        (
            {"preset": "modern-tiny", "type_vocab_size": 1},
            "model.type_vocab_size: 1 is a bert setting, which a modernbert model does not have",
        ),
    ],
)
def test_a_field_another_family_owns_is_refused_naming_the_family(kwargs, message):
    """The [model] section is one for every family: a field only another family reads (its
    family.toml's ``owns``), set, would be ignored silently; refused instead.  At its default (as in
    every recorded config.toml) it passes."""
    from tokendrop.config.model import MODEL_FAMILIES, ModelConfig
    from tokendrop.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        ModelConfig(**kwargs).validate()
    assert str(e.value).startswith(message)
    assert all(s.owns for s in MODEL_FAMILIES.values())  # every family declares what it owns
    ModelConfig(preset="bert-base", local_attention=128).validate()  # the default: not "set"
