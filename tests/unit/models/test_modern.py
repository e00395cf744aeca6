"""The ModernBERT family: Hugging Face parity, export, dropping that respects positions,
per-document attention (both families), every method/variant, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from combos import method_variant_combos  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from toydata import task_vocab_tokens, write_vocab  # noqa: E402

from tokendrop.config import Config, ModelConfig, TrainConfig, from_dict  # noqa: E402
from tokendrop.data.tokenizer import SPECIAL_IDS  # noqa: E402
from tokendrop.dropping.config import DropConfig  # noqa: E402
from tokendrop.dropping.methods import PAPER_METHOD, VARIANTS  # noqa: E402
from tokendrop.dropping.plan import DropPlan  # noqa: E402
from tokendrop.errors import (
    ConfigError,
    InteropError,  # noqa: E402
)
from tokendrop.finetuning.tasks import TASKS
from tokendrop.models import attention  # noqa: E402
from tokendrop.models.bert.model import BertForMaskedLM, BertForSequenceClassification
from tokendrop.models.families import build_model  # noqa: E402
from tokendrop.models.hf import copy_tokenizer, save_pretrained  # noqa: E402
from tokendrop.models.masked_lm import document_ids  # noqa: E402
from tokendrop.models.modernbert.model import ModernBertForMaskedLM  # noqa: E402
from tokendrop.models.source import (  # noqa: E402  # noqa: E402
    load_pretrained,
    load_source_weights,
    read_hf_dir,
    resolve_init_source,
    resolve_model_init,
)
from tokendrop.train.runtime import param_groups  # noqa: E402
from tokendrop.train.step import MLMStep

V = len(task_vocab_tokens())
CLS, SEP, PAD = SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["pad"]
HALF_WINDOW = 4  # local_attention = 8


def _perturbed(cls, config, seed: int = 0):
    """A transformers model with every tensor perturbed (norms, decoder bias), so parity tests every
    tensor."""
    torch.manual_seed(seed)
    hf = cls(config)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return hf.eval()


def _hf_model(seed: int = 0, **kw):
    base = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=2 * HALF_WINDOW,
        pad_token_id=PAD,
        sep_token_id=SEP,
        eos_token_id=SEP,
        cls_token_id=CLS,
        bos_token_id=CLS,
        attn_implementation="eager",
    )
    base.update(kw)
    return _perturbed(
        transformers.ModernBertForMaskedLM, transformers.ModernBertConfig(**base), seed
    )


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("modern") / "hf"
    _hf_model().save_pretrained(d)
    # a WordPiece tokenizer (vocab.txt + tokenizer_config.json) for finetune --model / pretrain
    # --init
    copy_tokenizer(write_vocab(tmp_path_factory.mktemp("vocab")), d)
    return d


# the three exact forms of the attention masks (tokendrop.models.attention): additive biases only,
# sliding windows as bands (block 4, always), FlexAttention block masks (unfused on CPU)
MODES = ["bias", "band", "flex"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    if request.param == "band":
        monkeypatch.setattr(attention, "BAND_BLOCK", 4)
        monkeypatch.setattr(attention, "BAND_MAX_FRACTION", 100.0)
        monkeypatch.setattr(attention, "BAND_MAX_FRACTION_DOCUMENTS", 100.0)
    else:
        monkeypatch.setattr(attention, "BAND_BLOCK", 0)
    return request.param


def _backend(model, mode: str):
    """Run ``model`` with the attention backend of ``mode`` (the config is read at every
    forward)."""
    model.config.attention_backend = "flex" if mode == "flex" else "sdpa"
    return model


def _hf(d):
    return transformers.AutoModelForMaskedLM.from_pretrained(d, attn_implementation="eager").eval()


def _ours(d, drop: DropConfig | None = None):
    src = resolve_init_source(str(d))
    m = build_model(src.model, drop)
    load_source_weights(src, m)
    return m


def _doc(lengths: list[int], seed: int = 0) -> torch.Tensor:
    """One packed row: [CLS] d1 [SEP] d2 [SEP] ... (each document's tokens random non-special
    ids)."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.tensor([CLS])]
    for n in lengths:
        parts += [torch.randint(len(SPECIAL_IDS), V, (n,), generator=g), torch.tensor([SEP])]
    return torch.cat(parts)[None]


# ----------------------------------------------------------------------------------------------
# parity and export


def test_parity_with_padding(hf_dir, mode):
    hf = _hf(hf_dir)
    ours, info = load_pretrained(hf_dir, BertForMaskedLM)  # our MLM class of the source's family
    assert isinstance(ours, ModernBertForMaskedLM) and info["fresh"] == []
    _backend(ours, mode).eval()
    lens = [40, 23, 9]
    ids = torch.full((3, 40), PAD)
    mask = torch.zeros(3, 40, dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, :n] = _doc([n - 2], seed=i)[0]
        mask[i, :n] = 1
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = ours(ids, None, mask)
    valid = mask.bool()
    assert got.shape == ref.shape
    torch.testing.assert_close(got[valid], ref[valid], atol=1e-5, rtol=1e-5)
    # masked-only head on prediction slots = the same rows of the full logits
    pos = torch.tensor([[1, 5, 30], [2, 3, 20], [1, 2, 7]])
    with torch.no_grad():
        slots = ours(ids, pos, mask)
    torch.testing.assert_close(
        slots, torch.gather(got, 1, pos[..., None].expand(-1, -1, V)), atol=1e-6, rtol=0
    )


def test_parity_packed_documents(hf_dir, mode):
    """A packed row with per-document attention = transformers run on every document on its own."""
    hf = _hf(hf_dir)
    ours = _backend(_ours(hf_dir), mode).eval()
    assert ours.document_attention  # auto: on for modernbert
    lengths = [14, 21, 6]
    row = _doc(lengths, seed=3)
    with torch.no_grad():
        got = ours(row)[0]
        start = 0
        for i, n in enumerate(lengths):
            end = start + n + 1 + (1 if i == 0 else 0)  # the first document owns the row's [CLS]
            ref = hf(input_ids=row[:, start:end]).logits[0]
            torch.testing.assert_close(got[start:end], ref, atol=1e-5, rtol=1e-5)
            start = end
        assert start == row.shape[1]


def test_export_round_trip(hf_dir, tmp_path):
    hf = _hf(hf_dir)
    ours = _ours(hf_dir)
    out = save_pretrained(ours, tmp_path / "export")
    theirs, mine = load_file(hf_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(mine) == set(theirs) - {"decoder.weight"}
    for k in mine:
        assert torch.equal(mine[k], theirs[k]), k
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(
        out, output_loading_info=True, attn_implementation="eager"
    )
    assert type(back).__name__ == "ModernBertForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = _doc([30])
    with torch.no_grad():
        assert torch.equal(back.eval()(input_ids=ids).logits, hf(input_ids=ids).logits)
    cfg, sd = read_hf_dir(out)  # and our reader sees the same model again
    assert cfg.family == "modernbert" and cfg.layer_types == ours.config.resolved_layer_types()
    assert all(torch.equal(sd[k], v) for k, v in ours.state_dict().items())


# ----------------------------------------------------------------------------------------------
# dropping


def _train_mode(m):
    m.train()
    return m


@pytest.mark.parametrize("variant", [n for n, v in VARIANTS.items() if v.selects])
def test_rate_zero_equals_dense(hf_dir, variant):
    ours = _train_mode(_ours(hf_dir, DropConfig(method="cumulative", variant=variant, rate=0.0)))
    row = torch.cat([_doc([20, 25], seed=1), _doc([7, 38], seed=2)])
    keep = torch.arange(row.shape[1]).expand(2, -1)
    with torch.no_grad():
        dense = ours(row)
        dropped = ours(row, keep_idx=keep)
    assert torch.equal(dense, dropped)


def _positions(doc: torch.Tensor) -> torch.Tensor:
    out, last, p = [], None, 0
    for d in doc.tolist():
        p = p + 1 if d == last else 0
        out.append(p)
        last = d
    return torch.tensor(out)


def _reference(hf, row, keep, start, end, documents: bool):
    """Dense transformers layers; inside the span after its first layer the dropped tokens are
    masked out as keys; dropped rows return to their span-entry state at the merge.  Positions and
    window are the dense ones (per document with document attention)."""
    m = hf.model
    T = row.shape[1]
    doc = document_ids(row, SEP, PAD)[0] if documents else torch.zeros(T, dtype=torch.long)
    pos = _positions(doc) if documents else torch.arange(T)
    kept = torch.zeros(T, dtype=torch.bool)
    kept[keep] = True
    x = m.embeddings(input_ids=row)
    x_in = None
    for i, layer in enumerate(m.layers):
        if i == start:
            x_in = x
        if i == end:
            x = torch.where(kept[:, None], x, x_in)
        allowed = doc[:, None] == doc[None, :]
        if layer.attention_type == "sliding_attention":
            allowed &= (pos[:, None] - pos[None, :]).abs() <= HALF_WINDOW
        if start < i < end:
            allowed &= kept[None, :]
        bias = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
        x = layer(
            x,
            attention_mask=bias,
            position_embeddings=m.rotary_emb(x, pos[None], layer.attention_type),
        )
    if end == len(m.layers):
        x = torch.where(kept[:, None], x, x_in)
    return hf.decoder(hf.head(m.final_norm(x)))


@pytest.mark.parametrize("documents", [True, False])
@pytest.mark.parametrize("variant", ["drop", "layer_rearranged"])
def test_kept_tokens_see_their_positions_and_window(hf_dir, variant, documents, mode):
    hf = _hf(hf_dir)
    drop = DropConfig(method="cumulative", variant=variant, rate=0.5)
    ours = _backend(_train_mode(_ours(hf_dir, drop)), mode)
    if not documents:
        ours.document_attention = False
    row = _doc([17, 12, 19], seed=5)
    T = row.shape[1]
    g = torch.Generator().manual_seed(0)
    # scattered: windows matter
    keep = torch.sort(torch.randperm(T, generator=g)[: drop.num_kept(T)]).values
    start, end = drop.span(4)
    with torch.no_grad():
        got = ours(row, keep_idx=keep[None])[0]
        ref = _reference(hf, row, keep, start, end, documents)[0]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


COMBOS = [*method_variant_combos(), (PAPER_METHOD, "avg")]  # avg also tolerates the paper's method


def _batch(b: int = 2, t: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([_doc([20, 20, 20], seed=seed + i) for i in range(b)])[:, :t]
    p = round(0.15 * t)
    pos = (
        torch.stack([torch.randperm(t - 2, generator=g)[:p] + 1 for _ in range(b)]).sort(-1).values
    )
    labels = torch.gather(ids, 1, pos)
    ids = ids.scatter(1, pos, SPECIAL_IDS["mask"])
    return {
        "input_ids": ids,
        "mlm_positions": pos,
        "mlm_labels": labels,
        "mlm_weights": torch.ones(b, p),
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }


@pytest.mark.parametrize("method,variant", COMBOS)
def test_every_method_and_variant_trains(method, variant):
    mc = ModelConfig(preset="modern-tiny", vocab_size=V, sep_token_id=SEP)
    drop = DropConfig(method=method, variant=variant, rate=0.5)
    cfg = Config(
        model=mc, drop=drop, train=TrainConfig(steps=2, batch_size=2, lr=1e-3, warmup_steps=0)
    ).validate()
    torch.manual_seed(0)
    model = build_model(mc, drop)
    assert isinstance(model, ModernBertForMaskedLM)
    counts = torch.arange(V, dtype=torch.float64).numpy()
    plan = DropPlan.for_model(drop, mc, 64, SPECIAL_IDS, counts=counts, total_steps=cfg.train.steps)
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3)
    step = MLMStep(model, plan, opt, cfg.train.grad_clip, None, use_attention_mask=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = step([_batch()], 1e-3, plan.at(0, 64))
    assert torch.isfinite(out["loss"]) and out["loss"] > 0
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert "model.layers.1.attn.Wqkv.weight" in changed and "decoder.bias" in changed


# ----------------------------------------------------------------------------------------------
# per-document attention, both families


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_documents_do_not_see_each_other(family):
    kw = dict(vocab_size=V, sep_token_id=SEP, hidden_dropout=0.0, attention_dropout=0.0)
    if family == "bert":
        kw.update(num_layers=4, hidden_size=32, num_heads=2, max_position_embeddings=64)
    else:
        kw.update(preset="modern-tiny", local_attention=16)
    drop = DropConfig(method="cumulative", rate=0.5)
    torch.manual_seed(0)
    on = build_model(ModelConfig(document_attention="on", **kw), drop)
    off = build_model(ModelConfig(document_attention="off", **kw), drop)
    off.load_state_dict(on.state_dict())
    a = _doc([12, 20], seed=1)
    b = a.clone()
    b[0, 15:-1] = _doc([19], seed=9)[0, 1:-1]  # the second document replaced, the first untouched
    first = slice(0, 14)  # [CLS] + 12 tokens + its [SEP]
    keep = torch.arange(0, a.shape[1], 2)[None]
    for model in (on, off):
        model.eval()
    with torch.no_grad():
        assert torch.allclose(on(a)[0, first], on(b)[0, first], atol=1e-6, rtol=0)
        assert not torch.allclose(off(a)[0, first], off(b)[0, first], atol=1e-3, rtol=0)
        on.train()  # with dropping too
        assert torch.allclose(
            on(a, keep_idx=keep)[0, first], on(b, keep_idx=keep)[0, first], atol=1e-6, rtol=0
        )


def test_document_ids():
    ids = torch.tensor([[CLS, 7, 8, SEP, 9, SEP, 10, SEP, PAD, PAD]])
    assert document_ids(ids, SEP, PAD).tolist() == [[0, 0, 0, 0, 1, 1, 2, 2, -1, -1]]


def test_document_attention_needs_the_sep_id():
    with pytest.raises(ConfigError, match="model.sep_token_id"):
        build_model(ModelConfig(preset="modern-tiny", vocab_size=V))
    # fine without
    build_model(ModelConfig(preset="modern-tiny", vocab_size=V, document_attention="off"))


# ----------------------------------------------------------------------------------------------
# bad input


def _edit_config(src, dst, **fields):
    shutil.copytree(src, dst)
    d = json.loads((dst / "config.json").read_text())
    d.update(fields)
    (dst / "config.json").write_text(json.dumps(d))
    return dst


@pytest.mark.parametrize(
    "fields,named",
    [
        (
            {
                "layer_types": [
                    "full_attention",
                    "chunked_attention",
                    "sliding_attention",
                    "full_attention",
                ]
            },
            "layer_types[1]",
        ),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                }
            },
            "rope_parameters.full_attention",
        ),
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_activation": "silu"}, "hidden_activation"),
    ],
)
def test_unsupported_modernbert_fields_are_one_line_errors(hf_dir, tmp_path, fields, named):
    d = _edit_config(hf_dir, tmp_path / "bad", **fields)
    with pytest.raises(InteropError) as e:
        load_pretrained(d, BertForSequenceClassification, num_labels=2)
    assert named in str(e.value) and "\n" not in str(e.value)


def test_bad_layer_types_in_our_config():
    with pytest.raises(ConfigError, match=r"model.layer_types\[2\]"):
        from_dict(
            Config,
            {
                "model": {
                    "preset": "modern-tiny",
                    "vocab_size": V,
                    "layer_types": [
                        "full_attention",
                        "sliding_attention",
                        "local",
                        "full_attention",
                    ],
                }
            },
        )
    with pytest.raises(ConfigError, match="model.family"):
        ModelConfig(family="neobert").validate()


# ----------------------------------------------------------------------------------------------
# finetune --model and pretrain --init with a ModernBERT directory


def test_finetune_accepts_a_modernbert_dir(hf_dir, tmp_path):
    from tokendrop.config import FinetuneConfig
    from tokendrop.finetuning import finetune

    data = TASKS["sst2"].write_examples(tmp_path / "SST-2", n_train=32, n_dev=16)
    cfg = FinetuneConfig(
        task="sst2",
        data=str(data),
        epochs=1,
        batch_size=16,
        max_seq_len=32,
        device="cpu",
        save_model=True,
        log_every=0,
    ).validate()
    res = finetune(cfg, hf_dir, tmp_path / "ft", log=None)
    assert 0.0 <= res["accuracy"] <= 100.0
    back, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "ft" / "model", output_loading_info=True
    )
    assert type(back).__name__ == "ModernBertForSequenceClassification" and not info["missing_keys"]


def _task_data(tmp_path, model_dir):
    """Prepared T=64 data of the task corpus in ``model_dir``'s vocabulary (for ``pretrain
    --init``)."""
    from tokendrop.data import prepare
    from tokendrop.finetuning.task_corpus import write_task_corpus

    corpus = write_task_corpus(tmp_path / "corpus.txt", num_docs=120)
    data = tmp_path / "data"
    prepare(
        [corpus],
        data,
        seq_len=64,
        vocab=model_dir / "vocab.txt",
        eval_fraction=0.1,
        workers=1,
        progress=False,
    )
    return data


def test_pretrain_init_from_a_modernbert_dir_and_export(hf_dir, tmp_path):
    from tokendrop.models.source import export_hf
    from tokendrop.train.trainer import pretrain

    data = _task_data(tmp_path, hf_dir)
    cfg = from_dict(
        Config,
        {
            "model": {"init": str(hf_dir)},
            "drop": {"method": "cumulative", "rate": 0.5},
            "data": {"path": str(data), "num_workers": 0},
            "train": {
                "steps": 2,
                "batch_size": 4,
                "warmup_steps": 0,
                "eval_every": 2,
                "eval_batches": 1,
                "ckpt_every": 2,
                "log_every": 1,
            },
        },
    )
    m = resolve_model_init(cfg.model, resolve_init_source(str(hf_dir)))  # what pretrain does, once
    assert m.family == "modernbert" and m.sep_token_id == SEP
    pretrain(cfg, tmp_path / "run", progress=False)
    out = export_hf(tmp_path / "run", tmp_path / "export")
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(back).__name__ == "ModernBertForMaskedLM" and not info["missing_keys"]


@pytest.fixture(scope="module")
def headless_dir(tmp_path_factory):
    """A ModernBERT encoder saved without its MLM head (``ModernBertModel``), with a tokenizer."""
    d = tmp_path_factory.mktemp("modern-headless") / "hf"
    hf = _hf_model()
    hf.model.save_pretrained(d)
    copy_tokenizer(write_vocab(tmp_path_factory.mktemp("vocab2")), d)
    return d


def test_head_warmup_moves_only_the_modern_head(headless_dir):
    from tokendrop.train.continued import head_is_fresh, head_warmup

    src = resolve_init_source(str(headless_dir))
    model = build_model(src.model)
    report = load_source_weights(src, model)
    assert head_is_fresh(model, report.fresh)
    assert set(report.fresh) == {"head.dense.weight", "head.norm.weight", "decoder.bias"} | (
        {"head.norm.bias"} if src.model.norm_bias else set()
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)

    def batches():
        while True:
            ids = torch.cat(
                [
                    _doc([20, 9], seed=int(torch.randint(0, 10**6, (1,), generator=g)))
                    for _ in range(4)
                ]
            )
            pos = torch.randint(1, ids.shape[1] - 1, (4, 6), generator=g)
            yield {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "token_type_ids": torch.zeros_like(ids),
                "mlm_positions": pos,
                "mlm_labels": torch.gather(ids, 1, pos),
                "mlm_weights": torch.ones(4, 6),
            }

    losses = head_warmup(model, batches(), 8, 1e-2, torch.device("cpu"), None)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == set(report.fresh), changed
    assert all(p.requires_grad for p in model.parameters())  # the freeze is undone
    assert len(losses) == 8 and all(map(torch.isfinite, torch.tensor(losses)))


def test_pretrain_init_warms_up_a_fresh_modern_head(headless_dir, tmp_path):
    from tokendrop.runs.metrics import read_metrics
    from tokendrop.train.trainer import pretrain

    data = _task_data(tmp_path, headless_dir)
    cfg = from_dict(
        Config,
        {
            "model": {"init": str(headless_dir)},
            "drop": {"method": "random", "rate": 0.5},
            "data": {"path": str(data), "num_workers": 0},
            "train": {
                "steps": 1,
                "batch_size": 4,
                "warmup_steps": 0,
                "eval_every": 1,
                "eval_batches": 1,
                "ckpt_every": 1,
                "log_every": 1,
                "head_warmup_steps": 3,
                "head_warmup_share": "off",
            },
        },
    )
    pretrain(cfg, tmp_path / "run", progress=False)
    ev = [r for r in read_metrics(tmp_path / "run") if r.get("event") == "head_warmup"]
    assert len(ev) == 1 and ev[0]["steps"] == 3


def _bert_with_documents(drop: DropConfig):
    torch.manual_seed(0)
    return build_model(
        ModelConfig(
            vocab_size=V,
            num_layers=4,
            hidden_size=32,
            num_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            sep_token_id=SEP,
            document_attention="on",
            hidden_dropout=0.0,
            attention_dropout=0.0,
        ),
        drop,
    )


@pytest.mark.parametrize("family", ["modernbert", "bert"])
@pytest.mark.parametrize("variant", ["drop", "pass", "avg"])
def test_attention_forms_give_the_same_gradients(hf_dir, monkeypatch, variant, family):
    """A dropping training step's loss and gradients agree across the mask forms (padding, documents
    and -- modernbert -- windows in one batch; bands for windows and documents).  FlexAttention has
    no CPU backward: its gradients are a GPU test (tests/integration/lab/test_gpu.py), its
    forward is compared here."""
    drop = DropConfig(
        method="random" if VARIANTS[variant].selects else "none", variant=variant, rate=0.5
    )
    b = _batch(b=3, t=64, seed=4)
    b["attention_mask"][1, 50:] = (
        0  # padding in one row (a padded row's own output is not compared)
    )
    w = torch.gather(b["attention_mask"], 1, b["mlm_positions"]).float()
    g = torch.Generator().manual_seed(1)
    keep = torch.stack(
        [torch.randperm(64, generator=g)[: drop.num_kept(64)].sort().values for _ in range(3)]
    )
    results = {}
    for mode in MODES:
        monkeypatch.setattr(attention, "BAND_BLOCK", 4 if mode == "band" else 0)
        monkeypatch.setattr(attention, "BAND_MAX_FRACTION", 100.0)
        monkeypatch.setattr(attention, "BAND_MAX_FRACTION_DOCUMENTS", 100.0)
        m = _backend(
            _train_mode(
                _ours(hf_dir, drop) if family == "modernbert" else _bert_with_documents(drop)
            ),
            mode,
        )
        torch.set_grad_enabled(mode != "flex")
        logits = m(
            b["input_ids"],
            b["mlm_positions"],
            b["attention_mask"],
            None,
            keep if VARIANTS[variant].selects else None,
            drop_active=True,
        )
        loss = (m.mlm_nll(logits, b["mlm_labels"]) * w).sum() / w.sum()
        torch.set_grad_enabled(True)
        if mode == "flex":
            results[mode] = (loss.detach(), None)
            continue
        loss.backward()
        results[mode] = (
            loss.detach(),
            {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None},
        )
    torch.testing.assert_close(results["flex"][0], results["bias"][0], atol=1e-5, rtol=1e-5)
    for mode in ("band",):
        torch.testing.assert_close(results[mode][0], results["bias"][0], atol=1e-5, rtol=1e-5)
        assert results[mode][1].keys() == results["bias"][1].keys()
        for n, gr in results[mode][1].items():
            torch.testing.assert_close(
                gr, results["bias"][1][n], atol=2e-5, rtol=1e-4, msg=f"{mode}: {n}"
            )


def test_band_and_flex_forms_against_the_dense_bias():
    from tokendrop.dropping.engine import Rows

    T = 512
    at = torch.arange(T)[None]
    rows = Rows(None, None, at, at)
    band = attention.Band.build(rows, rows, 64, torch.float32, block=64)
    # block + both half-windows
    assert band is not None and band.slot.shape == (
        1,
        T // 64,
        64 + 2 * 64,
    )
    # window ~ row: dense bias
    assert attention.Band.build(rows, rows, 400, torch.float32, block=64) is None
    # one band shared by a batch (no padding, no documents), and a kept subset per row, against the
    # dense bias
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, T, 16, generator=g) for _ in range(3))
    ref = attention.attend(
        q, k, v, attention.attention_bias(None, torch.float32, at, at, window=64)
    )
    torch.testing.assert_close(attention.attend(q, k, v, band), ref, atol=1e-5, rtol=1e-5)
    keep = torch.stack([torch.randperm(T, generator=g)[:200].sort().values for _ in range(3)])
    kept = rows.gather(keep)
    qk = torch.gather(q, 2, keep[:, None, :, None].expand(-1, 2, -1, 16))
    # FlexAttention's block mask, built once for the batch (unfused reference on CPU)
    flex = attention.attend(q, k, v, attention.flex_block_mask(rows, rows, 64))
    torch.testing.assert_close(flex, ref, atol=1e-5, rtol=1e-5)
    band = attention.Band.build(kept, rows, 30, torch.float32, block=16)
    # kept over all rows: blocks of positions
    assert band.rows is not None and band.slot.shape[2] <= 16 + 2 * 30
    got = attention.attend(qk, k, v, band)
    ref = attention.attend(
        qk, k, v, attention.attention_bias(None, torch.float32, kept.at, at, window=30)
    )
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # sparse queries shared by the batch (avg's pooled rows without padding or documents): broadcast
    pooled = Rows(None, None, at[:, ::2], at[:, ::2])
    band = attention.Band.build(pooled, rows, 30, torch.float32, block=16)
    assert band.rows is not None and band.rows.shape[0] == 1
    got = attention.attend(q[:, :, ::2], k, v, band)
    ref = attention.attend(
        q[:, :, ::2], k, v, attention.attention_bias(None, torch.float32, pooled.at, at, window=30)
    )
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # documents without a window (global layers, BERT): 40-token documents and padding in one row
    doc = (torch.arange(T) // 40)[None].repeat(2, 1)
    doc[1, 450:] = -1
    valid = (doc >= 0).long()
    drows = Rows(valid, doc, None, None)
    band = attention.Band.build(drows, drows, None, torch.float32, block=64)
    assert band is not None and band.slot.shape[2] <= 64 + 2 * 40  # block + a document on each side
    ref = attention.attend(
        q[:2], k[:2], v[:2], attention.attention_bias(valid, torch.float32, q_doc=doc, k_doc=doc)
    )
    got = attention.attend(q[:2], k[:2], v[:2], band)
    torch.testing.assert_close(got[0], ref[0], atol=1e-5, rtol=1e-5)
    # padding rows: not used
    torch.testing.assert_close(got[1, :, :450], ref[1, :, :450], atol=1e-5, rtol=1e-5)
    kept = drows.gather(keep[:2])  # kept rows over all rows (the first dropped layer)
    got = attention.attend(
        qk[:2], k[:2], v[:2], attention.Band.build(kept, drows, None, torch.float32, block=16)
    )
    ref = attention.attend(
        qk[:2],
        k[:2],
        v[:2],
        attention.attention_bias(valid, torch.float32, q_doc=kept.doc, k_doc=doc),
    )
    real = kept.valid.bool()
    torch.testing.assert_close(
        got.transpose(1, 2)[real], ref.transpose(1, 2)[real], atol=1e-5, rtol=1e-5
    )
    # one document: the band would be the row
    one = Rows(None, torch.zeros(1, T, dtype=torch.long), None, None)
    assert attention.Band.build(one, one, None, torch.float32, block=64) is None
    # blocks reach 300 of 512 keys: the bias
    longer = Rows(None, (torch.arange(T) // 150)[None], None, None)
    assert attention.Band.build(longer, longer, None, torch.float32, block=128) is None
    with pytest.raises(ConfigError, match="model.attention_backend"):
        ModelConfig(
            preset="modern-tiny", attention_backend="flex", attention_dropout=0.2
        ).validate()
    with pytest.raises(ConfigError, match="model.attention_backend"):
        ModelConfig(preset="modern-tiny", attention_backend="fast").validate()


def test_resume_may_change_the_attention_backend():
    from tokendrop.config import to_dict
    from tokendrop.errors import TrainingError
    from tokendrop.train.resume import check_resume_compatible

    old, new = to_dict(Config()), to_dict(Config())
    new["model"]["attention_backend"] = "sdpa"
    check_resume_compatible(old, new)  # execution only
    new["model"]["local_attention"] = 64
    with pytest.raises(TrainingError, match="model.local_attention"):
        check_resume_compatible(old, new)


# the config.json of answerdotai/ModernBERT-base as published (transformers 4.47 layout), at a tiny
# shape
PUBLISHED = {
    "architectures": ["ModernBertForMaskedLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": CLS,
    "classifier_activation": "gelu",
    "classifier_bias": False,
    "classifier_dropout": 0.0,
    "classifier_pooling": "mean",
    "cls_token_id": CLS,
    "decoder_bias": True,
    "deterministic_flash_attn": False,
    "embedding_dropout": 0.0,
    "eos_token_id": SEP,
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0,
    "gradient_checkpointing": False,
    "hidden_activation": "gelu",
    "hidden_size": 32,
    "initializer_cutoff_factor": 2.0,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "layer_norm_eps": 1e-05,
    "local_attention": 2 * HALF_WINDOW,
    "local_rope_theta": 10000.0,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "mlp_dropout": 0.0,
    "model_type": "modernbert",
    "norm_bias": False,
    "norm_eps": 1e-05,
    "num_attention_heads": 2,
    "num_hidden_layers": 4,
    "pad_token_id": PAD,
    "position_embedding_type": "absolute",
    "sep_token_id": SEP,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "transformers_version": "4.47.0.dev0",
    "vocab_size": V,
}


# jhu-clsp/ettin-encoder-*'s layout (also mmBERT's fields): one RoPE base for both layer kinds, an
# odd max_position_embeddings, and fields transformers ignores or uses only with flash_attn
ETTIN = {
    **PUBLISHED,
    "local_rope_theta": 160000.0,
    "max_position_embeddings": 7999,
    "position_embedding_type": "sans_pos",
    "repad_logits_with_grad": False,
    "sparse_pred_ignore_index": -100,
    "sparse_prediction": False,
    "reference_compile": None,
    "transformers_version": "4.48.0",
}


def _published_dir(root, head: str, published: dict = PUBLISHED):
    cfg = transformers.ModernBertConfig(
        **{
            k: v
            for k, v in published.items()
            if k not in ("architectures", "transformers_version", "torch_dtype")
        }
    )
    cls = (
        transformers.ModernBertForSequenceClassification
        if head == "classification"
        else transformers.ModernBertForMaskedLM
    )
    hf = _perturbed(cls, cfg)
    hf.save_pretrained(root)
    # as published
    (root / "config.json").write_text(
        json.dumps({**published, "architectures": [type(hf).__name__]})
    )
    return root


@pytest.mark.parametrize("published", [PUBLISHED, ETTIN], ids=["answerdotai", "ettin"])
def test_the_published_modernbert_config_loads(tmp_path, published):
    d = _published_dir(tmp_path / "mb", "mlm", published)
    src = resolve_init_source(str(d))
    assert (src.model.family, src.model.classifier_pooling, src.model.layer_norm_eps) == (
        "modernbert",
        "mean",
        1e-5,
    )
    ours = build_model(src.model)
    assert load_source_weights(src, ours).fresh == []
    ours.eval().document_attention = False
    row = _doc([30, 25], seed=2)
    with torch.no_grad():
        torch.testing.assert_close(ours(row), _hf(d)(input_ids=row).logits, atol=1e-5, rtol=1e-5)


def test_mean_pooling_classification_matches_transformers(tmp_path):
    d = _published_dir(tmp_path / "cls", "classification")
    ours, info = load_pretrained(d, BertForSequenceClassification, num_labels=2)
    assert ours.config.classifier_pooling == "mean" and not info["fresh"]
    ours.eval()
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        d, attn_implementation="eager"
    ).eval()
    ids = torch.full((2, 40), PAD)
    mask = torch.zeros(2, 40, dtype=torch.long)
    for i, n in enumerate((40, 17)):
        ids[i, :n] = _doc([n - 2], seed=i)[0]
        mask[i, :n] = 1
    with torch.no_grad():
        torch.testing.assert_close(
            ours(ids, mask), hf(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-5
        )
    out = save_pretrained(ours, tmp_path / "back")
    assert json.loads((Path(out) / "config.json").read_text())["classifier_pooling"] == "mean"
    with pytest.raises(ConfigError, match="model.classifier_pooling"):
        ModelConfig(classifier_pooling="mean").validate()  # BERT: the pooler


@pytest.mark.slow
def test_compiled_flex_attention_masks_on_cpu(monkeypatch):
    """The compiled path CUDA takes (torch.compile of create_block_mask and flex_attention), run by
    inductor on CPU in the forward: our mask_mods trace, and the result equals the dense bias
    (documents + window, documents alone, and a mask shared by the batch).  ~1 min."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from tokendrop.dropping.engine import Rows

    compiled = (torch.compile(create_block_mask), torch.compile(flex_attention))
    monkeypatch.setattr(attention, "_flex_fns", lambda device: compiled)
    T = 512
    at = torch.arange(T)[None]
    doc = (torch.arange(T) // 100)[None].expand(2, -1).contiguous()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, T, 64, generator=g) for _ in range(3))
    for rows, window in (
        (Rows(None, doc, at, at), 64),
        (Rows(None, doc, at, at), None),
        (Rows(None, None, at, at), 64),
    ):
        got = attention.attend(q, k, v, attention.flex_block_mask(rows, rows, window))
        ref = attention.attend(
            q,
            k,
            v,
            attention.attention_bias(None, torch.float32, at, at, rows.doc, rows.doc, window),
        )
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_whole_model_compiles_in_one_graph_per_mode(backend):
    """torch.compile(fullgraph=True) of the modern model with documents and windows traces without a
    graph break: with ``sdpa`` the bands (eager only: their length depends on the data) give way to
    the bias, with ``flex`` the block masks are built inside the graph.  One graph per dropping
    mode, no recompilation after; the compiled loss and gradients (sdpa; FlexAttention has no CPU
    backward: forward only) equal eager's, which used bands.  The GPU's path minus its kernels
    (backend aot_eager: no code generation; ~10-15 s each, in the default suite so that CI guards
    the compiled path no GPU has run yet)."""
    import torch._dynamo

    torch._dynamo.reset()
    mc = ModelConfig(
        preset="modern-tiny",
        vocab_size=V,
        sep_token_id=SEP,
        local_attention=32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_backend=backend,
    )
    torch.manual_seed(0)
    model = build_model(mc, DropConfig(method="random", variant="drop", rate=0.5)).train()
    run = torch.compile(model, dynamic=False, fullgraph=True, backend="aot_eager")
    ids = torch.cat([_doc([100, 80, 73], seed=i) for i in range(2)])  # (2, 256): bands in eager
    g = torch.Generator().manual_seed(1)
    pos = torch.stack([torch.randperm(254, generator=g)[:38] + 1 for _ in range(2)]).sort(-1).values
    keep = torch.stack([torch.randperm(256, generator=g)[:128].sort().values for _ in range(2)])
    labels = torch.gather(ids, 1, pos)

    def loss_and_grads(fn, k):
        with torch.set_grad_enabled(backend == "sdpa"):
            loss = model.mlm_nll(fn(ids, pos, None, None, k), labels).mean()
        if backend != "sdpa":
            return loss.detach(), []
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad()
        return loss.detach(), grads

    # (eager FlexAttention compiles a wrapper)
    eager = {k is None: loss_and_grads(model, k) for k in (None, keep)}
    for k in (None, keep):  # compile both modes first
        loss_and_grads(run, k)
    old = torch._dynamo.config.error_on_recompile
    torch._dynamo.config.error_on_recompile = True
    try:
        for k in (keep, None, keep):
            (lc, gc), (le, ge) = loss_and_grads(run, k), eager[k is None]
            torch.testing.assert_close(lc, le, atol=1e-5, rtol=1e-5)
            assert len(gc) == len(ge)
            for a, b in zip(gc, ge):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    finally:
        torch._dynamo.config.error_on_recompile = old
        torch._dynamo.reset()


def test_random_ltd_keeps_positions_windows_and_documents_against_transformers():
    """ModernBERT: a kept row keeps its rotary position, document and window (measured in original
    positions), attending only to the rows its layer kept; reference: transformers' dense layers
    with the rows not kept masked out as keys and reset to their input after the layer."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _hf_model().save_pretrained(d)
        hf = _hf(d)
        drop = DropConfig(method="random_ltd")
        ours = _ours(d, drop).train()
    row = _doc([17, 12, 19], seed=5)
    T = row.shape[1]
    g = torch.Generator().manual_seed(0)
    # layers 1, 2
    keep = torch.stack([torch.randperm(T, generator=g)[: T // 2].sort().values for _ in range(2)])
    m = hf.model
    doc = document_ids(row, SEP, PAD)[0]
    pos = _positions(doc)
    with torch.no_grad():
        got = ours(row, keep_idx=keep[:, None])[0]
        x = m.embeddings(input_ids=row)
        for i, layer in enumerate(m.layers):
            allowed = doc[:, None] == doc[None, :]
            if layer.attention_type == "sliding_attention":
                allowed &= (pos[:, None] - pos[None, :]).abs() <= HALF_WINDOW
            kept = torch.ones(T, dtype=torch.bool)
            if 1 <= i <= 2:
                kept = torch.zeros(T, dtype=torch.bool)
                kept[keep[i - 1]] = True
                allowed &= kept[None, :]
            bias = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)[
                None, None
            ]
            y = layer(
                x,
                attention_mask=bias,
                position_embeddings=m.rotary_emb(x, pos[None], layer.attention_type),
            )
            x = torch.where(kept[:, None], y, x)
        ref = hf.decoder(hf.head(m.final_norm(x)))[0]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
