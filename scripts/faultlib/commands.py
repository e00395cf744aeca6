"""The commands' pieces: the CLI as a subprocess (``python -m tokendrop``), the tiny settings every
case's command carries, and the {C} (the case's directory) and {B} (the base) placeholders."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository: this file is scripts/faultlib/...


SRC = REPO / "src"


FIXTURES = SRC.parent / "tests" / "fixtures"  # the tests' generated corpora and vocabularies


PY = sys.executable


ENV = dict(
    os.environ,
    PYTHONUNBUFFERED="1",
    OMP_NUM_THREADS="1",
    TOKENIZERS_PARALLELISM="false",
    PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
)
ENV.pop("PYTHONWARNINGS", None)


PT = [
    "--quiet",
    "--set",
    "train.steps=2",
    "--set",
    "train.batch_size=8",
    "--set",
    "train.eval_batches=1",
    "--set",
    "train.eval_every=2",
    "--set",
    "train.ckpt_every=2",
    "--set",
    "train.log_every=1",
    "--set",
    "train.threads=1",
]


FT = [
    "--set",
    "epochs=1",
    "--set",
    "threads=1",
    "--set",
    "batch_size=8",
    "--set",
    "max_train_examples=16",
    "--set",
    "max_eval_examples=8",
    "--set",
    "log_every=0",
    "--set",
    "device=cpu",
]


EV = [
    "--suite",
    "suite-tiny",
    "--set",
    "tasks=['sst2']",
    "--set",
    "glue_lrs=[1e-3]",
    "--set",
    "glue_epochs=[1.0]",
    "--set",
    'glue_data="{C}/glue"',
    "--set",
    'squad_data="{C}/squad"',
    "--set",
    "glue.max_train_examples=16",
    "--set",
    "glue.max_eval_examples=8",
]


def pretrain(out: str, data: str = "{C}/data", *extra: str) -> list[str]:
    return [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        out,
        "--set",
        f'data.path="{data}"',
        *PT,
        *extra,
    ]


def finetune(
    model: str, out: str, *extra: str, task: str = "sst2", data: str = "{C}/sst2"
) -> list[str]:
    return ["finetune", "--model", model, "--task", task, "--data", data, "--out", out, *FT, *extra]


def prepare(corpus: str, out: str, *extra: str) -> list[str]:
    return [
        "prepare",
        "--corpus",
        corpus,
        "--out",
        out,
        "--seq-len",
        "64",
        "--workers",
        "1",
        "--quiet",
        *extra,
    ]


CKPT = "{C}/run/checkpoints/step-00000004"  # the base run's last checkpoint


CAMPAIGN = ["bench", "--campaign", "env", "--dry-run", "--quiet", "--set", "pytest=false"]


def cli(argv: list[str], cwd: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [PY, "-m", "tokendrop", *argv], cwd=cwd, env=ENV, capture_output=True, text=True, **kw
    )
    if check and r.returncode != 0:
        raise RuntimeError(
            f"building the base failed: tokendrop {shlex.join(argv)}\n{r.stderr[-3000:]}"
        )
    return r


def run_cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return cli(argv, cwd, check=True)


def expand(s: str, c: Path, base: Path) -> str:
    return s.replace("{C}", str(c)).replace("{B}", str(base))


def shorten(s: str, c: Path, base: Path) -> str:
    return s.replace(str(c), "CASE").replace(str(base), "BASE").replace(str(REPO), "REPO")
