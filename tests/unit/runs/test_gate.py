"""tokendrop.runs.gate: the test-only pause points the fault matrix signals processes at."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tokendrop.runs import gate as gate_mod

SRC = Path(__file__).resolve().parents[3] / "src"
CODE = (
    "import sys; from tokendrop.runs.gate import gate; print('before', flush=True); "
    "gate(sys.argv[1]); "
    "gate(sys.argv[1]); print('after', flush=True)"
)


def _start(name: str, spec: str | None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop(gate_mod.ENV, None)
    if spec is not None:
        env[gate_mod.ENV] = spec
    # SIGINT back to its default in the child: a test run started in the background of a shell
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    return subprocess.Popen(
        [sys.executable, "-c", CODE, name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for(p: subprocess.Popen, f: Path) -> None:
    deadline = time.monotonic() + 120
    while not f.exists():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.01)


def test_a_process_waits_at_its_gate_until_released_and_only_once(tmp_path):
    g = tmp_path / "g"
    p = _start("pretrain-step", f"pretrain-step={g}")
    _wait_for(p, g)
    assert g.read_text().strip() == str(p.pid)
    time.sleep(0.3)
    assert p.poll() is None  # still waiting
    g.unlink()
    out, err = p.communicate(timeout=60)
    # the second gate() passed at once
    assert p.returncode == 0 and out.split() == ["before", "after"], err


def test_a_signal_ends_the_wait_as_it_would_end_the_work(tmp_path):
    g = tmp_path / "g"
    p = _start("prepare-units", f"prepare-units={g}")
    _wait_for(p, g)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (
        p.returncode == -signal.SIGINT and "KeyboardInterrupt" in err and out.split() == ["before"]
    )


def test_without_the_switch_or_for_another_name_nothing_waits(tmp_path):
    for spec in (None, f"finetune-step={tmp_path / 'g'}", "pretrain-step"):
        out, err = _start("pretrain-step", spec).communicate(timeout=60)
        assert out.split() == ["before", "after"], (spec, err)
    assert not (tmp_path / "g").exists()


def test_every_gate_is_placed_in_the_code_once():
    calls = {}
    for f in (SRC / "tokendrop").rglob("*.py"):
        for m in re.finditer(r'\bgate\("([\w-]+)"\)', f.read_text(encoding="utf-8")):
            calls.setdefault(m.group(1), []).append(f.name)
    assert sorted(calls) == sorted(gate_mod.GATES), calls
    assert all(len(v) == 1 for v in calls.values()), calls
