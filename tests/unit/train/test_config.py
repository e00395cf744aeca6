import tomllib

import pytest

from tokendrop.config import Config, from_dict, load_config, to_toml
from tokendrop.errors import ConfigError


def test_presets_load():
    for name in (
        "tiny",
        "demo",
        "bert-base-128",
        "bert-base-512",
        "bert-large-128",
        "bert-large-512",
    ):
        cfg = load_config(name)
        assert cfg.model.hidden_size % cfg.model.num_heads == 0
    base = load_config("bert-base-512")
    assert (
        base.model.num_layers,
        base.model.hidden_size,
        base.train.batch_size,
        base.train.steps,
        base.data.seq_len,
    ) == (12, 768, 512, 1_000_000, 512)
    large = load_config("bert-large-128")
    assert (
        large.model.num_layers,
        large.model.hidden_size,
        large.model.num_heads,
        large.model.intermediate_size,
    ) == (24, 1024, 16, 4096)


def test_overrides_and_round_trip():
    cfg = load_config(
        "tiny",
        [
            "drop.method=cumulative",
            "drop.rate=0.625",
            "train.steps=7",
            "drop.pinned_tokens=['.']",
            'data.path="x y"',
        ],
    )
    assert cfg.drop.method == "cumulative" and cfg.drop.rate == 0.625 and cfg.train.steps == 7
    assert cfg.drop.pinned_tokens == ["."] and cfg.data.path == "x y"
    again = from_dict(Config, tomllib.loads(to_toml(cfg)))
    assert again == cfg


def test_model_preset_explicit_fields_win():
    cfg = load_config(None, ["model.preset=bert-base", "model.num_layers=6"])
    assert cfg.model.num_layers == 6 and cfg.model.hidden_size == 768


def test_one_precedence_rule_on_every_path(tmp_path):
    """Explicit field > model.preset > bert-base, whether the config is built in Python, from TOML,
    from --set overrides, or from a dict; intermediate_size follows the resolved hidden_size."""
    from tokendrop.config import ModelConfig
    from tokendrop.config.model import MODEL_PRESETS

    def shape(m):
        return m.num_layers, m.hidden_size, m.num_heads, m.intermediate_size, m.preset

    assert shape(ModelConfig(preset="bert-base", num_layers=6)) == (6, 768, 12, 3072, "")
    # 12 = bert-base's, still explicit
    assert shape(ModelConfig(preset="bert-large", num_layers=12)) == (
        12,
        1024,
        16,
        4096,
        "",
    )
    assert shape(ModelConfig(preset="cpu-4x128", hidden_size=256)) == (4, 256, 2, 1024, "")
    assert shape(ModelConfig(preset="bert-base", intermediate_size=1000)) == (12, 768, 12, 1000, "")
    assert shape(ModelConfig()) == (12, 768, 12, 3072, "")
    assert shape(ModelConfig(num_layers=2, hidden_size=64, num_heads=2)) == (2, 64, 2, 256, "")
    toml = tmp_path / "m.toml"
    toml.write_text('[model]\npreset = "bert-large"\nnum_layers = 12\n')
    paths = [
        load_config(None, ["model.preset=bert-large", "model.num_layers=12"]).model,
        load_config(None, ["model.num_layers=12", "model.preset=bert-large"]).model,
        from_dict(Config, {"model": {"preset": "bert-large", "num_layers": 12}}).model,
        load_config(toml).model,
    ]
    for m in paths:
        assert shape(m)[:4] == (12, 1024, 16, 4096), m
    # a resolved config round-trips unchanged; re-reading it applies no preset a second time
    again = from_dict(Config, tomllib.loads(to_toml(load_config(toml))))
    assert shape(again.model) == shape(paths[-1])
    with pytest.raises(
        ConfigError, match="model.preset: unknown preset 'nope'; expected one of bert-large"
    ):
        ModelConfig(preset="nope", num_layers=3)
    assert set(MODEL_PRESETS) >= {"bert-base", "bert-large"}


@pytest.mark.parametrize(
    "override,msg",
    [
        ("train.stepz=3", "unknown config key 'train.stepz'; did you mean 'train.steps'"),
        ("drop.rat=0.2", "did you mean 'drop.rate'"),
        ("train.steps=abc", "train.steps: expected a positive integer or 'unset'"),
        ("train.steps=1.5", "train.steps: expected an integer or a string"),
        ("train.compile=1", "train.compile: expected true or false"),
        ("drop.rate=1.0", r"drop.rate: expected a fraction in \[0, 1\)"),
        ("model.num_heads=5", "model.hidden_size: 64 is not divisible"),
        ("model.preset=bert-huge", "model.preset: unknown preset"),
        ("train.precision=fp8", "train.precision"),
        ("nonsense", "expected section.key=value"),
    ],
)
def test_bad_values(override, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config("tiny", [override])


@pytest.mark.parametrize(
    "section,field,value,message",
    [
        (
            "train",
            "lr",
            float("nan"),
            "train.lr: expected a positive, finite learning rate, got nan",
        ),
        ("train", "lr", 0.0, "train.lr: expected a positive, finite learning rate, got 0.0"),
        (
            "train",
            "head_warmup_lr",
            -1.0,
            "train.head_warmup_lr: expected a positive learning rate, got -1.0",
        ),
        (
            "train",
            "grad_clip",
            float("inf"),
            "train.grad_clip: expected a finite max gradient norm >= 0 (0 = no clipping), got inf",
        ),
        (
            "train",
            "weight_decay",
            -0.1,
            "train.weight_decay: expected a finite value >= 0, got -0.1",
        ),
        ("train", "adam_eps", 0.0, "train.adam_eps: expected a positive, finite value, got 0.0"),
        (
            "train",
            "epochs",
            -0.5,
            "train.epochs: expected a positive number of passes over the training split or "
            "'unset' (the run's length is given in another unit), got -0.5; write train.epochs = "
            '"unset" to give the run\'s length another way',
        ),
        ("train", "batch_size", 0, "train.batch_size: expected a positive integer, got 0"),
        (
            "finetune",
            "lr",
            -2e-5,
            "finetune.lr: expected a positive, finite learning rate, got -2e-05",
        ),
        (
            "finetune",
            "grad_clip",
            -1.0,
            "finetune.grad_clip: expected a finite max gradient norm >= 0 (0 = no "
            "clipping), got -1.0",
        ),
        ("finetune", "epochs", 0.0, "finetune.epochs: expected a finite number > 0, got 0.0"),
        ("finetune", "eval_batch_size", 0, "finetune.eval_batch_size: expected > 0, got 0"),
        (
            "model",
            "local_attention",
            0,
            "model.local_attention: expected a positive integer, got 0",
        ),
        (
            "model",
            "global_rope_theta",
            float("nan"),
            "model.global_rope_theta: expected a positive rotary base, got nan",
        ),
    ],
)
def test_finite_positive_fields_say_what_they_expect(section, field, value, message):
    """Every finite-and-positive field of train, finetune and model is refused in one message shape:
    FIELD: expected WHAT, got VALUE (0 allowed where the field means "off")."""
    import dataclasses

    from tokendrop.config import FinetuneConfig, ModelConfig

    obj = {
        "train": load_config("tiny").train,
        "finetune": FinetuneConfig(),
        "model": ModelConfig(),
    }[section]
    # epochs is the run's one length
    length = {"steps": "unset"} if field == "epochs" and section == "train" else {}
    with pytest.raises(ConfigError) as e:
        dataclasses.replace(obj, **length, **{field: value}).validate()
    assert str(e.value) == message
    for off in ("grad_clip", "weight_decay"):  # 0 = off
        dataclasses.replace(obj, **{off: 0.0}).validate() if section == "train" else None


def test_bad_files(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("[train\nsteps=1")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="no such file or preset"):
        load_config(tmp_path / "missing.toml")
    p.write_text('extends = "tiny"\n[train]\nsteps = 3\n')
    assert load_config(p).train.steps == 3 and load_config(p).model.hidden_size == 64
