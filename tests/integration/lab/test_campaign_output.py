"""The GPU campaign's output directory (``tokendrop bench --campaign --out``): a lock and a
marker, parts marked incomplete until they end, a part killed mid-way reported by the next
campaign, part files written atomically.  Each case asserts the exit code, the one-line message and
the disk."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_run import (
    error_lines as _errors,
    one_line_error as _one_line_error,
    run_cli as _run,
    tree as _tree,
)

from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_write_text

REPO = Path(__file__).resolve().parents[3]


KILLED = textwrap.dedent("""
    import os, signal, sys
    import tokendrop.lab.bench.campaign as camp
    from tokendrop.lab.bench.campaign import campaign_config, run_parts

    def killed(cfg, out, budget, r, save, log):
        r.summary.append("phase 1 done")
        save()
        os.kill(os.getpid(), signal.SIGKILL)  # a hard kill: no clean-up runs

    camp._runner = lambda name: killed
    run_parts(campaign_config("dry", ["pytest=false"], dry_run=True), ["env"], sys.argv[1])
""")


def _campaign_cfg():
    from tokendrop.lab.bench.campaign import campaign_config

    return campaign_config("dry", ["pytest=false"], dry_run=True)


def _fake_runner(monkeypatch, fn):
    import tokendrop.lab.bench.campaign as camp

    monkeypatch.setattr(camp, "_runner", lambda name: fn)


def _writes_files(*names):
    def fn(cfg, out, budget, r, save, log):
        for n in names:
            atomic_write_text(out / n, f"{r.part} {n}\n")
            r.files.append(n)
        r.check("fake", True)
        save()

    return fn


def test_campaign_marks_and_locks_its_output(tmp_path, monkeypatch):
    from tokendrop.lab.bench.campaign import IN_PROGRESS, run_parts

    _fake_runner(monkeypatch, _writes_files("env-extra.txt"))
    out = tmp_path / "out"
    (r,) = run_parts(_campaign_cfg(), ["env"], out)
    assert r.ok and r.complete
    assert rundir.read_marker(out)["kind"] == "campaign"
    d = json.loads((out / "env.json").read_text())
    assert d["complete"] is True and d["ok"] is True and d["files"] == ["env-extra.txt"]
    assert not (out / IN_PROGRESS).exists() and not rundir.lock_path(out).exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    # a second campaign while one holds the lock: refused at once, nothing touched
    before = _tree(out)
    fd = os.open(rundir.lock_path(out), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        gone = _dead_pid()
        os.write(fd, f"{gone}\n".encode())
        with pytest.raises(
            rundir.RunDirError, match=rf"names pid {gone}, which is no longer running"
        ):
            run_parts(_campaign_cfg(), ["env"], out)
    finally:
        os.close(fd)
        rundir.lock_path(out).unlink()
    assert _tree(out) == before


def _dead_pid() -> int:
    """The pid of a process that has ended (waited for: not a zombie)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_campaign_refuses_a_foreign_or_other_kind_directory(tmp_path, monkeypatch, capsys):
    _fake_runner(monkeypatch, _writes_files())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    rc, _, err = _run(
        capsys,
        "bench",
        "--campaign",
        "env",
        "--dry-run",
        "--out",
        mine,
        "--quiet",
        "--set",
        "pytest=false",
    )
    _one_line_error(rc, err, str(mine), "no campaign output")
    assert _tree(mine) == {"notes.txt": b"my notes\n"}
    ft = tmp_path / "ft"
    rundir.create(ft, "finetune")
    (ft / "metrics.json").write_text("{}")
    before = _tree(ft)
    rc, _, err = _run(
        capsys,
        "bench",
        "--campaign",
        "env",
        "--dry-run",
        "--out",
        ft,
        "--quiet",
        "--set",
        "pytest=false",
    )
    _one_line_error(rc, err, str(ft), "finetune output, not a campaign's")
    assert _tree(ft) == before


def test_campaign_continues_an_unmarked_earlier_campaign(tmp_path, monkeypatch):
    """Campaign output written before markers (a PART.json naming its part) is continued and
    marked."""
    from tokendrop.lab.bench.campaign import run_parts

    _fake_runner(monkeypatch, _writes_files())
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text(json.dumps({"part": "bench", "ok": True, "files": []}))
    (out / "bench.md").write_text("# GPU campaign, part `bench`\n")
    run_parts(_campaign_cfg(), ["env"], out)
    assert rundir.read_marker(out)["kind"] == "campaign"
    # the other part's result is kept
    assert json.loads((out / "bench.json").read_text())["part"] == "bench"
    assert json.loads((out / "env.json").read_text())["complete"] is True


def test_rerunning_a_part_replaces_its_earlier_files(tmp_path, monkeypatch):
    from tokendrop.lab.bench.campaign import run_parts

    out = tmp_path / "out"
    _fake_runner(monkeypatch, _writes_files("env-a.txt", "sub/env-b.txt"))
    run_parts(_campaign_cfg(), ["env"], out)
    assert (out / "sub" / "env-b.txt").is_file()
    (out / "keep.txt").write_text("not the part's\n")
    _fake_runner(monkeypatch, _writes_files("env-c.txt"))
    logs = []
    run_parts(_campaign_cfg(), ["env"], out, log=logs.append)
    assert not (out / "env-a.txt").exists() and not (out / "sub").exists()  # no mix of the two runs
    assert (out / "env-c.txt").is_file() and (out / "keep.txt").read_text() == "not the part's\n"
    assert json.loads((out / "env.json").read_text())["files"] == ["env-c.txt"]
    assert any("replacing its earlier result" in x and "2 file(s) removed" in x for x in logs)


def test_an_interrupted_part_is_recorded_incomplete(tmp_path, monkeypatch, capsys):
    from tokendrop.lab.bench.campaign import IN_PROGRESS, run_parts

    def interrupted(cfg, out, budget, r, save, log):
        r.summary.append("phase 1 done")
        save()
        raise KeyboardInterrupt

    _fake_runner(monkeypatch, interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_parts(_campaign_cfg(), ["env", "bench"], out)
    d = json.loads((out / "env.json").read_text())
    assert d["complete"] is False and d["ok"] is False and d["summary"] == ["phase 1 done"]
    assert d["error"] == "interrupted (SIGINT) before the part finished"
    assert "result: **INCOMPLETE**" in (out / "env.md").read_text()
    assert not (out / "bench.json").exists()  # the next part never started
    assert not (out / IN_PROGRESS).exists() and not rundir.lock_path(out).exists()
    assert "holds what it finished (complete: false)" in capsys.readouterr().err
    rc, _, err = _run(capsys, "verify", out)
    assert rc == 2 and any(
        "part env did not finish" in e and str(out / "env.json") in e for e in _errors(err)
    )


def test_a_campaign_killed_during_a_part_is_reported_by_the_next_one(tmp_path, monkeypatch, capsys):
    from tokendrop.lab.bench.campaign import IN_PROGRESS, run_parts

    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", KILLED, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    d = json.loads((out / "env.json").read_text())
    assert d["complete"] is False and d["summary"] == ["phase 1 done"] and not d["error"]
    rec = json.loads((out / IN_PROGRESS).read_text())
    assert rec["part"] == "env" and isinstance(rec["pid"], int)
    rc, _, err = _run(capsys, "verify", out)
    assert rc == 2 and any("part env did not finish" in e for e in _errors(err))
    # the lock died with the process: the next campaign runs, says what it found, and finishes the
    # part
    _fake_runner(monkeypatch, _writes_files())
    (r,) = run_parts(_campaign_cfg(), ["env"], out)
    err = capsys.readouterr().err
    assert (
        "warning:" in err
        and "part env of an earlier campaign" in err
        and "was killed before it finished" in err
    )
    assert r.complete and json.loads((out / "env.json").read_text())["complete"] is True
    assert not (out / IN_PROGRESS).exists()
    rc, _, err = _run(capsys, "verify", out)
    assert rc == 0 and not _errors(err)


def test_campaign_part_files_are_written_atomically(tmp_path, monkeypatch):
    """write_part goes through rundir's atomic write: a failing write leaves the old PART.json
    whole."""
    from tokendrop.lab.bench.campaign.common import PartResult, write_part

    r = PartResult(part="env", dry_run=True, device="cpu")
    write_part(r, tmp_path, "t")
    before = (tmp_path / "env.json").read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    r.summary.append("more")
    with pytest.raises(OSError):
        write_part(r, tmp_path, "t")
    assert (tmp_path / "env.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.json", "env.md"]
