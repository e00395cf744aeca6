"""The training step is sync-free: a census (``tokendrop.train.census``, CUDA's sync-debug rules
applied on CPU) of every loop iteration of real ``pretrain`` runs finds no op that would make a
CUDA host wait, in every iteration that does not log, evaluate or checkpoint.

The grid is derived from the registries: every method x variant (``combos.method_variant_combos``),
ScTD on/off where it applies, the phases on/off where dropping is on (a dense start, a random start
where the method ranks by score, [MASK] rows ranked where it learns from the loss), both families
(``FAMILIES``), packed and padded rows, per-document attention and sliding windows (as bands: the
band block is lowered so T = 64 rows use them), no warm-up / a length warm-up / a batch warm-up, a
step count or a time budget.  The default run takes
a covering subset (every value of every factor at least once); the full grid is ``slow``.  DDP
(gloo, two processes) is ``slow`` too.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from combos import method_variant_combos

from tokendrop.config import load_config
from tokendrop.dropping.methods import METHODS
from tokendrop.models import attention
from tokendrop.models.families import FAMILIES
from tokendrop.train import trainer as trainer_mod
from tokendrop.train.census import Census

STEPS = 4  # the last one logs, evaluates and checkpoints (the intervals below are longer)


def _sctd_applies(method: str, variant: str) -> bool:
    m = METHODS[method]
    return m.drops and not m.per_layer and variant != "avg"


def _phase_overrides(method: str, variant: str) -> list[str]:
    """The phases a (method, variant) takes: a dense start wherever dropping is on, then a random
    start where the method ranks one subset by score, and [MASK] rows ranked where it learns from
    the loss (DropConfig's rules); [] where dropping is off."""
    m, pools = METHODS[method], variant == "avg"
    if not (m.drops or pools):
        return []
    ov = ["drop.dense_start_share=0.25"]
    if m.drops and m.reads_scores and not m.per_layer and not pools:
        ov.append("drop.random_start_share=0.25")
    if m.learns_from_loss and not pools:
        ov.append("drop.mask_rows='ranked'")
    return ov


def full_grid() -> list[tuple]:
    cases = []
    for (method, variant), family, rows, warm, budget in itertools.product(
        method_variant_combos(),
        sorted(FAMILIES),
        ("packed", "padded"),
        ("none", "length", "batch"),
        ("steps", "budget"),
    ):
        if warm == "length" and rows == "padded":
            continue  # a length warm-up cuts packed rows only (refused otherwise)
        for sctd in (False, True) if _sctd_applies(method, variant) else (False,):
            for phases in (False, True) if _phase_overrides(method, variant) else (False,):
                cases.append((method, variant, sctd, family, rows, warm, budget, phases))
    return cases


def covering_subset(grid: list[tuple]) -> list[tuple]:
    """Greedy: cases until every value of every factor (and every method/variant pair) is in one."""
    want = {(i, v) for case in grid for i, v in enumerate(case)} | {("mv", c[:2]) for c in grid}
    out = []
    for case in grid:
        keys = {(i, v) for i, v in enumerate(case)} | {("mv", case[:2])}
        if keys & want:
            out.append(case)
            want -= keys
    return out


GRID = full_grid()
DEFAULT = covering_subset(GRID)
SLOW = [c for c in GRID if c not in DEFAULT]


def _overrides(case, data) -> list[str]:
    method, variant, sctd, family, rows, warm, budget, phases = case
    ov = [
        f'data.path="{data}"',
        f"drop.method={method}",
        f'drop.variant="{variant}"',
        "train.batch_size=8",
        "train.log_every=1000",
        "train.eval_every=1000",
        "train.ckpt_every=1000",
        "train.eval_batches=1",
        "train.threads=1",
        "train.warmup_steps=1",
    ]
    if sctd:
        ov += ["drop.consistency_weight=0.05", "drop.consistency_every=1"]
    if phases:
        ov += _phase_overrides(method, variant)
    # the tiny run as the family's model, with per-document attention (packed rows) and 16-token
    # windows wherever the family has them: every family of the registry, none named here
    ov += [f"model.family={family}", 'model.document_attention="on"']
    if FAMILIES[family].schema.sliding_windows:
        ov += ["model.local_attention=16"]
    if warm == "length":
        ov += ["data.seq_len_start=32", "data.seq_len_warmup_share=0.5"]
    elif warm == "batch":
        ov += ["train.batch_warmup_start=4", "train.batch_warmup_share=0.5"]
    if budget == "budget":
        ov += ["train.steps=unset", "train.time_budget='4s'"]
    else:
        ov += [f"train.steps={STEPS}"]
    return ov


class FakeClock:
    """One second per reading: a 4 s budget is a few steps whatever the machine's speed."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.5
        return self.t


def census_of_run(cfg, out: Path, monkeypatch, clock=None) -> list[tuple[int, Census]]:
    """(step, census of its loop iteration: from its train_step to the next one's) for every step of
    ``pretrain(cfg)``; the last iteration (it logs, evaluates and checkpoints) is left out."""
    per_step: list[tuple[int, Census]] = []
    real = trainer_mod._Trainer.train_step
    open_census: list[Census] = []

    def spy(self):
        if open_census:
            open_census.pop().__exit__(None, None, None)
        c = Census()
        c.__enter__()
        open_census.append(c)
        per_step.append((self.step + 1, c))
        return real(self)

    monkeypatch.setattr(trainer_mod._Trainer, "train_step", spy)
    monkeypatch.setattr(attention, "BAND_BLOCK", 16)  # T = 64 rows take bands (windows, documents)
    try:
        trainer_mod.pretrain(cfg, out, progress=False, clock=clock)
    finally:
        if open_census:
            open_census.pop().__exit__(None, None, None)
    assert len(per_step) >= 2
    return per_step[:-1]


def _check(case, request, tmp_path, monkeypatch):
    rows = case[4]
    data = request.getfixturevalue("tiny_data" if rows == "packed" else "tiny_data_unpacked")
    cfg = load_config("tiny", _overrides(case, data))
    n = torch.get_num_threads()
    try:
        steps = census_of_run(
            cfg, tmp_path / "run", monkeypatch, FakeClock() if case[6] == "budget" else None
        )
    finally:
        torch.set_num_threads(n)
    bad = [(s, c) for s, c in steps if c.syncs]
    assert not bad, "host syncs in a training step:\n" + "\n".join(
        f"step {s}:\n{c.report()}" for s, c in bad
    )
    assert all(c.ops > 50 for _, c in steps)  # the census saw the step


def _id(case) -> str:
    method, variant, sctd, family, rows, warm, budget, phases = case
    extra = ("-sctd" if sctd else "") + ("-phases" if phases else "")
    return f"{method}-{variant}{extra}-{family}-{rows}-{warm}-{budget}"


def test_grid_is_derived_and_covered():
    assert len(GRID) > len(DEFAULT) > 0
    for i in range(8):
        assert {c[i] for c in DEFAULT} == {c[i] for c in GRID}
    assert {c[:2] for c in DEFAULT} == {c[:2] for c in GRID}
    print(f"census grid: {len(GRID)} cases, {len(DEFAULT)} in the default run")


@pytest.mark.parametrize("case", DEFAULT, ids=_id)
def test_training_step_is_sync_free(case, request, tmp_path, monkeypatch):
    _check(case, request, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=_id)
def test_training_step_is_sync_free_full_grid(case, request, tmp_path, monkeypatch):
    _check(case, request, tmp_path, monkeypatch)


def test_census_names_the_syncs_it_finds():
    """The census can fail: each rule it applies, on a known sync, named at this file's caller."""
    from tokendrop.dropping.config import DropConfig
    from tokendrop.dropping.importance import TokenSelector

    x, idx = torch.arange(6.0), torch.tensor([1, 2])
    cases = {
        "read": lambda: bool(x.sum()),
        "item": lambda: x.sum().item(),
        "tolist": lambda: x.tolist(),
        "mask": lambda: x[x > 2],
        "scalar write": lambda: x.__setitem__(idx, 1.0),
        "int write": lambda: x.__setitem__(0, 1.0),
        "nonzero": lambda: torch.nonzero(x),
        "unique": lambda: torch.unique(x),
        "repeat": lambda: idx.repeat_interleave(idx),
        "h2d": lambda: torch.tensor([1.0], device=x.device),
        "cpu": lambda: x.cpu(),
    }
    for name, fn in cases.items():
        with Census() as c:
            fn()
        assert len(c.syncs) >= 1, name
    with Census() as c:
        x.mul_(2).add_(idx.sum())
        x[:2] = 0.0  # a fill of a slice: no copy of the value
    assert c.syncs == [] and c.ops >= 3
    # a sync inside tokendrop is named by its file:line: the importance vector's pins as they were
    sel = TokenSelector(
        DropConfig(method="cumulative"), 50, {"cls": 1, "sep": 2, "mask": 3, "pad": 0}, 16
    )

    def old_repin():
        sel.scores[sel.pinned_ids] = 1e4

    with Census() as c:
        sel._repin()  # noqa: SLF001 - the fixed form: scalar fills
    assert c.syncs == []
    with Census() as c:
        old_repin()
    assert c.syncs and c.syncs[0].kind == "h2d"
    assert c.syncs[0].where == "?"  # called from a test, not from inside tokendrop


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_ddp_training_step_is_sync_free(tiny_data, tmp_path, parallel):
    """Two gloo ranks (DDP or FSDP2), a time budget (its clock agreed every step), token dropping
    with ScTD: every rank's non-logging iterations are sync-free."""
    script = tmp_path / "ddp_census.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "fixtures")!r})
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        import pytest
        from test_sync_free import FakeClock, census_of_run, _overrides
        from tokendrop.config import load_config
        mp = pytest.MonkeyPatch()
        case = ("cumulative", "drop", True, "modernbert", "packed", "batch", "budget")
        over = _overrides(case, {str(tiny_data)!r}) + ["train.parallel={parallel}"]
        cfg = load_config("modern-tiny", over)
        steps = census_of_run(cfg, {str(tmp_path / "run")!r}, mp, FakeClock())
        bad = [(s, c.report()) for s, c in steps if c.syncs]
        print("steps", len(steps), "bad", bad)
        sys.exit(1 if bad or len(steps) < 3 else 0)
    """)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(port),
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_window_bands_are_sized_without_a_host_read():
    """Every form of a window band (blocks of query rows; blocks of positions for kept rows over all
    rows) is built with 0 syncs; a document-only band reads its run length, so under the census (an
    accelerator's view) it is not built and the masked bias is used."""
    from tokendrop.dropping.engine import Rows

    T, g = 256, torch.Generator().manual_seed(0)
    at = torch.arange(T)[None]
    rows = Rows(None, None, at, at)
    keep = torch.stack([torch.randperm(T, generator=g)[:100].sort().values for _ in range(2)])
    kept = rows.gather(keep)
    doc = (torch.arange(T) // 40)[None].repeat(2, 1)
    drows = Rows(None, doc, None, None)
    with Census() as c:
        same = attention.Band.build(rows, rows, 8, torch.float32, block=32)
        sparse = attention.Band.build(kept, rows, 8, torch.float32, block=32, extent=T)
        documents = attention.Band.build(drows, drows, None, torch.float32, block=32)
    assert c.syncs == [], c.report()
    assert same is not None and same.rows is None and same.slot.shape[2] == 32 + 2 * 8
    assert (
        sparse is not None
        and sparse.rows is not None
        and sparse.slot.shape[1:] == (T // 32, 32 + 2 * 8)
    )
    assert documents is None
    # on CPU: free to read
    assert attention.Band.build(drows, drows, None, torch.float32, block=32) is not None
