"""SIGKILL of a pretrain that has data workers: the workers die with it, none of them holds the
run's lock, and ``--resume`` continues the run (docs/reliability.md, one writer per directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import ENV, wait_until

from tokendrop.runs import checkpoint as ckpt_mod, rundir


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pretrain(run: Path, data: Path, *extra: str) -> list[str]:
    sets = [
        f'data.path="{data}"',
        "data.num_workers=1",
        "train.ckpt_every=2",
        "train.warmup_steps=1",
        "train.eval_every=100000",
        "train.log_every=1",
        "train.batch_size=8",
        "train.threads=1",
        'train.report_to=["jsonl"]',
        *extra,
    ]
    return [
        sys.executable,
        "-m",
        "tokendrop",
        "pretrain",
        "--quiet",
        *sum((["--set", s] for s in sets), []),
    ]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_with_a_data_worker_then_resume(tiny_data, tmp_path):
    run = tmp_path / "run"
    argv = _pretrain(run, tiny_data, "train.steps=100000")
    p = subprocess.Popen(
        [*argv[:4], "--config", "tiny", "--out", str(run), *argv[4:]],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers: list[int] = []
    try:
        assert wait_until(p, lambda: ckpt_mod.latest_checkpoint(run) is not None), p.stderr.read()
        workers = _children(p.pid)
        assert workers, "the run started no data worker"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, workers)), f"data workers {workers} outlived their parent"
    finally:
        for pid in (p.pid, *_children(p.pid), *workers):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert rundir.lock_path(run).exists()  # SIGKILL: no clean-up
    step = ckpt_mod.verify(ckpt_mod.latest_checkpoint(run))["step"]
    resumed = subprocess.run(
        [*_pretrain(run, tiny_data, f"train.steps={step + 2}"), "--resume", str(run)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr and "in use by" not in resumed.stderr
    assert f"the lock left by pid {p.pid}, which is no longer running" in resumed.stderr
    assert ckpt_mod.verify(ckpt_mod.latest_checkpoint(run))["step"] == step + 2
    assert not rundir.lock_path(run).exists()
