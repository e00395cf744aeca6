"""The dropping phases through the real trainer (docs/design.md §2.3): a dense start keeps every row
and its losses still train the importance, and its steps cost dense FLOPs; a random start draws
uniformly, then the method ranks; a run stopped inside a phase resumes bit for bit, the [MASK]
rows ranked."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tokendrop.config import load_config
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.flops import step_flops
from tokendrop.dropping.importance import TokenSelector
from tokendrop.dropping.methods import PIN_HIGH, PIN_LOW
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.resume import load_run_config
from tokendrop.train.trainer import pretrain

STEPS = 10


def tiny(data, *overrides):
    return load_config(
        "tiny",
        [
            f'data.path="{data}"',
            f"train.steps={STEPS}",
            "train.log_every=1",
            "train.micro_batch_size=8",
            "train.threads=1",
            "drop.method=cumulative",
            *overrides,
        ],
    )


@pytest.fixture
def selections(monkeypatch):
    """The ``random`` flag of every TokenSelector.select call the trainer makes."""
    calls: list[bool] = []
    real = TokenSelector.select

    def counting(self, *a, **k):
        calls.append(bool(k.get("random", False)))
        return real(self, *a, **k)

    monkeypatch.setattr(TokenSelector, "select", counting)
    return calls


def _importance(run, step: int) -> torch.Tensor:
    return load_file(str(run / "checkpoints" / f"step-{step:08d}" / "state.safetensors"))[
        "importance"
    ]


def _learned(m: torch.Tensor, init: float = 10.0) -> int:
    """How many ids hold a score other than the start (pinned ids and [PAD] aside)."""
    free = (m > PIN_LOW) & (m < PIN_HIGH)
    return int((free & (m != init)).sum())


def _phase_run(data, tmp_path, option: str):
    """A 10-step run with one phase option, a checkpoint every 3 steps (all kept)."""
    run = tmp_path / "r"
    pretrain(
        tiny(data, option, "train.ckpt_every=3", "train.keep_checkpoints=5"), run, progress=False
    )
    return run


def test_a_dense_start_keeps_every_row_learns_and_costs_dense_flops(
    tiny_data, tmp_path, selections
):
    run = _phase_run(tiny_data, tmp_path, "drop.dense_start_share=0.3")
    recs = [r for r in read_metrics(run) if "loss" in r]
    assert [r["dropping"] for r in recs] == [False] * 3 + [True] * 7
    assert [r["kept_fraction"] for r in recs] == [1.0] * 3 + [0.5] * 7
    assert selections == [False] * 7 * 2  # two micro-batches per dropping step, none before
    # the dense start's losses trained the importance: by step 3 ids have left init_score
    assert _learned(_importance(run, 3)) > 0
    # FLOPs: 3 dense steps and 7 dropping steps of the run's batch
    cfg = load_run_config(run)
    start = next(r for r in read_metrics(run) if r.get("event") == "start")
    t, b = int(start["seq_len"]), cfg.train.batch_size
    dense = step_flops(cfg.model, t, b, None).total
    drop = step_flops(cfg.model, t, b, cfg.drop).total
    ends = [r for r in read_metrics(run) if r.get("event") == "end"]
    assert ends[-1]["flops"] == 3 * dense + 7 * drop


def test_a_random_start_draws_uniformly_then_ranks_and_learns_throughout(
    tiny_data, tmp_path, selections
):
    run = _phase_run(tiny_data, tmp_path, "drop.random_start_share=0.3")
    recs = [r for r in read_metrics(run) if "loss" in r]
    assert all(r["dropping"] for r in recs) and len(recs) == STEPS
    assert selections == [True] * 3 * 2 + [False] * 7 * 2
    assert _learned(_importance(run, 3)) > 0


def test_a_run_stopped_inside_a_phase_resumes_bit_for_bit(tiny_data, tmp_path):
    """Dense start, random start and the ranked [MASK] rows together; stopped in the random start
    (its draws come from the selector's generator, saved in the checkpoint) and resumed."""
    ov = [
        "drop.dense_start_share=0.2",
        "drop.random_start_share=0.3",
        "drop.mask_rows='ranked'",
        "train.deterministic=true",
        "train.ckpt_every=100",
    ]
    full, split = tmp_path / "full", tmp_path / "split"
    pretrain(tiny(tiny_data, *ov), full, progress=False)
    part = pretrain(tiny(tiny_data, *ov), split, progress=False, stop_at=3)
    assert part.interrupted and part.steps == 3
    pretrain(tiny(tiny_data, *ov), split, resume=True, progress=False)

    def losses(run):
        return [r["loss"] for r in read_metrics(run) if "loss" in r]

    assert len(losses(full)) == STEPS and losses(full) == losses(split)
    a = load_file(str(full / "checkpoints" / f"step-{STEPS:08d}" / "state.safetensors"))
    b = load_file(str(split / "checkpoints" / f"step-{STEPS:08d}" / "state.safetensors"))
    assert torch.equal(a["importance"], b["importance"])
    # [MASK] is scored, not pinned: the mean importance of the targets, below the pin
    assert load_run_config(full).drop.mask_rows == "ranked"
    assert PIN_LOW < float(a["importance"][SPECIAL_IDS["mask"]]) < PIN_HIGH


def test_a_run_recorded_before_the_phases_resumes_and_a_changed_mask_rows_is_refused():
    """A checkpoint's config without the new [drop] fields (an older tokendrop's) counts them at
    their defaults -- what that version did -- so it resumes; the ranking of [MASK] rows is fixed
    for a run (the saved vector's [MASK] score means something else), the phases are a schedule."""
    from tokendrop.config import to_dict
    from tokendrop.errors import TrainingError
    from tokendrop.train.resume import check_resume_compatible

    new = to_dict(load_config("tiny", ["drop.method=cumulative"]))
    old = json.loads(json.dumps(new))
    for k in ("dense_start_share", "random_start_share", "mask_rows"):
        del old["drop"][k]
    check_resume_compatible(old, new)  # no error
    new["drop"]["dense_start_share"] = 0.1
    check_resume_compatible(old, new)  # a schedule, like stage2_fraction
    new["drop"]["mask_rows"] = "ranked"
    with pytest.raises(TrainingError, match=r"drop\.mask_rows changed from 'pinned' to 'ranked'"):
        check_resume_compatible(old, new)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["drop.dense_start_share=1.0"],
            "drop.dense_start_share + drop.stage2_fraction: 1 covers every step, so nothing would "
            'drop; lower them, or set drop.method = "none" for a dense run',
        ),
        (
            ["drop.dense_start_share=0.6", "drop.stage2_fraction=0.4"],
            "drop.dense_start_share + drop.stage2_fraction: 1 covers every step",
        ),
        (
            ["drop.method=random_ltd", "drop.dense_start_share=0.5"],
            "drop.dense_start_share: 0.5 covers random_ltd's whole kept-count ramp "
            "(drop.ltd_schedule_share = 0.5), after which every row is kept, so nothing would drop",
        ),
    ],
)
def test_phases_that_leave_nothing_to_drop_are_refused(overrides, message):
    """A dense start (and stage 2) covering the run, or random-LTD's ramp, would train dense while
    the banner says dropping is on: refused in one line naming the fields."""
    from tokendrop.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config("tiny", ["drop.method=cumulative", *overrides])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_phase_that_rounds_to_no_step_is_refused(tiny_data, tmp_path):
    """4% of 10 steps is no step: the run is refused before it starts instead of announcing a dense
    start that never runs; one step's share runs."""
    from tokendrop.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"^drop\.dense_start_share: 0\.04 of 10 steps rounds to "
        r"no step; set it to 0, or to at least 0\.1 \(one step of 10\)$",
    ):
        pretrain(tiny(tiny_data, "drop.dense_start_share=0.04"), tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
    res = pretrain(tiny(tiny_data, "drop.dense_start_share=0.1"), tmp_path / "ok", progress=False)
    assert res.steps == STEPS
