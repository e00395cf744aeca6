"""One run-directory API (tokendrop.runs.rundir).

Row 1 -- no deletion of what tokendrop did not write: a non-empty target is refused without
--overwrite; --overwrite replaces only a directory tokendrop marked as the same kind of output,
never a file, never a directory holding one of the command's inputs; no temp/.old-*/lock entry is
left in any outcome.  Row 3 -- one writer per directory (flock; a dead holder's lock is taken over).
Row 4 -- honest exit codes: SIGINT/SIGTERM -> checkpoint, 130/143; a second SIGINT stops at once
with the last checkpoint intact; Ctrl-C in prepare/finetune/evaluate: exit 130, no partial output.
Every test checks the exit code, the one-line message and the disk afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import ENV, wait_for_training
from toydata import write_corpus

from tokendrop.cli import main as cli_main
from tokendrop.runs import checkpoint as ckpt_mod, rundir
from tokendrop.runs.files import json_text


def tree(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` with its bytes (the state of the disk to compare before/after)."""
    return {
        str(p.relative_to(d)): p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()
    }


def leftovers(parent: Path) -> list[str]:
    return sorted(
        p.name
        for p in Path(parent).iterdir()
        if ".tmp-" in p.name or ".old-" in p.name or p.name.endswith(".tokendrop.lock")
    )


def one_error_line(err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_run):
    """A copy of the shared finished tiny token-dropping run (importance vector: inspect works)."""
    return shutil.copytree(tiny_run, tmp_path_factory.mktemp("rundir") / "run")


# ----------------------------------------------------------------------------------------------
# row 1: no deletion of what tokendrop did not write


def test_outputs_are_marked_and_export_refuses_a_foreign_nonempty_dir(run, tmp_path, capsys):
    assert rundir.read_marker(run)["kind"] == "run"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    (foreign / "sub").mkdir()
    (foreign / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = tree(foreign)
    for extra in ([], ["--overwrite"]):
        rc = cli_main(["export", str(run), str(foreign), *extra])
        err = capsys.readouterr().err
        assert rc == 2
        one_error_line(
            err, str(foreign), "--overwrite" if not extra else "not written by tokendrop"
        )
        assert tree(foreign) == before and leftovers(tmp_path) == []
    # a fresh export is marked; re-exporting needs --overwrite and then replaces only it
    out = tmp_path / "hf"
    assert cli_main(["export", str(run), str(out)]) == 0
    # the export's own output (a warning when the loss is above the unigram entropy)
    capsys.readouterr()
    assert rundir.read_marker(out)["kind"] == "export" and (out / "model.safetensors").is_file()
    rc = cli_main(["export", str(run), str(out)])
    assert rc == 2
    one_error_line(capsys.readouterr().err, "already exists", "--overwrite")
    (out / "stale.txt").write_text("from the first export")
    assert cli_main(["export", str(run), str(out), "--overwrite"]) == 0
    # the export's own output (a warning when the loss is above the unigram entropy)
    capsys.readouterr()
    assert not (out / "stale.txt").exists() and (out / "config.json").is_file()
    assert leftovers(tmp_path) == []


def test_export_and_inspect_never_replace_a_file(run, tmp_path, capsys):
    f = tmp_path / "target"
    f.write_text("precious")
    for argv in (
        ["export", str(run), str(f)],
        ["export", str(run), str(f), "--overwrite"],
        ["inspect", str(run), "--out", str(f)],
        ["inspect", str(run), "--out", str(f), "--overwrite"],
    ):
        rc = cli_main(argv)
        assert rc == 2, argv
        one_error_line(capsys.readouterr().err, str(f), "not a directory")
        assert f.is_file() and f.read_text() == "precious"
        # no .target.old-*, no temp, no lock
        assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_overwrite_never_deletes_an_input(run, tmp_path, capsys):
    # export --overwrite into the run itself (a marked dir of another kind, and the input)
    before = tree(run)
    rc = cli_main(["export", str(run), str(run), "--overwrite"])
    assert rc == 2
    one_error_line(capsys.readouterr().err, "holds tokendrop run output")
    # inspect --overwrite of an earlier inspect dir that holds the run it reads
    import shutil

    ins = tmp_path / "ins"
    assert cli_main(["inspect", str(run), "--out", str(ins), "--examples", "1"]) == 0
    capsys.readouterr()
    inner = ins / "run"
    shutil.copytree(run, inner)
    inside = tree(ins)
    rc = cli_main(["inspect", str(inner), "--out", str(ins), "--overwrite", "--examples", "1"])
    assert rc == 2
    one_error_line(capsys.readouterr().err, str(inner), "an input of this command")
    assert (
        tree(ins) == inside
        and tree(run) == before
        and leftovers(tmp_path) == []
        and leftovers(run) == []
    )


def test_prepare_overwrite_refuses_a_dir_holding_its_corpus_or_vocab(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", docs=60)
    out = tmp_path / "data"
    base = ["prepare", "--seq-len", "32", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli_main([*base, "--corpus", str(corpus), "--vocab-size", "120"]) == 0
    capsys.readouterr()
    assert rundir.read_marker(out)["kind"] == "prepared"
    # the user keeps the corpus inside the output
    (out / "corpus.txt").write_bytes(corpus.read_bytes())
    before = tree(out)
    rc = cli_main(
        [*base, "--corpus", str(out / "corpus.txt"), "--vocab-size", "120", "--overwrite"]
    )
    assert rc == 2
    one_error_line(capsys.readouterr().err, str(out / "corpus.txt"), "an input of this command")
    rc = cli_main(
        [*base, "--corpus", str(corpus), "--vocab", str(out / "vocab.txt"), "--overwrite"]
    )
    assert rc == 2
    one_error_line(capsys.readouterr().err, str(out / "vocab.txt"), "an input of this command")
    rc = cli_main([*base, "--corpus", str(corpus), "--vocab-size", "120"])  # no --overwrite at all
    assert rc == 2
    one_error_line(capsys.readouterr().err, "already exists", "--overwrite")
    assert tree(out) == before and leftovers(tmp_path) == []
    # the same kind, no input inside: replaced
    (out / "corpus.txt").unlink()
    assert cli_main([*base, "--corpus", str(corpus), "--vocab-size", "150", "--overwrite"]) == 0
    assert json.loads((out / "meta.json").read_text())["tokenizer"]["vocab_size_requested"] == 150
    assert leftovers(tmp_path) == []


def test_overwrite_replaces_only_a_marked_dir_of_the_same_kind(run, tiny_data, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", docs=60)
    argv = [
        "prepare",
        "--corpus",
        str(corpus),
        "--seq-len",
        "32",
        "--vocab-size",
        "120",
        "--workers",
        "1",
        "--quiet",
        "--overwrite",
        "--out",
    ]
    unmarked = tmp_path / "unmarked"
    unmarked.mkdir()
    # looks like prepared data, but tokendrop did not mark it
    (unmarked / "meta.json").write_text("{}")
    rc = cli_main([*argv, str(unmarked)])
    assert rc == 2
    one_error_line(capsys.readouterr().err, "not written by tokendrop")
    assert tree(unmarked) == {"meta.json": b"{}"}
    other = tmp_path / "export"
    assert cli_main(["export", str(run), str(other)]) == 0
    # the export's own output (a warning when the loss is above the unigram entropy)
    capsys.readouterr()
    before_other = tree(other)
    rc = cli_main([*argv, str(other)])
    assert rc == 2
    one_error_line(capsys.readouterr().err, "holds tokendrop export output, not prepared output")
    assert tree(other) == before_other
    # pretrain: an existing run is refused (--resume or --overwrite), --overwrite starts it over
    before = tree(run)
    data = ["--set", f'data.path="{tiny_data}"', "--set", "train.steps=1"]
    rc = cli_main(["pretrain", "--config", "tiny", "--out", str(run), "--quiet", *data])
    assert rc == 2
    one_error_line(capsys.readouterr().err, "already holds a run", "--resume", "--overwrite")
    rc = cli_main(
        ["pretrain", "--config", "tiny", "--out", str(unmarked), "--quiet", "--overwrite", *data]
    )
    assert rc == 2
    one_error_line(capsys.readouterr().err, "not written by tokendrop")
    rc = cli_main(
        ["pretrain", "--config", "tiny", "--out", str(other), "--quiet", "--overwrite", *data]
    )
    assert rc == 2
    one_error_line(capsys.readouterr().err, "holds tokendrop export output, not run output")
    assert (
        tree(run) == before
        and tree(unmarked) == {"meta.json": b"{}"}
        and tree(other) == before_other
    )
    assert leftovers(tmp_path) == [] and leftovers(run.parent) == []


def test_pretrain_overwrite_starts_a_marked_run_over(tiny_data, tmp_path, capsys):
    out = tmp_path / "r"
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(out),
        "--quiet",
        "--set",
        f'data.path="{tiny_data}"',
        "--set",
        "train.steps=2",
        "--set",
        "train.batch_size=8",
        "--set",
        "train.eval_batches=1",
        "--set",
        "train.threads=1",
    ]
    assert cli_main(args) == 0
    (out / "extra.txt").write_text("x")
    assert cli_main([*args, "--overwrite"]) == 0
    assert not (out / "extra.txt").exists() and ckpt_mod.latest(out).name == "step-00000002"
    assert sum(1 for ln in (out / "metrics.jsonl").read_text().splitlines() if '"start"' in ln) == 1
    assert leftovers(tmp_path) == []
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------
# row 3: one writer per directory


HOLD = rundir.HOLD_COMMAND  # another process holding write locks (tokendrop.runs.rundir.hold)


def _holder(*paths: Path) -> subprocess.Popen:
    """Another process holding the write locks of ``paths`` (locks are reentrant within one
    process)."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, *map(str, paths)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_locked_dir_refuses_a_second_writer_and_touches_nothing(run, tmp_path, capsys):
    before = tree(run)
    out = tmp_path / "data"
    p = _holder(run, out)
    try:
        rc = cli_main(["pretrain", "--resume", str(run), "--quiet", "--set", "train.steps=6"])
        assert rc == 2
        one_error_line(capsys.readouterr().err, f"{run} is in use by pid {p.pid}")
        assert tree(run) == before
        rc = cli_main(
            [
                "prepare",
                "--corpus",
                str(write_corpus(tmp_path / "c.txt", docs=40)),
                "--out",
                str(out),
                "--seq-len",
                "32",
                "--vocab-size",
                "120",
                "--workers",
                "1",
                "--quiet",
            ]
        )
        assert rc == 2
        one_error_line(capsys.readouterr().err, f"{out} is in use by pid {p.pid}")
        assert not out.exists()
    finally:
        p.terminate()
        p.wait(timeout=30)
    # released on SIGTERM
    assert not rundir.lock_path(run).exists() and not rundir.lock_path(out).exists()


def test_the_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    out = tmp_path / "data"
    p = _holder(out)
    try:
        corpus = write_corpus(tmp_path / "c.txt", docs=40)
        argv = [
            "prepare",
            "--corpus",
            str(corpus),
            "--out",
            str(out),
            "--seq-len",
            "32",
            "--vocab-size",
            "120",
            "--workers",
            "1",
            "--quiet",
        ]
        assert cli_main(argv) == 2
        one_error_line(capsys.readouterr().err, f"is in use by pid {p.pid}")
        p.kill()  # SIGKILL: no clean-up, the lock file stays behind
        p.wait(timeout=30)
        assert rundir.lock_path(out).exists()
        assert cli_main(argv) == 0
        err = capsys.readouterr().err
        assert f"note: {out}: the lock left by pid {p.pid}, which is no longer running, is" in err
        assert (out / "meta.json").is_file() and leftovers(tmp_path) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_lock_file_naming_a_dead_pid_is_taken_over_with_a_note(tmp_path, capsys):
    out = tmp_path / "run"
    dead = _dead_pid()
    rundir.lock_path(out).write_text(f"{dead}\n")  # left by a process killed while it held it
    with rundir.lock(out):
        assert rundir.lock_path(out).read_text() == f"{os.getpid()}\n"
    err = capsys.readouterr().err
    assert (
        err
        == f"note: {out}: the lock left by pid {dead}, which is no longer running, is taken over\n"
    )
    assert not rundir.lock_path(out).exists()
    with rundir.lock(out):  # a lock released cleanly leaves nothing to say
        pass
    assert capsys.readouterr().err == ""


# a process that takes the lock of argv[1], forks a child that outlives it, and is SIGKILLed
_FORKS = textwrap.dedent(
    """
    import multiprocessing as mp, os, signal, sys, time
    from tokendrop.runs import rundir
    def child():
        os.write(1, b"forked\\n")  # after the fork's own clean-up; one write, one line
        time.sleep(60)
    with rundir.lock(sys.argv[1]):
        child = mp.get_context("fork").Process(target=child, daemon=True)
        child.start()
        os.write(1, f"{child.pid}\\n".encode())
        time.sleep(60)
    """
)


def test_a_forked_child_never_holds_its_parents_lock(tmp_path, capsys):
    out = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-c", _FORKS, str(out)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    said = {p.stdout.readline().strip(), p.stdout.readline().strip()}  # either order
    assert "forked" in said, said
    child = int((said - {"forked"}).pop())
    try:
        with pytest.raises(rundir.RunDirError, match=f"in use by pid {p.pid}"):
            with rundir.lock(out):
                pass
        p.kill()  # the parent dies; its child lives on (a data worker would die with it)
        p.wait(timeout=30)
        os.kill(child, 0)  # still running
        with rundir.lock(out):
            pass
        assert (
            f"the lock left by pid {p.pid}, which is no longer running" in capsys.readouterr().err
        )
    finally:
        for pid in (p.pid, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_lock_held_by_what_a_dead_pid_left_names_the_leftover(tmp_path):
    out = tmp_path / "run"
    p = _holder(out)
    try:
        dead = _dead_pid()
        rundir.lock_path(out).write_text(f"{dead}\n")  # the pid that took it is gone
        with pytest.raises(rundir.RunDirError) as e:
            with rundir.lock(out):
                pass
        msg = str(e.value)
        assert f"left over from pid {dead}, which is no longer running" in msg
        if sys.platform.startswith("linux"):
            assert f"locked by pid {p.pid}," in msg and f"kill {p.pid}" in msg
    finally:
        p.kill()
        p.wait()


def _pretrain_proc(out: Path, data: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokendrop",
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(out),
            "--quiet",
            "--set",
            f'data.path="{data}"',
            "--set",
            "train.steps=100000",
            "--set",
            "train.eval_every=100000",
            "--set",
            "train.threads=1",
            *extra,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_pretrains_on_one_out_and_sigterm_exits_143(tiny_data, tmp_path):
    run = tmp_path / "run"
    first = _pretrain_proc(run, tiny_data, "--set", "train.ckpt_every=100000")
    try:
        wait_for_training(first, run)
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "tokendrop",
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(run),
                "--quiet",
                "--set",
                f'data.path="{tiny_data}"',
                "--set",
                "train.steps=3",
            ],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2
        one_error_line(second.stderr, f"{run} is in use by pid {first.pid}")
        assert first.poll() is None  # the first run goes on, untouched
        first.terminate()
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err
    assert "interrupted (checkpoint saved)" in out and "Traceback" not in err
    last = ckpt_mod.latest(run)
    assert last is not None and 0 < ckpt_mod.verify(last)["step"] < 100000
    assert leftovers(tmp_path) == [] and leftovers(run / "checkpoints") == []
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert (
        sum(1 for r in recs if r.get("event") == "start") == 1
        and recs[-1]["event"] == "interrupted"
    )


# ----------------------------------------------------------------------------------------------
# row 4: honest exit codes


SLOW_SAVE = textwrap.dedent("""
    import os, sys, time
    import safetensors.torch as st
    from tokendrop.cli import main
    real = st.save_file
    def slow_save(tensors, path, metadata=None):
        real(tensors, path)
        if os.path.exists(sys.argv[1]):  # the test asked for a slow checkpoint: hold it mid-write
            print("saving", flush=True)
            time.sleep(3600)  # held for an hour: only a prompt second SIGINT ends it in time
    st.save_file = slow_save
    raise SystemExit(main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_sigint_checkpoints_130_and_a_second_sigint_stops_at_once(tiny_data, tmp_path):
    run = tmp_path / "run"
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--quiet",
        "--set",
        f'data.path="{tiny_data}"',
        "--set",
        "train.steps=100000",
        "--set",
        "train.eval_every=100000",
        "--set",
        "train.threads=1",
    ]
    # one SIGINT: a checkpoint at the end of the step, exit 130
    p = subprocess.Popen(
        [sys.executable, "-m", "tokendrop", *args, "--set", "train.ckpt_every=100000"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_training(p, run)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "interrupted (checkpoint saved)" in out and "Traceback" not in err
    first = ckpt_mod.latest(run)
    assert first is not None and ckpt_mod.verify(first)["step"] > 0
    n0 = len((run / "metrics.jsonl").read_text().splitlines())
    # a second SIGINT while the next checkpoint is being written: stops at once, the last one intact
    flag = tmp_path / "slow"
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SLOW_SAVE,
            str(flag),
            *["pretrain", "--resume", str(run), "--quiet", "--set", "train.ckpt_every=100000"],
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 90
        while (
            time.time() < deadline and len((run / "metrics.jsonl").read_text().splitlines()) <= n0
        ):
            assert p.poll() is None, p.communicate()
            time.sleep(0.1)  # resumed and training (its first logged step)
        flag.write_text("")
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline().strip() == "saving"
        p.send_signal(signal.SIGINT)
        # at once, not after the hour-long save (no timing assert)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        "interrupted (SIGINT); nothing partial was kept"
    ]
    assert ckpt_mod.latest(run) == first and ckpt_mod.verify(first)
    assert leftovers(run / "checkpoints") == [] and leftovers(tmp_path) == []
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [first.name]


INTERRUPT_PREPARE = textwrap.dedent("""
    import importlib, os, signal, sys
    from tokendrop.cli import main
    prep = importlib.import_module("tokendrop.data.prepare")
    # Python's own SIGINT handling even where the parent ignores SIGINT (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    def stop(self):  # mid-write: shards written, no meta.json yet
        # handled before it returns (os.kill may reach another thread)
        signal.raise_signal(getattr(signal, sys.argv[1]))
        raise AssertionError("the signal did not interrupt")
    prep.PackedWriter.finish = stop
    raise SystemExit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupted_prepare_exits_128_plus_signal_and_keeps_only_its_work_units(
    tmp_path, sig, code
):
    corpus = write_corpus(tmp_path / "corpus.txt", docs=40)
    out = tmp_path / "data"
    args = [
        "prepare",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--seq-len",
        "32",
        "--vocab-size",
        "120",
        "--workers",
        "1",
        "--quiet",
    ]
    r = subprocess.run(
        [sys.executable, "-c", INTERRUPT_PREPARE, sig, *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == code, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        f"interrupted ({sig}); the finished work units are kept in {out}.partial: run the same "
        "command again to continue"
    ]
    # nothing that looks like output: only the resumable work dir, which the same command finishes
    # and removes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "data.partial"]
    r = subprocess.run(
        [sys.executable, "-m", "tokendrop", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "data"]


def test_ctrl_c_in_finetune_and_evaluate_exits_130_with_no_partial_output(
    run, tmp_path, monkeypatch, capsys
):
    from toydata import write_glue_examples, write_squad_examples

    from tokendrop.finetuning import fit
    from tokendrop.finetuning.tasks import TASKS

    task = TASKS["sst2"].write_examples(tmp_path / "task", n_train=16, n_dev=8)

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fit, "_train", ctrl_c)
    out = tmp_path / "ft"
    rc = cli_main(
        [
            "finetune",
            "--model",
            str(run),
            "--task",
            "sst2",
            "--data",
            str(task),
            "--out",
            str(out),
            "--set",
            "epochs=1",
            "--set",
            "threads=1",
        ]
    )
    assert rc == 130
    err = capsys.readouterr().err
    assert (
        err.strip().endswith("\ninterrupted (SIGINT); nothing partial was kept")
        and "Traceback" not in err
    )
    assert not out.exists() and leftovers(tmp_path) == []
    glue, squad = (
        write_glue_examples(tmp_path / "glue", n_train=8, n_dev=4),
        write_squad_examples(tmp_path / "squad", 8, 4),
    )
    ev = tmp_path / "eval"
    rc = cli_main(
        [
            "evaluate",
            "--models",
            str(run),
            "--suite",
            "suite-tiny",
            "--out",
            str(ev),
            "--set",
            f'glue_data="{glue}"',
            "--set",
            f'squad_data="{squad}"',
        ]
    )
    assert rc == 130
    err = capsys.readouterr().err
    assert (
        err.strip().endswith("\ninterrupted (SIGINT); nothing partial was kept")
        and "Traceback" not in err
    )
    assert not ev.exists() and leftovers(tmp_path) == []


def test_json_text_writes_what_the_package_records():
    """One JSON default for every file: dataclasses, paths, numpy/torch values; anything else as
    text."""
    import dataclasses as dc
    import json as _json

    import numpy as np
    import torch

    @dc.dataclass
    class Rec:
        a: int
        p: Path

    obj = {
        "rec": Rec(1, Path("/x/y")),
        "np": np.float32(0.5),
        "arr": np.arange(3),
        "t": torch.tensor([1.5, 2.0]),
        "t0": torch.tensor(3),
        "dtype": torch.float32,
        "naïve": "é",
    }
    text = json_text(obj)
    assert "naïve" in text  # UTF-8 kept
    assert _json.loads(text) == {
        "rec": {"a": 1, "p": "/x/y"},
        "np": 0.5,
        "arr": [0, 1, 2],
        "t": [1.5, 2.0],
        "t0": 3,
        "dtype": "torch.float32",
        "naïve": "é",
    }


def test_a_refusal_names_the_option_as_its_caller_spells_it(run, tmp_path, capsys):
    """The same refusal: ``--overwrite`` on the command line, ``overwrite=True`` from Python."""
    from tokendrop.errors import InteropError
    from tokendrop.models.source import export_hf
    from tokendrop.runs.rundir import RunDirError

    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("x")
    assert cli_main(["export", str(run), str(out)]) == 2
    one_error_line(
        capsys.readouterr().err, f"{out}: already exists and is not empty; pass --overwrite"
    )
    with pytest.raises(
        InteropError, match="already exists and is not empty; pass overwrite=True to"
    ):
        export_hf(run, out)
    with pytest.raises(
        RunDirError,
        match=r"^out_dir: .* already holds a run; use resume=True to "
        "continue it, overwrite=True to start it over",
    ):
        rundir.prepare_output(run, "run")
