"""tokendrop.transformers: a patched transformers BertForMaskedLM / ModernBertForMaskedLM against
tokendrop's own model with the same weights, batch and kept positions (loss, gradients and the
importance update, every method x variant of the registries, eager and sdpa, padded batches,
ModernBERT's sliding windows); rate 0 and eval mode are the unpatched model exactly; save_pretrained
writes the unpatched tensors; remove_token_dropping; pickle / deepcopy / DDP / FSDP2 / compile;
one-line errors."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from tokendrop.config import ModelConfig  # noqa: E402
from tokendrop.dropping.config import DropConfig  # noqa: E402
from tokendrop.dropping.consistency import ClsTaps, consistency_term  # noqa: E402
from tokendrop.dropping.methods import DROP_VARIANTS, METHODS, PIN_HIGH, VARIANTS  # noqa: E402
from tokendrop.errors import ConfigError, TokendropError  # noqa: E402
from tokendrop.models.bert.hf import hf_config_dict, to_hf  # noqa: E402
from tokendrop.models.bert.model import BertForMaskedLM  # noqa: E402
from tokendrop.models.modernbert.hf import modern_config_from_hf, modern_state_from_hf  # noqa: E402
from tokendrop.models.modernbert.model import ModernBertForMaskedLM  # noqa: E402
from tokendrop.transformers import (  # noqa: E402
    OPTIONS,
    SUPPORTED_NAMES,
    TokenDroppingError,
    apply_token_dropping,
    remove_token_dropping,
    token_dropping_state,
)

V = 97
SPECIAL = {"pad": 0, "cls": 2, "sep": 3, "mask": 4}
FAMILIES = ("bert", "modernbert")


def _valid(method: str, variant: str) -> bool:
    d = DropConfig(method=method, variant=variant)
    try:
        d.validate(6)
    except ConfigError:
        return False
    return d.enabled


# every (method, variant) the registries allow, plus ScTD's consistency term on the paper's setting;
# with sdpa all in the default suite, with eager (another mask format and attention function) the
# layer-call shapes -- separation, kept rows alone, pooled rows, per-layer subsets -- and the rest
# slow
GRID = [(m, v, 0.0) for m, v in itertools.product(METHODS, DROP_VARIANTS) if _valid(m, v)]
GRID.append(("cumulative", "drop", 0.5))
EAGER_DEFAULT = {
    ("cumulative", "drop"),
    ("cumulative", "pass"),
    ("cumulative", "avg"),
    ("random_ltd", "drop"),
}
CASES = [
    pytest.param(
        m,
        v,
        c,
        impl,
        id=f"{m}-{v}{'-sctd' if c else ''}-{impl}",
        marks=() if impl == "sdpa" or ((m, v) in EAGER_DEFAULT and not c) else pytest.mark.slow,
    )
    for impl in ("sdpa", "eager")
    for m, v, c in GRID
]


def _hf_bert(impl: str = "sdpa", layers: int = 6, dropout: float = 0.0, seed: int = 0):
    cfg = ModelConfig(
        vocab_size=V,
        hidden_size=32,
        num_layers=layers,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=dropout,
        attention_dropout=dropout,
    )
    hcfg = transformers.BertConfig(
        **{k: v for k, v in hf_config_dict(cfg).items() if k != "architectures"},
        attn_implementation=impl,
    )
    torch.manual_seed(seed)
    return transformers.BertForMaskedLM(hcfg), cfg


def _hf_modern(impl: str = "sdpa", layers: int = 6, dropout: float = 0.0, seed: int = 0):
    hcfg = transformers.ModernBertConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=8,
        global_attn_every_n_layers=3,
        pad_token_id=0,
        cls_token_id=2,
        sep_token_id=3,
        bos_token_id=2,
        eos_token_id=3,
        attn_implementation=impl,
        attention_dropout=dropout,
        mlp_dropout=dropout,
        embedding_dropout=dropout,
        classifier_dropout=dropout,
    )
    torch.manual_seed(seed)
    hf = transformers.ModernBertForMaskedLM(hcfg)
    with torch.no_grad():  # every tensor away from its init (norm weights/biases too)
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return hf, None


def _hf(family: str, **kw):
    return (_hf_bert if family == "bert" else _hf_modern)(**kw)[0]


def _twins(family: str, drop: DropConfig, impl: str):
    """(transformers model, tokendrop's model with the same weights), both in training mode."""
    if family == "bert":
        hf, cfg = _hf_bert(impl)
        ours = BertForMaskedLM(cfg, drop)
        hf.load_state_dict(to_hf(ours.state_dict()), strict=False)
        hf.tie_weights()
    else:
        hf, _ = _hf_modern(impl)
        cfg = dataclasses.replace(
            modern_config_from_hf(hf.config.to_dict()), document_attention="off"
        )
        ours = ModernBertForMaskedLM(cfg, drop)
        missing, unexpected = ours.load_state_dict(
            modern_state_from_hf(hf.state_dict()), strict=False
        )
        assert not missing and not unexpected
    return hf.train(), ours.train()


def _batch(t: int, seed: int = 0, pad: bool = True):
    """A padded MLM batch: input ids with [MASK] at the prediction positions, labels (-100
    elsewhere), the positions (B, P) and their original ids."""
    g = torch.Generator().manual_seed(seed)
    b = 3
    ids = torch.randint(5, V, (b, t), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
    mask = torch.ones(b, t, dtype=torch.long)
    if pad:
        cut = t - t // 4
        mask[1, cut:] = 0
        ids[1, cut:] = SPECIAL["pad"]
        ids[1, cut - 1] = SPECIAL["sep"]
    p = max(2, t // 8)
    pos = (
        torch.stack([torch.randperm(t // 2 - 2, generator=g)[:p] + 1 for _ in range(b)])
        .sort(-1)
        .values
    )
    pos[0, -1] = t - 2  # one late position: the dropped/kept rows of the window layers differ
    orig = ids.gather(1, pos)
    labels = torch.full((b, t), -100).scatter(1, pos, orig)
    return ids.scatter(1, pos, SPECIAL["mask"]), mask, labels, pos, orig


def _record_keep(hf):
    st = token_dropping_state(hf)
    rec = {}
    select = st.select

    def recording(input_ids, labels):
        active, keep = select(input_ids, labels)
        rec["keep"], rec["active"] = keep, active
        return active, keep

    st.select = recording
    return rec


def _grads(hf, ours, family):
    """(transformers gradient, tokendrop gradient) pairs by transformers name, every parameter."""
    mine = {k: p.grad for k, p in ours.named_parameters()}
    if family == "bert":
        mine = to_hf({k: g for k, g in mine.items() if g is not None})
    theirs = dict(hf.named_parameters())
    out = {}
    for k, p in theirs.items():
        if p.grad is not None or k in mine:
            out[k] = (p.grad, mine.get(k))
    return out


def _options(method: str, variant: str, sctd: float) -> dict:
    opts = dict(method=method, variant=variant, special_ids=SPECIAL, total_steps=10)
    if METHODS[method].needs_counts:
        opts["counts"] = torch.arange(V, dtype=torch.float64)
    if sctd:
        opts.update(consistency_weight=sctd, consistency_every=1)
    return opts


def _drop(method: str, variant: str, sctd: float) -> DropConfig:
    return DropConfig(method=method, variant=variant, consistency_weight=sctd, consistency_every=1)


def _reference(ours, family, ids, mask, pos, orig, keep, sctd: float):
    """tokendrop's own step: weighted NLL / slots (+ ScTD's weight x KL / slots), backward; ->
    (loss, nll)."""
    taps = ClsTaps(ours.encoder_layers) if sctd else None
    if taps is not None:
        with taps.record() as dropped:
            logits = ours(ids, pos, mask, None, keep_idx=keep, drop_active=True)
        with taps.record() as dense:
            ours.hidden(ids, None, mask, None)
        taps.remove()
    else:
        logits = ours(ids, pos, mask, None, keep_idx=keep, drop_active=True)
    nll = ours.mlm_nll(logits, orig)
    loss = nll.sum()
    if sctd:
        loss = loss + sctd * consistency_term(dropped, dense)
    loss = loss / nll.numel()
    loss.backward()
    return loss, nll


@pytest.mark.parametrize("method,variant,sctd,impl", CASES)
@pytest.mark.parametrize("family", FAMILIES)
def test_same_loss_gradients_and_importance_as_tokendrop(family, method, variant, sctd, impl):
    drop = _drop(method, variant, sctd)
    hf, ours = _twins(family, drop, impl)
    apply_token_dropping(hf, **_options(method, variant, sctd))
    st = token_dropping_state(hf)
    rec = _record_keep(hf)
    ids, mask, labels, pos, orig = _batch(40)
    selector = copy.deepcopy(st.selector)  # the importance before the step

    out = hf(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    assert rec["active"]
    keep = rec["keep"]
    if VARIANTS[variant].selects:
        assert keep.shape[-1] < ids.shape[1]  # tokens were dropped
    loss, nll = _reference(ours, family, ids, mask, pos, orig, keep, sctd)

    torch.testing.assert_close(out.loss, loss, atol=1e-5, rtol=1e-5)
    pairs = _grads(hf, ours, family)
    assert len(pairs) == len([p for p in hf.parameters()])  # every parameter compared
    for name, (theirs, mine) in pairs.items():
        assert theirs is not None and mine is not None, name
        torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=1e-5, msg=name)
    if st.learns():  # the importance update from this forward's per-token loss = tokendrop's update
        selector.update(orig, nll.detach(), torch.ones_like(nll))
        torch.testing.assert_close(st.importance, selector.scores, atol=1e-5, rtol=1e-6)
        assert not torch.equal(st.importance, st.initial)


@pytest.mark.parametrize("family", FAMILIES)
def test_dropping_changes_the_loss_and_rate_zero_is_the_unpatched_model(family):
    ids, mask, labels, _, _ = _batch(32)
    ref = _hf(family).train()
    base = ref(input_ids=ids, attention_mask=mask, labels=labels)
    base.loss.backward()
    for rate, same in ((0.0, True), (0.5, False)):
        pat = copy.deepcopy(ref)
        pat.zero_grad()
        apply_token_dropping(pat, rate=rate, special_ids=SPECIAL, sparse_prediction=False)
        out = pat(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        assert torch.equal(out.loss, base.loss) is same
        if same:
            assert torch.equal(out.logits, base.logits)
            for (k, a), b in zip(ref.named_parameters(), pat.parameters()):
                assert torch.equal(a.grad, b.grad), k


@pytest.mark.parametrize("family", FAMILIES)
def test_the_flops_reported_to_transformers_count_the_dropped_rows(family):
    """transformers' Trainer counts every training forward as 6 x non-embedding parameters x
    tokens; a dropping forward saves (1 - (L - S + S M / T) / L) of it, which the callback takes
    off ``total_flos`` at the step's end (x the world size: the Trainer sums the ranks); a dense
    forward and an evaluation save nothing."""
    from transformers import TrainerState, TrainingArguments

    from tokendrop.transformers import TokenDroppingCallback

    ids, mask, labels, _, _ = _batch(32)
    pat = apply_token_dropping(_hf(family).train(), rate=0.5, special_ids=SPECIAL)
    pat(input_ids=ids, attention_mask=mask, labels=labels)
    st = token_dropping_state(pat)
    L, S, T = st.num_layers, st.span.end - st.span.start, ids.shape[1]
    kept = round(st.kept_fraction * T)
    assert 0 < kept < T
    dense = 6 * ids.numel() * pat.num_parameters(exclude_embeddings=True)
    saved = dense * (1 - (L - S + S * kept / T) / L)
    assert st.flops_saved == pytest.approx(saved) and saved > 0
    pat.eval()
    pat(input_ids=ids, attention_mask=mask)  # an evaluation forward: nothing saved
    assert st.flops_saved == pytest.approx(saved)
    pat.train()
    state = TrainerState()
    state.total_flos = 2 * dense  # two forwards counted dense by the Trainer
    args = TrainingArguments(output_dir="unused", report_to=[])
    TokenDroppingCallback().on_step_end(args, state, None, model=pat)
    assert state.total_flos == pytest.approx(2 * dense - saved * args.world_size)
    assert st.flops_saved == 0
    remove_token_dropping(pat)
    apply_token_dropping(pat, rate=0.0, special_ids=SPECIAL)
    pat(input_ids=ids, attention_mask=mask, labels=labels)  # rate 0: a dense forward
    assert token_dropping_state(pat).flops_saved == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_keeping_every_row_through_the_schedule_is_the_dense_model(family):
    """The gather/scatter path itself, every position kept (not the rate-0 shortcut): the forward is
    the unpatched one bit for bit, gradients to rounding."""
    ids, mask, labels, _, _ = _batch(32)
    ref = _hf(family).train()
    base = ref(input_ids=ids, attention_mask=mask, labels=labels)
    base.loss.backward()
    for variant in (n for n, v in VARIANTS.items() if v.selects):
        pat = copy.deepcopy(ref)
        pat.zero_grad()
        apply_token_dropping(pat, variant=variant, special_ids=SPECIAL, sparse_prediction=False)
        st = token_dropping_state(pat)
        st.select = lambda input_ids, labels: (
            True,
            torch.arange(input_ids.shape[1]).expand(input_ids.shape[0], -1),
        )
        out = pat(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        assert torch.equal(out.logits, base.logits), variant
        for (k, a), b in zip(ref.named_parameters(), pat.parameters()):
            torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5, msg=f"{variant} {k}")


@pytest.mark.parametrize("family", FAMILIES)
def test_eval_mode_and_no_labels_and_bare_encoders(family):
    ids, mask, labels, _, _ = _batch(32)
    ref = _hf(family).eval()
    pat = apply_token_dropping(copy.deepcopy(ref), special_ids=SPECIAL).eval()
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask, labels=labels)
        b = pat(input_ids=ids, attention_mask=mask, labels=labels)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.loss, b.loss)
    # training mode without labels: full (B, T, V) logits, dropped rows differ from dense
    pat.train()
    ref.train()
    with torch.no_grad():
        c = pat(input_ids=ids, attention_mask=mask).logits
        d = ref(input_ids=ids, attention_mask=mask).logits
    assert c.shape == d.shape and not torch.equal(c, d)
    # a bare encoder (BertModel / ModernBertModel) is patched the same way
    bare_ref = ref.bert if family == "bert" else ref.model
    bare = apply_token_dropping(copy.deepcopy(bare_ref), special_ids=SPECIAL).train()
    with torch.no_grad():
        h = bare(input_ids=ids, attention_mask=mask).last_hidden_state
        h_ref = bare_ref(input_ids=ids, attention_mask=mask).last_hidden_state
        assert h.shape == h_ref.shape and not torch.equal(h, h_ref)
        bare.eval()
        bare_ref.eval()
        assert torch.equal(
            bare(input_ids=ids, attention_mask=mask).last_hidden_state,
            bare_ref(input_ids=ids, attention_mask=mask).last_hidden_state,
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_writes_the_unpatched_tensors(family, tmp_path):
    ref = _hf(family)
    pat = apply_token_dropping(copy.deepcopy(ref), special_ids=SPECIAL).train()
    ids, mask, labels, _, _ = _batch(32)
    pat(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()  # state has moved
    assert not torch.equal(token_dropping_state(pat).importance, token_dropping_state(pat).initial)
    ref.save_pretrained(tmp_path / "ref")
    pat.save_pretrained(tmp_path / "pat")
    a, b = (
        load_file(tmp_path / "ref" / "model.safetensors"),
        load_file(tmp_path / "pat" / "model.safetensors"),
    )
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "ref" / "config.json").read_text() == (
        tmp_path / "pat" / "config.json"
    ).read_text()
    assert sorted(p.name for p in (tmp_path / "pat").iterdir()) == sorted(
        p.name for p in (tmp_path / "ref").iterdir()
    )
    assert set(pat.state_dict()) == set(ref.state_dict())
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "pat", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.parametrize("family", FAMILIES)
def test_remove_token_dropping_restores_the_model(family):
    ref = _hf(family).train()
    pat = apply_token_dropping(copy.deepcopy(ref), special_ids=SPECIAL)
    remove_token_dropping(pat)
    assert "forward" not in pat.__dict__
    layers = pat.bert.encoder.layer if family == "bert" else pat.model.layers
    assert all("forward" not in layer.__dict__ for layer in layers)
    ids, mask, labels, _, _ = _batch(32)
    torch.manual_seed(0)
    a = ref(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.manual_seed(0)
    b = pat(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.equal(a, b)
    with pytest.raises(TokenDroppingError, match="not patched"):
        remove_token_dropping(pat)
    apply_token_dropping(pat, special_ids=SPECIAL)  # and it can be patched again


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_model_pickles_deep_copies_and_wraps_in_ddp_and_fsdp(family, tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    model = apply_token_dropping(_hf(family), special_ids=SPECIAL, method="random").train()
    ids, mask, labels, _, _ = _batch(32)
    snapshot = copy.deepcopy(model)
    copies = [copy.deepcopy(model), pickle.loads(pickle.dumps(model))]
    ref = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    for c in copies:  # the state came along: the same random draw, the same loss
        assert token_dropping_state(c) is not token_dropping_state(model)
        assert torch.equal(c(input_ids=ids, attention_mask=mask, labels=labels).loss, ref)
    import inspect

    assert "labels" in inspect.signature(model.forward).parameters  # what Trainer reads
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        fresh = lambda: copy.deepcopy(snapshot)  # noqa: E731 - the state before the draw above
        ddp = DistributedDataParallel(fresh())
        loss = ddp(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.testing.assert_close(loss, ref)
        assert token_dropping_state(ddp).kept_fraction < 1.0
        from torch.distributed.fsdp import fully_shard

        sharded = fresh()
        for layer in sharded.bert.encoder.layer if family == "bert" else sharded.model.layers:
            fully_shard(layer)
        fully_shard(sharded)
        loss = sharded(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.testing.assert_close(loss, ref)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_patched_model_compiles(family):
    model = apply_token_dropping(_hf(family), special_ids=SPECIAL, method="random").train()
    twin = copy.deepcopy(model)
    ids, mask, labels, _, _ = _batch(32)
    compiled = torch.compile(model)
    a = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    a.backward()
    b = twin(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask, labels, _, _ = _batch(32)
    a = apply_token_dropping(_hf("bert"), special_ids=SPECIAL).train()
    b = copy.deepcopy(a)
    b.activation_checkpointing_enable()
    la = a(input_ids=ids, attention_mask=mask, labels=labels).loss
    lb = b(input_ids=ids, attention_mask=mask, labels=labels).loss
    la.backward()
    lb.backward()
    assert torch.equal(la, lb)
    for (k, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=k)


# transformers builds FlexAttention block masks with torch.compile: minutes on CPU
@pytest.mark.slow
def test_flex_attention_where_it_runs():
    """flex_attention: the dropped forward equals sdpa's (skipped where FlexAttention cannot
    run)."""
    from tokendrop.models.attention import flex_available

    if not flex_available():
        pytest.skip("FlexAttention is not in this torch")
    ids, mask, labels, _, _ = _batch(32, pad=False)
    out = {}
    for impl in ("sdpa", "flex_attention"):
        m = apply_token_dropping(_hf("modernbert", impl=impl), special_ids=SPECIAL).train()
        try:
            with torch.no_grad():
                out[impl] = m(input_ids=ids, labels=labels).loss
        except Exception as e:  # noqa: BLE001 - e.g. no FlexAttention kernel for this device
            pytest.skip(f"flex_attention does not run here: {type(e).__name__}: {str(e)[:80]}")
    torch.testing.assert_close(out["flex_attention"], out["sdpa"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_flash_attention_where_installed(family):
    """flash_attention_2 (CUDA + the flash_attn package; skipped elsewhere): the full-length layers
    run FlashAttention, the calls on gathered rows sdpa; the dropped loss equals sdpa's within
    bf16."""
    from transformers.utils import is_flash_attn_2_available

    if not (torch.cuda.is_available() and is_flash_attn_2_available()):
        pytest.skip("flash_attention_2 needs CUDA and the flash_attn package")
    ids, mask, labels, _, _ = _batch(64)
    out = {}
    for impl in ("sdpa", "flash_attention_2"):
        m = (
            apply_token_dropping(_hf(family, impl=impl), special_ids=SPECIAL)
            .to("cuda", torch.bfloat16)
            .train()
        )
        out[impl] = m(
            input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=labels.cuda()
        ).loss.float()
    torch.testing.assert_close(out["flash_attention_2"], out["sdpa"], atol=2e-2, rtol=2e-2)


# ----------------------------------------------------------------------------------------------
# schedules and state


def test_random_ltd_ramp_and_stage2_follow_the_step():
    m = apply_token_dropping(
        _hf("bert"),
        method="random_ltd",
        ltd_start_fraction=0.5,
        ltd_schedule_share=0.5,
        ltd_step=4,
        total_steps=10,
        stage2_fraction=0.2,
        special_ids=SPECIAL,
    ).train()
    st = token_dropping_state(m)
    ids, mask, labels, _, _ = _batch(32, pad=False)
    seen = []
    for step in range(10):
        st.step = step
        m(input_ids=ids, labels=labels)
        seen.append(st.kept_fraction if st.dropping_now() else None)
    assert seen[0] == 0.5 and seen[4] < 1.0 and seen[5] == 1.0  # ramp over the first half
    assert seen[8:] == [None, None]  # stage 2: the last 20% dense
    no_length = apply_token_dropping(_hf("bert"), method="random_ltd", special_ids=SPECIAL).train()
    with pytest.raises(TokenDroppingError, match="total_steps"):
        no_length(input_ids=ids, labels=labels)


def test_the_dense_and_random_starts_follow_the_step():
    """A dense start runs the unpatched forward (every row kept) while the importance learns; the
    random start then drops at the rate; the ranked [MASK] id is not pinned."""
    m = apply_token_dropping(
        _hf("bert"),
        dense_start_share=0.2,
        random_start_share=0.2,
        mask_rows="ranked",
        total_steps=10,
        special_ids=SPECIAL,
    ).train()
    st = token_dropping_state(m)
    ids, mask, labels, _, _ = _batch(32, pad=False)
    seen = []
    before = st.importance.clone()
    for step in range(6):
        st.step = step
        at = st.now(ids.shape[1])
        m(input_ids=ids, labels=labels)
        seen.append((st.dropping_now(), at.random_selection))
    assert seen == [(False, False)] * 2 + [(True, True)] * 2 + [(True, False)] * 2
    assert not torch.equal(st.importance, before)
    assert st.importance[SPECIAL["mask"]] < PIN_HIGH


def test_importance_is_skipped_for_a_non_finite_loss_and_pinned_ids_stay():
    m = apply_token_dropping(_hf("bert"), special_ids=SPECIAL).train()
    st = token_dropping_state(m)
    before = st.importance.clone()
    labels = torch.tensor([[5, 6, -100]])
    st.update(labels, torch.tensor([[1.0, float("nan"), 0.0]]))
    assert torch.equal(st.importance, before)
    st.update(labels, torch.tensor([[1.0, 2.0, 0.0]]))
    assert (
        st.importance[5] < before[5]
        and st.importance[6] < before[6]
        and st.importance[7] == before[7]
    )
    assert st.importance[SPECIAL["cls"]] == 1e4 and st.importance[SPECIAL["pad"]] == -1e4


def test_state_saves_and_restores_exactly(tmp_path):
    from tokendrop.transformers import load_state, save_state

    m = apply_token_dropping(_hf("bert"), special_ids=SPECIAL, method="half_random").train()
    st = token_dropping_state(m)
    ids, mask, labels, _, _ = _batch(32)
    m(input_ids=ids, attention_mask=mask, labels=labels)
    st.step = 7
    save_state(st, tmp_path)
    twin = copy.deepcopy(m)
    # moves the importance and the generator on
    m(input_ids=ids, attention_mask=mask, labels=labels)
    fresh = apply_token_dropping(_hf("bert"), special_ids=SPECIAL, method="half_random").train()
    load_state(token_dropping_state(fresh), tmp_path)
    a, b = token_dropping_state(twin), token_dropping_state(fresh)
    assert b.step == 7 and torch.equal(a.importance, b.importance)
    assert torch.equal(a.selector.select(ids), b.selector.select(ids))  # same generator state
    other = apply_token_dropping(_hf("bert"), special_ids=SPECIAL, method="cumulative")
    with pytest.raises(TokenDroppingError, match="method='half_random'"):
        load_state(token_dropping_state(other), tmp_path)
    with pytest.raises(TokenDroppingError, match="no token-dropping state"):
        load_state(token_dropping_state(other), tmp_path / "nowhere")


def test_a_state_saved_before_the_phases_loads_and_a_changed_mask_rows_is_refused(tmp_path):
    """A saved state without the newer options (an older version's) reads them as their defaults;
    the phases may change between runs (schedules), the ranking of [MASK] rows may not."""
    import json

    from tokendrop.transformers import load_state, save_state

    m = apply_token_dropping(_hf("bert"), special_ids=SPECIAL).train()
    save_state(token_dropping_state(m), tmp_path)
    meta_path = next(tmp_path.glob("*.json"))
    meta = json.loads(meta_path.read_text())
    for k in ("dense_start_share", "random_start_share", "mask_rows"):
        del meta["options"][k]
    meta_path.write_text(json.dumps(meta))
    later = apply_token_dropping(
        _hf("bert"), special_ids=SPECIAL, dense_start_share=0.1, total_steps=10
    )
    load_state(token_dropping_state(later), tmp_path)
    ranked = apply_token_dropping(_hf("bert"), special_ids=SPECIAL, mask_rows="ranked")
    with pytest.raises(TokenDroppingError, match="mask_rows='pinned'"):
        load_state(token_dropping_state(ranked), tmp_path)


def test_a_saved_state_with_other_ids_or_damaged_tensors_is_refused(tmp_path):
    """A Trainer resume must not train on a state the model cannot use: other special or pinned
    ids, NaN/inf importance, a cut generator state (each one line naming the file)."""
    import json

    from safetensors.torch import save_file

    from tokendrop.transformers import load_state, save_state

    def patched(**kw):
        return apply_token_dropping(_hf("bert"), method="half_random", **kw)

    m = patched(special_ids=SPECIAL).train()
    ids, mask, labels, _, _ = _batch(32)
    m(input_ids=ids, attention_mask=mask, labels=labels)  # the generator exists from here on
    save_state(token_dropping_state(m), tmp_path)
    load_state(token_dropping_state(patched(special_ids=SPECIAL)), tmp_path)
    with pytest.raises(TokenDroppingError) as e:
        load_state(token_dropping_state(patched(special_ids={**SPECIAL, "mask": 5})), tmp_path)
    assert _one_line(e) == (
        f"{tmp_path / 'token_dropping.json'}: the run was trained with special ids mask=4, this "
        "model is patched with mask=5; apply_token_dropping with the run's tokenizer (or "
        "special_ids=) to resume it"
    )
    jpath = tmp_path / "token_dropping.json"
    meta = json.loads(jpath.read_text())
    jpath.write_text(json.dumps({**meta, "pinned_ids": [7]}))
    with pytest.raises(TokenDroppingError) as e:
        load_state(token_dropping_state(patched(special_ids=SPECIAL)), tmp_path)
    assert "trained with pinned ids [7], this model is patched with []" in _one_line(e)
    jpath.write_text(json.dumps(meta))
    tpath = tmp_path / "token_dropping.safetensors"
    good = load_file(tpath)
    for v in (float("nan"), float("inf")):
        t = good["importance"].clone()
        t[9] = v
        save_file({**good, "importance": t}, tpath)
        with pytest.raises(TokenDroppingError) as e:
            load_state(token_dropping_state(patched(special_ids=SPECIAL)), tmp_path)
        assert _one_line(e).startswith(f"{tpath}: tensor importance holds 1 NaN/inf value(s)")
    save_file({**good, "rng_state": good["rng_state"][:-7].clone()}, tpath)
    with pytest.raises(TokenDroppingError) as e:
        load_state(token_dropping_state(patched(special_ids=SPECIAL)), tmp_path)
    assert _one_line(e).startswith(f"{tpath}: tensor rng_state is no generator state")


# ----------------------------------------------------------------------------------------------
# bad input: one line each


def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and isinstance(excinfo.value, TokendropError)
    return msg


def test_unsupported_architecture_names_the_supported_ones():
    m = transformers.BertForSequenceClassification(
        transformers.BertConfig(
            vocab_size=V,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
        )
    )
    with pytest.raises(TokenDroppingError) as e:
        apply_token_dropping(m, special_ids=SPECIAL)
    msg = _one_line(e)
    assert "BertForSequenceClassification is not supported" in msg
    assert all(n in msg for n in SUPPORTED_NAMES)
    dec = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=V,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            is_decoder=True,
        )
    )
    with pytest.raises(TokenDroppingError, match="is_decoder"):
        apply_token_dropping(dec, special_ids=SPECIAL)


@pytest.mark.parametrize(
    "options,match",
    [
        ({"rat": 0.5}, "unknown option 'rat' \\(did you mean 'rate'\\?\\)"),
        ({"bogus": 1}, "unknown option 'bogus'"),
        ({"counts_path": "x.npy"}, "belongs to tokendrop's own trainer"),
        ({"rate": 1.0}, "rate: expected a fraction in \\[0, 1\\), got 1.0"),
        ({"rate": -0.1}, "rate: expected a fraction in \\[0, 1\\)"),
        ({"rate": "half"}, "rate must be a number"),
        ({"method": "topk"}, "method: unknown method 'topk'"),
        ({"method": "none"}, "method 'none' drops nothing"),
        ({"variant": "avg", "method": "random"}, "variant 'avg' selects no tokens"),
        ({"method": "frequency"}, "counts"),
        ({"sparse_prediction": "yes"}, "sparse_prediction must be True or False"),
        ({"total_steps": 0}, "total_steps must be a positive integer"),
        ({"pinned_tokens": ["[X]"]}, "pinned_tokens needs tokenizer"),
    ],
)
def test_bad_options_are_one_line_errors(options, match):
    with pytest.raises(TokenDroppingError) as e:
        apply_token_dropping(_hf("bert", layers=4), special_ids=SPECIAL, **options)
    assert _one_line(e)
    e.match(match)


def test_missing_special_ids_and_patching_twice():
    m = _hf("bert", layers=4)
    with pytest.raises(TokenDroppingError, match="pass tokenizer=") as e:
        apply_token_dropping(m)  # BertConfig knows no [CLS]/[MASK] id
    _one_line(e)
    assert "forward" not in m.__dict__  # nothing half-patched
    # random-LTD pins nothing: no ids needed
    apply_token_dropping(m, method="random_ltd", total_steps=4)
    with pytest.raises(TokenDroppingError, match="already patched") as e:
        apply_token_dropping(m, special_ids=SPECIAL)
    _one_line(e)
    with pytest.raises(TokenDroppingError, match="already patched"):
        # its encoder's layers are patched already
        apply_token_dropping(m.bert, special_ids=SPECIAL)
    assert set(OPTIONS) >= {"rate", "method", "variant", "tokenizer"}


def test_forward_refusals_are_one_line():
    m = apply_token_dropping(_hf("bert", layers=4), special_ids=SPECIAL).train()
    ids, mask, labels, _, _ = _batch(16)
    with pytest.raises(TokenDroppingError, match="output_hidden_states") as e:
        m(input_ids=ids, labels=labels, output_hidden_states=True)
    _one_line(e)
    with pytest.raises(TokenDroppingError, match="encoder_hidden_states"):
        m(input_ids=ids, labels=labels, encoder_hidden_states=torch.randn(3, 16, 32))
    m(input_ids=ids, labels=labels, output_hidden_states=False)  # an explicit "no" is fine
    with pytest.raises(TokenDroppingError, match="pass input_ids"):
        m(inputs_embeds=torch.randn(3, 16, 32), labels=labels)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_masking_rate_collator_follows_tokendrops_own_mask_schedule(tmp_path, kind):
    """MaskingRateCollator's rate at every progress is what tokendrop's trainer uses at that
    progress (train.schedules.mask_schedule of data.mask_prob / data.mask_schedule): one formula."""
    from toydata import write_toy_vocab

    from tokendrop.config import DataConfig
    from tokendrop.train.schedules import mask_schedule
    from tokendrop.transformers import MaskingRateCollator

    write_toy_vocab(tmp_path / "vocab.txt")
    tok = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    collator = MaskingRateCollator(
        transformers.DataCollatorForLanguageModeling(tok), 0.3, 0.15, kind
    )
    ours = mask_schedule(DataConfig(mask_prob=[0.3, 0.15], mask_schedule=kind))
    for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        collator.set_progress(p)
        assert collator.rate == ours.at(p)
