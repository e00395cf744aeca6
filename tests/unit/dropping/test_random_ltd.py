"""random-LTD (drop.method = "random_ltd"): the schedule against its formula, a draw of its own per
half layer and step, the first and last layers dense, dense at full length,
positions/windows/documents (ModernBERT against transformers), FLOPs, bad input, resume through the
CLI mid-schedule."""

from __future__ import annotations

import math

import pytest
import torch
from batches import mlm_batch

from tokendrop.config import Config, ModelConfig, TrainConfig, load_config
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import layer_flops, step_flops
from tokendrop.dropping.methods import ltd_kept, ltd_kept_at
from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import ConfigError
from tokendrop.models.families import build_model
from tokendrop.train.runtime import param_groups
from tokendrop.train.step import MLMStep

V = 97


def ltd(**kw) -> DropConfig:
    return DropConfig(method="random_ltd", **kw)


# ----------------------------------------------------------------------------------------------
# the schedule


def deepspeed_fixed_linear(step, require_steps, min_value, max_value, seq_per_step):
    """DeepSpeed's ``__fixed_root_get_value`` (data_routing/scheduler.py) with root_degree = 1."""
    next_seq = (float(step) / require_steps) ** 1.0
    next_seq = math.floor(next_seq * (max_value - min_value) + min_value)
    next_seq -= next_seq % seq_per_step
    return min(next_seq, max_value)


def test_schedule_hand_values():
    # T=128, M_0 = 32, K = round(0.5 * 200) = 100, grid 16
    fixed = ltd(ltd_start_fraction=0.25, ltd_schedule_share=0.5, ltd_step=16)
    lin = ltd(ltd_start_fraction=0.25, ltd_schedule_share=0.5, ltd_step=16, ltd_schedule="linear")
    # v_k = 32 + 96 k / 100
    for k, want_fixed, want_lin in [
        (0, 32, 32),
        (16, 32, 48),
        (17, 48, 48),
        (50, 80, 80),
        (59, 80, 96),
        (67, 96, 96),
        (99, 112, 128),
        (100, 128, 128),
        (150, 128, 128),
    ]:
        assert ltd_kept(fixed, 128, k, 200) == want_fixed, k
        assert ltd_kept(lin, 128, k, 200) == want_lin, k


def test_time_budgeted_schedule_follows_the_budget_fraction():
    # train.steps 0 (train.time_budget): the same ramp over the fraction of the budget used
    fixed = ltd(ltd_start_fraction=0.25, ltd_schedule_share=0.5, ltd_step=16)
    for p, want in [
        (0.0, 32),
        (0.08, 32),
        (0.085, 48),
        (0.25, 80),
        (0.495, 112),
        (0.5, 128),
        (0.9, 128),
    ]:
        # v = 32 + 96 p / 0.5, floored to the grid
        assert ltd_kept_at(fixed, 128, 0, 0, p) == want, p
    # steps given: the step
    assert ltd_kept_at(fixed, 128, 50, 200, 0.99) == ltd_kept(fixed, 128, 50, 200) == 80


def test_kept_rows_is_the_schedule_or_the_static_count():
    """DropConfig.kept_rows, the one count the step, the log and the FLOP model use (each method
    row's count rule): random_ltd's scheduled count at (step, progress) (default: the first step's),
    every other method's static M at any step."""
    fixed = ltd(ltd_start_fraction=0.25, ltd_schedule_share=0.5, ltd_step=16)
    assert fixed.kept_rows(128) == ltd_kept(fixed, 128, 0, 1) == 32
    assert fixed.kept_rows(128, 50, 200) == 80 and fixed.kept_rows(128, 0, 0, 0.25) == 80
    for method in ("cumulative", "random"):
        drop = DropConfig(method=method, rate=0.25)
        assert (
            {drop.kept_rows(128, k, 200, k / 200) for k in (0, 50, 199)}
            == {drop.num_kept(128)}
            == {96}
        )


@pytest.mark.parametrize(
    "t,start,share,steps,grid",
    [
        (128, 0.25, 0.5, 200, 16),
        (512, 0.25, 0.8, 1000, 16),
        (64, 0.5, 1.0, 12, 8),
        (100, 0.3, 0.3, 77, 8),
    ],
)
def test_schedule_matches_the_formula(t, start, share, steps, grid):
    fixed = ltd(ltd_start_fraction=start, ltd_schedule_share=share, ltd_step=grid)
    lin = ltd(
        ltd_start_fraction=start, ltd_schedule_share=share, ltd_step=grid, ltd_schedule="linear"
    )
    m0, k_total = round(start * t), max(1, round(share * steps))
    prev = 0
    for k in range(steps + 3):
        got = ltd_kept(fixed, t, k, steps)
        # DeepSpeed's own function (it has no floor at the grid step)
        if m0 % grid == 0 and t % grid == 0:
            assert got == deepspeed_fixed_linear(min(k, k_total), k_total, m0, t, grid), k
        v = m0 + (t - m0) * min(k, k_total) / k_total
        full = k >= k_total
        assert got == (
            t if full else min(t, max(math.floor(v) - math.floor(v) % grid, min(grid, t)))
        ), k
        assert ltd_kept(lin, t, k, steps) == (
            t if full else min(t, max(grid * round(v / grid), min(grid, t)))
        ), k
        assert got >= prev and (got % grid == 0 or got == t)  # monotone, on the grid
        prev = got
    assert ltd_kept(fixed, t, k_total, steps) == t == ltd_kept(lin, t, k_total, steps)


# ----------------------------------------------------------------------------------------------
# the draws, through the real training step


def _bert(**drop_kw):
    mc = ModelConfig(
        vocab_size=V,
        hidden_size=32,
        num_layers=6,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    return mc, ltd(**drop_kw)


def _modern(**drop_kw):
    mc = ModelConfig(
        preset="modern-tiny",
        vocab_size=V,
        sep_token_id=SPECIAL_IDS["sep"],
        local_attention=16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        num_layers=5,
    )
    return mc, ltd(**drop_kw)


FAMILIES = {"bert": _bert, "modernbert": _modern}


def _batch(b: int = 3, t: int = 48, seed: int = 0) -> dict[str, torch.Tensor]:
    return mlm_batch(V, b, t, seed, seps=(20,))


def _step(mc, drop, steps=20, seed=0):
    cfg = Config(
        model=mc, drop=drop, train=TrainConfig(steps=steps, batch_size=3, lr=1e-3, warmup_steps=0)
    ).validate()
    torch.manual_seed(seed)
    model = build_model(mc, drop).train()
    plan = DropPlan.for_model(drop, mc, 48, SPECIAL_IDS, seed=seed, total_steps=steps)
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3)
    return MLMStep(model, plan, opt, cfg.train.grad_clip, None, use_attention_mask=False), model


@pytest.mark.parametrize("family", FAMILIES)
def test_each_half_layer_keeps_the_scheduled_count_of_its_own(family):
    mc, drop = FAMILIES[family](ltd_start_fraction=0.25, ltd_schedule_share=0.5, ltd_step=8)
    step_fn, model = _step(mc, drop, steps=20)
    L, T = mc.num_layers, 48
    seen: list[tuple[int, int]] = []
    layers = model.bert.encoder.layers if family == "bert" else model.model.layers
    hooks = [
        layer.register_forward_hook(lambda mod, args, out, i=i: seen.append((i, args[0].shape[1])))
        for i, layer in enumerate(layers)
    ]
    mb = _batch()
    draws = {}
    for k in (0, 1, 6):
        keep = step_fn.plan.keep_idx(mb["input_ids"], step_fn.plan.at(k, T))
        m = ltd_kept(drop, T, k, 20)
        # every middle layer, each row M_k distinct positions
        assert m < T and keep.shape == (
            L - 2,
            3,
            m,
        )
        assert torch.equal(keep, keep.sort(-1).values) and (keep[..., 1:] > keep[..., :-1]).all()
        # a draw of its own per layer
        assert all(not torch.equal(keep[0], keep[j]) for j in range(1, L - 2))
        draws[k] = keep
        seen.clear()
        step_fn([mb], 1e-3, step_fn.plan.at(k, 48))
        # first and last: all T rows
        assert seen == [(0, T)] + [(i, m) for i in range(1, L - 1)] + [(L - 1, T)]
    assert ltd_kept(drop, T, 0, 20) == ltd_kept(drop, T, 1, 20)
    assert not torch.equal(draws[0], draws[1])  # and per step (the same count)
    for h in hooks:
        h.remove()


@pytest.mark.parametrize("family", FAMILIES)
def test_full_length_equals_dense(family):
    """A full-length schedule (start fraction 1) is the dense model: through the step (losses and
    updated weights) and through the per-layer path itself (keep_idx = every position)."""
    mc, drop = FAMILIES[family](ltd_start_fraction=1.0)
    dense_drop = DropConfig(method="none")
    a, ma = _step(mc, drop)
    b, mb_ = _step(mc, dense_drop)
    batch = _batch()
    for k in range(2):
        oa, ob = a([batch], 1e-3, a.plan.at(k, 48)), b([batch], 1e-3, b.plan.at(k, 48))
        torch.testing.assert_close(oa["loss"], ob["loss"], atol=1e-6, rtol=0)
    for (n, p), (_, q) in zip(ma.named_parameters(), mb_.named_parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=n)
    # the gather/scatter path with M = T against the dense forward: outputs and gradients
    torch.manual_seed(1)
    model = build_model(mc, drop).train()
    ids = batch["input_ids"]
    full = torch.arange(ids.shape[1]).expand(mc.num_layers - 2, ids.shape[0], -1)
    outs, grads = [], []
    for keep in (None, full):
        model.zero_grad()
        logits = model(ids, batch["mlm_positions"], keep_idx=keep)
        loss = model.mlm_nll(logits, batch["mlm_labels"]).mean()
        loss.backward()
        outs.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=0)
    assert len(grads[0]) == len(grads[1])
    for g0, g1 in zip(*grads):
        torch.testing.assert_close(g0, g1, atol=1e-6, rtol=1e-5)


def test_bert_rows_not_kept_pass_each_layer_unchanged():
    """Against a hand-written loop: half layer j runs on keep[j]'s rows alone (queries and keys) and
    the other rows keep their state."""
    mc, drop = _bert()
    torch.manual_seed(0)
    model = build_model(mc, drop).train()
    ids = _batch()["input_ids"]
    g = torch.Generator().manual_seed(3)
    keep = torch.stack(
        [
            torch.stack([torch.randperm(48, generator=g)[:24].sort().values for _ in range(3)])
            for _ in range(4)
        ]
    )
    layers = model.bert.encoder.layers
    with torch.no_grad():
        got = model.bert(ids, keep_idx=keep)
        x = layers[0](model.bert.embeddings(ids, None))
        for j, layer in enumerate(layers[1:5]):
            x = x.clone()
            for b in range(3):
                rows = keep[j, b]
                x[b, rows] = layer(x[b, rows][None])[0]
        ref = layers[5](x)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# FLOPs


def test_flops_count_each_layer_at_the_scheduled_length():
    mc = ModelConfig(preset="cpu-12x256", vocab_size=30522)
    d, f, T = mc.hidden_size, mc.intermediate_size, 128
    drop = ltd(ltd_start_fraction=0.5)
    for m in (64, 96, 128):
        enc = 2 * layer_flops(T, T, d, f) + 10 * layer_flops(m, m, d, f)
        assert step_flops(mc, T, 1, drop, kept=m).encoder == enc
    assert step_flops(mc, T, 1, drop).encoder == 2 * layer_flops(T, T, d, f) + 10 * layer_flops(
        64, 64, d, f
    )
    assert step_flops(mc, T, 4, drop, kept=T).total == step_flops(mc, T, 4, None).total


# ----------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(ltd_start_fraction=0.0), "drop.ltd_start_fraction"),
        (dict(ltd_start_fraction=1.5), "drop.ltd_start_fraction"),
        (dict(ltd_schedule_share=0.0), "drop.ltd_schedule_share"),
        (dict(ltd_schedule_share=1.01), "drop.ltd_schedule_share"),
        (dict(ltd_schedule="cosine"), "drop.ltd_schedule"),
        (dict(ltd_step=0), "drop.ltd_step"),
        (dict(variant="pass"), "drop.variant"),
        (dict(variant="avg"), "drop.method"),
        (dict(keep_mlm_targets=True), "drop.keep_mlm_targets"),
        (dict(start=0), "drop.start/drop.end"),
        (dict(end=6), "drop.start/drop.end"),
        (dict(consistency_weight=0.1), "drop.consistency_weight"),
    ],
)
def test_bad_config_is_one_line(kw, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as e:
        ltd(**kw).validate(6)
    assert "\n" not in str(e.value)


def test_start_fraction_zero_through_the_cli(capsys):
    from tokendrop.cli import main

    rc = main(
        [
            "flops",
            "--config",
            "tiny",
            "--set",
            "drop.method=random_ltd",
            "--set",
            "drop.ltd_start_fraction=0",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "drop.ltd_start_fraction" in err


def test_default_span_is_every_middle_layer():
    assert ltd().span(12) == (1, 11) and ltd().span(4) == (1, 3)
    assert load_config("tiny", ["drop.method=random_ltd"]).drop.span(4) == (1, 3)


# ----------------------------------------------------------------------------------------------
# resume mid-schedule, through the CLI


def test_resume_mid_schedule_is_bit_identical(tiny_data, tmp_path):
    from safetensors.torch import load_file

    from tokendrop.cli import main
    from tokendrop.runs import checkpoint as ckpt_mod
    from tokendrop.runs.metrics import read_metrics
    from tokendrop.train.trainer import pretrain

    ov = [
        "drop.method=random_ltd",
        "drop.ltd_start_fraction=0.25",
        "drop.ltd_schedule_share=0.8",
        "drop.ltd_step=8",
        "train.steps=10",
        "train.log_every=1",
        "train.ckpt_every=100",
        "train.deterministic=true",
        "train.eval_every=100",
        "model.hidden_dropout=0.1",
        f'data.path="{tiny_data}"',
    ]
    args = [x for o in ov for x in ("--set", o)]
    assert (
        main(["pretrain", "--config", "tiny", *args, "--out", str(tmp_path / "full"), "--quiet"])
        == 0
    )
    part = pretrain(load_config("tiny", ov), tmp_path / "split", progress=False, stop_at=4)
    assert part.interrupted and part.steps == 4
    assert main(["pretrain", "--resume", str(tmp_path / "split"), "--quiet"]) == 0
    ra, rb = ([r for r in read_metrics(tmp_path / run) if "loss" in r] for run in ("full", "split"))
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb] and len(ra) == 10
    kept = [r["kept_fraction"] for r in ra]
    # the resume fell mid-schedule
    assert kept[0] < kept[5] < kept[-1] == 1.0 and len(set(kept)) > 3
    wa, wb = (
        load_file(str(ckpt_mod.latest(tmp_path / run) / "model.safetensors"))
        for run in ("full", "split")
    )
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ----------------------------------------------------------------------------------------------
# bench rows


def test_bench_random_ltd_rows(tmp_path):
    import json

    from tokendrop.cli import main

    out = tmp_path / "b.json"
    assert (
        main(
            [
                "bench",
                "--preset",
                "smoke",
                "--set",
                'variants=["drop", "random_ltd"]',
                "--set",
                "hf=false",
                "--set",
                "memory=false",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    rows = {s["name"]: s for s in res["settings"]}
    assert list(rows) == ["T32/dense", "T32/drop-0.5", "T32/random_ltd-0.5"]
    mc = ModelConfig(preset="debug-4x64", vocab_size=512)
    ltd_row = rows["T32/random_ltd-0.5"]
    assert ltd_row["kept"] == 16  # (1 - 0.5) T in each of the 2 middle layers
    assert (
        ltd_row["flops_per_step"]
        == step_flops(mc, 32, ltd_row["batch_size"], ltd(ltd_start_fraction=0.5)).total
    )
    sp = {x["setting"]: x for x in res["speedups"]}["T32/random_ltd-0.5"]
    bound = (
        step_flops(mc, 32, 1, None).total / step_flops(mc, 32, 1, ltd(ltd_start_fraction=0.5)).total
    )
    assert sp["flop_bound"] == pytest.approx(bound) and 1.0 < bound < 2.0
    assert "T32_random_ltd50_flop_bound" in res["headline"]
