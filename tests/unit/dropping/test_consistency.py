"""ScTD's consistency term (drop.consistency_weight): 0 is plain token dropping bit for bit with no
extra pass; > 0 adds exactly weight * sum of the [CLS] KLs of the last two layers, on every
consistency_every-th step; the KL on a hand-computed case; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from batches import mlm_batch
from tiny_models import tiny_config

from tokendrop.config import Config, ModelConfig, TrainConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.consistency import cls_kl
from tokendrop.dropping.flops import consistency_flops, step_flops
from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import ConfigError
from tokendrop.models.families import build_model
from tokendrop.train.runtime import param_groups
from tokendrop.train.step import MLMStep

V = 97


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients it was given (what the step's backward produced)."""

    def step(self, closure=None):
        self.by_id = {
            id(p): None if p.grad is None else p.grad.clone()
            for g in self.param_groups
            for p in g["params"]
        }
        return super().step(closure)


def _batch(b: int = 2, t: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    return mlm_batch(V, b, t, seed)


def grads(step_fn, model) -> list:
    """The gradients the step's optimizer saw, in ``model.parameters()`` order."""
    return [step_fn.opt.by_id.get(id(p)) for p in model.parameters()]


def _step(mc, drop, opt_cls=RecordingSGD):
    cfg = Config(
        model=mc,
        drop=drop,
        train=TrainConfig(steps=20, batch_size=2, lr=0.1, warmup_steps=0, grad_clip=0.0),
    ).validate()
    torch.manual_seed(0)
    model = build_model(mc, drop).train()
    plan = DropPlan.for_model(drop, mc, 32, SPECIAL_IDS, seed=0, total_steps=cfg.train.steps)
    opt = opt_cls(param_groups(model, 0.0), lr=0.1)
    return MLMStep(model, plan, opt, cfg.train.grad_clip, None, use_attention_mask=False), model


def test_kl_hand_computed():
    dense = torch.tensor([[0.0, math.log(3.0)], [1.0, 1.0]])  # softmax: (1/4, 3/4), (1/2, 1/2)
    # softmax: (1/2, 1/2), (1/5, 4/5)
    dropped = torch.tensor([[2.0, 2.0], [1.0, 1.0 + math.log(4.0)]])
    # KL(p || q), p = softmax(dense)
    first = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    second = 0.5 * math.log(0.5 / 0.2) + 0.5 * math.log(0.5 / 0.8)
    assert cls_kl(dense, dropped).item() == pytest.approx(first + second, abs=1e-6)
    reverse = (
        0.5 * math.log(0.5 / 0.25)
        + 0.5 * math.log(0.5 / 0.75)
        + 0.2 * math.log(0.2 / 0.5)
        + 0.8 * math.log(0.8 / 0.5)
    )
    # the direction matters: the dense pass is the target
    assert abs(reverse - (first + second)) > 1e-2
    assert cls_kl(dropped, dense).item() == pytest.approx(reverse, abs=1e-6)
    assert cls_kl(dense, dense).item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_weight_zero_is_plain_dropping_bit_for_bit(family):
    mc = tiny_config(family, V)
    plain, mp = _step(mc, DropConfig(method="cumulative"), torch.optim.AdamW)
    zero, mz = _step(
        mc,
        DropConfig(method="cumulative", consistency_weight=0.0, consistency_every=1),
        torch.optim.AdamW,
    )
    assert zero.taps is None  # no hooks, no dense pass
    calls = []
    mz.encoder_layers[-1].register_forward_hook(lambda *a: calls.append(1))
    for k in range(3):
        a, b = (
            plain([_batch(seed=k)], 1e-3, plain.plan.at(k, 32)),
            zero([_batch(seed=k)], 1e-3, zero.plan.at(k, 32)),
        )
        assert torch.equal(a["loss"], b["loss"]) and "consistency" not in b
    assert len(calls) == 3  # one pass per step
    for (n, p), (_, q) in zip(mp.named_parameters(), mz.named_parameters()):
        assert torch.equal(p, q), n


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_positive_weight_adds_the_cls_kl_of_the_last_two_layers(family):
    mc = tiny_config(family, V)
    lam = 0.3
    drop = DropConfig(method="cumulative", consistency_weight=lam, consistency_every=2)
    step_fn, model = _step(mc, drop)
    plain_fn, plain_model = _step(mc, DropConfig(method="cumulative"))
    with torch.no_grad():  # sharper [CLS] distributions over the features: a KL well above rounding
        for m in (model, plain_model):
            for mod in m.modules():
                if isinstance(mod, torch.nn.LayerNorm) and mod.weight is not None:
                    mod.weight.mul_(30.0)
    ref = build_model(mc, drop).train()
    ref.load_state_dict(model.state_dict())
    mb = _batch()
    # the reference loss, written out: MLM NLL of the dropping pass + lam * sum over the last two
    # layers of sum_b KL(softmax(h_dense[b, 0]) || softmax(h_drop[b, 0])), over the real slots
    keep = step_fn.plan.selector.select(mb["input_ids"], mb["mlm_positions"], mb["mlm_weights"])
    states: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda m, a, out: states.append(out[:, 0]))
        for layer in ref.encoder_layers[-2:]
    ]
    logits = ref(mb["input_ids"], mb["mlm_positions"], keep_idx=keep)
    ref.hidden(mb["input_ids"])  # dense
    for h in hooks:
        h.remove()
    assert len(states) == 4
    kl = 0.0
    for q_state, p_state in zip(states[:2], states[2:]):
        log_p, log_q = torch.log_softmax(p_state, -1), torch.log_softmax(q_state, -1)
        kl = kl + (log_p.exp() * (log_p - log_q)).sum()
    nll = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), mb["mlm_labels"].flatten(), reduction="sum"
    )
    n = mb["mlm_weights"].sum()
    ((nll + lam * kl) / n).backward()
    out = step_fn([mb], 0.1, step_fn.plan.at(0, 32))  # 0 % 2 == 0: a consistency step
    assert (
        out["consistency"].item() == pytest.approx(kl.item() / n.item(), rel=1e-3)
        and kl.item() > 1e-6
    )
    # the MLM loss as reported
    assert out["loss"].item() == pytest.approx(nll.item() / n.item(), rel=1e-6)
    got = grads(step_fn, model)
    assert sum(g is not None for g in got) > 10
    for (name, p), g in zip(ref.named_parameters(), got):
        if g is None:
            assert p.grad is None or not p.grad.any(), name
            continue
        torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-5, msg=name)
    # the dense pass changes the gradient (the term is not zero), and step 1 is a plain dropping
    # step
    plain_fn([mb], 0.1, plain_fn.plan.at(0, 32))
    pairs = [
        (a, b) for a, b in zip(grads(plain_fn, plain_model), grads(step_fn, model)) if a is not None
    ]
    assert any(not torch.allclose(a, b, atol=1e-7) for a, b in pairs)
    plain_model.load_state_dict(model.state_dict())  # from equal weights (plain SGD keeps no state)
    assert torch.equal(plain_fn.plan.importance, step_fn.plan.importance)
    mb2 = _batch(seed=1)
    o1, o2 = (
        step_fn([mb2], 0.1, step_fn.plan.at(1, 32)),
        plain_fn([mb2], 0.1, plain_fn.plan.at(1, 32)),
    )
    assert "consistency" not in o1 and torch.equal(o1["loss"], o2["loss"])
    for a, b in zip(grads(plain_fn, plain_model), grads(step_fn, model)):
        assert (a is None and b is None) or torch.equal(a, b)


def test_flops_of_the_consistency_pass():
    mc = ModelConfig(preset="cpu-12x256", vocab_size=30522)
    dense = step_flops(mc, 128, 8, None)
    assert consistency_flops(mc, 128, 8) == dense.encoder_total == 3 * dense.encoder * 8


@pytest.mark.parametrize(
    "kw",
    [
        dict(consistency_weight=-0.1),
        dict(consistency_weight=float("nan")),
        dict(consistency_every=0),
        dict(method="none", consistency_weight=0.1),
        dict(method="random_ltd", consistency_weight=0.1),
        dict(method="none", variant="avg", consistency_weight=0.1),
    ],
)
def test_bad_consistency_config(kw):
    kw = {"method": "cumulative", **kw}
    with pytest.raises(ConfigError, match=r"drop\.consistency_(weight|every)") as e:
        DropConfig(**kw).validate(12)
    assert "\n" not in str(e.value)


def test_per_step_flops_of_a_run():
    from tokendrop.dropping.flops import dropping_step_flops
    from tokendrop.dropping.methods import ltd_kept

    mc = ModelConfig(preset="cpu-12x256", vocab_size=30522)
    sctd = DropConfig(method="cumulative", consistency_weight=0.05, consistency_every=10)
    per = dropping_step_flops(mc, 128, 4, sctd, 25)
    base = step_flops(mc, 128, 4, sctd).total
    assert per == [base + (consistency_flops(mc, 128, 4) if k % 10 == 0 else 0) for k in range(25)]
    ltd = DropConfig(method="random_ltd", ltd_start_fraction=0.25, ltd_schedule_share=0.5)
    per = dropping_step_flops(mc, 128, 4, ltd, 40)
    assert per == [
        step_flops(mc, 128, 4, ltd, kept=ltd_kept(ltd, 128, k, 40)).total for k in range(40)
    ]
    assert per[0] < per[10] < per[-1] == step_flops(mc, 128, 4, None).total
