"""Sequence-length and batch-size warm-ups (tokendrop.train.schedules, tokendrop.train.warmups, the
loader's framed pieces), the per-step FLOP count and the process budget clock: values against the
formulas, pieces against a hand-made framing, exact resume, one-line errors, a fake clock."""

import itertools
import math
import re

import numpy as np
import pytest
import torch
from batches import unmask as _originals
from torch._dynamo.testing import CompileCounterWithBackend
from toydata import toy_prepared

from tokendrop.config import load_config
from tokendrop.data import MLMLoader, PreparedData, num_prediction_slots
from tokendrop.data.pieces import frame_pieces
from tokendrop.dropping.flops import consistency_flops, step_flops
from tokendrop.dropping.methods import ltd_kept
from tokendrop.errors import ConfigError
from tokendrop.runs.metrics import read_metrics
from tokendrop.train import budget, trainer as train_mod
from tokendrop.train.resume import load_run_config
from tokendrop.train.schedules import BatchWarmup, SeqLenWarmup, batch_at, seq_len_at
from tokendrop.train.step import MLMStep
from tokendrop.train.trainer import pretrain
from tokendrop.train.warmups import StepPlan, default_micro_batch

# ---------------------------------------------------------------------------------------------
# pure functions


def test_seq_len_at_follows_its_formula():
    T = 128
    for k in range(21):
        p = k / 20
        target = 16 + (T - 16) * min(1.0, p / 0.4)
        want = max(d for d in (16, 32, 64, 128) if d <= target + 1e-9)
        assert seq_len_at(p, 16, 0.4, T) == want
        assert SeqLenWarmup(16, 0.4, T).at(p) == want
    assert seq_len_at(0.0, 16, 0.4, T) == 16 and seq_len_at(0.4, 16, 0.4, T) == T
    assert seq_len_at(0.3, 0, 0.4, T) == T  # off
    assert SeqLenWarmup(16, 0.4, T).lengths() == [16, 32, 64, 128]
    assert SeqLenWarmup(48, 0.5, 96).lengths() == [48, 96]


def test_batch_at_follows_its_formula():
    for k in range(21):
        r = k / 20
        want = max(8, int(8 + (64 - 8) * r) // 8 * 8)
        assert batch_at(r, 8, 64, 8) == want
    w = BatchWarmup(8, 64, 8, share=0.25)
    assert [w.at(p) for p in (0.0, 0.125, 0.25, 0.9)] == [8, batch_at(0.5, 8, 64, 8), 64, 64]
    t = BatchWarmup(8, 64, 4, tokens=1000)
    assert [t.at(0.9, n) for n in (0, 500, 999, 1000, 5000)] == [8, 36, 60, 64, 64]
    assert BatchWarmup(0, 64, 8, share=0.2).at(0.0) == 64  # off


def test_bucketed_batch_warmup_rounds_down_to_its_sizes():
    """Bucketed (a compiled step of one micro-batch): the start doubled while below the final
    batch, and the final batch; each step's batch is the formula's rounded down to one of them."""
    for start, final, unit in ((8, 64, 8), (6, 64, 2), (2, 8, 2), (24, 96, 8)):
        plain = BatchWarmup(start, final, unit, share=0.5)
        w = BatchWarmup(start, final, unit, share=0.5, bucketed=True)
        sizes = w.sizes()
        assert sizes[0] == start and sizes[-1] == final and len(sizes) == len(set(sizes))
        assert all(b == 2 * a for a, b in zip(sizes[:-2], sizes[1:-1]))
        assert len(sizes) <= math.ceil(math.log2(final / start)) + 1
        assert all(s % unit == 0 for s in sizes)
        for k in range(41):
            b, raw = w.at(k / 40), plain.at(k / 40)
            assert b == max(s for s in sizes if s <= raw)
    assert BatchWarmup(8, 64, 8, share=0.5, bucketed=True).sizes() == [8, 16, 32, 64]
    assert BatchWarmup(8, 64, 8, share=0.5).sizes() == list(range(8, 65, 8))


def test_step_plan_micro_batches():
    cfg = load_config(
        "tiny",
        ["train.batch_size=12", "train.batch_warmup_start=4", "train.batch_warmup_share=0.5"],
    )
    micro = default_micro_batch(
        cfg.train, 6, 2
    )  # 2 ranks: per-rank batches 6 and 2 -> micro-batch 2
    assert micro == 2
    plan = StepPlan(cfg.train, cfg.data, 64, True, micro, 2)
    assert [(s.micro, s.batch) for s in (plan.at(0.0), plan.at(0.25), plan.at(0.5))] == [
        (1, 4),
        (2, 8),
        (3, 12),
    ]


# ---------------------------------------------------------------------------------------------
# pieces in the loader


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return PreparedData.open(
        toy_prepared(tmp_path_factory.mktemp("d") / "packed", seq_len=64, num_docs=200)
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_pieces_are_framed_and_masked_on_their_own(packed, workers):
    """At L < T each sequence becomes T/L pieces [CLS] body [SEP] (the body tokens in order), masked
    with round(rate * n) slots of each piece's own n maskable positions; P_L slots; the batch at
    L = T afterwards is the plain loader's batch; the same with workers."""
    B, T = 4, packed.seq_len
    cls, sep = packed.special_ids["cls"], packed.special_ids["sep"]
    plain = list(
        itertools.islice(
            MLMLoader(packed, batch_size=B, mask_prob=0.3, num_workers=0, variable_rate=True), 4
        )
    )
    loader = MLMLoader(packed, batch_size=B, mask_prob=0.3, num_workers=workers, variable_rate=True)
    it = iter(loader)
    special = torch.tensor(sorted(packed.special_ids[k] for k in ("pad", "cls", "sep", "mask")))
    for step, (L, rate) in enumerate([(16, 0.3), (32, 0.2), (16, 0.15), (64, 0.3)]):
        loader.set_seq_len(L)
        loader.set_mask_rate(rate)
        b = next(it)
        if L == T:
            assert all(torch.equal(b[k], plain[step][k]) for k in b)
            continue
        rows = packed.sequences("train")[loader.batch_indices(0, step)]
        want = torch.from_numpy(frame_pieces(np.asarray(rows), L, cls, sep)).long()
        assert b["input_ids"].shape == (B * T // L, L)
        assert b["mlm_positions"].shape == (B * T // L, num_prediction_slots(L, 0.3))
        orig = _originals(b)
        assert torch.equal(orig, want)
        assert torch.all(orig[:, 0] == cls) and torch.all(orig[:, -1] == sep)
        assert torch.equal(
            orig[0, 1 : L - 1], torch.from_numpy(np.asarray(rows[0, 1 : L - 1])).long()
        )
        n = (~torch.isin(orig, special)).sum(1)
        k = torch.clamp(
            torch.floor(rate * n.double() + 0.5).long(), 1, num_prediction_slots(L, 0.3)
        )
        assert torch.equal(b["mlm_weights"].sum(1).long(), k)
    loader.close()
    with pytest.raises(Exception, match="set_seq_len: expected 64 or a divisor of it"):
        loader.set_seq_len(24)


def test_frame_pieces_by_hand():
    rows = np.array([[1, 10, 11, 12, 13, 14, 15, 2]])  # [CLS] 6 body tokens [SEP], T = 8
    # 14, 15 do not fit
    assert frame_pieces(rows, 4, 1, 2).tolist() == [
        [1, 10, 11, 2],
        [1, 12, 13, 2],
    ]


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


def _rows(run):
    return [r for r in read_metrics(run) if "loss" in r]


WARM = [
    "train.steps=8",
    "train.ckpt_every=100",
    "train.eval_every=100",
    "train.warmup_steps=2",
    "data.seq_len_start=16",
    "data.seq_len_warmup_share=0.5",
    "train.batch_warmup_start=2",
    "train.batch_warmup_share=0.5",
    "data.mask_prob=[0.3, 0.15]",
]


@pytest.mark.parametrize(
    "extra",
    [
        ["drop.method=cumulative", "drop.consistency_weight=0.1", "drop.consistency_every=2"],
        ["drop.method=random_ltd", "drop.ltd_step=4"],
    ],
    ids=["sctd", "random_ltd"],
)
def test_warmups_in_pretraining_flops_and_exact_resume(tiny_data, tmp_path, extra):
    """Each step's length and batch are the formulas at p = k / steps; the run's FLOPs are the sum
    of the per-step counts computed here by hand (shorter sequences, smaller batches, the kept
    rows relative to the current length, ScTD's dense pass); a run stopped mid-warm-up and resumed
    ends with the same losses and weights, bit for bit."""
    cfg = tiny(tiny_data, *WARM, *extra)
    res = pretrain(cfg, tmp_path / "full", progress=False)
    # as resolved (the vocabulary size from the data); the parsed cfg is unchanged
    cfg = load_run_config(tmp_path / "full")
    rows = _rows(tmp_path / "full")
    T, total = 64, 0
    for r in rows:
        k = r["step"] - 1
        L, batch = seq_len_at(k / 8, 16, 0.5, T), batch_at(min(1.0, (k / 8) / 0.5), 2, 8, 2)
        assert (r["seq_len"], r["batch_size"]) == (L, batch)
        if cfg.drop.per_layer:
            kept = ltd_kept(cfg.drop, L, k, 8)
            f = step_flops(cfg.model, L, batch * T // L, cfg.drop, kept=kept).total
        else:
            f = step_flops(
                cfg.model, L, batch * T // L, cfg.drop, kept=max(1, round(L * 0.5))
            ).total
            f += consistency_flops(cfg.model, L, batch * T // L) if k % 2 == 0 else 0
        assert r["flops_per_step"] == f
        total += f
        assert r["flops"] == total
    assert sorted({r["seq_len"] for r in rows}) == [16, 32, 64]
    end = [r for r in read_metrics(tmp_path / "full") if r.get("event") == "end"][0]
    assert end["flops"] == total
    part = pretrain(tiny(tiny_data, *WARM, *extra), tmp_path / "split", progress=False, stop_at=3)
    assert part.interrupted
    pretrain(tiny(tiny_data, *WARM, *extra), tmp_path / "split", resume=True, progress=False)
    assert [(r["loss"], r["flops"]) for r in _rows(tmp_path / "split")] == [
        (r["loss"], r["flops"]) for r in rows
    ]
    from safetensors.torch import load_file

    from tokendrop.runs import checkpoint as ckpt_mod

    wa, wb = (
        load_file(str(ckpt_mod.latest(d) / "model.safetensors"))
        for d in (tmp_path / "full", tmp_path / "split")
    )
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert res.steps == 8


def test_batch_warmup_in_tokens_follows_the_tokens_taken(tiny_data, tmp_path):
    ov = [
        "train.steps=5",
        "train.ckpt_every=100",
        "train.eval_every=100",
        "train.batch_warmup_start=2",
        "train.batch_warmup_tokens=512",
        "model.family='modernbert'",
    ]
    pretrain(tiny(tiny_data, *ov), tmp_path / "r", progress=False)
    seen, got = 0, []
    for r in _rows(tmp_path / "r"):
        want = batch_at(min(1.0, seen / 512), 2, 8, 2)
        got.append(r["batch_size"])
        assert r["batch_size"] == want
        seen += want * 64
    assert got == [2, 2, 4, 8, 8]


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (
            ["data.seq_len_start=-4"],
            r"data.seq_len_start: expected a positive integer or 'off' .* got -4",
        ),
        (
            ["data.seq_len_start=16", "data.seq_len_warmup_share=0"],
            r"data.seq_len_warmup_share: .* lies outside \(0, 1\)",
        ),
        (
            ["data.seq_len_start=16", "data.seq_len_warmup_share=1.5"],
            r"data.seq_len_warmup_share: .* lies outside \(0, 1\)",
        ),
        (
            ["data.seq_len=64", "data.seq_len_start=128"],
            r"data.seq_len_start: expected a length in \(0, data.seq_len = 64\] or "
            r"\"off\", got 128",
        ),
        (
            ["train.batch_warmup_start=64"],
            r"train.batch_warmup_start: 64 sequences is more than the batch itself "
            r"\(train.batch_size = 16\); set train.batch_warmup_start <= 16, or a share",
        ),
        (
            ["train.batch_warmup_start=1.5", "train.batch_warmup_share=0.25"],
            r"train.batch_warmup_start: expected a number of sequences or a share .* got 1.5",
        ),
        (["train.batch_warmup_start=4"], "set exactly one"),
        (
            [
                "train.batch_warmup_start=4",
                "train.batch_warmup_share=0.1",
                "train.batch_warmup_tokens=100",
            ],
            "set exactly one",
        ),
        (
            ["train.batch_warmup_start=4", "train.batch_warmup_share=1.0"],
            r"train.batch_warmup_share: expected a share of the run in \(0, 1\) .* got 1.0",
        ),
        (["train.budget_clock='cpu'"], "train.budget_clock: expected one of wall, process"),
    ],
)
def test_bad_warmup_config(overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        load_config("tiny", overrides).validate()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (
            ["data.seq_len_start=24"],
            "data.seq_len_start: 24 is not a divisor >= 8 of the prepared sequence length 64",
        ),
        (["data.seq_len_start=4"], "data.seq_len_start: 4 is not a divisor >= 8"),
        (
            [
                "train.batch_warmup_start=3",
                "train.batch_warmup_share=0.5",
                "train.micro_batch_size=2",
            ],
            "train.batch_warmup_start: 3 is not a multiple of the micro-batch 2",
        ),
    ],
)
def test_warmup_errors_against_the_data(tiny_data, tmp_path, overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        pretrain(tiny(tiny_data, "train.steps=2", *overrides), tmp_path / "r", progress=False)
    assert "\n" not in str(e.value)


def test_seq_len_warmup_refuses_unpacked_data(tiny_data_unpacked, tmp_path):
    with pytest.raises(
        ConfigError, match="data.seq_len_start: the sequence-length warm-up cuts packed sequences"
    ):
        pretrain(
            tiny(tiny_data_unpacked, "train.steps=2", "data.seq_len_start=16"),
            tmp_path / "r",
            progress=False,
        )


# ---------------------------------------------------------------------------------------------
# the process budget clock


def test_budget_clock_picks_the_process_clock(monkeypatch):
    cfg = load_config("tiny", [])
    assert budget.budget_clock(cfg.train) is __import__("time").perf_counter
    cfg = load_config("tiny", ["train.budget_clock='process'"])
    fake = lambda: 0.0  # noqa: E731
    monkeypatch.setattr("time.process_time", fake)
    assert budget.budget_clock(cfg.train) is fake


def test_process_clock_budget_stops_within_one_step(tiny_data, tmp_path, monkeypatch):
    """With train.budget_clock = "process" the run reads time.process_time (here a fake advancing
    one second per step, not during evaluation) and stops at the first step at or past its budget;
    the wall clock is never consulted for the budget."""
    t = [50.0]
    step_call, eval_call = MLMStep.__call__, train_mod.evaluate_mlm

    def step(self, *a, **k):
        t[0] += 1.0
        return step_call(self, *a, **k)

    def evaluate(*a, **k):
        t[0] += 7.0
        return eval_call(*a, **k)

    monkeypatch.setattr(MLMStep, "__call__", step)
    monkeypatch.setattr(train_mod, "evaluate_mlm", evaluate)
    monkeypatch.setattr("time.process_time", lambda: t[0])
    monkeypatch.setattr("time.perf_counter", lambda: 0.0)  # a wall clock that never moves
    ov = [
        "train.steps=unset",
        "train.time_budget=5.5s",
        "train.budget_clock='process'",
        "train.eval_every=2",
        "train.ckpt_every=100",
        "data.seq_len_start=16",
        "data.seq_len_warmup_share=0.5",
    ]
    res = pretrain(tiny(tiny_data, *ov), tmp_path / "r", progress=False)
    assert res.steps == 6 and math.isclose(res.wall_time, 6.0)  # 5 s < 5.5 s <= 6 s
    rows = _rows(tmp_path / "r")
    for r in rows:  # the length follows the budget fraction used before the step
        assert r["seq_len"] == seq_len_at((r["step"] - 1) / 5.5, 16, 0.5, 64)


def test_an_evaluation_reads_the_same_sequences_with_a_batch_warm_up(tiny_data, tmp_path):
    """train.eval_batches counts batches of train.batch_size: a batch warm-up's smaller
    micro-batches (or a micro_batch_size) do not shrink the held-out set an arm is scored on."""
    import json

    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    slots = {}
    for name, extra in (
        ("plain", []),
        ("warm", ["train.batch_warmup_start=4", "train.batch_warmup_share=0.5"]),
        ("micro", ["train.micro_batch_size=2"]),
    ):
        cfg = load_config(
            "tiny",
            [
                f"data.path={json.dumps(str(tiny_data))}",
                "train.steps=2",
                "train.batch_size=8",
                "train.eval_batches=2",
                "train.eval_every=2",
                "train.device='cpu'",
                *extra,
            ],
        )
        pretrain(cfg, tmp_path / name, progress=False)
        recs = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        slots[name] = [
            (r["eval_slots"], round(r["eval_loss"], 4)) for r in recs if "eval_loss" in r
        ][0]
    assert slots["plain"] == slots["warm"] == slots["micro"], slots


def _step_batches(cfg, out, monkeypatch, fits: bool = True):
    """The micro-batches (their key -> shape) of every step of ``pretrain(cfg)``; ``fits`` False:
    the memory pre-flight refuses any batch larger than the loader's."""
    seen = []
    real_step = MLMStep.__call__

    def spy(self, micro, *a, **k):
        seen.append([{key: tuple(v.shape) for key, v in mb.items()} for mb in micro])
        return real_step(self, micro, *a, **k)

    monkeypatch.setattr(MLMStep, "__call__", spy)
    if not fits:
        real_check = train_mod.check_memory

        def check(model_cfg, drop, mask_prob, T, micro_batch, *a, **k):
            if micro_batch > 2:
                raise ConfigError("model/batch too large (a test)")
            return real_check(model_cfg, drop, mask_prob, T, micro_batch, *a, **k)

        monkeypatch.setattr(train_mod, "check_memory", check)
    pretrain(cfg, out, progress=False)
    return seen


@pytest.mark.parametrize("mode", ["one pass", "asked", "does not fit"])
def test_batch_warmup_runs_one_micro_batch_unless_asked_or_too_large(
    tiny_data, tmp_path, monkeypatch, mode
):
    """Without train.micro_batch_size a batch warm-up's step is one micro-batch of its current batch
    (2 -> 8 over half of 6 steps), not the gcd's accumulated ones; train.micro_batch_size, or a
    batch the memory pre-flight refuses, accumulates loader batches of 2.  The same data either
    way."""
    ov = [
        "train.steps=6",
        "train.ckpt_every=100",
        "train.eval_every=100",
        "train.batch_warmup_start=2",
        "train.batch_warmup_share=0.5",
        "train.memory_check=true",
    ]
    if mode == "asked":
        ov.append("train.micro_batch_size=2")
    seen = _step_batches(
        tiny(tiny_data, *ov), tmp_path / "run", monkeypatch, fits=mode != "does not fit"
    )
    batches = [sum(mb["input_ids"][0] for mb in step) for step in seen]
    assert batches[0] == 2 and batches[-1] == 8 and batches == sorted(batches)
    if mode == "one pass":
        assert all(len(step) == 1 for step in seen)
    else:
        assert all(
            len(step) == b // 2 and all(mb["input_ids"][0] == 2 for mb in step)
            for step, b in zip(seen, batches, strict=True)
        )


def test_one_pass_equals_accumulation(tiny_data, tmp_path):
    """The joined micro-batch and the accumulated ones: the same data, the same losses up to the
    float order of the sums (without dropout, whose draws differ with the micro-batch's shape)."""
    ov = [
        "train.steps=6",
        "train.ckpt_every=100",
        "train.eval_every=100",
        "train.batch_warmup_start=2",
        "train.batch_warmup_share=0.5",
        "drop.method=cumulative",
        "model.hidden_dropout=0.0",
        "model.attention_dropout=0.0",
    ]
    pretrain(tiny(tiny_data, *ov), tmp_path / "one", progress=False)
    pretrain(tiny(tiny_data, *ov, "train.micro_batch_size=2"), tmp_path / "acc", progress=False)
    one, acc = _rows(tmp_path / "one"), _rows(tmp_path / "acc")
    assert [r["batch_size"] for r in one] == [r["batch_size"] for r in acc]
    np.testing.assert_allclose([r["loss"] for r in one], [r["loss"] for r in acc], rtol=1e-4)


@pytest.mark.parametrize("rows", ["packed", "padded"])
def test_the_step_gets_only_what_the_model_reads(
    tiny_data, tiny_data_unpacked, tmp_path, monkeypatch, rows
):
    """Packed rows: no attention mask (no [PAD]) and no token type ids (all 0); padded rows keep the
    mask."""
    data = tiny_data if rows == "packed" else tiny_data_unpacked
    seen = _step_batches(
        tiny(data, "train.steps=2", "train.ckpt_every=100", "train.eval_every=100"),
        tmp_path / "run",
        monkeypatch,
    )
    keys = {k for step in seen for mb in step for k in mb}
    base = {"input_ids", "mlm_positions", "mlm_labels", "mlm_weights"}
    assert keys == (base if rows == "packed" else base | {"attention_mask", "token_type_ids"})


@pytest.mark.slow
def test_compiled_warmups_compile_the_announced_shapes_once(tiny_data, tmp_path, monkeypatch):
    """train.compile = step with a sequence-length warm-up (16 -> 64), a batch warm-up (2 -> 8,
    bucketed to 2, 4, 8), a masking-rate warm-up (30% -> 15%) and a dense stage 2: a graph is
    compiled exactly at the steps whose (length, batch, kind) is new (and AdamW's update at the
    first, where it is compiled), never after; the distinct shapes are at most the number the run's
    log announces.
    AOTAutograd's eager backend (dynamo's guards and recompiles as with inductor, no code
    generation)."""
    counter = CompileCounterWithBackend("aot_eager")

    class Counted(MLMStep):
        def __init__(self, *a, **k):
            super().__init__(*a, **{**k, "compile_backend": counter})

    steps = []
    real_call = MLMStep.__call__
    update = []  # whether AdamW's update is a compiled graph (not for a fused AdamW on CPU)

    def spy(self, micro, lr, at):
        before = counter.frame_count
        out = real_call(self, micro, lr, at)
        shape = (*micro[0]["input_ids"].shape, at.dropping)
        steps.append((shape, counter.frame_count - before))
        update.append(self.compiled_opt is not None)
        return out

    monkeypatch.setattr(train_mod, "MLMStep", Counted)
    monkeypatch.setattr(Counted, "__call__", spy)
    torch._dynamo.reset()
    run = tmp_path / "r"
    ov = ["train.compile=step", "drop.method=cumulative", "drop.stage2_fraction=0.25"]
    pretrain(tiny(tiny_data, *WARM, *ov), run, progress=False)
    opt = update[0]
    assert set(update) == {opt}
    seen = set()
    for i, (shape, compiled) in enumerate(steps):
        assert compiled == (shape not in seen) + (i == 0 and opt), (i, shape, compiled)
        seen.add(shape)
    assert {(s[0] * s[1] // 64) for s, _ in steps} == {2, 4, 8}  # the bucketed batches (T = 64)
    assert len({s[1] for s, _ in steps}) == 3 and {s[2] for s, _ in steps} == {True, False}
    log = (run / "log.txt").read_text()
    m = re.search(r"train.compile: step, at most (\d+) graph\(s\) of the step", log)
    assert m and "the warm-up's batches [2, 4, 8]" in log, log
    assert len(seen) <= int(m.group(1)) == 3 * 2 * 3  # lengths x kinds x batches
    assert counter.frame_count == len(seen) + opt
    assert ("and 1 of AdamW's update" in log) == opt
