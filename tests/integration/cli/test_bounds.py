"""Counts beyond what a machine holds, integers no setting holds, and a torchrun environment that
cannot form a process group: each one line ``error: ...`` naming the field or variable, exit 2,
before anything runs (no segfault, no traceback, no wait without end)."""

from __future__ import annotations

import socket

import pytest

import tokendrop.config.checks as checks
from tokendrop.cli import main
from tokendrop.finetuning.tasks import TASKS

DIST_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for var in (*DIST_VARS, "TORCHELASTIC_RESTART_COUNT", "TOKENDROP_RENDEZVOUS_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _pretrain(data, out, *sets):
    argv = ["pretrain", "--config", "tiny", "--out", str(out), "--quiet"]
    for s in (f'data.path="{data}"', "train.steps=2", "train.batch_size=8", *sets):
        argv += ["--set", s]
    return argv


def _one_line(capsys, rc, *says):
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    for s in says:
        assert s in lines[0], (s, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "setting,says",
    [
        ("train.threads=100000", ("train.threads", "100000 threads", "at most 1024", "CPUs")),
        ("train.threads=1e30", ("train.threads", "expected an integer", "1e+30")),
        ("data.num_workers=1e30", ("data.num_workers", "expected an integer")),
        ("data.num_workers=100000", ("data.num_workers", "at most 256")),
        ("train.steps=99999999999999999999", ("train.steps", "beyond the largest integer")),
    ],
)
def test_counts_no_machine_holds_are_one_line(setting, says, tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    _one_line(capsys, main(_pretrain(tiny_data, out, setting)), *says)
    assert not out.exists()


def test_threads_beyond_this_machine_are_one_line(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(checks, "machine_cpus", lambda: 2)
    out = tmp_path / "run"
    rc = main(_pretrain(tiny_data, out, "train.threads=9"))
    _one_line(capsys, rc, "train.threads: 9 threads on a machine with 2 CPUs (at most 8")
    rc = main(_pretrain(tiny_data, out, "data.num_workers=9"))
    _one_line(capsys, rc, "data.num_workers: 9 worker processes on a machine with 2 CPUs")
    assert not out.exists()


def test_finetune_threads_beyond_any_machine(tmp_path, tiny_run, capsys):
    TASKS["sst2"].write_examples(tmp_path / "sst2", n_train=8, n_dev=4)
    argv = ["finetune", "--model", str(tiny_run), "--task", "sst2", "--data"]
    argv += [str(tmp_path / "sst2"), "--out", str(tmp_path / "ft"), "--set", "threads=100000"]
    _one_line(capsys, main(argv), "threads", "at most 1024")
    assert not (tmp_path / "ft").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "env,says",
    [
        ({"WORLD_SIZE": "abc"}, ("WORLD_SIZE='abc'", "expected a non-negative integer")),
        ({"WORLD_SIZE": "2"}, ("WORLD_SIZE=2 without RANK, MASTER_ADDR, MASTER_PORT", "torchrun")),
        (
            {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
            ("RANK=2: expected below WORLD_SIZE=2",),
        ),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, ("1-65535",)),
        ({"WORLD_SIZE": "1", "LOCAL_RANK": "-1"}, ("LOCAL_RANK='-1'",)),
    ],
)
def test_a_broken_torchrun_environment_is_one_line(
    env, says, clean_env, tiny_data, tmp_path, capsys
):
    for k, v in env.items():
        clean_env.setenv(k, v)
    out = tmp_path / "run"
    _one_line(capsys, main(_pretrain(tiny_data, out)), *says)
    assert not out.exists()


def test_a_leftover_torchrun_environment_ends_in_one_line(clean_env, tiny_data, tmp_path, capsys):
    """WORLD_SIZE=2 RANK=0 with no second rank: the rendezvous gives up after its timeout."""
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env |= {"MASTER_PORT": str(_free_port()), "TOKENDROP_RENDEZVOUS_TIMEOUT": "1"}
    for k, v in env.items():
        clean_env.setenv(k, v)
    out = tmp_path / "run"
    line = _one_line(
        capsys, main(_pretrain(tiny_data, out)), "did not meet its peers", "within 1 s"
    )
    assert "TOKENDROP_RENDEZVOUS_TIMEOUT" in line and "unset WORLD_SIZE" in line
    assert not out.exists()
