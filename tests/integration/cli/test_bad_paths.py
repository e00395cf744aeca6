"""The command line driven with every class of bad path and bad file: each is one line ``error:
...`` on stderr naming the path (or field) and the fix, exit status 2, no traceback, nothing written
(docs/reliability.md, "bad paths").  The messages are listed in the lead's report."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import tokendrop.cli as cli
from tokendrop.cli import main
from tokendrop.finetuning.tasks import TASKS

PT = [
    "--quiet",
    "--set",
    "train.steps=2",
    "--set",
    "train.batch_size=8",
    "--set",
    "train.threads=1",
]


@pytest.fixture(scope="module")
def place(tmp_path_factory, tiny_data, tiny_run):
    """A directory with a regular file ``afile``, a sub-directory ``adir``, an SST-2 task dir and a
    copy of the tiny run (whose config.toml the cases may break)."""
    d = tmp_path_factory.mktemp("badpaths")
    (d / "afile").write_text("x\n")
    (d / "adir").mkdir()
    (d / "binary.toml").write_bytes(b"\x00\xff\xfe binary")
    TASKS["sst2"].write_examples(d / "sst2", n_train=16, n_dev=8)
    shutil.copytree(tiny_run, d / "run")
    broken = d / "broken-run"
    shutil.copytree(tiny_run, broken)
    with open(broken / "config.toml", "a") as f:
        f.write("\n[train\nsteps = = 3\n")  # edited by hand
    return d


def cases(d: Path, data: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """name -> (argv, what the one-line message must contain)."""
    dp = f'data.path="{data}"'
    f, D = str(d / "afile"), str(d / "adir")
    return {
        # missing
        "pretrain --config missing": (
            ["pretrain", "--config", str(d / "no.toml"), "--out", str(d / "o")],
            ("no.toml",),
        ),
        "pretrain --resume missing": (
            ["pretrain", "--resume", str(d / "nowhere")],
            ("nowhere", "no such run"),
        ),
        "prepare --corpus missing": (
            [
                "prepare",
                "--corpus",
                str(d / "no.txt"),
                "--out",
                str(d / "o"),
                "--seq-len",
                "32",
                "--vocab-size",
                "150",
            ],
            ("no.txt", "no such file"),
        ),
        "prepare --vocab missing": (
            [
                "prepare",
                "--corpus",
                f,
                "--out",
                str(d / "o"),
                "--seq-len",
                "32",
                "--vocab",
                str(d / "no-vocab.txt"),
            ],
            ("no-vocab.txt",),
        ),
        "export missing checkpoint": (["export", str(d / "nowhere"), str(d / "o")], ("nowhere",)),
        "finetune --model missing": (
            [
                "finetune",
                "--model",
                str(d / "nowhere"),
                "--task",
                "sst2",
                "--data",
                str(d / "sst2"),
                "--out",
                str(d / "o"),
            ],
            ("nowhere",),
        ),
        "finetune --data missing": (
            [
                "finetune",
                "--model",
                str(d / "run"),
                "--task",
                "sst2",
                "--data",
                str(d / "nodata"),
                "--out",
                str(d / "o"),
            ],
            ("nodata",),
        ),
        "evaluate --suite missing": (
            [
                "evaluate",
                "--models",
                str(d / "run"),
                "--suite",
                str(d / "no-suite.toml"),
                "--out",
                str(d / "o"),
            ],
            ("no-suite.toml",),
        ),
        "pretrain data.path missing": (
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(d / "o"),
                "--set",
                f'data.path="{d / "nodata"}"',
                *PT,
            ],
            ("nodata",),
        ),
        "inspect missing run": (["inspect", str(d / "nowhere")], ("nowhere",)),
        # a directory where a file is expected, a file where a directory is
        "pretrain --config a directory": (
            ["pretrain", "--config", D, "--out", str(d / "o")],
            ("adir",),
        ),
        "prepare --vocab a directory": (
            ["prepare", "--corpus", f, "--out", str(d / "o"), "--seq-len", "32", "--vocab", D],
            ("adir",),
        ),
        "export checkpoint a file": (["export", f, str(d / "o")], ("afile", "directory")),
        "finetune --data a file": (
            [
                "finetune",
                "--model",
                str(d / "run"),
                "--task",
                "sst2",
                "--data",
                f,
                "--out",
                str(d / "o"),
            ],
            ("afile",),
        ),
        "pretrain data.path a file": (
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(d / "o"),
                "--set",
                f'data.path="{f}"',
                *PT,
            ],
            ("afile",),
        ),
        "pretrain --resume a file": (["pretrain", "--resume", f], ("afile",)),
        # --out whose parent is a regular file
        **{
            f"{cmd} --out under a file": (argv, (f"{f}/o", "is a file, not a directory"))
            for cmd, argv in {
                "export": ["export", str(d / "run"), f"{f}/o"],
                "pretrain": ["pretrain", "--config", "tiny", "--out", f"{f}/o", "--set", dp, *PT],
                "prepare": [
                    "prepare",
                    "--corpus",
                    str(d / "sst2" / "train.tsv"),
                    "--out",
                    f"{f}/o",
                    "--seq-len",
                    "32",
                    "--vocab-size",
                    "150",
                ],
                "finetune": [
                    "finetune",
                    "--model",
                    str(d / "run"),
                    "--task",
                    "sst2",
                    "--data",
                    str(d / "sst2"),
                    "--out",
                    f"{f}/o",
                ],
                "evaluate": [
                    "evaluate",
                    "--models",
                    str(d / "run"),
                    "--suite",
                    "suite-tiny",
                    "--out",
                    f"{f}/o",
                ],
                "inspect": ["inspect", str(d / "run"), "--out", f"{f}/o"],
                "study": ["study", "--config", "study-tiny", "--out", f"{f}/o"],
            }.items()
        },
        # bad files
        "config not TOML": (
            ["pretrain", "--config", f, "--out", str(d / "o")],
            ("afile", "invalid TOML"),
        ),
        "config binary": (
            ["flops", "--config", str(d / "binary.toml")],
            ("binary.toml", "not UTF-8"),
        ),
        "config.toml broken by hand, --resume": (
            ["pretrain", "--resume", str(d / "broken-run"), *PT],
            ("broken-run/config.toml", "invalid TOML", "meta.json"),
        ),
        # sizes that cannot fit: refused before anything is allocated
        "model.hidden_size=1000000": (
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(d / "o"),
                "--set",
                dp,
                *PT,
                "--set",
                "model.hidden_size=1000000",
            ],
            ("too large", "GiB", "memory_check"),
        ),
        "model.num_layers=100000": (
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(d / "o"),
                "--set",
                dp,
                *PT,
                "--set",
                "model.num_layers=100000",
            ],
            ("too large", "GiB", "model.num_layers"),
        ),
    }


def test_every_bad_path_is_one_line_exit_2(place, tiny_data, capsys):
    before = sorted(os.listdir(place))
    failures = []
    for name, (argv, says) in cases(place, tiny_data).items():
        rc = main(argv)  # an exception escaping main is a traceback: the test fails there
        err = capsys.readouterr().err
        if os.environ.get("SHOW_MESSAGES"):
            with capsys.disabled():
                print(f"{name}\t{err.strip()}")
        lines = [ln for ln in err.splitlines() if ln.strip()]
        ok = (
            rc == 2
            and len(lines) == 1
            and lines[0].startswith("error: ")
            and "Traceback" not in err
        )
        missing = [s for s in says if s not in err]
        if not ok or missing:
            failures.append(
                f"{name}: exit {rc}, {len(lines)} line(s), missing {missing}: {err.strip()[:300]}"
            )
        assert sorted(os.listdir(place)) == before, (
            f"{name} wrote {set(os.listdir(place)) - set(before)}"
        )
    assert not failures, "\n".join(failures)
    # left as it was
    assert (place / "broken-run" / "config.toml").read_text().endswith("steps = = 3\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes regardless of permissions")
def test_unreadable_and_unwritable_paths(place, tiny_data, capsys):
    locked = place / "locked"
    locked.mkdir()
    (locked / "corpus.txt").write_text("some text\n")
    os.chmod(locked / "corpus.txt", 0)
    os.chmod(locked, 0o500)
    try:
        for argv in (
            [
                "prepare",
                "--corpus",
                str(locked / "corpus.txt"),
                "--out",
                str(place / "o"),
                "--seq-len",
                "32",
                "--vocab-size",
                "150",
            ],
            ["export", str(place / "run"), str(locked / "o")],
        ):
            rc = main(argv)
            err = capsys.readouterr().err
            assert (
                rc == 2
                and len(err.splitlines()) == 1
                and "Traceback" not in err
                and str(locked) in err
            ), err
    finally:
        os.chmod(locked, 0o700)


def test_a_path_error_deep_inside_a_command_is_one_line(monkeypatch, capsys):
    """An OSError on a path that escapes a command (permissions, a file where a directory must be,
    a link loop ...) is reported as that path, its reason and a hint, exit 2 -- what root cannot
    provoke for real above."""
    for exc, hint in (
        (PermissionError(13, "Permission denied", "/data/corpus.txt"), "check its permissions"),
        (
            NotADirectoryError(20, "Not a directory", "/data/file/x"),
            "a part of the path is a file, not a directory",
        ),
        (
            IsADirectoryError(21, "Is a directory", "/data/dir"),
            "a directory where a file was expected",
        ),
    ):

        def boom(a, exc=exc):
            raise exc

        monkeypatch.setattr(cli, "cmd_verify", boom)
        rc = main(["verify", "x"])
        err = capsys.readouterr().err
        assert rc == 2 and err == f"error: {exc.filename}: {exc.strerror} ({hint})\n", err

    def gone(a):
        raise FileNotFoundError(2, "No such file or directory", "/data/gone.txt")

    monkeypatch.setattr(cli, "cmd_verify", gone)
    assert (
        main(["verify", "x"]) == 2
        and capsys.readouterr().err == "error: /data/gone.txt: No such file or directory\n"
    )


def test_out_of_memory_is_one_line(monkeypatch, capsys):
    def boom(a):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you "
            "tried to allocate 40000000000 bytes."
        )

    monkeypatch.setattr(cli, "cmd_verify", boom)
    rc = main(["verify", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: out of memory (") and len(err.splitlines()) == 1
