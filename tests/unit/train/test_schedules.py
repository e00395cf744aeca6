"""Schedules (tokendrop.train.schedules), run lengths and time budgets (tokendrop.train.budget), the
masking-rate schedule in the loader, and all of them in pretraining: values against the formulas,
exact resume, a time-budgeted run on a fake clock (no sleeps, no timing asserts), and the one-line
errors."""

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from batches import unmask as _originals
from safetensors.torch import load_file
from toydata import toy_prepared

from tokendrop.cli import main as cli_main
from tokendrop.config import load_config
from tokendrop.config.quantities import parse_duration
from tokendrop.data import MLMLoader, PreparedData, num_prediction_slots
from tokendrop.errors import ConfigError
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.metrics import read_metrics
from tokendrop.train import trainer as train_mod
from tokendrop.train.budget import RunLength
from tokendrop.train.schedules import LRSchedule, wsd_shape
from tokendrop.train.step import MLMStep
from tokendrop.train.trainer import pretrain
from tokendrop.value_schedule import ValueSchedule, cosine, linear

# ---------------------------------------------------------------------------------------------
# pure functions


def test_value_schedules_follow_their_formulas():
    for k in range(11):
        p = k / 10
        assert linear(p, 0.3, 0.15) == pytest.approx(0.3 - 0.15 * p, abs=1e-15)
        assert cosine(p, 0.3, 0.15) == pytest.approx(
            0.15 + 0.15 * 0.5 * (1 + math.cos(math.pi * p)), abs=1e-15
        )
    assert (linear(0, 0.3, 0.15), linear(1, 0.3, 0.15)) == (0.3, 0.15)
    assert (cosine(0, 0.3, 0.15), cosine(1, 0.3, 0.15)) == (0.3, 0.15)
    # progress clamped to [0, 1]
    assert linear(1.7, 0.3, 0.15) == 0.15 and cosine(-1, 0.3, 0.15) == 0.3
    assert ValueSchedule(0.15, 0.15).constant and ValueSchedule(0.15, 0.15).at(0.7) == 0.15
    assert ValueSchedule(0.3, 0.15, "cosine").largest == 0.3


def test_linear_lr_follows_its_formula():
    """Fixed length: warm-up peak (k + 1) / W, then peak (S - k) / (S - W) down to 0 at S and after;
    no warm-up starts at the peak; a warm-up longer than the run ramps to its end."""
    peak = 2e-3
    cases = {
        (40, 4): {0: peak / 4, 3: peak, 4: peak, 22: peak / 2, 40: 0.0, 41: 0.0},
        (24, 0): {0: peak, 12: peak / 2, 23: peak / 24, 24: 0.0},
        (5, 9): {0: peak / 9, 4: peak * 5 / 9},
    }
    for (total, warmup), want in cases.items():
        sched = LRSchedule("linear", peak, warmup, total)
        for k, v in want.items():
            assert sched.at(k, k / total) == pytest.approx(v, rel=1e-12, abs=0.0), (
                total,
                warmup,
                k,
            )


def test_wsd_lr_follows_its_formula():
    peak, W, S, d = 1e-3, 3, 20, 0.25
    for shape, fall in (("1-sqrt", lambda q: 1 - math.sqrt(q)), ("linear", lambda q: 1 - q)):
        sched = LRSchedule("wsd", peak, W, S, decay_share=d, decay_shape=shape)
        for k in range(S):
            p = k / S
            ramp = (k + 1) / W if k < W else 1.0
            expect = peak * ramp * (1.0 if p < 1 - d else fall((p - (1 - d)) / d))
            assert sched.at(k, p) == pytest.approx(expect, rel=1e-12, abs=1e-18), (shape, k)
        assert sched.at(S - 1, (S - 1) / S) > 0 and sched.at(S, 1.0) == 0.0
    assert wsd_shape(0.5, 0.2) == 1.0 and wsd_shape(0.9, 0.2, "linear") == pytest.approx(0.5)
    # a time-budgeted linear schedule: the warm-up ramp times 1 - p
    assert LRSchedule("linear", 1.0, 4, 0).at(1, 0.5) == pytest.approx(0.5 * 0.5)


def test_run_length_progress_and_end():
    steps = RunLength(steps=10)
    assert (
        not steps.timed
        and steps.progress(3, 999.0) == 0.3
        and steps.finished(10, 0.0)
        and not steps.finished(9, 1e9)
    )
    timed = RunLength(budget_s=60.0)
    assert timed.timed and timed.progress(999, 15.0) == 0.25 and timed.progress(0, 90.0) == 1.0
    assert timed.finished(1, 60.0) and not timed.finished(10**6, 59.9)
    assert (
        RunLength.of(
            load_config("tiny", ["train.steps=unset", "train.time_budget=1h30m"]).train
        ).budget_s
        == 5400.0
    )


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("90s", 90),
        ("20m", 1200),
        ("6h", 21600),
        ("1h30m", 5400),
        ("2.5h", 9000),
        ("1h0m5s", 3605),
        (" 45M ", 2700),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "20", "m", "20x", "30m1h", "1h1h", "0s", "-5m", "1 hour", "1.h"]
)
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError, match="train.time_budget: "):
        parse_duration(text)


@pytest.mark.parametrize(
    "overrides,msg",
    [
        (
            ["data.mask_prob=[0.3, 1.5]"],
            r"data.mask_prob: the schedule's end 1.5 lies outside \(0, 1\)",
        ),
        (
            ["data.mask_prob=[0.3, 0.0]"],
            r"data.mask_prob: the schedule's end 0.0 lies outside \(0, 1\)",
        ),
        (
            ["data.mask_prob=[0.0, 0.15]"],
            r"data.mask_prob: the schedule's start 0.0 lies outside \(0, 1\)",
        ),
        (
            ["data.mask_prob=[0.3, 0.2, 0.1]"],
            r"data.mask_prob: expected a fraction or a \[start, end\] pair",
        ),
        (["data.mask_schedule=step"], "data.mask_schedule: expected one of linear, cosine"),
        (
            ["train.decay_share=1.0"],
            r"train.decay_share: the decay's share of the run 1.0 lies outside \(0, 1\)",
        ),
        (["train.decay_share=0"], r"train.decay_share: .* lies outside \(0, 1\)"),
        (["train.lr_schedule=cosine"], "train.lr_schedule: expected one of linear, wsd"),
        (
            ["train.steps=unset", "train.time_budget=20 minutes"],
            "train.time_budget: cannot parse '20 minutes'; expected a "
            'duration such as "90s", "20m", "6h" or "1h30m"',
        ),
        (
            [
                "train.time_budget=20m",
                "train.steps=5",
            ],  # one layer (the preset's steps are replaced: test_cli_operator)
            "train.steps and train.time_budget: both set \\(5 steps, '20m'\\).*"
            'set train.steps="unset"',
        ),
        (["train.steps=-3"], "train.steps: expected a positive integer"),
    ],
)
def test_bad_schedule_config(overrides, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config("tiny", overrides)


def test_bad_budget_is_one_line_through_the_cli(tmp_path, capsys):
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "r"),
            "--set",
            "train.steps=unset",
            "--set",
            "train.time_budget=soon",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "train.time_budget: cannot parse 'soon'" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_defaults_and_round_trip():
    cfg = load_config(
        "tiny", ["train.steps=unset", "train.time_budget=20m", "data.mask_prob=[0.3, 0.15]"]
    )
    assert cfg.train.steps == "unset" and cfg.data.mask_prob_max == 0.3
    assert cfg.data.mask_prob_end == 0.15
    assert (
        load_config(None).train.steps == 1000
        and load_config(None, ["train.time_budget=6h"]).train.steps == "unset"
    )
    import tomllib

    from tokendrop.config import Config, from_dict, to_toml

    again = from_dict(Config, tomllib.loads(to_toml(cfg)))
    assert (
        again.data.mask_prob == [0.3, 0.15]
        and again.train.time_budget == "20m"
        and again.train.steps == "unset"
    )


# ---------------------------------------------------------------------------------------------
# the masking-rate schedule in the loader


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return PreparedData.open(
        toy_prepared(tmp_path_factory.mktemp("d") / "packed", seq_len=64, num_docs=200)
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_variable_rate_batches(packed, workers):
    """At the largest rate a variable-rate batch is the fixed-rate batch; at a lower rate each row
    keeps round(rate * n) of its slots (n: maskable positions), a subset of the full draw, the rest
    of the sequence restored; shapes stay static (P for the largest rate)."""
    B, rates = 8, [0.3, 0.15, 0.22, 0.3, 0.05]
    fixed = list(
        itertools.islice(MLMLoader(packed, batch_size=B, mask_prob=0.3, num_workers=0), len(rates))
    )
    loader = MLMLoader(packed, batch_size=B, mask_prob=0.3, num_workers=workers, variable_rate=True)
    it = iter(loader)
    got = []
    for r in rates:
        loader.set_mask_rate(r)
        got.append(next(it))
    loader.close()
    P = num_prediction_slots(packed.seq_len, 0.3)
    special = torch.tensor(sorted(packed.special_ids[k] for k in ("pad", "cls", "sep", "mask")))
    for r, f, g in zip(rates, fixed, got):
        assert {k: v.shape for k, v in g.items()} == {k: v.shape for k, v in f.items()} and g[
            "mlm_positions"
        ].shape[1] == P
        orig = _originals(f)
        assert torch.equal(_originals(g), orig)
        n = (~torch.isin(orig, special)).sum(1)
        k = torch.clamp(torch.floor(r * n.double() + 0.5).long(), 1, P)
        assert torch.equal(g["mlm_weights"].sum(1).long(), k)
        if r == 0.3:
            for key in f:
                assert torch.equal(f[key], g[key]), key
        for i in range(B):  # the kept slots: a prefix, in position order, a subset of the full draw
            ki = int(k[i])
            pos = g["mlm_positions"][i, :ki]
            assert torch.all(pos[1:] > pos[:-1]) and not g["mlm_positions"][i, ki:].any()
            full = dict(
                zip(
                    f["mlm_positions"][i].tolist(),
                    f["input_ids"][i, f["mlm_positions"][i]].tolist(),
                )
            )
            assert all(full[int(p)] == int(g["input_ids"][i, p]) for p in pos)
            assert int((g["input_ids"][i] != orig[i]).sum()) <= ki  # only kept slots are corrupted
    with pytest.raises(Exception, match=r"set_mask_rate: expected a rate in \(0, 0.3\]"):
        loader.set_mask_rate(0.31)


# ---------------------------------------------------------------------------------------------
# in pretraining


def tiny(data, *overrides):
    return load_config(
        "tiny",
        [
            f'data.path="{data}"',
            "train.log_every=1",
            "train.deterministic=true",
            "train.batch_size=8",
            "train.eval_batches=1",
            "train.threads=1",
            *overrides,
        ],
    )


def _train_rows(run):
    return [r for r in read_metrics(run) if "loss" in r]


def _weights(run):
    return load_file(str(ckpt_mod.latest(run) / "model.safetensors"))


def test_schedules_in_pretraining_and_exact_resume(tiny_data, tmp_path):
    """The logged LR and masking rate of each step are the formulas at p = k / steps; a run stopped
    mid-schedule and resumed through the CLI ends with the uninterrupted run's weights, bit for
    bit."""
    ov = [
        "train.steps=10",
        "train.ckpt_every=100",
        "train.eval_every=100",
        "train.warmup_steps=2",
        "train.lr_schedule=wsd",
        "train.decay_share=0.4",
        "data.mask_prob=[0.3, 0.15]",
        "data.mask_schedule=cosine",
        "data.num_workers=1",
        "drop.method=cumulative",
    ]
    pretrain(tiny(tiny_data, *ov), tmp_path / "full", progress=False)
    rows = _train_rows(tmp_path / "full")
    assert [r["step"] for r in rows] == list(range(1, 11))
    for r in rows:
        k = r["step"] - 1
        assert r["lr"] == LRSchedule("wsd", 2e-3, 2, 10, 0.4, "1-sqrt").at(k, k / 10)
        assert r["mask_prob"] == cosine(k / 10, 0.3, 0.15)
    part = pretrain(tiny(tiny_data, *ov), tmp_path / "split", progress=False, stop_at=4)
    assert part.interrupted and part.steps == 4
    assert cli_main(["pretrain", "--resume", str(tmp_path / "split"), "--quiet"]) == 0
    assert [r["loss"] for r in _train_rows(tmp_path / "split")] == [r["loss"] for r in rows]
    wa, wb = _weights(tmp_path / "full"), _weights(tmp_path / "split")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


class FakeClock:
    """Training time advances one second per optimizer step and nothing else (evaluation costs
    five seconds, which the budget must not count)."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def fake_clock(monkeypatch):
    clock = FakeClock()
    step_call, eval_call = MLMStep.__call__, train_mod.evaluate_mlm

    def step(self, *a, **k):
        clock.t += 1.0
        return step_call(self, *a, **k)

    def evaluate(*a, **k):
        clock.t += 5.0
        return eval_call(*a, **k)

    monkeypatch.setattr(MLMStep, "__call__", step)
    monkeypatch.setattr(train_mod, "evaluate_mlm", evaluate)
    return clock


def test_time_budget_stops_on_time_and_resumes_with_what_is_left(tiny_data, tmp_path, fake_clock):
    ov = [
        "train.steps=unset",
        "train.time_budget=9.5s",
        "train.eval_every=5",
        "train.ckpt_every=4",
        "train.warmup_steps=2",
        "train.lr_schedule=wsd",
        "train.decay_share=0.5",
        "data.mask_prob=[0.3, 0.15]",
    ]
    res = pretrain(tiny(tiny_data, *ov), tmp_path / "full", progress=False, clock=fake_clock)
    # 10 one-second steps: 9 s < 9.5 s, 10 s >= 9.5 s: it stops at the first step past the budget
    assert res.steps == 10 and not res.interrupted and 9.5 <= res.wall_time < 9.5 + 1.0
    assert res.wall_time == 10.0  # the evaluations' 5 s each are not training time
    rows = _train_rows(tmp_path / "full")
    for r in rows:  # every schedule is evaluated at the fraction of the budget used before the step
        k = r["step"] - 1
        assert r["lr"] == LRSchedule("wsd", 2e-3, 2, 0, 0.5, "1-sqrt").at(k, k / 9.5)
        assert r["mask_prob"] == linear(k / 9.5, 0.3, 0.15)
    assert ckpt_mod.latest(tmp_path / "full").name.endswith("10")  # a final checkpoint at the end
    events = [r for r in read_metrics(tmp_path / "full") if r.get("event")]
    assert events[0]["time_budget_s"] == 9.5 and events[-1]["event"] == "end"

    part = pretrain(
        tiny(tiny_data, *ov), tmp_path / "split", progress=False, clock=fake_clock, stop_at=4
    )
    assert part.interrupted and part.steps == 4 and part.wall_time == 4.0
    fake_clock.t = 0.0  # a new process, another clock origin: only the recorded time used counts
    res2 = pretrain(
        tiny(tiny_data, *ov), tmp_path / "split", resume=True, progress=False, clock=fake_clock
    )
    assert res2.steps == 10 and res2.wall_time == 10.0
    wa, wb = _weights(tmp_path / "full"), _weights(tmp_path / "split")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    again = pretrain(
        tiny(tiny_data, *ov), tmp_path / "split", resume=True, progress=False, clock=fake_clock
    )
    # a requeued job of a finished run: nothing to do, exit 0
    assert again.already_finished and again.steps == 10


def test_time_budget_stage2_follows_the_budget(tiny_data, tmp_path, fake_clock):
    ov = [
        "train.steps=unset",
        "train.time_budget=8s",
        "drop.method=cumulative",
        "drop.stage2_fraction=0.25",
        "train.eval_every=100",
        "train.ckpt_every=100",
    ]
    pretrain(tiny(tiny_data, *ov), tmp_path / "r", progress=False, clock=fake_clock)
    # p = k/8 < 0.75
    assert [r["dropping"] for r in _train_rows(tmp_path / "r")] == [True] * 6 + [False] * 2


DDP_BUDGET_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from tokendrop.config import load_config
    from tokendrop.train.step import MLMStep
    from tokendrop.train.trainer import pretrain

    rank = int(os.environ.get("RANK", "0"))
    clock = [0.0]
    call = MLMStep.__call__

    def step(self, *a, **k):  # rank 1's clock runs three times as fast: only rank 0's may count
        clock[0] += 1.0 + 2.0 * rank
        return call(self, *a, **k)

    MLMStep.__call__ = step
    # train.warmup_steps in steps: tiny's warmup_ratio is a share of the budget
    cfg = load_config("tiny", [
        f'data.path="{sys.argv[1]}"', "train.steps=unset", "train.time_budget=4s",
        "train.log_every=1",
        "train.batch_size=8", "train.eval_every=100", "train.threads=1",
        "train.lr_schedule=wsd", "train.warmup_steps=4",
    ])
    res = pretrain(cfg, sys.argv[2], progress=False, clock=lambda: clock[0])
    lrs = [r["lr"] for r in res.history if "lr" in r]
    with open(os.path.join(os.path.dirname(sys.argv[2]), f"rank{rank}.json"), "w") as f:
        json.dump({"steps": res.steps, "lrs": lrs}, f)
    """
)


def test_time_budget_ranks_agree_under_ddp(tiny_data, tmp_path):
    """Two ranks whose clocks disagree stop at the same step with the same learning rates (rank 0's
    clock decides); without the agreement rank 1 would stop after 2 steps and rank 0 hang."""
    script = tmp_path / "ddp_budget.py"
    script.write_text(DDP_BUDGET_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(tiny_data),
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 4 and r0["lrs"] == r1["lrs"]
    assert r0["lrs"] == [LRSchedule("wsd", 2e-3, 4, 0).at(k, k / 4) for k in range(4)]
