"""Our BERT against transformers.BertForMaskedLM with identical weights."""

import pytest
import torch
import transformers

from tokendrop.models.bert.hf import from_hf, hf_config_dict, to_hf
from tokendrop.models.bert.model import BertForMaskedLM, BertForSequenceClassification
from tokendrop.models.hf import save_pretrained
from tokendrop.models.source import load_pretrained


def hf_twin(ours: BertForMaskedLM) -> transformers.BertForMaskedLM:
    cfg = transformers.BertConfig(
        **{k: v for k, v in hf_config_dict(ours.config).items() if k not in ("architectures",)}
    )
    cfg._attn_implementation = "eager"
    hf = transformers.BertForMaskedLM(cfg)
    missing, unexpected = hf.load_state_dict(to_hf(ours.state_dict()), strict=False)
    assert not [k for k in missing if "decoder.weight" not in k and "decoder.bias" not in k], (
        missing
    )
    assert [k for k in unexpected if not k.startswith("bert.pooler")] == []
    hf.tie_weights()
    return hf.eval()


def test_logits_match_hf_packed_and_padded(small_cfg):
    torch.manual_seed(0)
    ours = BertForMaskedLM(small_cfg).eval()
    hf = hf_twin(ours)
    ids = torch.randint(5, small_cfg.vocab_size, (3, 24))
    with torch.no_grad():
        a = ours(ids)
        b = hf(input_ids=ids).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # padded batch with an attention mask
    mask = torch.ones_like(ids)
    mask[0, 15:] = 0
    mask[2, 7:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    tt = torch.zeros_like(ids)
    tt[:, 10:] = 1
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, token_type_ids=tt)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits
    keep = mask.bool()
    torch.testing.assert_close(a[keep], b[keep], atol=1e-5, rtol=1e-5)


def test_head_on_positions_equals_full_head(small_cfg):
    torch.manual_seed(1)
    m = BertForMaskedLM(small_cfg).eval()
    ids = torch.randint(5, 97, (2, 20))
    pos = torch.tensor([[1, 5, 7], [0, 2, 19]])
    with torch.no_grad():
        full = m(ids)
        part = m(ids, mlm_positions=pos)
    torch.testing.assert_close(
        part, torch.stack([full[0, pos[0]], full[1, pos[1]]]), atol=1e-6, rtol=0
    )


def test_state_dict_adapter_round_trip(small_cfg):
    m = BertForMaskedLM(small_cfg)
    sd = m.state_dict()
    back = from_hf(to_hf(sd))
    assert set(back) == set(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    hf_keys = set(to_hf(sd))
    ref = set(
        transformers.BertForMaskedLM(
            transformers.BertConfig(**hf_config_dict(small_cfg))
        ).state_dict()
    )
    # every HF MLM key is produced (the tied decoder weight/bias are aliases of ours)
    assert ref - hf_keys <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert "cls.predictions.bias" in hf_keys


def test_export_loads_in_transformers(small_cfg, tmp_path):
    torch.manual_seed(2)
    ours = BertForMaskedLM(small_cfg).eval()
    out = save_pretrained(ours, tmp_path / "exp")
    hf, info = transformers.BertForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"], info
    hf.eval()
    ids = torch.randint(5, 97, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert not info["unexpected_keys"], info  # the MLM export leaves the (untrained) pooler out
    clf, info2 = transformers.BertForSequenceClassification.from_pretrained(
        out, num_labels=3, output_loading_info=True
    )
    assert not [
        k for k in info2["missing_keys"] if not k.startswith(("classifier", "bert.pooler"))
    ], info2
    # and back into ours, as classifier: encoder identical, the classifier and pooler fresh
    mine, meta = load_pretrained(out, BertForSequenceClassification, num_labels=3)
    assert meta["source"] == "huggingface"
    assert set(meta["fresh"]) == {
        "classifier.weight",
        "classifier.bias",
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
    }
    torch.testing.assert_close(
        mine.bert.embeddings.word_embeddings.weight, ours.bert.embeddings.word_embeddings.weight
    )
    re_mlm, _ = load_pretrained(out, BertForMaskedLM)
    with torch.no_grad():
        torch.testing.assert_close(re_mlm.eval()(ids), ours(ids), atol=0, rtol=0)


def test_refuses_pickles(tmp_path, small_cfg):
    import json

    from tokendrop.errors import InteropError
    from tokendrop.models.bert.hf import hf_config_dict

    (tmp_path / "config.json").write_text(json.dumps(hf_config_dict(small_cfg)))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(InteropError, match="pickle"):
        load_pretrained(tmp_path, BertForMaskedLM)


def test_import_transformers_saved_mlm_dir(small_cfg, tmp_path):
    """A directory saved by transformers' own BertForMaskedLM (no pooler) imports; pooler starts
    fresh."""
    torch.manual_seed(3)
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**hf_config_dict(small_cfg))).eval()
    hf.save_pretrained(tmp_path / "hfdir")
    ours, info = load_pretrained(tmp_path / "hfdir", BertForMaskedLM)
    assert info["fresh"] == ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]
    ids = torch.randint(5, 97, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(ids), hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
