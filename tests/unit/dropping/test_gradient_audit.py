"""The gradient audit: autograd against a central finite difference of tokendrop's own loss, in
float64, over every way a pretraining step can run (docs/design.md §7).

The grid is derived, not listed: every family (``models.families.FAMILIES``) x every dropping layout
a config accepts (``dropping.methods.METHODS`` x ``DROP_VARIANTS`` x ScTD's consistency term off/on,
each checked by ``DropConfig.validate``; layouts that run the same computation -- method "none"
under every non-avg variant, any method under ``avg`` -- audited once) x packed / padded rows with
odd real lengths / padded rows with even real lengths x per-document attention on/off
(``DOCUMENT_ATTENTION``) x every attention form the CPU has for ``ATTENTION_BACKENDS`` (SDPA with an
additive bias, SDPA in bands, FlexAttention; the last two only where there is a document or window
mask for them to take).  A new method, variant, family or backend is audited without editing this
file.  The default run takes a covering subset (every pair of axis values that the grid holds
occurs in at least one case, plus the padded-odd ``avg`` cases under per-document attention that
once had a wrong gradient); ``-m slow`` runs the whole product.

Per case: a tiny float64 model, a batch, the kept positions drawn once by the method's own selector
and then held fixed (selection is discrete: the finite difference never crosses a boundary), and
the loss of ``MLMStep`` (weighted MLM NLL plus, with ScTD, the weighted [CLS] KL against the dense
pass, over the number of real slots).  Checked: the directional derivative along one random
direction over all parameters, and (SDPA) along random directions of three single tensors: the
embeddings, the first half layer's first weight, the last parameter.  FlexAttention has no CPU
backward: its finite difference is compared with the autograd derivative of the SDPA form (the same
function), and every form's hidden states (padding rows included) with the SDPA bias form's.
"""

from __future__ import annotations

import contextlib
import itertools
import zlib
from dataclasses import dataclass, fields

import pytest
import torch

from tokendrop.config import ModelConfig
from tokendrop.config.model import ATTENTION_BACKENDS, DOCUMENT_ATTENTION, MODEL_FAMILIES
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping import engine
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.consistency import ClsTaps, consistency_term
from tokendrop.dropping.importance import build_selector
from tokendrop.dropping.methods import DROP_VARIANTS, METHODS, ltd_kept_at
from tokendrop.errors import ConfigError
from tokendrop.models import attention
from tokendrop.models.attention import flex_available, use_flex
from tokendrop.models.families import FAMILIES, build_model

V, T, B, LAYERS = 40, 13, 3, 4
CLS, SEP, PAD, MASK = (SPECIAL_IDS[k] for k in ("cls", "sep", "pad", "mask"))
# real lengths per row
PADDINGS = {
    "packed": (T, T, T),
    "padded-odd": (T, 9, 5),
    "padded-even": (T, 8, 6),
}
DOCUMENTS = tuple(v for v in DOCUMENT_ATTENTION if v != "auto")  # on / off
EPS = 1e-6
# float64 round-off of the central difference here is ~5e-10; before the avg pooling fix the padded
# odd-length avg cases were off by 2e-3 (modernbert) and 2e-2 (bert) relative
RTOL, ATOL = 1e-6, 1e-8


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: a second intra-op thread only adds synchronisation (3x the time here)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------------------------------------
# the grid


def attention_forms() -> dict[str, str]:
    """form -> the ``model.attention_backend`` that runs it on CPU: each backend's kernel there
    (``use_flex``), SDPA in both of its mask forms (an additive bias; bands)."""
    forms: dict[str, str] = {}
    for backend in ATTENTION_BACKENDS:
        if backend == "flex" and not flex_available():
            continue
        kernel = "flex" if use_flex(backend, torch.device("cpu"), 0.0) else "sdpa"
        for form in ("sdpa-bias", "sdpa-band") if kernel == "sdpa" else (kernel,):
            forms.setdefault(form, backend)
    return forms


FORMS = attention_forms()


def drop_config(method: str, variant: str, sctd: bool) -> DropConfig:
    # half_random_frac: J = 3 random slots at T = 13 (the default 0.05 draws none); ltd_step 1:
    # random_ltd keeps half the rows at step 0 (the default grid of 16 rows would keep all 13)
    return DropConfig(
        method=method,
        variant=variant,
        rate=0.5,
        half_random_frac=0.25,
        ltd_step=1,
        consistency_weight=0.5 if sctd else 0.0,
        consistency_every=1,
    )


def selects(drop: DropConfig) -> bool:
    """The step draws kept positions (``DropPlan.select``): a pooling variant (avg) selects
    nothing."""
    return drop.enabled and drop.variant_row.selects


def layouts() -> list[tuple[str, str, bool]]:
    """(method, variant, ScTD) for every layout a config accepts, one per distinct computation."""
    seen: dict[tuple, tuple[str, str, bool]] = {}
    for method, variant, sctd in itertools.product(METHODS, DROP_VARIANTS, (False, True)):
        drop = drop_config(method, variant, sctd)
        try:
            drop.validate(LAYERS)
        except ConfigError:
            continue
        key = (
            drop.enabled,
            drop.variant if drop.enabled else "",
            drop.method if selects(drop) else "",
            sctd,
        )
        seen.setdefault(key, (method, variant, sctd))
    return list(seen.values())


@dataclass(frozen=True)
class Case:
    family: str
    method: str
    variant: str
    sctd: bool
    padding: str
    documents: str
    form: str

    def __str__(self) -> str:
        return "-".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def forms_differ(family: str, documents: str) -> bool:
    """Bands and FlexAttention take document and window masks only; without either, every form is
    the same additive padding bias."""
    return documents == "on" or MODEL_FAMILIES[family].sliding_windows


def full_grid() -> list[Case]:
    return [
        Case(f, m, v, s, p, d, form)
        for f in FAMILIES
        for m, v, s in layouts()
        for p in PADDINGS
        for d in DOCUMENTS
        for form in FORMS
        if form == "sdpa-bias" or forms_differ(f, d)
    ]


AXES = tuple(f.name for f in fields(Case))


def covering_subset(grid: list[Case]) -> list[Case]:
    """Greedy pairwise cover: every pair of axis values that occurs together in ``grid`` occurs in
    one chosen case; it starts from the cases of the one bug found so far (avg, padded rows of odd
    length, per-document attention)."""

    def pairs(c: Case) -> set:
        vals = [(a, getattr(c, a)) for a in AXES]
        return set(itertools.combinations(vals, 2))

    need = set().union(*(pairs(c) for c in grid))
    chosen = [
        c
        for c in grid
        if c.variant == "avg"
        and c.padding == "padded-odd"
        and c.documents == "on"
        and c.form == "sdpa-bias"
    ]
    for c in chosen:
        need -= pairs(c)
    while need:
        best = max(grid, key=lambda c: len(pairs(c) & need))  # first of the best: deterministic
        chosen.append(best)
        need -= pairs(best)
    return chosen


GRID = full_grid()
DEFAULT = covering_subset(GRID)
DEFAULT_SET = set(DEFAULT)


def test_the_grid_covers_every_value_of_every_axis():
    print(
        f"gradient audit: {len(GRID)} cases in the full grid (-m slow), {len(DEFAULT)} in the "
        f"default run; {len(FAMILIES)} families x {len(layouts())} layouts x {len(PADDINGS)} "
        f"paddings x {len(DOCUMENTS)} document settings x forms {sorted(FORMS)}"
    )
    every = {a: {getattr(c, a) for c in GRID} for a in AXES}
    assert every["family"] == set(FAMILIES)
    assert every["method"] == set(METHODS) and every["variant"] == set(DROP_VARIANTS)
    assert every["sctd"] == {False, True}
    assert every["padding"] == set(PADDINGS) and every["documents"] == set(DOCUMENTS)
    assert every["form"] == set(FORMS) and {"sdpa-bias", "sdpa-band"} <= set(FORMS)
    for a in AXES:
        assert {getattr(c, a) for c in DEFAULT} == every[a], a
    for backend in ATTENTION_BACKENDS:  # each runs one of the audited kernels here
        if backend != "flex" or flex_available():
            kernel = "flex" if use_flex(backend, torch.device("cpu"), 0.0) else "sdpa"
            assert any(form.split("-")[0] == kernel for form in FORMS), backend


# ----------------------------------------------------------------------------------------------
# one case


def family_fields(family: str, **fields) -> dict:
    """``fields`` without those another family owns (its family.toml ``owns``: refused set)."""
    from tokendrop.config.model import MODEL_FAMILIES

    foreign = {k for f, s in MODEL_FAMILIES.items() if f != family for k in s.owns}
    return {k: v for k, v in fields.items() if k not in foreign}


def model_config(family: str, documents: str, backend: str) -> ModelConfig:
    """A tiny model: 4 layers (ModernBERT: global, sliding, global, sliding; a 4-token window),
    weights 10x the usual scale so attention is far from uniform, no dropout."""
    return ModelConfig(
        family=family,
        vocab_size=V,
        num_layers=LAYERS,
        hidden_size=16,
        num_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        **family_fields(family, local_attention=4, global_attn_every_n_layers=2),
        sep_token_id=SEP,
        pad_token_id=PAD,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        initializer_range=0.2,
        document_attention=documents,
        attention_backend=backend,
    )


def make_batch(padding: str, gen: torch.Generator) -> dict:
    """(B, T) rows framed [CLS] ... [SEP], a [SEP] inside every row long enough for two documents,
    [PAD] after each row's real length, 3 prediction slots per row (weights 1)."""
    lengths = PADDINGS[padding]
    ids = torch.randint(len(SPECIAL_IDS), V, (B, T), generator=gen)
    ids[:, 0] = CLS
    pos = []
    for b, n in enumerate(lengths):
        seps = [s for s in (3, 7) if s < n - 2] + [n - 1]
        ids[b, seps] = SEP
        ids[b, n:] = PAD
        inner = [i for i in range(1, n) if i not in seps]
        pos.append(torch.tensor(inner)[torch.randperm(len(inner), generator=gen)[:3]].sort().values)
    pos = torch.stack(pos)
    labels = ids.gather(1, pos)
    ids = ids.scatter(1, pos, MASK)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    return {
        "input_ids": ids,
        "mlm_positions": pos,
        "mlm_labels": labels,
        "mlm_weights": torch.ones(B, 3, dtype=torch.float64),
        "attention_mask": None if padding == "packed" else mask,
        "token_type_ids": torch.zeros_like(ids),
    }


def kept_positions(drop: DropConfig, batch: dict, gen: torch.Generator):
    """The method's own selection, drawn once: (B, M), (S, B, M) for random_ltd, or None."""
    if not selects(drop):
        return None
    sel = build_selector(
        drop, V, SPECIAL_IDS, T, counts=torch.randint(0, 1000, (V,), generator=gen), seed=3
    )
    # an importance vector mid-run
    sel.set_scores(torch.rand(V, generator=gen) * 10, torch.ones(V, dtype=torch.bool))
    if drop.per_layer:
        start, end = drop.span(LAYERS)
        kept = ltd_kept_at(drop, T, 0, 10, 0.0)
        assert kept < T
        return sel.select_layers(batch["input_ids"], kept, end - start)
    return sel.select(batch["input_ids"], batch["mlm_positions"], batch["mlm_weights"])


def step_loss(model, drop: DropConfig, batch: dict, keep, taps: ClsTaps | None) -> torch.Tensor:
    """``MLMStep``'s loss of one micro-batch: the weighted MLM NLL (plus, with ScTD, the weight
    times the [CLS] KL against a dense pass), over the number of real prediction slots."""
    w = batch["mlm_weights"]
    args = (
        batch["input_ids"],
        batch["mlm_positions"],
        batch["attention_mask"],
        batch["token_type_ids"],
    )
    with taps.record() if taps else contextlib.nullcontext() as dropped:
        logits = model(*args, keep_idx=keep, drop_active=drop.enabled)
    loss = (model.mlm_nll(logits, batch["mlm_labels"]) * w).sum()
    if taps:
        with taps.record() as dense:
            model.hidden(batch["input_ids"], None, batch["attention_mask"], batch["token_type_ids"])
        loss = loss + drop.consistency_weight * consistency_term(dropped, dense)
    return loss / w.sum()


def set_form(monkeypatch, model, form: str) -> None:
    """Run ``model`` under ``form``: its backend, and bands always (block 4, no size limit) or never
    (block 0)."""
    model.config.attention_backend = FORMS[form]
    monkeypatch.setattr(attention, "BAND_BLOCK", 4 if form == "sdpa-band" else 0)
    monkeypatch.setattr(attention, "BAND_MAX_FRACTION", 100.0)
    monkeypatch.setattr(attention, "BAND_MAX_FRACTION_DOCUMENTS", 100.0)


def directional(loss_fn, params, dirs) -> float:
    """Central difference of ``loss_fn`` along ``dirs`` (one per parameter; None = not moved)."""

    def shifted(sign: float) -> float:
        with torch.no_grad():
            for p, d in zip(params, dirs):
                if d is not None:
                    p.add_(sign * EPS * d)
            try:
                return loss_fn().item()
            finally:
                for p, d in zip(params, dirs):
                    if d is not None:
                        p.sub_(sign * EPS * d)

    return (shifted(1.0) - shifted(-1.0)) / (2 * EPS)


def audit(case: Case, monkeypatch) -> dict[str, tuple[float, float]]:
    """-> {direction: (autograd, finite difference)}; asserts the forms' forward equal the bias
    form's."""
    seed = zlib.crc32(str(case).encode())
    gen = torch.Generator().manual_seed(seed)
    drop = drop_config(case.method, case.variant, case.sctd)
    torch.manual_seed(seed)
    model = build_model(model_config(case.family, case.documents, "sdpa"), drop).double().train()
    batch = make_batch(case.padding, gen)
    keep = kept_positions(drop, batch, gen)
    taps = ClsTaps(model.encoder_layers) if drop.consistency_weight > 0 else None
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]

    built: list[str] = []
    build = attention.MaskCache._build

    def spy(self, q, k, window):
        mask = build(self, q, k, window)
        built.append(type(mask).__name__)
        return mask

    monkeypatch.setattr(attention.MaskCache, "_build", spy)

    def loss():
        return step_loss(model, drop, batch, keep, taps)

    def hidden():
        return model.hidden(
            batch["input_ids"],
            None,
            batch["attention_mask"],
            batch["token_type_ids"],
            keep,
            drop.enabled,
        )

    # autograd: the SDPA bias form (the same function as every other form; FlexAttention has no CPU
    # backward)
    set_form(monkeypatch, model, "sdpa-bias")
    grads = torch.autograd.grad(loss(), params, allow_unused=True)
    with torch.no_grad():
        ref_hidden = hidden()
    set_form(monkeypatch, model, case.form)
    if case.form != "sdpa-bias":
        built.clear()
        with torch.no_grad():
            got = hidden()
        kind = {"sdpa-band": "Band", "flex": "BlockMask"}.get(case.form)
        assert kind is None or kind in built, f"{case}: no {kind} was built ({built})"
        # every row, padding included: the forms compute the same function (rows with no valid key
        # give 0)
        torch.testing.assert_close(
            got, ref_hidden, rtol=1e-10, atol=1e-10, msg=lambda m: f"{case}: {m}"
        )

    def fd(dirs) -> float:
        with torch.no_grad() if case.form == "flex" else contextlib.nullcontext():
            return directional(loss, params, dirs)

    out = {}
    dirs = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    out["all parameters"] = (
        sum(float((g * d).sum()) for g, d in zip(grads, dirs) if g is not None),
        fd(dirs),
    )
    # unfused on CPU (slow): one direction; the single tensors are the SDPA cases' job
    if case.form == "flex":
        return out
    layers = list(model.encoder_layers)
    first_half = dict(
        layers[drop.span(LAYERS)[0] if drop.enabled else LAYERS // 2].named_parameters()
    )
    few = {
        named[0][0],
        named[-1][0],
        next(n for n, p in named if any(p is q for q in first_half.values())),
    }
    for i, (n, p) in enumerate(named):
        if n in few:
            d = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            g = grads[i]
            only = [d if j == i else None for j in range(len(params))]
            out[n] = (0.0 if g is None else float((g * d).sum()), fd(only))
    return out


def check(case: Case, monkeypatch) -> None:
    bad = [
        f"{name}: autograd {a:.10g} vs finite difference {f:.10g}"
        for name, (a, f) in audit(case, monkeypatch).items()
        if abs(a - f) > ATOL + RTOL * max(abs(a), abs(f))
    ]
    assert not bad, f"{case}:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("case", DEFAULT, ids=str)
def test_gradient_audit(case, monkeypatch):
    check(case, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in GRID if c not in DEFAULT_SET], ids=str)
def test_gradient_audit_full_grid(case, monkeypatch):
    check(case, monkeypatch)


# ----------------------------------------------------------------------------------------------
# padding never reaches a real row


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("documents", DOCUMENTS)
@pytest.mark.parametrize("variant", ["avg", None])
def test_a_padded_row_computes_what_it_computes_alone(family, documents, variant):
    """A sequence's real rows are the same padded in a batch as alone and unpadded (``avg``: a
    (real, [PAD]) pair pools to its real row, as an odd row's last row pools alone), whatever the
    [PAD] ids."""
    drop = DropConfig(method="none", variant="avg", rate=0.5) if variant == "avg" else None
    torch.manual_seed(0)
    model = build_model(model_config(family, documents, "sdpa"), drop).double().train()
    gen = torch.Generator().manual_seed(1)
    batch = make_batch("padded-odd", gen)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        h = model.hidden(ids, None, mask, None, None, drop is not None)
        other = ids.masked_fill(mask == 0, 7)  # other ids in the padding: nothing real moves
        h2 = model.hidden(other, None, mask, None, None, drop is not None)
        for b, n in enumerate(PADDINGS["padded-odd"]):
            alone = model.hidden(ids[b : b + 1, :n], None, None, None, None, drop is not None)
            torch.testing.assert_close(h[b, :n], alone[0], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(h2[b, :n], alone[0], rtol=1e-12, atol=1e-12)


def test_the_audit_fails_on_a_wrong_gradient(monkeypatch):
    """The audit can fail: a backward that halves the pooled rows' gradient is caught."""
    case = next(c for c in DEFAULT if c.variant == "avg")

    class Halved(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * 0.5

    pool = engine.avg_pool_rows
    monkeypatch.setattr(engine, "avg_pool_rows", lambda x, valid=None: Halved.apply(pool(x, valid)))
    with pytest.raises(AssertionError, match="autograd"):
        check(case, monkeypatch)


# ----------------------------------------------------------------------------------------------
# rows with no valid key


def test_a_row_with_no_valid_key_gives_zero_in_every_form():
    """[PAD] rows under per-document attention have no valid key: 0 out (FlexAttention's own
    answer), and no gradient through a softmax whose scores the forward flattened; the other rows
    unchanged."""
    from tokendrop.dropping.engine import Rows

    n = 12
    doc = torch.tensor([[0] * 5 + [1] * 4 + [-1] * 3, [0] * 12])
    valid = (doc >= 0).long()
    at = torch.arange(n)[None]
    rows = Rows(valid, doc, at, at)
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, n, 4, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    empty = doc < 0  # (B, n)
    plain = attention.attend(
        q, k, v, attention.attention_bias(valid, q.dtype, q_doc=doc, k_doc=doc)
    )
    assert (plain.transpose(1, 2)[empty].abs() > 0).all()  # the bare bias: SDPA's mean of V
    masks = {
        "bias": attention.MaskCache(q.dtype, band=0)(rows, rows),
        "band": attention.Band.build(rows, rows, 1, q.dtype, block=4),
    }
    assert isinstance(masks["bias"], attention.Bias) and masks["band"] is not None
    window = attention.attend(q, k, v, attention.MaskCache(q.dtype, band=0)(rows, rows, 1))
    for name, mask in masks.items():
        y = attention.attend(q, k, v, mask)
        ref = plain if name == "bias" else window
        assert (y.transpose(1, 2)[empty] == 0).all(), name
        torch.testing.assert_close(
            y.transpose(1, 2)[~empty], ref.transpose(1, 2)[~empty], rtol=1e-12, atol=1e-12
        )
        gq, gk, gv = torch.autograd.grad(
            y.transpose(1, 2)[empty].sum(), (q, k, v), allow_unused=True
        )
        assert all(t is None or not t.any() for t in (gq, gk, gv)), name
    if flex_available():
        with torch.no_grad():
            y = attention.attend(
                q.detach(), k.detach(), v.detach(), attention.flex_block_mask(rows, rows, None)
            )
        assert (y.transpose(1, 2)[empty] == 0).all()
        torch.testing.assert_close(
            y, masks["bias"].attend(q, k, v, 0.0).detach(), rtol=1e-12, atol=1e-12
        )
