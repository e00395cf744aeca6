"""Atomic directories: partial output never takes the target's place; a writer killed hard leaves a
temp dir that the next write to the same target removes (and only that one)."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from toydata import write_corpus

from tokendrop.runs.files import atomic_directory, remove_stale_temp_dirs

SRC = Path(__file__).resolve().parents[3] / "src"


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def temp_with_writer(parent: Path, name: str, host: str, pid: int) -> Path:
    d = parent / name
    d.mkdir()
    (d / "partial.bin").write_bytes(b"x" * 10)
    (d / ".tokendrop-writer").write_text(f"{host} {pid}\n")
    return d


def test_atomic_directory_publishes_without_writer_record(tmp_path):
    with atomic_directory(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("a")
        assert (tmp / ".tokendrop-writer").read_text().split() == [
            socket.gethostname(),
            str(os.getpid()),
        ]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "out") as tmp:
        (tmp / "b.txt").write_text("b")
        raise RuntimeError("writer failed")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt"]  # old result intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_only_temp_dirs_of_dead_local_writers_are_removed(tmp_path):
    host = socket.gethostname()
    dead = temp_with_writer(tmp_path, ".out.tmp-dead", host, dead_pid())
    live = temp_with_writer(tmp_path, ".out.tmp-live", host, os.getpid())
    remote = temp_with_writer(tmp_path, ".out.tmp-remote", host + "-elsewhere", dead_pid())
    unknown = tmp_path / ".out.tmp-norecord"
    unknown.mkdir()
    other_target = temp_with_writer(tmp_path, ".other.tmp-dead", host, dead_pid())
    assert remove_stale_temp_dirs(tmp_path, ".out.tmp-") == [dead]
    assert (
        not dead.exists()
        and live.exists()
        and remote.exists()
        and unknown.exists()
        and other_target.exists()
    )
    # a new write sweeps its own target's leftovers
    with atomic_directory(tmp_path / "other") as tmp:
        assert not other_target.exists() and tmp.is_dir()
    assert (tmp_path / "other").is_dir()


def test_prepare_killed_hard_is_cleaned_by_the_next_prepare(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", docs=40)
    out = tmp_path / "data"
    script = textwrap.dedent(f"""
        import importlib, os, signal, sys
        sys.path.insert(0, {str(SRC)!r})
        from tokendrop.data import prepare
        prepare_mod = importlib.import_module("tokendrop.data.prepare")
        def die(self):
            os.kill(os.getpid(), signal.SIGKILL)  # mid-write: shards written, no meta.json
        prepare_mod.PackedWriter.finish = die
        prepare([{str(corpus)!r}], {str(out)!r}, 32, vocab_size=120, workers=1, progress=False)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == -9, r.stderr
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("data.tmp-")]
    assert len(left) == 1 and not out.exists()
    from tokendrop.data import PreparedData, prepare

    prepare([corpus], out, 32, vocab_size=120, workers=1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "data"]
    assert not (out / ".tokendrop-writer").exists()
    PreparedData.open(out, verify=True)
