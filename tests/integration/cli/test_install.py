"""The package as a user installs it: the wheel builds, installs into a fresh virtual environment,
``tokendrop --version`` answers, and a 2-step ``pretrain`` finds its preset (configs/ shipped as
data files) on generated data.

The fresh venv gets tokendrop only from the wheel (``--no-deps``); its dependencies (torch,
tokenizers, ...) come from the environment running the tests, whose site-packages directory is
appended to the new venv's path by a ``.pth`` line (not processed as a site dir: the editable
install of this checkout there stays invisible).  So this checks the wheel's own contents and entry
point, not the resolution of its dependencies from an index."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow  # builds a wheel and a venv: ~1-2 min
def test_wheel_installs_and_runs(tmp_path):
    pytest.importorskip("build")
    # build from a copy: nothing (build/, *.egg-info) is written into the checkout
    src = tmp_path / "src-copy"
    # the checkout's own outputs (top level only)
    top = {
        ".git",
        ".venv",
        "runs",
        ".cache",
        "build",
        "dist",
    }
    shutil.copytree(
        ROOT,
        src,
        ignore=lambda d, names: [
            n
            for n in names
            if (Path(d) == ROOT and n in top)
            or n.endswith(".egg-info")
            or n in ("__pycache__", ".pytest_cache")
        ],
    )
    _run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp_path / "dist"),
            str(src),
        ]
    )
    (wheel,) = (tmp_path / "dist").glob("tokendrop-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    purelib = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    ours = [
        p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()
    ]
    (purelib / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOKENDROP_CONFIG_DIR")}
    env["OMP_NUM_THREADS"] = "1"
    where = _run(
        [
            str(py),
            "-c",
            "import tokendrop, tokendrop.config as c; print(tokendrop.__file__); "
            "print(c.config_dir())",
        ],
        env=env,
        cwd=tmp_path,
    ).stdout.split()
    assert where[0].startswith(str(venv)), where  # the wheel's copy, not this checkout
    # presets installed as data files
    assert where[1] == str(venv / "share" / "tokendrop" / "configs"), where
    from tokendrop import __version__

    exe = venv / "bin" / "tokendrop"
    assert (
        _run([str(exe), "--version"], env=env, cwd=tmp_path).stdout.strip()
        == f"tokendrop {__version__}"
    )
    _run(
        [
            str(py),
            "-c",
            "from tokendrop.finetuning.task_corpus import write_task_corpus; "
            "write_task_corpus('corpus.txt', num_docs=120)",
        ],
        env=env,
        cwd=tmp_path,
    )
    _run(
        [
            str(exe),
            "prepare",
            "--corpus",
            "corpus.txt",
            "--out",
            "data",
            "--seq-len",
            "64",
            "--vocab-size",
            "200",
            "--workers",
            "1",
            "--quiet",
        ],
        env=env,
        cwd=tmp_path,
    )
    r = _run(
        [
            str(exe),
            "pretrain",
            "--config",
            "tiny",
            "--out",
            "run",
            "--set",
            "data.path=data",
            "--set",
            "train.steps=2",
            "--set",
            "train.batch_size=4",
            "--set",
            "train.eval_batches=1",
            "--quiet",
        ],
        env=env,
        cwd=tmp_path,
    )
    # --quiet: the result line only
    assert r.stdout.startswith("finished: 2 steps") and r.stderr == ""
    assert "tokendrop pretrain: new run in run" in (tmp_path / "run" / "log.txt").read_text()
