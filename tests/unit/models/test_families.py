"""The encoder-family table (tokendrop.models.families.FAMILIES): complete, consistent with the
config schema, each family's HF adapter a round trip, and no family dispatch outside the table."""

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.config.model import MODEL_FAMILIES, MODEL_PRESETS, read_families
from tokendrop.dropping.flops import describe_model, step_flops
from tokendrop.errors import ConfigError
from tokendrop.models.families import (
    FAMILIES,
    TASKS,
    build_model,
    spec_for_hf_model_type,
    spec_of,
    task_of,
)
from tokendrop.models.hf import model_config_from_hf

SRC = Path(__file__).resolve().parents[3] / "src" / "tokendrop"


def tiny_fields(family: str) -> dict:
    """A small model of ``family``: its preset with the fewest layer weights, a 128-token vocabulary
    (derived from the family's row, so a new family is covered without an entry here)."""

    def size(name: str) -> int:
        return MODEL_PRESETS[name]["num_layers"] * MODEL_PRESETS[name]["hidden_size"] ** 2

    return dict(preset=min(FAMILIES[family].presets, key=size), vocab_size=128, sep_token_id=3)


def tiny(family: str) -> ModelConfig:
    cfg = ModelConfig(**tiny_fields(family))
    cfg.validate()
    return cfg


def test_table_matches_the_config_schema_and_covers_every_task():
    assert set(FAMILIES) == set(MODEL_FAMILIES)
    # the schema's facts are what a config of the family resolves
    for (
        name,
        schema,
    ) in MODEL_FAMILIES.items():
        assert tiny(name).uses_document_attention == schema.document_attention
        assert (
            ModelConfig(**tiny_fields(name), document_attention="off").uses_document_attention
            is False
        )
    for name, spec in FAMILIES.items():
        assert spec.name == name
        assert set(spec.classes) == set(TASKS) == set(spec.hf_architectures)
        for task, cls in spec.classes.items():
            assert task_of(cls) == task
        assert spec_for_hf_model_type(spec.hf_model_type) is spec
    assert spec_for_hf_model_type("roberta") is None
    with pytest.raises(ConfigError, match="model.family: unknown family 'gpt'"):
        spec_of("gpt")


def test_a_family_is_one_folder_and_one_registration():
    """Every folder of models/ with a family.toml is a registered family whose row is that folder's
    FAMILY; the row carries the folder's [model] schema and presets, and the transformers
    integration's layout names one of tokendrop.transformers.encoders.LAYOUTS."""
    from tokendrop.transformers.encoders import LAYOUTS

    assert {p.parent.name for p in (SRC / "models").glob("*/family.toml")} == set(FAMILIES)
    for name, spec in FAMILIES.items():
        assert importlib.import_module(f"tokendrop.models.{name}").FAMILY is spec
        assert spec.schema is MODEL_FAMILIES[name]
        for preset in spec.presets:
            assert ModelConfig(preset=preset).family == name
        assert spec.integration is None or spec.integration.layout in LAYOUTS
    assert list(MODEL_PRESETS) == [p for spec in FAMILIES.values() for p in spec.presets]


def test_a_broken_family_file_is_one_line(tmp_path):
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "family.toml").write_text(
        "document_attention = false\nrotary = true\n"
        'classifier_pooling = ["cls"]\nglu_ffn = false\nsliding_windows = false\n'
        '[preset_defaults]\nfamily = "good"\n'
        "[presets]\ngood-tiny = { num_layers = 2 }\n"
    )
    schemas, presets, owners = read_families(tmp_path)
    assert presets == {"good-tiny": {"num_layers": 2, "family": "good"}} and owners == {
        "good-tiny": "good"
    }
    assert schemas["good"].rotary and schemas["good"].classifier_pooling == ("cls",)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "family.toml").write_text("rotary = true\n")
    with pytest.raises(
        ConfigError, match=r"bad/family.toml: not a family file .*document_attention"
    ):
        read_families(tmp_path)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_adapter_round_trips_config_and_weights(family):
    """config.json and tensor names, ours -> transformers -> ours, are the identity; the export's
    layout is recognised as the family's MLM class; pretraining's frozen modules exist."""
    spec = spec_of(family)
    cfg = tiny(family)
    torch.manual_seed(0)
    model = build_model(cfg)
    back = spec.config_from_hf(spec.hf_config(cfg, [spec.hf_architectures["mlm"]]), "config.json")
    arch = (
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "intermediate_size",
        "max_position_embeddings",
        "family",
        "layer_norm_eps",
    )
    assert {k: getattr(back, k) for k in arch} == {k: getattr(cfg, k) for k in arch}
    # dispatch by model_type
    assert model_config_from_hf(spec.hf_config(cfg, None)).family == family
    sd = model.state_dict()
    hf = spec.to_hf(sd)
    ours = spec.from_hf(hf)
    tied = {k for k in sd if k not in ours}  # the decoder tied to the word embeddings
    assert all(sd[k].data_ptr() == model.state_dict()[k].data_ptr() for k in tied)
    assert len(tied) <= 1
    for k, v in ours.items():
        assert torch.equal(v, sd[k]), k
    layout = spec.check_hf_tensors(
        Path("model.safetensors"), {k: tuple(v.shape) for k, v in hf.items()}, cfg
    )
    assert layout == spec.hf_architectures["mlm"]
    for name in spec.pretrain_frozen:
        model.get_submodule(name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_flop_model_reads_the_family(family):
    """GeGLU counts 3 d f matrices per row where a plain FFN counts 2: the difference between the
    family's count and the same shape counted as the other FFN is exactly one d x f matrix per
    row."""
    # the FLOP facts are the config schema's (dropping reads no models)
    schema = MODEL_FAMILIES[family]
    cfg = tiny(family)
    T = 32
    dense = step_flops(cfg, T).encoder
    MODEL_FAMILIES[family] = dataclasses.replace(schema, glu_ffn=not schema.glu_ffn)
    try:
        flipped = step_flops(cfg, T).encoder
    finally:
        MODEL_FAMILIES[family] = schema
    one_matrix = 2 * T * cfg.hidden_size * cfg.intermediate_size * cfg.num_layers
    assert dense - flipped == (one_matrix if schema.glu_ffn else -one_matrix)
    assert describe_model(cfg).startswith(f"{family}: ")


def test_no_family_dispatch_outside_the_table():
    """Comparisons of ``.family`` live in the config schema and the table only: everything else asks
    ``spec_of``, so a new family is one registration, not a hunt through if/else chains."""
    # transformers/patch.py reads each family's HFIntegration (where the encoder, its layers and the
    # head sit)
    allowed = {"config/model.py", "models/families.py"}
    pattern = re.compile(
        r"family[\"')]*\s*(==|!=|\bnot in\b|\bin\b)|(==|!=)\s*[\"']modernbert[\"']"
        r"|[\"']model_type[\"'][^)]*\)\s*(==|!=)"
    )
    found = [
        f"{p.relative_to(SRC)}:{i}"
        for p in sorted(SRC.rglob("*.py"))
        if p.relative_to(SRC).as_posix() not in allowed
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"family dispatch outside tokendrop.models.families: {found}"


def test_a_new_family_is_one_registration(monkeypatch, tmp_path):
    """Following docs/design.md's "new encoder family" row with a stand-in (BERT's modules under
    another name): one FAMILIES entry plus its entry in the config schema, and building, the FLOP
    model, the trainer's frozen modules and export all reach it with no other change."""
    from tokendrop.config import model as config_model
    from tokendrop.models.hf import save_pretrained

    monkeypatch.setitem(config_model.MODEL_FAMILIES, "bert-copy", MODEL_FAMILIES["bert"])
    monkeypatch.setitem(
        FAMILIES, "bert-copy", dataclasses.replace(FAMILIES["bert"], name="bert-copy")
    )
    cfg = ModelConfig(**{**tiny_fields("bert"), "family": "bert-copy"})
    cfg.validate()
    model = build_model(cfg)
    assert type(model) is FAMILIES["bert"].classes["mlm"]
    assert describe_model(cfg).startswith("bert-copy: ")
    assert step_flops(cfg, 32).encoder == step_flops(tiny("bert"), 32).encoder
    out = save_pretrained(model, tmp_path / "export")
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
