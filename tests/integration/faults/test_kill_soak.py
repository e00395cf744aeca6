"""The kill soak.

A ``tiny`` pretraining run (token dropping with half-random selection and dropout, so every RNG
stream matters) is SIGKILLed at 10 random moments -- while it starts, while it trains, and while a
checkpoint is being written or an old one removed (the moment a ``.step-*.tmp-*`` directory appears)
-- and resumed with ``tokendrop pretrain --resume RUN`` each time (or started again with
``--overwrite`` when it was killed before its first checkpoint).  It must end with weights,
optimizer state and importance vector bit-identical to an uninterrupted run of the same config, the
same loss at every step, no step logged twice in ``metrics.jsonl``, and no temp or lock entry left
behind."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import torch
from processes import ENV, logged_steps as _logged_steps, wait_until as _wait
from safetensors.torch import load_file

from tokendrop.runs import checkpoint as ckpt_mod

SEED = 1313
STEPS = 60
CKPT_EVERY = 3
# How far past the last step logged before it (re)started one kill can let the run get, in logged
# steps: a checkpoint kill comes at the 1st or 2nd checkpoint temp dir after a resume from a
# checkpoint at most that last logged step (so by 2 checkpoints' steps), a training kill 1-4 steps
# after it, a start-up kill before its first step; each waits its random extra moment only until one
# more step is logged.  The soak's kills together stay below STEPS, so no kill can come after the
# run finished (the flake this replaces: a start-up kill timed in seconds came after step 60 on a
# fast machine).
ADVANCE = {"checkpoint": 2 * CKPT_EVERY + 1, "training": 4 + 1, "start-up": 1}
MODES = ["checkpoint"] * 5 + ["training"] * 4 + ["start-up"]


def _args(data: Path) -> list[str]:
    return [
        "--quiet",
        "--set",
        f'data.path="{data}"',
        "--set",
        f"train.steps={STEPS}",
        "--set",
        f"train.ckpt_every={CKPT_EVERY}",
        "--set",
        "train.log_every=1",
        "--set",
        "train.eval_every=10",
        "--set",
        "train.eval_batches=1",
        "--set",
        "train.batch_size=8",
        "--set",
        "train.threads=1",
        "--set",
        "train.deterministic=true",
        "--set",
        "drop.method=half_random",
        "--set",
        "model.hidden_dropout=0.1",
    ]


def _start(run: Path, data: Path, fresh: bool) -> subprocess.Popen:
    cmd = (
        ["pretrain", "--config", "tiny", "--out", str(run), "--overwrite"]
        if fresh
        else ["pretrain", "--resume", str(run)]
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tokendrop", *cmd, *_args(data)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _temps(run: Path) -> set[str]:
    try:
        return {n for n in os.listdir(run / "checkpoints") if ".tmp-" in n}
    except FileNotFoundError:
        return set()


def _kill_moment(p: subprocess.Popen, run: Path, seconds: float) -> None:
    """Wait ``seconds`` or until one more step is logged, whichever comes first (bounds a kill's
    advance)."""
    n, until = _logged_steps(run), time.time() + seconds
    _wait(p, lambda: time.time() >= until or _logged_steps(run) > n, poll=0.001)


def _leftovers(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if ".tmp-" in p.name
        or ".old-" in p.name
        or p.name.endswith(".tokendrop.lock")
        or p.name == ".tokendrop-writer"
    )


def _records(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


# not marked slow: ~40-65 s on the 2-core machine, and the soak belongs in CI while CI stays in
# budget
def test_sigkill_soak_resumes_bit_identically(tiny_data, tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "soak"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokendrop",
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(ref),
            *_args(tiny_data),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr

    # every kill comes while the run is provably unfinished
    assert sum(ADVANCE[m] for m in MODES) < STEPS
    rng = random.Random(SEED)
    modes = list(MODES)
    rng.shuffle(modes)
    log = []
    for mode in modes:
        fresh = ckpt_mod.latest(run) is None if run.exists() else True
        p = _start(run, tiny_data, fresh)
        try:
            if mode == "start-up":  # anywhere from the imports to its first logged step
                _kill_moment(p, run, rng.uniform(0.2, 2.5))
            # a few steps after it resumed, then a random fraction of a step later
            elif mode == "training":
                n0, k = _logged_steps(run), rng.randint(1, 4)
                assert _wait(p, lambda: _logged_steps(run) >= n0 + k, poll=0.005)  # noqa: B023, p.communicate()
                _kill_moment(p, run, rng.uniform(0.0, 0.05))
            else:  # the k-th checkpoint temp dir (a write, or the removal of an old checkpoint)
                seen: set[str] = set()
                k = rng.randint(1, 2)

                def nth_temp() -> bool:
                    seen.update(_temps(run))  # noqa: B023 (waited for in this iteration)
                    return len(seen) >= k  # noqa: B023

                assert _wait(p, nth_temp, poll=0.001), p.communicate()
                _kill_moment(p, run, rng.uniform(0.0, 0.003))
            assert p.poll() is None, f"the run ended before the {mode} kill: {p.communicate()}"
            p.kill()
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        last = ckpt_mod.latest(run) if run.exists() else None
        log.append(
            (mode, "fresh" if fresh else "resume", bool(_temps(run)), last.name if last else None)
        )

    print(
        "kills (moment, started as, a checkpoint temp dir was left, latest valid checkpoint):",
        *log,
        sep="\n  ",
    )
    p = _start(run, tiny_data, ckpt_mod.latest(run) is None)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, (log, err)
    # a write was cut
    assert sum(1 for m, _, mid_write, _ in log if m == "checkpoint" and mid_write) >= 1, log

    # the weights, optimizer state and importance vector: bit-identical
    a, b = ckpt_mod.latest(ref), ckpt_mod.latest(run)
    assert a.name == b.name == f"step-{STEPS:08d}"
    for name in ("model.safetensors", "state.safetensors"):
        ta, tb = load_file(str(a / name)), load_file(str(b / name))
        assert ta.keys() == tb.keys()
        for k in ta:
            assert torch.equal(ta[k], tb[k]), (name, k, log)
    # nothing left behind: no temp dir or file, no lock
    assert _leftovers(tmp_path) == [], log
    # the log: every step once, with the uninterrupted run's losses
    ra, rb = _records(ref), _records(run)
    for key in ("loss", "eval_loss"):
        sa, sb = (
            [(r["step"], r[key]) for r in ra if key in r],
            [(r["step"], r[key]) for r in rb if key in r],
        )
        steps = [s for s, _ in sb]
        assert len(steps) == len(set(steps)), (
            f"{key}: steps logged twice: {sorted(s for s in set(steps) if steps.count(s) > 1)}"
        )
        assert sb == sa, key
    assert [r["event"] for r in rb if "event" in r and r["event"] != "interrupted"].count(
        "start"
    ) == 1
    assert rb[-1].get("event") == "end"
