#!/usr/bin/env python
"""The fault matrix (and the bad `--init` sources): every bad input and fault, run as a
subprocess of the real CLI (``python -m tokendrop ...``), each in its own directory, with the disk
compared before and after.  Writes ``docs/reliability.md`` (and ``docs/reliability.json``).

    python scripts/fault_matrix.py                      # every case, docs/reliability.{md,json}
    python scripts/fault_matrix.py --only 'lock|sigint' --jobs 2 --md /tmp/r.md --json ''

A case passes when the exit code is the expected one, stderr holds no traceback, an error is one
line of stderr (naming what the case says it must name), and the disk is intact: every watched
file or directory has the same names, sizes and sha256 as before, what must not exist does not, no
temp / ``.old-*`` / lock entry is left anywhere in the case's directory, and the case's own check
(e.g. "no step twice in metrics.jsonl") holds.

Everything is generated (``tests/fixtures/toydata.py``, ``tokendrop.lab.toydata``): one prepared
directory, one tiny pretraining run, its export and a few variants are built once under the work
directory ("BASE") and copied into each case's directory ("CASE").  Commands and messages in the
report show those two as BASE and CASE."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendrop.config import NAMED_SIZES, SIZE_TAKES
from tokendrop.errors import TokendropError
from tokendrop.lab.machine import cpu_model, loadavg
from tokendrop.lab.sizes import LAB_NAMED_SIZES
from tokendrop.runs.files import read_json
from tokendrop.runs.metrics import scan_lines
from tokendrop.runs.rundir import HOLD_COMMAND

REPO = Path(__file__).resolve().parents[1]
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
LEFTOVER = re.compile(r"\.tmp-|\.old-|\.tokendrop\.lock$|\.tokendrop-writer$")

# ----------------------------------------------------------------------------------------------
# command pieces

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

# ----------------------------------------------------------------------------------------------
# the base: built once, copied into the cases


def cli(argv: list[str], cwd: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [PY, "-m", "tokendrop", *argv], cwd=cwd, env=ENV, capture_output=True, text=True, **kw
    )
    if check and r.returncode != 0:
        raise RuntimeError(
            f"building the base failed: tokendrop {shlex.join(argv)}\n{r.stderr[-3000:]}"
        )
    return r


# what each built base item needs first (the generated files are always written: they are cheap)
BASE_DEPS = {
    "data": (),
    "data-other": (),
    "run": ("data",),
    "hf": ("run",),
    "relrun": ("data",),
    "run-moved": ("data",),
    "data-moved": ("run-moved",),
}
GENERATED = ("corpus.txt", "other-vocab.txt", "sst2", "glue", "squad")


def base_items(selected: list[Case]) -> set[str]:
    """The built base items the selected cases use (copied in, or named as {B}/ITEM), with their
    deps."""
    want = {n for c in selected for n in c.needs}
    want |= {
        m.group(1) for c in selected for a in c.argv for m in re.finditer(r"\{B\}/([\w.-]+)", a)
    }
    todo, out = [w for w in want if w in BASE_DEPS], set()
    while todo:
        item = todo.pop()
        if item not in out:
            out.add(item)
            todo.extend(BASE_DEPS[item])
    return out


def build_base(base: Path, items: set[str], log: Callable[[str], None]) -> None:
    sys.path[:0] = [str(SRC), str(FIXTURES)]
    import toydata as F

    from tokendrop.lab import toydata as T

    base.mkdir(parents=True, exist_ok=True)
    log(f"building the base in {base}: {', '.join(sorted(items)) or 'generated files only'}")
    F.write_corpus(base / "corpus.txt", docs=150)
    F.write_toy_vocab(base / "other-vocab.txt")
    T.write_keyword_sentiment(base / "sst2", n_train=32, n_dev=16)
    T.write_toy_glue(base / "glue", n_train=16, n_dev=8)
    T.write_toy_squad(base / "squad", n_train=16, n_dev=8)
    if "data" in items:
        cli(
            prepare(
                str(base / "corpus.txt"),
                str(base / "data"),
                "--vocab-size",
                "150",
                "--eval-fraction",
                "0.1",
            ),
            base,
        )
    if "data-other" in items:
        cli(
            prepare(
                str(base / "corpus.txt"),
                str(base / "data-other"),
                "--vocab",
                str(base / "other-vocab.txt"),
                "--eval-fraction",
                "0.1",
            ),
            base,
        )
    # 4 steps, checkpoints at 2 and 4, token dropping (an importance vector for inspect)
    if "run" in items:
        cli(
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(base / "run"),
                "--set",
                f'data.path="{base / "data"}"',
                *PT,
                "--set",
                "train.steps=4",
                "--set",
                "drop.method=cumulative",
            ],
            base,
        )
    if "hf" in items:
        cli(["export", str(base / "run"), str(base / "hf")], base)
    if "relrun" in items:  # a run whose data.path is relative ("data", from BASE): row 5
        cli(
            ["pretrain", "--config", "tiny", "--out", "relrun", "--set", 'data.path="data"', *PT],
            base,
        )
    # a run whose data moved away after it was made: data-gone -> data-moved
    if "run-moved" in items:
        shutil.copytree(base / "data", base / "data-gone")
        cli(
            [
                "pretrain",
                "--config",
                "tiny",
                "--out",
                str(base / "run-moved"),
                "--set",
                f'data.path="{base / "data-gone"}"',
                *PT,
            ],
            base,
        )
        (base / "data-gone").rename(base / "data-moved")
    log("base built")


# ----------------------------------------------------------------------------------------------
# helpers for setups and checks


def sha256(p: Path) -> str:
    from tokendrop.runs.checkpoint import sha256_file  # the one file-hash helper

    return sha256_file(p)


def snapshot(root: Path) -> dict[str, Any]:
    """name -> (size, sha256) of every file (and "dir" of every directory) under ``root``."""
    if root.is_symlink() or root.is_file():
        return {".": (root.stat().st_size, sha256(root))}
    if not root.exists():
        return {".": "absent"}
    out: dict[str, Any] = {".": "dir"}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (
            "dir"
            if p.is_dir() and not p.is_symlink()
            else (p.lstat().st_size, sha256(p) if p.is_file() else "link")
        )
    return out


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if LEFTOVER.search(p.name))


def flip_byte(p: Path, offset: int = -100) -> None:
    b = bytearray(p.read_bytes())
    b[offset] ^= 0xFF
    p.write_bytes(bytes(b))


def truncate(p: Path, frac: float = 0.5) -> None:
    with open(p, "r+b") as f:
        f.truncate(int(p.stat().st_size * frac))


def edit_json(p: Path, fn: Callable[[dict], Any]) -> None:
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d, indent=1))


def metrics(run: Path) -> list[dict]:
    """The records of run/metrics.jsonl that parse (tokendrop.runs.metrics.scan_lines, the log's one
    parser; torn or bad lines are left out here: the checks look at steps)."""
    p = run / "metrics.jsonl"
    return [rec for _, rec in scan_lines(p.read_text())[0]] if p.is_file() else []


def check_no_duplicate_steps(run: Path) -> str | None:
    recs = metrics(run)
    _, bad, torn = scan_lines((run / "metrics.jsonl").read_text())
    if bad or torn:
        return f"metrics.jsonl keeps a torn or bad line (line {bad[0][0] if bad else 'last'})"
    for key in ("loss", "eval_loss"):
        steps = [r["step"] for r in recs if key in r]
        dup = sorted({s for s in steps if steps.count(s) > 1})
        if dup:
            return f"metrics.jsonl has {key} rows twice for steps {dup}"
    return None


def ckpt_ok(ck: Path) -> bool:
    """A checkpoint dir whose files match its meta.json's sizes and sha256 (checked here, not by
    tokendrop)."""
    try:
        meta = json.loads((ck / "meta.json").read_text())
        return bool(meta["files"]) and all(
            (ck / n).stat().st_size == i["bytes"] and sha256(ck / n) == i["sha256"]
            for n, i in meta["files"].items()
        )
    except (OSError, ValueError, KeyError):
        return False


def checkpoints(run: Path) -> list[Path]:
    d = run / "checkpoints"
    return sorted(p for p in d.iterdir() if p.name.startswith("step-")) if d.is_dir() else []


def load_tensors(p: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(p))


def save_tensors(tensors: dict, p: Path) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(p))


def shard_path(data: Path, split: str = "train") -> Path:
    return data / json.loads((data / "meta.json").read_text())["splits"][split]["file"]


def set_shard_hash(data: Path, split: str = "train") -> None:
    """Record the shard's current sha256 (and size-derived counts unchanged) in meta.json: an edit
    that only a content check (not the hash) can find."""
    f = shard_path(data, split)

    def fn(d):
        info = d["splits"][split]
        for k in ("sha256", "file_sha256"):
            if k in info:
                info[k] = sha256(f)

    edit_json(data / "meta.json", fn)


def run_cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return cli(argv, cwd, check=True)


# ----------------------------------------------------------------------------------------------
# the cases


@dataclass
class Case:
    name: str
    # the category: outputs, corrupt files, locks, signals, moved runs, reuse, logs, bad input, ...
    row: str
    argv: list[str]  # after `python -m tokendrop`; {C} = the case dir, {B} = the base dir
    expect: str  # what should happen, in words (the report's "expected" column)
    rc: int | tuple[int, ...] = 2
    needs: tuple[str, ...] = ()  # base items copied into the case dir
    setup: Callable[[Path], None] | None = None
    watch: tuple[str, ...] = ()  # paths (relative to the case dir) that must be unchanged
    absent: tuple[str, ...] = ()  # paths that must not exist afterwards
    says: tuple[str, ...] = ()  # substrings the (one-line) message must contain ({C} expands)
    check: Callable[[Path, Outcome], str | None] | None = None  # -> why it fails, or None
    drive: Callable[[subprocess.Popen, Path], None] | None = None  # signals, while it runs
    gate: str = ""  # the test gate (tokendrop.runs.gate) the command waits at, for ``drive``
    # paths another process holds the write lock of while the command runs
    hold: tuple[str, ...] = ()
    cwd: str = ""  # relative to the case dir
    fsize: int = 0  # RLIMIT_FSIZE in bytes (a full disk, as far as one file is concerned)
    # the case dir is a read-only mount for the command (unshare -m: root, or user namespaces)
    read_only: bool = False
    one_line: bool | None = None  # default: required for non-zero exits
    timeout: int = 240
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # set for the command (over ENV)


@dataclass
class Outcome:
    rc: int | str
    stdout: str
    stderr: str
    seconds: float


# tokendrop.runs.gate: the command waits at a named point (test-only)
GATE_ENV = "TOKENDROP_TEST_GATE"
DRIVE_NOTES: dict[Path, str] = {}  # case dir -> why its driver could not do its part


def gate_file(c: Path) -> Path:
    """The file a case's command creates when it reaches its gate (beside the case dir, not in
    it)."""
    return c.parent / f"{c.name}.gate"


def gated_env(case: Case, c: Path) -> dict[str, str]:
    env = dict(ENV, **case.env)
    return dict(env, **{GATE_ENV: f"{case.gate}={gate_file(c)}"}) if case.gate else env


def at_gate(sig: int, limit: float = 600):
    """A driver: wait until the command is waiting at its gate (``Case.gate``: provably mid-work,
    whatever the machine's speed), send ``sig``, release the gate.  A command that ends without
    reaching its gate fails the case (noted), instead of being signalled at a moment it never
    had."""

    def drive(p: subprocess.Popen, c: Path) -> None:
        g = gate_file(c)
        t0 = time.time()
        while time.time() - t0 < limit and p.poll() is None and not g.exists():
            time.sleep(0.02)
        if not g.exists():
            DRIVE_NOTES[c] = (
                "the command ended (or took over the time limit) before it reached its gate"
            )
            return
        p.send_signal(sig)
        g.unlink()

    return drive


def write_corpus(path: Path, docs: int) -> None:
    sys.path[:0] = [str(SRC), str(FIXTURES)]
    from toydata import write_corpus as wc

    wc(path, docs=docs)


def hf_config(c: Path, **changes: Any) -> None:
    def fn(d):
        d.update(changes)

    edit_json(c / "hf" / "config.json", fn)


def pickle_only(c: Path) -> None:
    """hf/ with pytorch_model.bin holding a pickled object that weights_only=True refuses, no
    safetensors."""
    hf = c / "hf"
    (hf / "model.safetensors").unlink()
    code = (
        "import datetime, sys, torch; torch.save({'bert.embeddings.word_embeddings.weight': "
        "torch.zeros(2, 2), 'when': datetime.date(2020, 1, 1)}, sys.argv[1])"
    )
    subprocess.run([PY, "-c", code, str(hf / "pytorch_model.bin")], check=True, env=ENV)


def mismatched_shapes(c: Path) -> None:
    p = c / "hf" / "model.safetensors"
    t = load_tensors(p)
    key = next(k for k in t if k.endswith("intermediate.dense.weight"))
    t[key] = t[key][: t[key].shape[0] // 2].copy()
    save_tensors(t, p)


def short_positions(c: Path) -> None:
    """hf/ whose model has max_position_embeddings=32 (consistent weights) < the data's T=64."""
    p = c / "hf" / "model.safetensors"
    t = load_tensors(p)
    key = next(k for k in t if k.endswith("position_embeddings.weight"))
    t[key] = t[key][:32].copy()
    for k in [k for k in t if k.endswith("position_ids")]:
        t[k] = t[k][..., :32].copy()
    save_tensors(t, p)
    hf_config(c, max_position_embeddings=32)


def eval_loss_not_zero(c: Path, o: Outcome) -> str | None:
    """Row 7: an empty held-out split is an error (one line), or evaluation is off with a warning;
    never an eval loss of 0.0."""
    if o.rc == 2:
        return None if len(_lines(o.stderr)) == 1 else "error is not one line"
    if o.rc != 0:
        return f"exit {o.rc}"
    zero = [
        r["step"] for r in metrics(c / "r") if r.get("eval_loss") == 0.0 or r.get("eval_slots") == 0
    ]
    if zero:
        return f"reports eval loss 0.0 (an empty held-out split) at steps {zero}"
    if not _warns_about_eval(o.stderr):
        return "no warning that evaluation is off"
    return None


def _warns_about_eval(err: str) -> bool:
    return any(
        "warn" in ln.lower() and ("eval" in ln.lower() or "held-out" in ln.lower())
        for ln in _lines(err)
    )


def prepare_empty_eval(c: Path, o: Outcome) -> str | None:
    if o.rc == 2:
        return None if len(_lines(o.stderr)) == 1 else "error is not one line"
    if o.rc != 0:
        return f"exit {o.rc}"
    meta = json.loads((c / "out" / "meta.json").read_text())
    n = meta["splits"]["eval"]["num_sequences"]
    if n == 0 and not _warns_about_eval(o.stderr):
        return "writes an empty held-out split without a warning (later reported as eval loss 0.0)"
    return None


def empty_eval_split(c: Path) -> None:
    """data/ whose held-out split has no sequences (meta.json and shard consistent)."""
    d = c / "data"
    f = shard_path(d, "eval")
    f.write_bytes(b"")

    def fn(m):
        info = m["splits"]["eval"]
        for k in list(info):
            if k in ("num_sequences", "num_tokens", "documents", "num_documents"):
                info[k] = 0
        for k in ("sha256", "file_sha256"):
            if k in info:
                info[k] = hashlib.sha256(b"").hexdigest()

    edit_json(d / "meta.json", fn)


def oov_token(c: Path) -> None:
    """Token 10 of every training sequence set to an id far above the vocabulary (meta.json's hash
    updated: only a bound check can find it)."""
    import numpy as np

    meta = json.loads((c / "data" / "meta.json").read_text())
    f = shard_path(c / "data")
    a = np.fromfile(f, dtype=meta["dtype"]).reshape(-1, meta["seq_len"])
    a[:, 10] = np.iinfo(a.dtype).max // 2
    a.tofile(f)
    set_shard_hash(c / "data")


def no_sep_sep(c: Path, o: Outcome) -> str | None:
    import numpy as np

    if o.rc != 0:
        return None
    d = c / "out"
    meta = json.loads((d / "meta.json").read_text())
    sep = meta["special_ids"]["sep"]
    n = 0
    for split in ("train", "eval"):
        a = np.fromfile(shard_path(d, split), dtype=meta["dtype"]).reshape(-1, meta["seq_len"])
        n += int(((a[:, 1:] == sep) & (a[:, :-1] == sep)).sum())
    return f"{n} [SEP][SEP] pairs in the packed shards" if n else None


def normal_permissions(rel: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        bad = sorted(
            str(p.relative_to(c)) + f" {oct(p.stat().st_mode & 0o777)}"
            for p in (c / rel).rglob("*")
            if p.is_file() and p.stat().st_mode & 0o777 != 0o644
        )
        return f"files not 0644 under umask 022: {', '.join(bad[:3])}" if bad else None

    return check


def finite_checkpoints(c: Path, o: Outcome) -> str | None:
    import numpy as np

    for ck in checkpoints(c / "r"):
        t = load_tensors(ck / "model.safetensors")
        bad = [k for k, v in t.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:
            return f"{ck.name} holds non-finite weights ({bad[0]})"
    return None


def same_weights_as(other: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        if o.rc != 0:
            return None
        a, b = checkpoints(c / "r"), checkpoints(c / other)
        if not a or not b:
            return "no checkpoint to compare"
        if sha256(a[-1] / "model.safetensors") != sha256(b[-1] / "model.safetensors"):
            return f"weights differ from the run with {other} (grad_clip=0 is not 'off')"
        return None

    return check


def says_in_output(*needles: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        text = (o.stdout + o.stderr).lower()
        miss = [n for n in needles if n.lower() not in text]
        return f"output does not mention {', '.join(miss)}" if miss else None

    return check


def squad_check(c: Path, o: Outcome) -> str | None:
    """Row 8: a wrong answer_start is an error naming the file, or counted and reported -- never
    silently relocated."""
    if o.rc == 2:
        return None
    if o.rc != 0:
        return f"exit {o.rc}"
    text = o.stdout + o.stderr
    for f in (c / "ft").rglob("*.json"):
        text += f.read_text()
    return (
        None
        if "answer_start" in text
        else "the wrong answer_start was relocated silently (not reported)"
    )


def bad_squad(c: Path) -> None:
    for name in ("train-v1.1.json", "dev-v1.1.json"):

        def fn(d):
            a = d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]
            a["answer_start"] += 3

        edit_json(c / "squad" / name, fn)


def vocab_size_check(c: Path, o: Outcome) -> str | None:
    """Row 8: --vocab-size above what the corpus supports: a one-line error, or a warning on stderr
    that says the size actually trained (the one meta.json records)."""
    lines = _lines(o.stderr)
    if o.rc == 2:
        return (
            None
            if len(lines) == 1 and "vocab" in lines[0].lower()
            else "the error is not one line naming the vocabulary"
        )
    size = json.loads((c / "out" / "meta.json").read_text())["vocab_size"]
    warn = [ln for ln in lines if "warn" in ln.lower() and str(size) in ln]
    return None if warn else f"no warning on stderr saying that {size} word pieces were trained"


def eval_counts(computed: int, reused: int) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        m = re.search(r"(\d+) cells computed, (\d+) reused", o.stderr)
        if not m:
            return "no 'N cells computed, M reused' line"
        got = (int(m.group(1)), int(m.group(2)))
        return (
            None
            if got == (computed, reused)
            else f"{got[0]} computed, {got[1]} reused; expected {computed}, {reused}"
        )

    return check


def evaluate_then_retrain(retrain: bool) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        run_cli(
            [
                "evaluate",
                "--models",
                str(c / "r"),
                "--out",
                str(c / "ev"),
                *[a.replace("{C}", str(c)) for a in EV],
            ],
            c,
        )
        if retrain:  # the same path, new weights (another seed)
            run_cli(
                [
                    a.replace("{C}", str(c))
                    for a in pretrain("{C}/r", "{C}/data", "--set", "train.seed=7", "--overwrite")
                ],
                c,
            )

    return setup


def fresh_run(name: str = "r", *extra: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        run_cli([a.replace("{C}", str(c)) for a in pretrain("{C}/" + name, "{C}/data", *extra)], c)

    return setup


def chain(*fns: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        for f in fns:
            f(c)

    return setup


def resume_logged_past_checkpoint(c: Path) -> None:
    """run/ as if killed after logging steps 3-4 but before checkpoint 4 was complete."""
    shutil.rmtree(c / "run" / "checkpoints" / "step-00000004")
    lines = (c / "run" / "metrics.jsonl").read_text().splitlines()
    (c / "run" / "metrics.jsonl").write_text(
        "\n".join(ln for ln in lines if '"event": "end"' not in ln) + "\n"
    )
    (c / "run" / "report.md").unlink(missing_ok=True)


def torn_metrics(c: Path) -> None:
    with open(c / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 4.12')  # killed mid-write


def make_dir(rel: str, files: dict[str, bytes] | None = None) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        d = c / rel
        d.mkdir(parents=True, exist_ok=True)
        for n, b in (files or {}).items():
            (d / n).parent.mkdir(parents=True, exist_ok=True)
            (d / n).write_bytes(b)

    return setup


def make_file(rel: str, data: bytes = b"precious\n") -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        (c / rel).parent.mkdir(parents=True, exist_ok=True)
        (c / rel).write_bytes(data)

    return setup


MINE = {"notes.txt": b"my notes\n", "sub/data.bin": b"\x00\x01\x02"}


def copied_study_data(rel: str, overrides: list[str]) -> Callable[[Path], None]:
    """``rel/data/prepared.json`` of study-tiny with ``overrides``: another study's data directory
    copied into a new --out (its stamp only: the refusal reads nothing else)."""

    def setup(c: Path) -> None:
        from tokendrop.lab.study import load_study
        from tokendrop.lab.study.data import data_fingerprint

        d = c / rel / "data"
        d.mkdir(parents=True, exist_ok=True)
        fp = data_fingerprint(load_study("study-tiny", overrides))
        (d / "prepared.json").write_text(json.dumps({"fingerprint": fp}) + "\n")

    return setup


def stale_lock(rel: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        p = c / rel
        (p.parent / f".{p.name}.tokendrop.lock").write_text("999999\n")  # its writer died (SIGKILL)

    return setup


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc; [] elsewhere)."""
    out = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            if (
                d.isdigit()
                and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == pid
            ):
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def killed_with_workers(rel: str) -> Callable[[Path], None]:
    """A pretrain with one data worker, SIGKILLed (the parent only) once its first checkpoint is
    written: its worker must end by itself, holding no lock (one still running after 60 s is
    killed and the case fails)."""

    def setup(c: Path) -> None:
        argv = [PY, "-m", "tokendrop", *pretrain(str(c / rel), str(c / "data"))]
        argv += ["--set", "train.steps=100000", "--set", "data.num_workers=1"]
        argv += ["--set", "train.warmup_steps=1", "--set", "train.eval_every=100000"]
        p = subprocess.Popen(
            argv, cwd=c, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        t0 = time.time()
        while time.time() - t0 < 600 and p.poll() is None and not checkpoints(c / rel):
            time.sleep(0.02)
        workers = _children(p.pid)
        p.kill()
        p.wait()
        p.stderr.close()
        if not workers:
            DRIVE_NOTES[c] = "the run started no data worker (or ended before its checkpoint)"
        t0 = time.time()
        while time.time() - t0 < 60 and not all(map(_gone, workers)):
            time.sleep(0.05)
        left = [w for w in workers if not _gone(w)]
        for w in left:
            os.kill(w, signal.SIGKILL)
        if left:
            DRIVE_NOTES[c] = f"data worker(s) {left} outlived their SIGKILLed parent"

    return setup


def pad_not_zero_vocab(c: Path) -> None:
    lines = (c / "other-vocab.txt").read_text().splitlines()
    pad = lines.index("[PAD]")
    lines.pop(pad)
    lines.insert(7, "[PAD]")
    (c / "pad7-vocab.txt").write_text("\n".join(lines) + "\n")


# more faults: the campaign's output directory, verify of finetune/evaluate/study/campaign
CAMPAIGN = ["bench", "--campaign", "env", "--dry-run", "--quiet", "--set", "pytest=false"]


def campaign_killed(rel: str = "out", drop_lock: bool = False) -> Callable[[Path], None]:
    """A campaign SIGKILLed during its part: OUT/env.json says complete: false, the in-progress
    record and the lock file stay (killed while it waits at its gate ``campaign-part``, after the
    part's first save: provably mid-part).  ``drop_lock``: remove the dead writer's lock file (for a
    case that does not write OUT again)."""

    def setup(c: Path) -> None:
        argv = [PY, "-m", "tokendrop", *CAMPAIGN, "--out", str(c / rel)]
        g = c.parent / f"{c.name}.setup-gate"
        p = subprocess.Popen(
            argv,
            cwd=c,
            env=dict(ENV, **{GATE_ENV: f"campaign-part={g}"}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        t0 = time.time()
        while time.time() - t0 < 600 and p.poll() is None and not g.exists():
            time.sleep(0.02)
        if not g.exists():
            p.kill()
            raise RuntimeError(
                f"the campaign ended before it reached its gate: {p.communicate()[1][-300:]}"
            )
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.stderr.close()
        g.unlink()
        if drop_lock:
            (c / f".{rel}.tokendrop.lock").unlink()

    return setup


def rerun_succeeds(argv: list[str], made: str) -> Callable[[Path, Outcome], str | None]:
    """The same command run again (what the interrupted one's message says to do) exits 0 and makes
    ``made``."""

    def check(c: Path, o: Outcome) -> str | None:
        r = cli([a.replace("{C}", str(c)) for a in argv], c, check=False)
        if r.returncode != 0:
            return (
                f"the same command run again failed (exit {r.returncode}): "
                f"{(r.stderr.strip().splitlines() or [''])[-1][:200]}"
            )
        return None if (c / made).exists() else f"the same command run again made no {made}"

    return check


def one_long_line(c: Path) -> None:
    """A 3 MB corpus on one line: words of the toy vocabulary, no newline inside."""
    words = [w for w in (c / "other-vocab.txt").read_text().split() if w.isalpha()][:50] or ["a"]
    line = " ".join(words[i % len(words)] for i in range(600_000))
    (c / "x.txt").write_text(line[:3_000_000] + "\n")


def one_long_cell(name: str, cut: bool = True) -> Callable[[Path], None]:
    """CASE/NAME: a Parquet or Arrow file of a short row, then one 3 MB cell of words of the toy
    vocabulary (``cut``), or of 2.1 MB without a space (not)."""

    def setup(c: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if cut:
            one_long_line(c)
            long = (c / "x.txt").read_text().strip()
            (c / "x.txt").unlink()
        else:
            long = "x" * 2_100_000
        t = pa.table({"text": ["a b c", long]})
        if name.endswith(".parquet"):
            pq.write_table(t, c / name)
        else:
            with pa.ipc.new_file(c / name, t.schema) as w:
                w.write_table(t)

    return setup


def one_huge_parquet_page(c: Path) -> None:
    """CASE/x.parquet: a short row, then a cell of 64 Mi + 6 bytes (one page that long, zstd: a
    small file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"text": ["a b c", "ab cd " * ((1 << 26) // 6 + 2)]})
    pq.write_table(t, c / "x.parquet", compression="zstd")


def one_huge_wiki_page(c: Path) -> None:
    """CASE/x.xml: a MediaWiki dump whose second article's text is 64 Mi + 2 characters."""
    with open(c / "x.xml", "w", encoding="utf-8") as f:
        f.write("<mediawiki><page><title>Small</title><ns>0</ns><revision><text>a b c")
        f.write("</text></revision></page><page><title>Huge</title><ns>0</ns><revision><text>")
        for _ in range(32):
            f.write("ab" * (1 << 20))
        f.write("cd</text></revision></page></mediawiki>\n")


def stsb_score(score: float) -> Callable[[Path], None]:
    """Set the score of the first STS-B training example (line 2) to ``score``."""

    def setup(c: Path) -> None:
        p = c / "glue" / "STS-B" / "train.tsv"
        lines = p.read_text(encoding="utf-8").splitlines()
        at = lines[0].lstrip("\ufeff").split("\t").index("score")
        f = lines[1].split("\t")
        f[at] = str(score)
        lines[1] = "\t".join(f)
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")

    return setup


def foreign_checkpoint(c: Path) -> None:
    """Replace the run's step-2 checkpoint by the step-2 checkpoint of a 2-layer run on the same
    data."""
    cli(pretrain(str(c / "other"), str(c / "data"), "--set", "model.num_layers=2"), c)
    shutil.rmtree(c / "run" / "checkpoints" / "step-00000002")
    shutil.copytree(
        c / "other" / "checkpoints" / "step-00000002", c / "run" / "checkpoints" / "step-00000002"
    )
    shutil.rmtree(c / "other")


def chain_checks(
    *checks: Callable[[Path, Outcome], str | None],
) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        return next((m for m in (f(c, o) for f in checks) if m), None)

    return check


def part_record(
    rel: str, complete: bool, error: str | None = None
) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        d = json.loads((c / rel).read_text())
        if d.get("complete") is not complete:
            return f"{rel} says complete: {d.get('complete')}, expected {complete}"
        if error is not None and error not in (d.get("error") or ""):
            return f"{rel} does not record the error {error!r}: {d.get('error')!r}"
        if (c / Path(rel).parent / ".campaign-in-progress.json").exists():
            return "the in-progress record was left behind"
        return None

    return check


def run_into(rel: str, argv: Callable[[Path], list[str]]) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        run_cli(argv(c), c)

    return setup


def ft_into(rel: str, *extra: str) -> Callable[[Path], None]:
    return run_into(
        rel, lambda c: [a.replace("{C}", str(c)) for a in finetune("{C}/run", "{C}/" + rel, *extra)]
    )


def ev_into(rel: str) -> Callable[[Path], None]:
    return run_into(
        rel,
        lambda c: [
            a.replace("{C}", str(c))
            for a in ["evaluate", "--models", "{C}/run", "--out", "{C}/" + rel, *EV]
        ],
    )


def cell_file(rel: str, name: str) -> Callable[[Path], Path]:
    return lambda c: next((c / rel).glob(f"cells/*/*/*/{name}"))


MINI_STUDY = [
    "study",
    "--config",
    "study-tiny",
    "--set",
    "methods=['baseline']",
    "--set",
    "drop_rates=[0.0]",
    "--set",
    'inspect_method="baseline"',
]


def saved_config_keeps(key: str, value: Any) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        d = json.loads((c / "ft" / "model" / "config.json").read_text())
        if d.get(key) != value:
            return f"ft/model/config.json has {key} = {d.get(key)!r}, the source {value!r}"
        r = subprocess.run(
            [PY, "-m", "tokendrop", "verify", str(c / "ft")],
            env=ENV,
            capture_output=True,
            text=True,
        )
        return None if r.returncode == 0 else f"verify ft failed: {r.stderr.strip()[:200]}"

    return check


# ---- helpers of the rows for corrupt inputs, directory walks, bad paths, scores on n = 0,
# stuck runs ----


def corpus_bytes(c: Path, docs: int = 200) -> bytes:
    write_corpus(c / "src.txt", docs)
    data = (c / "src.txt").read_bytes()
    (c / "src.txt").unlink()
    return data


def truncated_input(name: str) -> Callable[[Path], None]:
    """CASE/NAME: a corpus file of NAME's format cut short (the way a copy or download ends
    early)."""

    def setup(c: Path) -> None:
        import bz2
        import gzip
        import io

        text = corpus_bytes(c)
        docs = [d for d in text.decode().split("\n\n") if d.strip()]
        # a streaming writer's frame: blocks flushed every 4 KB, no content size
        if name.endswith(".zst"):
            import zstandard

            buf = io.BytesIO()
            w = zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False)
            for i in range(0, len(text), 4096):
                w.write(text[i : i + 4096])
                w.flush(zstandard.FLUSH_BLOCK)
            w.flush(zstandard.FLUSH_FRAME)
            blob = buf.getvalue()
        elif name.endswith(".gz"):
            blob = gzip.compress(text)
        elif name.endswith(".bz2"):
            blob = bz2.compress(text)
        elif name.endswith(".jsonl"):
            # inside the last object
            blob = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()[:-20]
        elif name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            sink = io.BytesIO()
            pq.write_table(pa.table({"text": docs}), sink, row_group_size=20)
            blob = sink.getvalue()[:-30]  # the footer cut
        elif name.endswith(".arrow"):  # a stream of 3 of its batches whose writer never closed it
            import pyarrow as pa

            t = pa.table({"text": docs})
            sink = pa.BufferOutputStream()
            w = pa.ipc.new_stream(sink, t.schema)
            for b in t.to_batches(max_chunksize=20)[:3]:
                w.write_batch(b)
            blob = sink.getvalue().to_pybytes()
        else:
            raise ValueError(name)
        if name.endswith((".zst", ".gz", ".bz2")):
            blob = blob[: len(blob) // 2]
        (c / name).write_bytes(blob)

    return setup


def prepared_inside_corpus(c: Path) -> None:
    """CASE/corpus/ holding its text and, beside it, an earlier prepare's output
    (CASE/corpus/prep)."""
    (c / "corpus").mkdir()
    shutil.copy(c / "corpus.txt", c / "corpus" / "corpus.txt")
    run_cli(prepare(str(c / "corpus"), str(c / "corpus" / "prep"), "--vocab-size", "150"), c)


def sources_are(*rel: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        got = [
            s["path"]
            for s in json.loads((c / "corpus" / "prep" / "meta.json").read_text())["sources"]
        ]
        want = [str(c / r) for r in rel]
        return (
            None if got == want else f"read as corpus: {', '.join(shorten(g, c, c) for g in got)}"
        )

    return check


def link(rel: str, target: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        (c / "corpus").mkdir(exist_ok=True)
        shutil.copy(c / "corpus.txt", c / "corpus" / "corpus.txt")
        (c / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, c / rel)

    return setup


def broken_config(c: Path) -> None:
    with open(c / "run" / "config.toml", "a") as f:
        f.write("\n[train\nsteps = = 3\n")  # edited by hand


def header_only(rel: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        p = c / rel
        p.write_text(p.read_text().splitlines()[0] + "\n")

    return setup


def scored_on_nothing(c: Path) -> None:
    """CASE/ft: a finetune output whose dev split was scored on n = 0 (what a header-only dev file
    gave)."""
    run_cli([a.replace("{C}", str(c)) for a in finetune("{C}/run", "{C}/ft")], c)

    def fn(m):
        m["metrics"]["dev"].update(n=0, accuracy=0.0, score=0.0)
        m["scores"] = {k: 0.0 for k in m["scores"]}

    edit_json(c / "ft" / "metrics.json", fn)


def eval_without_slots(c: Path) -> None:
    """CASE/data whose held-out split holds sequences of [SEP] only (meta.json's hash updated)."""
    import numpy as np

    meta = json.loads((c / "data" / "meta.json").read_text())
    f = shard_path(c / "data", "eval")
    a = np.fromfile(f, dtype=meta["dtype"])
    a[:] = meta["special_ids"]["sep"]
    a.tofile(f)
    set_shard_hash(c / "data", "eval")


def failed_before_checkpoint(*extra: str, fsize: int = 0) -> Callable[[Path], None]:
    """CASE/r: a run that failed before its first checkpoint (the command exits 2, leaving
    config.toml): an impossible setting in ``extra``, or a disk that was full (``fsize``:
    RLIMIT_FSIZE) then."""

    def limit() -> None:
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    def setup(c: Path) -> None:
        r = subprocess.run(
            [
                PY,
                "-m",
                "tokendrop",
                *[a.replace("{C}", str(c)) for a in pretrain("{C}/r", "{C}/data", *extra)],
            ],
            cwd=c,
            env=ENV,
            capture_output=True,
            text=True,
            preexec_fn=limit,
        )
        if r.returncode != 2 or not (c / "r" / "config.toml").is_file():
            raise RuntimeError(
                f"the failing run did not fail as planned (exit {r.returncode}): {r.stderr[-200:]}"
            )

    return setup


def suggestion_works(made: str) -> Callable[[Path, Outcome], str | None]:
    """The `tokendrop ...` command the (one-line) message ends with, run: exit 0 and ``made``
    there."""

    def check(c: Path, o: Outcome) -> str | None:
        line = _lines(o.stderr)[-1]
        if "tokendrop " not in line:
            return "the message suggests no command"
        r = cli(shlex.split(line.rsplit("tokendrop ", 1)[1]), c, check=False)
        if r.returncode != 0:
            return (
                f"the suggested command failed (exit {r.returncode}): "
                f"{(_lines(r.stderr) or [''])[-1][:200]}"
            )
        return None if (c / made).exists() else f"the suggested command made no {made}"

    return check


def cases() -> list[Case]:
    C: list[Case] = []
    add = C.append

    # ---- row 1: no deletion of what tokendrop did not write
    # ------------------------------------------
    add(
        Case(
            "export-into-foreign-dir",
            "outputs",
            ["export", "{C}/run", "{C}/mine"],
            "refused; the dir untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine", "run"),
            says=("{C}/mine", "--overwrite"),
        )
    )
    add(
        Case(
            "export-overwrite-foreign-dir",
            "outputs",
            ["export", "{C}/run", "{C}/mine", "--overwrite"],
            "refused (not tokendrop's); untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("not written by tokendrop",),
        )
    )
    add(
        Case(
            "export-to-a-file",
            "outputs",
            ["export", "{C}/run", "{C}/target"],
            "refused; file intact, no .old-*",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
            says=("not a directory",),
        )
    )
    add(
        Case(
            "export-overwrite-a-file",
            "outputs",
            ["export", "{C}/run", "{C}/target", "--overwrite"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "export-overwrite-its-own-input",
            "outputs",
            ["export", "{C}/run", "{C}/run", "--overwrite"],
            "refused; the run untouched",
            needs=("run",),
            watch=("run",),
        )
    )
    add(
        Case(
            "export-overwrite-previous-export",
            "outputs",
            ["export", "{C}/run", "{C}/hf", "--overwrite"],
            "replaces only its own earlier export",
            rc=0,
            needs=("run", "hf"),
            watch=("run",),
        )
    )
    add(
        Case(
            "inspect-out-a-file",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/target", "--examples", "1"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target", "run"),
        )
    )
    add(
        Case(
            "inspect-text-without-tokens",
            "edge settings",
            ["inspect", "{C}/run", "--text", "   "],
            "refused: the text has no tokens; nothing written",
            needs=("run",),
            watch=("run",),
            says=("has no tokens for the run's tokenizer",),
        )
    )
    add(
        Case(
            "inspect-text-with-out",
            "edge settings",
            ["inspect", "{C}/run", "--text", "a b", "--out", "{C}/ins"],
            "refused: --text writes nothing; nothing written",
            needs=("run",),
            watch=("run",),
            absent=("ins",),
            says=("--text prints what the run keeps",),
        )
    )
    add(
        Case(
            "inspect-overwrite-a-file",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/target", "--overwrite"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "inspect-into-foreign-dir",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/mine", "--overwrite"],
            "refused; untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "prepare-into-foreign-dir",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/mine", "--vocab-size", "150"),
            "refused; untouched",
            needs=("corpus.txt",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("--overwrite",),
        )
    )
    add(
        Case(
            "prepare-overwrite-foreign-dir",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/mine", "--vocab-size", "150", "--overwrite"),
            "refused (not tokendrop's); untouched",
            needs=("corpus.txt",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "prepare-overwrite-dir-holding-its-corpus",
            "outputs",
            prepare("{C}/data/corpus.txt", "{C}/data", "--vocab-size", "150", "--overwrite"),
            "refused; corpus and data intact",
            needs=("data", "corpus.txt"),
            setup=lambda c: shutil.copy(c / "corpus.txt", c / "data" / "corpus.txt"),
            watch=("data",),
            says=("input",),
        )
    )
    add(
        Case(
            "prepare-overwrite-dir-holding-its-vocab",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/data", "--vocab", "{C}/data/vocab.txt", "--overwrite"),
            "refused; vocab and data intact",
            needs=("data", "corpus.txt"),
            watch=("data",),
            says=("input",),
        )
    )
    add(
        Case(
            "pretrain-out-existing-run",
            "outputs",
            pretrain("{C}/run", "{B}/data"),
            "refused, suggests --resume/--overwrite",
            needs=("run",),
            watch=("run",),
            says=("--resume",),
        )
    )
    add(
        Case(
            "pretrain-overwrite-foreign-dir",
            "outputs",
            pretrain("{C}/mine", "{B}/data", "--overwrite"),
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "pretrain-overwrite-an-export",
            "outputs",
            pretrain("{C}/hf", "{B}/data", "--overwrite"),
            "refused (another kind); untouched",
            needs=("hf",),
            watch=("hf",),
        )
    )
    add(
        Case(
            "finetune-into-foreign-dir",
            "outputs",
            finetune("{C}/run", "{C}/mine"),
            "refused; untouched",
            needs=("run", "sst2"),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "finetune-out-a-file",
            "outputs",
            finetune("{C}/run", "{C}/target", "--overwrite"),
            "refused; file intact",
            needs=("run", "sst2"),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "evaluate-into-foreign-dir",
            "outputs",
            ["evaluate", "--models", "{C}/run", "--out", "{C}/mine", *EV],
            "refused; untouched",
            needs=("run", "glue", "squad"),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "study-into-foreign-dir",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/mine"],
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "study-copied-data-without-stamp",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/reuse", "--only"],
            "refused before any write: not a study's data directory; untouched",
            setup=make_dir("reuse/data", {"packed-32/meta.json": b"{}\n"}),
            watch=("reuse",),
            absent=("reuse/.tokendrop.json",),
            says=("{C}/reuse/data", "no prepared.json"),
        )
    )
    add(
        Case(
            "study-copied-data-of-another-config",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/reuse", "--only"],
            "refused before any write: the copy's fingerprint names what differs; untouched",
            setup=copied_study_data("reuse", ["seq_len=16"]),
            watch=("reuse",),
            absent=("reuse/.tokendrop.json",),
            says=("{C}/reuse/data", "seq_len changed"),
        )
    )
    add(
        Case(
            "demo-into-foreign-dir",
            "outputs",
            ["demo", "--out", "{C}/mine", "--cache", "{C}/cache", "--no-finetune"],
            "refused before any download; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
            absent=("cache",),
        )
    )

    # ---- row 2: verify weights and data before using them
    # ---------------------------------------------
    flip = lambda rel: lambda c: flip_byte(c / rel)  # noqa: E731
    add(
        Case(
            "export-bit-flipped-checkpoint",
            "corrupt files",
            ["export", CKPT, "{C}/out"],
            "refused naming the file",
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            watch=("run",),
            absent=("out",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "export-truncated-checkpoint",
            "corrupt files",
            ["export", CKPT, "{C}/out"],
            "refused naming the file",
            needs=("run",),
            setup=lambda c: truncate(c / CKPT[4:] / "model.safetensors"),
            watch=("run",),
            absent=("out",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "finetune-bit-flipped-checkpoint",
            "corrupt files",
            finetune(CKPT, "{C}/ft"),
            "refused naming the file",
            needs=("run", "sst2"),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("ft",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "inspect-bit-flipped-state",
            "corrupt files",
            ["inspect", "{C}/run", "--out", "{C}/ins", "--examples", "1"],
            "refused naming the file (every checkpoint corrupt)",
            needs=("run",),
            setup=lambda c: [flip_byte(ck / "state.safetensors") for ck in checkpoints(c / "run")],
            absent=("ins",),
            says=("state.safetensors",),
        )
    )
    add(
        Case(
            "evaluate-bit-flipped-checkpoint",
            "corrupt files",
            ["evaluate", "--models", CKPT, "--out", "{C}/ev", *EV],
            "refused naming the file",
            needs=("run", "glue", "squad"),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("ev",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "init-from-bit-flipped-checkpoint",
            "corrupt files",
            [*pretrain("{C}/r", "{B}/data"), "--init", CKPT],
            "refused naming the file; no run dir",
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("r",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "resume-every-checkpoint-corrupt",
            "corrupt files",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused: no valid checkpoint; run untouched",
            needs=("run",),
            setup=lambda c: [flip_byte(ck / "model.safetensors") for ck in checkpoints(c / "run")],
            watch=("run",),
            says=("checkpoint",),
        )
    )
    add(
        Case(
            "data-meta-counts-vs-shard",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming meta.json/shard; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json",
                lambda d: d["splits"]["train"].update(
                    num_sequences=d["splits"]["train"]["num_sequences"] + 1
                ),
            ),
            absent=("r",),
            watch=("data",),
        )
    )
    add(
        Case(
            "data-truncated-shard",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming the shard; no run dir",
            needs=("data",),
            setup=lambda c: truncate(shard_path(c / "data")),
            absent=("r",),
            watch=("data",),
        )
    )
    add(
        Case(
            "data-token-id-out-of-vocab",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming the shard (id >= vocab size, found at open or per batch); no "
            "checkpoint of it",
            needs=("data",),
            setup=oov_token,
            watch=("data",),
            says=("train.bin", "vocab"),
            check=lambda c, o: (
                "a checkpoint was written from the bad data" if checkpoints(c / "r") else None
            ),
        )
    )
    add(
        Case(
            "verify-good-run",
            "corrupt files",
            ["verify", "{C}/run"],
            "exit 0, run untouched",
            rc=0,
            needs=("run",),
            watch=("run",),
        )
    )
    add(
        Case(
            "verify-good-data",
            "corrupt files",
            ["verify", "{C}/data"],
            "exit 0",
            rc=0,
            needs=("data",),
            watch=("data",),
        )
    )
    add(
        Case(
            "verify-bit-flipped-checkpoint",
            "corrupt files",
            ["verify", CKPT],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            watch=("run",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "verify-run-with-truncated-state",
            "corrupt files",
            ["verify", "{C}/run"],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run",),
            setup=lambda c: truncate(c / CKPT[4:] / "state.safetensors"),
            watch=("run",),
            says=("state.safetensors",),
        )
    )
    add(
        Case(
            "verify-bit-flipped-shard",
            "corrupt files",
            ["verify", "{C}/data"],
            "non-zero, names the shard",
            rc=(1, 2),
            needs=("data",),
            setup=lambda c: flip_byte(shard_path(c / "data"), 50),
            watch=("data",),
        )
    )

    # ---- row 3: one writer per directory
    # ----------------------------------------------------------------
    add(
        Case(
            "resume-locked-run",
            "locks",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused at once: in use by pid N; untouched",
            needs=("run",),
            hold=("run",),
            watch=("run",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "pretrain-locked-out",
            "locks",
            pretrain("{C}/r", "{B}/data"),
            "refused: in use; nothing written",
            hold=("r",),
            absent=("r",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "prepare-locked-out",
            "locks",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150"),
            "refused: in use; nothing written",
            needs=("corpus.txt",),
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "export-locked-out",
            "locks",
            ["export", "{C}/run", "{C}/out"],
            "refused: in use; nothing written",
            needs=("run",),
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "finetune-locked-out",
            "locks",
            finetune("{C}/run", "{C}/ft"),
            "refused: in use; nothing written",
            needs=("run", "sst2"),
            hold=("ft",),
            absent=("ft",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "export-stale-lock-taken-over",
            "locks",
            ["export", "{C}/run", "{C}/out"],
            "a dead writer's lock is taken over: exit 0",
            rc=0,
            needs=("run",),
            setup=stale_lock("out"),
            watch=("run",),
            check=says_in_output("the lock left by pid 999999, which is no longer running"),
        )
    )
    add(
        Case(
            "resume-after-sigkill-with-a-data-worker",
            "locks",
            ["pretrain", "--resume", "{C}/r", "--quiet", "--set", "train.steps=20"],
            "the worker died with its parent; the dead pid's lock is taken over with a note; "
            "resumed: exit 0",
            rc=0,
            needs=("data",),
            setup=killed_with_workers("r"),
            check=says_in_output("which is no longer running, is taken over"),
            timeout=600,
        )
    )

    # ---- row 4: honest exit codes on interruption
    # --------------------------------------------------------
    long_pt = pretrain(
        "{C}/r",
        "{B}/data",
        "--set",
        "train.steps=100000",
        "--set",
        "train.eval_every=100000",
        "--set",
        "train.ckpt_every=100000",
    )
    add(
        Case(
            "pretrain-sigint",
            "signals",
            long_pt,
            "checkpoint saved, exit 130",
            rc=130,
            gate="pretrain-step",
            drive=at_gate(signal.SIGINT),
            check=lambda c, o: (
                None
                if checkpoints(c / "r") and ckpt_ok(checkpoints(c / "r")[-1])
                else "no valid checkpoint"
            ),
        )
    )
    add(
        Case(
            "pretrain-sigterm",
            "signals",
            long_pt,
            "checkpoint saved, exit 143",
            rc=143,
            gate="pretrain-step",
            drive=at_gate(signal.SIGTERM),
            check=lambda c, o: (
                None
                if checkpoints(c / "r") and ckpt_ok(checkpoints(c / "r")[-1])
                else "no valid checkpoint"
            ),
        )
    )
    prep_big = prepare("{C}/big.txt", "{C}/out", "--vocab-size", "300")
    add(
        Case(
            "prepare-sigint",
            "signals",
            prep_big,
            "exit 130, no output, no temp dir; the finished work units kept in out.partial, and "
            "the same command "
            "run again (as the message says) finishes",
            rc=130,
            setup=lambda c: write_corpus(c / "big.txt", 600),
            gate="prepare-units",
            drive=at_gate(signal.SIGINT),
            absent=("out",),
            watch=("big.txt",),
            check=chain_checks(
                says_in_output("kept in", "run the same command again"),
                rerun_succeeds(prep_big, "out/meta.json"),
            ),
        )
    )
    add(
        Case(
            "finetune-sigint",
            "signals",
            finetune("{C}/run", "{C}/ft", "--set", "epochs=2"),
            "exit 130, no output",
            rc=130,
            needs=("run", "sst2"),
            gate="finetune-step",
            drive=at_gate(signal.SIGINT),
            absent=("ft",),
            watch=("run",),
        )
    )
    add(
        Case(
            "evaluate-sigint",
            "signals",
            ["evaluate", "--models", "{C}/run", "--out", "{C}/ev", *EV],
            "exit 130, no output",
            rc=130,
            needs=("run", "glue", "squad"),
            gate="finetune-step",
            drive=at_gate(signal.SIGINT),
            absent=("ev",),
            watch=("run",),
        )
    )
    add(
        Case(
            "bench-sigint",
            "signals",
            [
                "bench",
                "--preset",
                "smoke",
                "--no-hf",
                "--quiet",
                "--rounds",
                "3",
                "--json",
                "{C}/bench.json",
            ],
            "exit 130, no results file",
            rc=130,
            gate="bench-round",
            drive=at_gate(signal.SIGINT),
            absent=("bench.json", "bench.md"),
        )
    )

    # ---- row 5: runs that move
    # --------------------------------------------------------------------------
    add(
        Case(
            "resume-relative-data-path-from-elsewhere",
            "moved runs",
            ["pretrain", "--resume", "{C}/relrun", "--quiet", "--set", "train.steps=3"],
            "works from any working directory",
            rc=0,
            needs=("relrun", "data"),
            cwd="elsewhere",
            setup=make_dir("elsewhere"),
            watch=("data",),
        )
    )
    add(
        Case(
            "resume-with-absolute-data-path",
            "moved runs",
            [
                "pretrain",
                "--resume",
                "{C}/relrun",
                "--quiet",
                "--set",
                "train.steps=3",
                "--set",
                'data.path="{C}/data"',
            ],
            "same data given absolutely: accepted",
            rc=0,
            needs=("relrun", "data"),
            watch=("data",),
        )
    )
    add(
        Case(
            "resume-moved-data-via-set",
            "moved runs",
            [
                "pretrain",
                "--resume",
                "{C}/run-moved",
                "--quiet",
                "--set",
                "train.steps=3",
                "--set",
                'data.path="{C}/data-moved"',
            ],
            "moved data with the same fingerprint: accepted",
            rc=0,
            needs=("run-moved", "data-moved"),
            watch=("data-moved",),
        )
    )
    add(
        Case(
            "resume-moved-data-not-given",
            "moved runs",
            ["pretrain", "--resume", "{C}/run-moved", "--quiet", "--set", "train.steps=3"],
            "refused naming data.path and the fix; run untouched",
            needs=("run-moved",),
            watch=("run-moved",),
            says=("data.path",),
        )
    )
    add(
        Case(
            "resume-other-data-via-set",
            "moved runs",
            [
                "pretrain",
                "--resume",
                "{C}/run",
                "--quiet",
                "--set",
                "train.steps=6",
                "--set",
                'data.path="{C}/data-other"',
            ],
            "another fingerprint: refused; run untouched",
            needs=("run", "data-other"),
            watch=("run",),
            says=("data.path",),
        )
    )

    # ---- row 6: results keyed by content
    # ----------------------------------------------------------------
    add(
        Case(
            "evaluate-same-model-reused",
            "reuse",
            ["evaluate", "--models", "{C}/r", "--out", "{C}/ev", *EV],
            "the finished cell is reused",
            rc=0,
            needs=("data", "glue", "squad"),
            setup=chain(fresh_run("r"), evaluate_then_retrain(False)),
            check=eval_counts(0, 1),
            one_line=False,
        )
    )
    add(
        Case(
            "evaluate-retrained-model-recomputed",
            "reuse",
            ["evaluate", "--models", "{C}/r", "--out", "{C}/ev", *EV],
            "a model retrained at the same path is evaluated again",
            rc=0,
            needs=("data", "glue", "squad"),
            setup=chain(fresh_run("r"), evaluate_then_retrain(True)),
            check=eval_counts(1, 0),
            one_line=False,
        )
    )

    # ---- row 7: logs that survive a kill
    # ----------------------------------------------------------------
    add(
        Case(
            "resume-after-torn-metrics-line",
            "logs",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "resumes; no torn line, no step twice",
            rc=0,
            needs=("run",),
            setup=torn_metrics,
            check=lambda c, o: check_no_duplicate_steps(c / "run"),
        )
    )
    add(
        Case(
            "resume-drops-rows-past-checkpoint",
            "logs",
            ["pretrain", "--resume", "{C}/run", "--quiet"],
            "rows past step 2 dropped: no step twice",
            rc=0,
            needs=("run",),
            setup=resume_logged_past_checkpoint,
            check=lambda c, o: check_no_duplicate_steps(c / "run"),
        )
    )
    add(
        Case(
            "prepare-eval-fraction-0",
            "logs",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150", "--eval-fraction", "0"),
            "error, or a warning; never an empty split reported as eval loss 0.0",
            rc=(0, 2),
            needs=("corpus.txt",),
            check=prepare_empty_eval,
            one_line=False,
        )
    )
    add(
        Case(
            "pretrain-empty-eval-split",
            "logs",
            pretrain("{C}/r"),
            "error (one line), or evaluation off with a warning; never eval loss 0.0",
            rc=(0, 2),
            needs=("data",),
            setup=empty_eval_split,
            check=eval_loss_not_zero,
            one_line=False,
        )
    )

    # ---- row 8: one-line errors instead of tracebacks
    # -----------------------------------------------------
    for v in ("nan", "inf", "-0.001"):
        add(
            Case(
                f"lr-{v}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", "--set", f"train.lr={v}"),
                "refused at config time naming train.lr; no run dir",
                absent=("r",),
                says=("train.lr",),
            )
        )
    add(
        Case(
            "pretrain-out-a-file",
            "bad input, full disk",
            pretrain("{C}/target", "{B}/data"),
            "refused; file intact",
            setup=make_file("target"),
            watch=("target",),
            says=("{C}/target",),
        )
    )
    # a size is given or named from its source: model.vocab_size = 0 (or less) is refused
    for v in (0, -1):
        add(
            Case(
                f"pretrain-vocab-size-{v}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", "--set", f"model.vocab_size={v}"),
                "refused at config time naming model.vocab_size and its named source; no run dir",
                absent=("r",),
                says=("model.vocab_size: expected a positive integer or 'data'", f"got {v}"),
            )
        )
    # the trainer's and data's named sizes (config.NAMED_SIZES; what each takes besides its name:
    # config.SIZE_TAKES): 0 (or less) is refused naming the field's name; train.warmup_steps takes
    # 0 (no warm-up).  model.vocab_size and the fine-tuning sizes have rows of their own.
    for key, word in NAMED_SIZES.items():
        if key.split(".")[0] not in ("train", "data"):
            continue
        takes = SIZE_TAKES.get(key, "a positive integer")
        for v in (-1,) if key == "train.warmup_steps" else (0, -1):
            add(
                Case(
                    f"pretrain-{key.split('.')[1].replace('_', '-')}-{v}",
                    "bad input, full disk",
                    pretrain("{C}/r", "{B}/data", "--set", f"{key}={v}"),
                    f"refused at config time naming {key} and {word!r}; no run dir",
                    absent=("r",),
                    says=(f"{key}: expected {takes} or {word!r}", f"got {v}"),
                )
            )
    # a layer index is an index or "auto" (the variant's span): a negative one is refused
    add(
        Case(
            "pretrain-drop-start--1",
            "bad input, full disk",
            pretrain("{C}/r", "{B}/data", "--set", "drop.method=cumulative", "--set")
            + ["drop.start=-1"],
            "refused at config time naming drop.start and 'auto'; no run dir",
            absent=("r",),
            says=("drop.start: expected a layer index >= 0 or 'auto'", "got -1"),
        )
    )
    # the lab's named sizes (tokendrop.lab.sizes.LAB_NAMED_SIZES): the benchmark's threads, shape,
    # attention dropout, documents, peak and time budget, the long-context run's memory limit and a
    # family's shape, the campaign's largest-batch memory, a study's prepare workers, corpus and
    # vocabulary -- 0 or less refused naming the field and its name before anything runs or is
    # written
    bench = ["bench", "--preset", "smoke", "--json", "{C}/bench.json", "--set"]
    study = ["study", "--config", "study-tiny", "--out", "{C}/st", "--set"]
    for name, key, field, argv, got in (
        ("bench-set-threads-0", "bench.threads", None, bench + ["threads=0"], "0"),
        (
            "bench-longctx-memory-limit-0",
            "longctx.memory_limit_gib",
            None,
            ["bench", "--preset", "longctx-cpu", "--set", "memory_limit_gib=0"]
            + ["--json", "{C}/bench.json"],
            "0.0",
        ),
        (
            "study-prepare-workers-0",
            "study.prepare_workers",
            None,
            study + ["prepare_workers=0"],
            "0",
        ),
        ("bench-set-num-layers-0", "bench.num_layers", None, bench + ["num_layers=0"], "0"),
        (
            "bench-set-attention-dropout--1",
            "bench.attention_dropout",
            None,
            bench + ["attention_dropout=-1"],
            "-1.0",
        ),
        (
            "bench-set-document-tokens-0",
            "bench.document_tokens",
            None,
            bench + ["document_tokens=0"],
            "0",
        ),
        ("bench-set-peak-tflops-0", "bench.peak_tflops", None, bench + ["peak_tflops=0"], "0.0"),
        (
            "bench-set-time-budget-0",
            "bench.time_budget_s",
            None,
            bench + ["time_budget_s=0"],
            "0.0",
        ),
        (
            "bench-longctx-family-num-layers-0",
            "longctx.bert.num_layers",
            None,
            ["bench", "--preset", "longctx-cpu", "--set", "bert.num_layers=0"]
            + ["--json", "{C}/bench.json"],
            "0",
        ),
        (
            "bench-campaign-max-batch-memory-0",
            "campaign.max_batch_memory_bytes",
            "bench.max_batch_memory_bytes",
            [*CAMPAIGN, "--set", "bench.max_batch_memory_bytes=0", "--out", "{C}/st"],
            "0",
        ),
        (
            "study-corpus-max-bytes-0",
            "study.corpus_max_bytes",
            None,
            study + ["corpus_max_bytes=0"],
            "0",
        ),
        ("study-vocab-size-0", "study.vocab_size", None, study + ["vocab_size=0"], "0"),
    ):
        size = LAB_NAMED_SIZES[key]
        add(
            Case(
                name,
                "bad input, full disk",
                argv,
                "refused at config time naming the field and its name; nothing written",
                absent=("bench.json", "bench.md", "st"),
                says=(f"{field or key}: expected {size.takes} or {size.name!r}", f"got {got};"),
            )
        )
    # a warm-up counted in steps or tokens longer than the run: refused before anything is written
    for name, over, said in (
        (
            "lr-warmup-longer-than-run",
            ("train.warmup_steps=100",),
            "train.warmup_steps: the learning-rate warm-up (100 steps) is longer than the run",
        ),
        (
            "batch-warmup-longer-than-run",
            ("train.batch_warmup_start=4", "train.batch_warmup_tokens=1000000"),
            "train.batch_warmup_tokens: the batch warm-up (1,000,000 tokens) is longer than",
        ),
    ):
        add(
            Case(
                f"pretrain-{name}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", *[x for o in over for x in ("--set", o)]),
                "refused naming the warm-up and the run's length; no run dir",
                absent=("r",),
                says=(said,),
            )
        )
    # the fine-tuning sizes: refused before the model or the data are read, nothing written
    for key, word in (
        ("max_train_examples", "all"),
        ("max_eval_examples", "all"),
        ("threads", "auto"),
    ):
        add(
            Case(
                f"finetune-{key.replace('_', '-')}-0",
                "bad input, full disk",
                finetune("{C}/run", "{C}/ft", "--set", f"{key}=0"),
                f"refused at config time naming finetune.{key} and {word!r}; no output dir",
                absent=("ft",),
                says=(f"finetune.{key}: expected a positive integer or {word!r}", "got 0"),
            )
        )
    add(
        Case(
            "data-meta-missing",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming meta.json; no run dir",
            needs=("data",),
            setup=lambda c: (c / "data" / "meta.json").unlink(),
            absent=("r",),
            says=("meta.json",),
        )
    )
    add(
        Case(
            "data-meta-invalid-json",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming meta.json; no run dir",
            needs=("data",),
            setup=lambda c: (c / "data" / "meta.json").write_text('{"format": "tokendrop-prep'),
            absent=("r",),
            says=("meta.json",),
        )
    )
    add(
        Case(
            "data-meta-seq-len-a-string",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json", lambda d: d.update(seq_len="sixty")
            ),
            absent=("r",),
            says=("seq_len",),
        )
    )
    add(
        Case(
            "data-meta-special-ids-a-list",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json", lambda d: d.update(special_ids=[0, 1])
            ),
            absent=("r",),
            says=("special_ids",),
        )
    )
    add(
        Case(
            "data-meta-splits-a-string",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(c / "data" / "meta.json", lambda d: d.update(splits="train")),
            absent=("r",),
            says=("splits",),
        )
    )

    def step3(c):
        return edit_json(c / CKPT.replace("{C}/", "") / "meta.json", lambda d: d.update(step=3))

    add(
        Case(
            "verify-meta-step-vs-directory",
            "corrupt files",
            ["verify", "{C}/run"],
            "fails naming the step and the directory",
            rc=(1, 2),
            needs=("run",),
            setup=step3,
            watch=("run",),
            says=("records step 3 but its directory is step-00000004",),
        )
    )
    add(
        Case(
            "resume-meta-step-vs-directory",
            "corrupt files",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused naming the step and the directory; run untouched",
            needs=("run",),
            setup=step3,
            watch=("run",),
            says=("records step 3 but its directory is step-00000004",),
        )
    )
    add(
        Case(
            "verify-checkpoint-of-another-run",
            "corrupt files",
            ["verify", "{C}/run"],
            "fails naming the field that differs from the run's config",
            rc=(1, 2),
            needs=("run", "data"),
            setup=foreign_checkpoint,
            says=("model.num_layers is 2 but the run's config.toml has 4",),
        )
    )
    add(
        Case(
            "disk-full-checkpoint",
            "bad input, full disk",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "one-line error; earlier checkpoints intact, no temp dir",
            needs=("run",),
            fsize=300_000,
            watch=("run/checkpoints",),
            says=("checkpoint",),
            check=lambda c, o: (
                None
                if any(r.get("step", 0) > 4 for r in metrics(c / "run") if "loss" in r)
                else "it never trained up to the checkpoint write"
            ),
        )
    )
    add(
        Case(
            "disk-full-shards",
            "bad input, full disk",
            prepare("{C}/big.txt", "{C}/out", "--vocab-size", "150"),
            "one-line error; no output",
            setup=lambda c: write_corpus(c / "big.txt", 3000),
            fsize=60_000,
            absent=("out",),
        )
    )
    add(
        Case(
            "disk-full-export",
            "bad input, full disk",
            ["export", "{C}/run", "{C}/out"],
            "one-line error; no output",
            needs=("run",),
            fsize=300_000,
            absent=("out",),
            watch=("run",),
        )
    )
    # a read-only file system is named as such (never "free space")
    not_free_space = lambda c, o: "says 'free space'" if "free space" in o.stderr else None  # noqa: E731
    add(
        Case(
            "resume-on-read-only-fs",
            "bad input, full disk",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "one-line error naming the read-only file system; run untouched",
            needs=("run",),
            read_only=True,
            watch=("run",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    add(
        Case(
            "export-onto-read-only-fs",
            "bad input, full disk",
            ["export", "{C}/run", "{C}/out"],
            "one-line error naming the read-only file system; no output",
            needs=("run",),
            read_only=True,
            absent=("out",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    add(
        Case(
            "prepare-onto-read-only-fs",
            "bad input, full disk",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150"),
            "one-line error naming the read-only file system; no output",
            needs=("corpus.txt",),
            read_only=True,
            absent=("out",),
            says=("read-only",),
            check=not_free_space,
        )
    )
    # a line longer than the reader's part size: tokenized in pieces, or refused when it cannot be
    # cut
    add(
        Case(
            "prepare-long-line-no-spaces",
            "bad input, full disk",
            prepare("{C}/x.txt", "{C}/out", "--vocab-size", "150"),
            "refused naming the file, the line and the limit; no output",
            absent=("out",),
            setup=lambda c: (c / "x.txt").write_text("a b c\n\n" + "x" * 2_100_000 + "\n"),
            says=("{C}/x.txt", "line 3", "1,048,576 characters"),
        )
    )
    add(
        Case(
            "prepare-long-line-in-pieces",
            "bad input, full disk",
            prepare("{C}/x.txt", "{C}/out", "--vocab", "{C}/other-vocab.txt"),
            "prepared (one document of 3 MB, tokenized in pieces)",
            rc=0,
            needs=("other-vocab.txt",),
            setup=one_long_line,
            check=lambda c, o: (
                None if json.loads(o.stdout)["documents"] == 1 else "not one document"
            ),
        )
    )
    # a Parquet/Arrow cell longer than the reader's part size: read from pyarrow's buffer in
    # parts and tokenized in pieces, or refused when it cannot be cut; a Wikipedia page is cleaned
    # whole: one over the limit is refused
    for ext in (".parquet", ".arrow"):
        kind = ext[1:]
        add(
            Case(
                f"prepare-long-{kind}-cell-in-pieces",
                "bad input, full disk",
                prepare(
                    f"{{C}}/x{ext}",
                    "{C}/out",
                    "--vocab",
                    "{C}/other-vocab.txt",
                    "--eval-fraction",
                    "0",
                ),
                "prepared (a 3 MB cell read in parts, tokenized in pieces)",
                rc=0,
                needs=("other-vocab.txt",),
                setup=one_long_cell(f"x{ext}"),
                check=lambda c, o: (
                    None if json.loads(o.stdout)["documents"] == 2 else "not two documents"
                ),
            )
        )
        add(
            Case(
                f"prepare-long-{kind}-cell-no-spaces",
                "bad input, full disk",
                prepare(f"{{C}}/x{ext}", "{C}/out", "--vocab-size", "150"),
                "refused naming the file, the row and the limit; no output",
                absent=("out",),
                setup=one_long_cell(f"x{ext}", cut=False),
                says=(f"{{C}}/x{ext}", "row 2", "1,048,576 characters"),
            )
        )
    add(
        Case(
            "prepare-parquet-page-over-the-limit",
            "bad input, full disk",
            prepare("{C}/x.parquet", "{C}/out", "--vocab-size", "150"),
            "refused before the page is decoded, naming the file, the row group and the "
            "limit; no output",
            absent=("out",),
            setup=one_huge_parquet_page,
            says=("{C}/x.parquet: row group 0", "over the limit of 67,108,864"),
        )
    )
    add(
        Case(
            "prepare-wiki-page-over-the-limit",
            "bad input, full disk",
            prepare("{C}/x.xml", "{C}/out", "--vocab-size", "150"),
            "refused naming the file, the page and the limit; no output",
            absent=("out",),
            setup=one_huge_wiki_page,
            says=("{C}/x.xml", "page 2 ('Huge')", "67,108,864 characters"),
        )
    )
    # a task's value ranges (STS-B scores in [0, 5])
    add(
        Case(
            "stsb-score-out-of-range",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", task="stsb", data="{C}/glue"),
            "refused naming file:line and the range; no output",
            needs=("run", "glue"),
            absent=("ft",),
            setup=stsb_score(7.5),
            says=("STS-B/train.tsv:2", "[0, 5]"),
        )
    )
    for v in ("0", "-2"):
        add(
            Case(
                f"bench-threads-{v}",
                "bad input, full disk",
                ["bench", "--preset", "smoke", "--no-hf", "--quiet", "--threads", v],
                "refused naming --threads",
                says=("threads",),
            )
        )
    for v in ("0", "-5"):
        add(
            Case(
                f"flops-seq-len-{v}",
                "bad input, full disk",
                ["flops", "--config", "tiny", "--seq-len", "128", v],
                "refused naming --seq-len",
                says=("seq-len",),
            )
        )
    for v in ("0", "-1"):
        add(
            Case(
                f"prepare-workers-{v}",
                "bad input, full disk",
                prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150", "--workers", v),
                "refused naming --workers; no output",
                needs=("corpus.txt",),
                absent=("out",),
                says=("workers",),
            )
        )
    add(
        Case(
            "bench-json-unwritable",
            "bad input, full disk",
            ["bench", "--preset", "smoke", "--no-hf", "--json", "{C}/target/b.json"],
            "refused before the run (no progress lines), file intact",
            setup=make_file("target"),
            watch=("target",),
            says=("{C}/target",),
        )
    )
    add(
        Case(
            "prepare-vocab-size-too-large",
            "bad input, full disk",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "20000"),
            "one-line error, or a warning saying the size actually trained",
            rc=(0, 2),
            needs=("corpus.txt",),
            one_line=False,
            check=vocab_size_check,
        )
    )
    add(
        Case(
            "squad-answer-start-mismatch",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", task="squad1", data="{C}/squad"),
            "error naming the file, or the mismatch counted and reported; never relocated silently",
            rc=(0, 2),
            needs=("run", "squad"),
            setup=bad_squad,
            check=squad_check,
            watch=("squad",),
            one_line=False,
        )
    )
    add(
        Case(
            "finetune-max-seq-len-clamped",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", "--set", "max_seq_len=1024"),
            "runs; reports the max_seq_len actually used (128)",
            rc=0,
            needs=("run", "sst2"),
            check=says_in_output("max_seq_len", "128"),
            one_line=False,
        )
    )

    # ---- row 9: numerical and distributed edge cases
    # --------------------------------------------------------
    add(
        Case(
            "half-random-more-random-than-kept",
            "edge settings",
            pretrain(
                "{C}/r",
                "{B}/data",
                "--set",
                "drop.method=half_random",
                "--set",
                "drop.rate=0.75",
                "--set",
                "drop.half_random_frac=0.5",
            ),
            "refused at config time; no run dir",
            absent=("r",),
            says=("half_random",),
        )
    )
    add(
        Case(
            "grad-clip-0-is-off",
            "edge settings",
            pretrain("{C}/r", "{C}/data", "--set", "train.grad_clip=0"),
            "runs; same weights as with clipping off (1e30)",
            rc=0,
            needs=("data",),
            setup=fresh_run("ref", "--set", "train.grad_clip=1e30"),
            check=same_weights_as("ref"),
            one_line=False,
        )
    )
    add(
        Case(
            "diverging-lr-no-nonfinite-checkpoint",
            "edge settings",
            pretrain(
                "{C}/r",
                "{B}/data",
                "--set",
                "train.lr=1e30",
                "--set",
                "train.ckpt_every=1",
                "--set",
                "train.steps=4",
                "--set",
                "train.warmup_steps=0",
            ),
            "stops (one line) or skips; no checkpoint holds non-finite weights",
            rc=(0, 2),
            check=finite_checkpoints,
        )
    )
    add(
        Case(
            "bf16-cpu-unpacked-mask-fill",
            "edge settings",
            pretrain("{C}/r", "{C}/unpacked", "--set", "train.precision=bf16"),
            "runs with finite losses",
            rc=0,
            needs=("corpus.txt",),
            one_line=False,
            setup=lambda c: run_cli(
                prepare(
                    str(c / "corpus.txt"), str(c / "unpacked"), "--vocab-size", "150", "--unpacked"
                ),
                c,
            ),
            check=lambda c, o: (
                None
                if all(
                    r["loss"] == r["loss"] and abs(r["loss"]) != float("inf")
                    for r in metrics(c / "r")
                    if "loss" in r
                )
                else "non-finite loss"
            ),
        )
    )
    add(
        Case(
            "pad-id-not-zero",
            "edge settings",
            pretrain("{C}/r", "{C}/unpacked"),
            "runs on data whose [PAD] is id 7",
            rc=0,
            needs=("corpus.txt", "other-vocab.txt"),
            one_line=False,
            setup=chain(
                pad_not_zero_vocab,
                lambda c: run_cli(
                    prepare(
                        str(c / "corpus.txt"),
                        str(c / "unpacked"),
                        "--vocab",
                        str(c / "pad7-vocab.txt"),
                        "--unpacked",
                    ),
                    c,
                ),
            ),
        )
    )
    add(
        Case(
            "packing-no-sep-sep",
            "edge settings",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150", "--seq-len", "32"),
            "packed shards hold no [SEP][SEP]",
            rc=0,
            needs=("corpus.txt",),
            check=no_sep_sep,
            one_line=False,
        )
    )
    add(
        Case(
            "export-file-permissions",
            "edge settings",
            ["export", "{C}/run", "{C}/out"],
            "files 0644 under umask 022",
            rc=0,
            needs=("run",),
            check=normal_permissions("out"),
            one_line=False,
        )
    )
    add(
        Case(
            "checkpoint-file-permissions",
            "edge settings",
            pretrain("{C}/r", "{B}/data"),
            "files 0644 under umask 022",
            rc=0,
            check=normal_permissions("r/checkpoints"),
            one_line=False,
        )
    )
    add(
        Case(
            "warnings-on-stderr",
            "edge settings",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "a corrupt newest checkpoint: warning on stderr, resumes from the previous one",
            rc=0,
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            one_line=False,
            check=lambda c, o: (
                None
                if "warning" in o.stderr.lower()
                and "warning" not in o.stdout.replace(str(c), "CASE").lower()
                else "the warning is not on stderr (only)"
            ),
        )
    )

    # ---- bad --init sources
    # ----------------------------------------------------------------------- the `continue-plain`
    # preset has no model shape (it comes from the source); the tiny run settings on top
    def init(src, data="{B}/data"):
        return [
            "pretrain",
            "--config",
            "continue-plain",
            "--out",
            "{C}/r",
            "--set",
            f'data.path="{data}"',
            *PT,
            "--init",
            src,
        ]

    add(
        Case(
            "init-dir-without-config-json",
            "--init",
            init("{C}/hf"),
            "refused naming config.json; no run dir",
            needs=("hf",),
            setup=lambda c: (c / "hf" / "config.json").unlink(),
            absent=("r",),
            watch=("hf",),
            says=("config.json",),
        )
    )
    add(
        Case(
            "init-roberta-config",
            "--init",
            init("{C}/hf"),
            "refused naming model_type; no run dir",
            needs=("hf",),
            setup=lambda c: hf_config(
                c, model_type="roberta", architectures=["RobertaForMaskedLM"]
            ),
            absent=("r",),
            watch=("hf",),
            says=("model_type",),
        )
    )
    add(
        Case(
            "init-modernbert-config",
            "--init",
            init("{C}/hf"),
            "a ModernBERT config over BERT weights: refused; no run dir",
            needs=("hf",),
            setup=lambda c: hf_config(
                c, model_type="modernbert", architectures=["ModernBertForMaskedLM"]
            ),
            absent=("r",),
            watch=("hf",),
            says=("model_type",),
        )
    )
    add(
        Case(
            "init-pickle-only-checkpoint",
            "--init",
            init("{C}/hf"),
            "refused (weights_only); no run dir",
            needs=("hf",),
            setup=pickle_only,
            absent=("r",),
            watch=("hf",),
            says=("pytorch_model.bin",),
        )
    )
    add(
        Case(
            "init-mismatched-tensor-shapes",
            "--init",
            init("{C}/hf"),
            "refused naming the tensor; no run dir",
            needs=("hf",),
            setup=mismatched_shapes,
            absent=("r",),
            watch=("hf",),
            says=("intermediate",),
        )
    )
    add(
        Case(
            "init-data-with-another-vocab",
            "--init",
            init("{C}/hf", "{B}/data-other"),
            "refused naming both vocabularies; no run dir",
            needs=("hf",),
            absent=("r",),
            watch=("hf",),
            says=("vocab",),
        )
    )
    add(
        Case(
            "init-seq-len-above-max-positions",
            "--init",
            init("{C}/hf"),
            "refused naming T, the source's learned positions and the source",
            needs=("hf",),
            setup=short_positions,
            absent=("r",),
            watch=("hf",),
            says=("T=64", "32 learned position embeddings", "{C}/hf"),
        )
    )
    add(
        Case(
            "init-missing-directory",
            "--init",
            init("{C}/nowhere"),
            "refused naming the path; no run dir",
            absent=("r",),
            says=("{C}/nowhere",),
        )
    )

    # ---- more faults: the campaign's output dir, verify of every output kind, config.json
    # shapes ----
    # rounds that run whatever the time budget: 1 ... rounds, refused before anything is timed
    for name, argv, key in (
        (
            "bench-min-rounds-over-rounds",
            ["bench", "--preset", "smoke", "--json", "{C}/bench.json"],
            "bench.min_rounds",
        ),
        (
            "bench-longctx-min-rounds-over-rounds",
            ["bench", "--preset", "longctx-cpu", "--json", "{C}/bench.json"],
            "longctx.min_rounds",
        ),
    ):
        add(
            Case(
                name,
                "bad input, full disk",
                [*argv, "--set", "rounds=2", "--set", "min_rounds=3"],
                f"refused at config time naming {key}; nothing written",
                absent=("bench.json",),
                says=(f"{key}: expected 1 ... rounds (2)", "got 3"),
            )
        )
    # part scratch's learning rates: each > 0 and distinct, refused before anything is written
    for name, lrs, got in (
        ("bench-campaign-scratch-lr-0", "[1e-3, 0]", "[0.001, 0.0]"),
        ("bench-campaign-scratch-lrs-repeated", "[1e-3, 1e-3]", "[0.001, 0.001]"),
    ):
        add(
            Case(
                name,
                "bad input, full disk",
                [*CAMPAIGN, "--set", f"scratch.lrs={lrs}", "--out", "{C}/out"],
                "refused at config time naming scratch.lrs; no output dir",
                absent=("out",),
                says=("scratch.lrs: expected distinct learning rates > 0", f"got {got}"),
            )
        )
    add(
        Case(
            "bench-campaign-into-foreign-dir",
            "outputs",
            [*CAMPAIGN, "--out", "{C}/mine"],
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("{C}/mine", "no campaign output"),
        )
    )
    add(
        Case(
            "bench-campaign-into-a-run",
            "outputs",
            [*CAMPAIGN, "--out", "{C}/run"],
            "refused; the run untouched",
            needs=("run",),
            watch=("run",),
            says=("{C}/run", "run output"),
        )
    )
    add(
        Case(
            "bench-campaign-locked-out",
            "locks",
            [*CAMPAIGN, "--out", "{C}/out"],
            "refused: in use; nothing written",
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "bench-campaign-sigint",
            "signals",
            [*CAMPAIGN[:-2], "--out", "{C}/out", "--set", "pytest=true"],
            "exit 130; env.json keeps what the part finished, marked complete: false",
            rc=130,
            gate="campaign-part",
            drive=at_gate(signal.SIGINT),
            check=chain_checks(
                part_record("out/env.json", False, "interrupted (SIGINT)"),
                says_in_output("env's partial result (complete: false) were kept"),
            ),
            one_line=False,
        )
    )
    add(
        Case(
            "bench-campaign-after-sigkill",
            "signals",
            [*CAMPAIGN, "--out", "{C}/out"],
            "a campaign killed during a part: the next one warns, takes the lock over, "
            "redoes the part",
            rc=0,
            setup=campaign_killed(),
            check=chain_checks(
                says_in_output("was killed before it finished"), part_record("out/env.json", True)
            ),
            one_line=False,
        )
    )
    add(
        Case(
            "verify-campaign-killed-part",
            "corrupt files",
            ["verify", "{C}/out"],
            "non-zero, names env.json",
            rc=(1, 2),
            setup=campaign_killed(drop_lock=True),
            watch=("out",),
            says=("{C}/out/env.json", "did not finish"),
        )
    )
    add(
        Case(
            "verify-good-finetune",
            "corrupt files",
            ["verify", "{C}/ft"],
            "exit 0",
            rc=0,
            needs=("run", "sst2"),
            setup=ft_into("ft", "--set", "save_model=true"),
            watch=("ft",),
        )
    )
    add(
        Case(
            "verify-finetune-flipped-saved-model",
            "corrupt files",
            ["verify", "{C}/ft"],
            "non-zero, names the weights file",
            rc=(1, 2),
            needs=("run", "sst2"),
            watch=("ft",),
            says=("{C}/ft/model/model.safetensors", "sha256"),
            setup=chain(
                ft_into("ft", "--set", "save_model=true"),
                lambda c: flip_byte(c / "ft/model/model.safetensors"),
            ),
        )
    )
    add(
        Case(
            "verify-finetune-torn-metrics",
            "corrupt files",
            ["verify", "{C}/ft"],
            "non-zero, names metrics.json",
            rc=(1, 2),
            needs=("run", "sst2"),
            watch=("ft",),
            says=("{C}/ft/metrics.json", "invalid JSON"),
            setup=chain(ft_into("ft"), lambda c: truncate(c / "ft" / "metrics.json")),
        )
    )
    add(
        Case(
            "verify-good-evaluate",
            "corrupt files",
            ["verify", "{C}/ev"],
            "exit 0",
            rc=0,
            needs=("run", "glue", "squad"),
            setup=ev_into("ev"),
            watch=("ev",),
        )
    )
    add(
        Case(
            "verify-evaluate-cell-predictions-gone",
            "corrupt files",
            ["verify", "{C}/ev"],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run", "glue", "squad"),
            watch=("ev",),
            says=("dev.tsv", "recomputes the cell"),
            setup=chain(
                ev_into("ev"), lambda c: cell_file("ev", "predictions/dev.tsv")(c).unlink()
            ),
        )
    )
    add(
        Case(
            "verify-good-study",
            "corrupt files",
            ["verify", "{C}/st"],
            "exit 0",
            rc=0,
            watch=("st",),
            setup=run_into("st", lambda c: [*MINI_STUDY, "--out", str(c / "st")]),
        )
    )
    add(
        Case(
            "verify-study-flipped-run-checkpoint",
            "corrupt files",
            ["verify", "{C}/st"],
            "non-zero, names the file",
            rc=(1, 2),
            watch=("st",),
            says=("{C}/st/runs/baseline-seed0/checkpoints/step-00000008/model.safetensors",),
            setup=chain(
                run_into("st", lambda c: [*MINI_STUDY, "--out", str(c / "st")]),
                lambda c: flip_byte(
                    c / "st/runs/baseline-seed0/checkpoints/step-00000008/model.safetensors"
                ),
            ),
        )
    )
    add(
        Case(
            "finetune-save-model-keeps-source-config",
            "--init",
            finetune("{C}/hf", "{C}/ft", "--set", "save_model=true"),
            "runs; the saved config.json keeps the source's sep_token_id; verify passes",
            rc=0,
            needs=("hf", "sst2"),
            setup=lambda c: hf_config(c, sep_token_id=3),
            check=saved_config_keeps("sep_token_id", 3),
            one_line=False,
        )
    )
    for key, val in (("num_hidden_layers", 0), ("hidden_size", 0), ("hidden_size", None)):
        what = "missing" if val is None else f"{val}"
        add(
            Case(
                f"init-config-{key.replace('_', '-')}-{what}",
                "--init",
                init("{C}/hf"),
                "refused naming config.json and the field (no preset shape); no run dir",
                needs=("hf",),
                setup=(
                    lambda f, v: (
                        lambda c: edit_json(
                            c / "hf" / "config.json",
                            lambda d: d.pop(f) if v is None else d.update({f: v}),
                        )
                    )
                )(key, val),
                absent=("r",),
                watch=("hf",),
                says=("{C}/hf/config.json", key),
            )
        )
    add(
        Case(
            "finetune-config-num-hidden-layers-0",
            "--init",
            finetune("{C}/hf", "{C}/ft"),
            "refused naming config.json and the field; no output",
            needs=("hf", "sst2"),
            setup=lambda c: hf_config(c, num_hidden_layers=0),
            absent=("ft",),
            watch=("hf",),
            says=("{C}/hf/config.json", "num_hidden_layers"),
        )
    )
    # model.attention_backend (tokendrop.models.attention), refused before anything is written
    add(
        Case(
            "pretrain-attention-backend-unknown",
            "attention",
            pretrain("{C}/r", "{C}/data", "--set", 'model.attention_backend="fast"'),
            "refused naming the field; no run dir",
            absent=("r",),
            says=("model.attention_backend", "fast"),
        )
    )
    add(
        Case(
            "pretrain-flex-attention-on-cpu",
            "attention",
            pretrain(
                "{C}/r",
                "{C}/data",
                "--set",
                "model.family=modernbert",
                "--set",
                "model.attention_dropout=0.0",
                "--set",
                'model.attention_backend="flex"',
            ),
            "refused (FlexAttention has no CPU backward); no run dir",
            absent=("r",),
            says=("model.attention_backend", "CUDA"),
        )
    )

    # ---- corrupt inputs: every corpus format refuses a file cut short (never read quietly
    # short) ----
    for name, says in (
        ("half.txt.zst", "zstandard frame 1 (from byte 0) is truncated"),
        ("half.txt.gz", "cannot decompress"),
        ("half.jsonl.bz2", "cannot decompress"),
        ("cut.jsonl", "invalid JSON"),
        ("cut.parquet", "cannot read as Parquet"),
        ("cut.arrow", "no end-of-stream marker"),
    ):
        fmt = name.split(".", 1)[1]
        add(
            Case(
                f"prepare-truncated-{fmt.replace('.', '-')}",
                "corrupt inputs",
                prepare("{C}/" + name, "{C}/out", "--vocab-size", "150"),
                "refused naming the file; no output, no work dir",
                setup=truncated_input(name),
                absent=("out", "out.partial"),
                watch=(name,),
                says=("{C}/" + name, says),
            )
        )

    # ---- directory walks: tokendrop's own outputs are skipped (and said), broken links
    # refused ----
    add(
        Case(
            "prepare-corpus-dir-holding-an-earlier-prepare",
            "directory walks",
            prepare("{C}/corpus", "{C}/corpus/prep", "--vocab-size", "150", "--overwrite"),
            "the earlier output is skipped (a note says so), not read back as corpus; the "
            "re-run replaces it",
            rc=0,
            needs=("corpus.txt",),
            setup=prepared_inside_corpus,
            one_line=False,
            watch=("corpus/corpus.txt",),
            check=chain_checks(
                says_in_output("corpus/prep: skipped, tokendrop's own prepared output"),
                sources_are("corpus/corpus.txt"),
            ),
        )
    )
    add(
        Case(
            "prepare-corpus-symlink-loop",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link; no output",
            needs=("corpus.txt",),
            setup=link("corpus/loop.txt", "loop.txt"),
            absent=("out",),
            says=("{C}/corpus/loop.txt", "symbolic link loop"),
        )
    )
    add(
        Case(
            "prepare-corpus-dangling-link",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link; no output",
            needs=("corpus.txt",),
            setup=link("corpus/gone.txt", "nowhere.txt"),
            absent=("out",),
            says=("{C}/corpus/gone.txt", "dangling symbolic link"),
        )
    )
    add(
        Case(
            "prepare-corpus-link-to-its-parent",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link (a loop); no output",
            needs=("corpus.txt",),
            setup=link("corpus/sub/up", ".."),
            absent=("out",),
            says=("{C}/corpus/sub/up", "already in"),
        )
    )

    # ---- bad paths: one line naming the path, before anything is read or written
    # -------------------------
    under = "{C}/target/out"
    for cmd, argv, needs in (
        ("export", ["export", "{C}/run", under], ("run",)),
        ("pretrain", pretrain(under, "{B}/data"), ()),
        ("prepare", prepare("{C}/corpus.txt", under, "--vocab-size", "150"), ("corpus.txt",)),
        ("finetune", finetune("{C}/run", under), ("run", "sst2")),
    ):
        add(
            Case(
                f"{cmd}-out-under-a-file",
                "bad paths",
                argv,
                "refused naming the file in the way; file intact",
                needs=needs,
                setup=make_file("target"),
                watch=("target",),
                says=("{C}/target/out", "{C}/target is a file, not a directory"),
            )
        )
    add(
        Case(
            "resume-config-toml-broken-by-hand",
            "bad paths",
            ["pretrain", "--resume", "{C}/run", "--quiet"],
            "refused naming config.toml and the fix; the run untouched",
            needs=("run",),
            setup=broken_config,
            watch=("run",),
            says=("{C}/run/config.toml", "invalid TOML", "meta.json"),
        )
    )
    for setting, names in (
        ("model.hidden_size=1000000", "model.hidden_size"),
        ("model.num_layers=100000", "model.num_layers"),
        ("train.batch_size=50000000", "train.batch_size"),
    ):
        add(
            Case(
                f"pretrain-{setting.split('.', 1)[1].replace('_', '-').replace('=', '-')}",
                "bad paths",
                pretrain("{C}/r", "{B}/data", "--set", setting),
                "refused before allocating, with the numbers (GiB needed and "
                "available); no run dir",
                absent=("r",),
                says=("too large", "GiB", names, "train.memory_check"),
                timeout=120,
            )
        )

    for setting, names in (
        ("train.threads=100000", ("train.threads", "at most 1024", "CPUs")),
        ("train.threads=1e30", ("train.threads", "expected an integer", "1e+30")),
        ("data.num_workers=1e30", ("data.num_workers", "expected an integer")),
        ("data.num_workers=100000", ("data.num_workers", "at most 256")),
    ):
        add(
            Case(
                f"pretrain-{setting.split('.', 1)[1].replace('_', '-').replace('=', '-')}",
                "bounds",
                pretrain("{C}/r", "{B}/data", "--set", setting),
                "refused before use, naming the field and the bound; no run dir",
                absent=("r",),
                says=names,
                timeout=120,
            )
        )
    add(
        Case(
            "finetune-threads-100000",
            "bounds",
            [*finetune("{C}/run", "{C}/ft"), "--set", "threads=100000"],
            "refused before use, naming the field and the bound; nothing written",
            needs=("run", "sst2"),
            absent=("ft",),
            says=("threads", "at most 1024"),
        )
    )
    for name, env, says in (
        ("world-size-abc", {"WORLD_SIZE": "abc"}, ("WORLD_SIZE='abc'", "torchrun")),
        ("world-size-alone", {"WORLD_SIZE": "2"}, ("WORLD_SIZE=2 without RANK", "torchrun")),
        (
            "leftover-torchrun-env",
            {
                "WORLD_SIZE": "2",
                "RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29551",
                "TOKENDROP_RENDEZVOUS_TIMEOUT": "3",
            },
            ("did not meet its peers", "within 3 s", "unset WORLD_SIZE"),
        ),
    ):
        add(
            Case(
                f"pretrain-{name}",
                "bounds",
                pretrain("{C}/r", "{B}/data"),
                "one line naming the variable and the fix; no wait without end; no run dir",
                absent=("r",),
                says=says,
                env=env,
                timeout=120,
            )
        )

    # ---- scores on n = 0: refused where they would be computed, rejected by verify
    # ------------------------
    add(
        Case(
            "evaluate-header-only-dev-file",
            "empty scores",
            [
                "evaluate",
                "--models",
                "{C}/run",
                "--out",
                "{C}/ev",
                *EV,
                "--set",
                "tasks=['sst2', 'qnli']",
            ],
            "refused before the first cell, naming the file; no output",
            needs=("run", "glue", "squad"),
            setup=header_only("glue/QNLI/dev.tsv"),
            absent=("ev",),
            says=("{C}/glue/QNLI/dev.tsv", "no examples"),
        )
    )
    add(
        Case(
            "pretrain-held-out-split-without-slots",
            "empty scores",
            pretrain("{C}/r"),
            "refused before the run starts (no eval loss from n = 0); no run dir",
            needs=("data",),
            setup=eval_without_slots,
            absent=("r",),
            watch=("data",),
            says=("held-out split", "n = 0"),
        )
    )
    add(
        Case(
            "verify-finetune-scored-on-n-0",
            "empty scores",
            ["verify", "{C}/ft"],
            "non-zero, names metrics.json",
            rc=(1, 2),
            needs=("run", "sst2"),
            setup=scored_on_nothing,
            watch=("ft",),
            says=("{C}/ft/metrics.json", "scored on n = 0"),
        )
    )

    # ---- stuck runs: a run that failed before its first checkpoint never blocks the
    # corrected command ----
    add(
        Case(
            "pretrain-after-an-impossible-batch",
            "stuck runs",
            pretrain("{C}/r", "{C}/data"),
            "the corrected command takes the failed run over (a note says so) and finishes",
            rc=0,
            needs=("data",),
            setup=failed_before_checkpoint("--set", "train.batch_size=4096"),
            one_line=False,
            check=chain_checks(
                says_in_output("stopped before its first checkpoint", "starting it over"),
                lambda c, o: None if checkpoints(c / "r") else "no checkpoint",
            ),
        )
    )
    add(
        Case(
            "resume-a-run-without-checkpoint",
            "stuck runs",
            ["pretrain", "--resume", "{C}/r", "--quiet"],
            "refused: nothing to resume; the command it suggests works",
            needs=("data",),
            setup=failed_before_checkpoint(fsize=300_000),
            says=("{C}/r has no checkpoint", "nothing to resume"),
            check=suggestion_works("r/checkpoints"),
        )
    )
    full_first = pretrain("{C}/r", "{C}/data")
    add(
        Case(
            "disk-full-first-checkpoint",
            "stuck runs",
            full_first,
            "one-line error that suggests the same command (not --resume: there is no checkpoint); "
            "run again, it finishes",
            needs=("data",),
            fsize=300_000,
            says=("run the same command again",),
            check=chain_checks(
                lambda c, o: "suggests --resume" if "--resume" in o.stderr else None,
                rerun_succeeds(full_first, "r/checkpoints"),
            ),
        )
    )
    return C


# ----------------------------------------------------------------------------------------------
# running one case

HOLD = HOLD_COMMAND  # another process holding write locks (tokendrop.runs.rundir.hold)


def _lines(s: str) -> list[str]:
    return [ln for ln in s.splitlines() if ln.strip()]


def expand(s: str, c: Path, base: Path) -> str:
    return s.replace("{C}", str(c)).replace("{B}", str(base))


def shorten(s: str, c: Path, base: Path) -> str:
    return s.replace(str(c), "CASE").replace(str(base), "BASE").replace(str(REPO), "REPO")


def run_case(case: Case, idx: int, work: Path, base: Path) -> dict[str, Any]:
    c = work / f"{idx:03d}-{case.name}"
    c.mkdir(parents=True)
    rec: dict[str, Any] = {
        "case": case.name,
        "row": case.row,
        "expect": case.expect,
        "command": "tokendrop "
        + shlex.join(a.replace("{C}", "CASE").replace("{B}", "BASE") for a in case.argv),
        "expected_rc": list(case.rc) if isinstance(case.rc, tuple) else case.rc,
    }
    try:
        for item in case.needs:
            src = base / item
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, c / item)
        if case.setup is not None:
            case.setup(c)
    # a setup that cannot be built is a failure of the case, reported as such
    except Exception as e:
        rec.update(
            rc=None,
            stderr_first="",
            traceback=False,
            disk="",
            passed=False,
            why="setup failed: "
            f"{shorten(str(e), c, base).splitlines()[-1][:200] if str(e) else type(e).__name__}",
            seconds=0.0,
        )
        return rec
    watched = {w: snapshot(c / w) for w in case.watch}
    argv = [expand(a, c, base) for a in case.argv]
    holder = None
    if case.hold:
        holder = subprocess.Popen(
            [PY, "-c", HOLD, *[str(c / h) for h in case.hold]],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert holder.stdout.readline().strip() == "held"

    def limits() -> None:
        os.umask(0o022)
        # a matrix started in the background inherits SIGINT ignored (and Python then keeps it so):
        # every case starts with the default disposition, as from a terminal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if case.fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))

    cwd = c / case.cwd if case.cwd else c
    cmd = [PY, "-m", "tokendrop", *argv]
    if case.read_only:  # a private mount namespace in which the case dir is mounted read-only
        cmd = [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" || exit 99; exec "$@"',
            str(c),
            *cmd,
        ]
    t0 = time.time()
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=gated_env(case, c),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limits,
        start_new_session=True,
    )
    try:
        if case.drive is not None:
            import threading

            th = threading.Thread(target=case.drive, args=(p, c), daemon=True)
            th.start()
        try:
            out, err = p.communicate(timeout=case.timeout)
            rc: int | str = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = "timeout"
        if case.drive is not None:
            th.join(timeout=30)
    finally:
        gate_file(c).unlink(missing_ok=True)
        if holder is not None:
            holder.terminate()
            holder.wait(timeout=30)
    secs = time.time() - t0
    o = Outcome(rc, out, err, secs)
    lines = _lines(err)
    tb = "Traceback (most recent call last)" in err
    exp = case.rc if isinstance(case.rc, tuple) else (case.rc,)
    why: list[str] = [DRIVE_NOTES.pop(c)] if c in DRIVE_NOTES else []
    if case.read_only and rc == 99:
        why.append(
            "no read-only mount on this machine (needs `unshare -m` and `mount`: root or "
            "user namespaces)"
        )
    if rc not in exp:
        why.append(f"exit {rc}, expected {' or '.join(map(str, exp))}")
    if tb:
        why.append("traceback")
    one_line = case.one_line if case.one_line is not None else 0 not in exp
    if one_line and rc != 0:
        if rc in (130, 143):  # progress lines may come first; the last one says it was interrupted
            if lines and not lines[-1].startswith("interrupted"):
                why.append("the last line of stderr is not 'interrupted ...'")
        elif len(lines) != 1:
            why.append(f"{len(lines)} lines on stderr, expected one")
        elif rc == 2 and not lines[0].startswith("error: "):
            why.append("the message does not start with 'error: '")
        else:
            miss = [s for s in case.says if expand(s, c, base).lower() not in lines[0].lower()]
            if miss:
                why.append(
                    "the message does not name "
                    + ", ".join(shorten(expand(m, c, base), c, base) for m in miss)
                )
    disk: list[str] = []
    for w, before in watched.items():
        after = snapshot(c / w)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            disk.append(f"{w} changed ({', '.join(changed[:2])})")
    for a in case.absent:
        if (c / a).exists():
            disk.append(f"{a} exists")
    left = leftovers(c)
    if left:
        disk.append("left " + ", ".join(left[:2]))
    if case.check is not None and not why:
        try:
            msg = case.check(c, o)
        except Exception as e:  # the state the check reads is not there: that is the finding
            msg = f"check could not read the result: {type(e).__name__}: {e}"
        if msg:
            disk.append(shorten(msg, c, base))
    why += disk
    first = shorten(lines[0], c, base) if lines else ""
    rec.update(
        rc=rc,
        stderr_first=first[:300],
        stderr_lines=len(lines),
        traceback=tb,
        disk="intact" if not disk else "; ".join(disk),
        passed=not why,
        why="; ".join(why),
        seconds=round(secs, 1),
    )
    if tb:
        tail = [ln for ln in lines if ln and not ln.startswith(" ")]
        rec["exception"] = shorten(tail[-1], c, base)[:300] if tail else ""
    return rec


# ----------------------------------------------------------------------------------------------
# the report


def machine_line() -> str:
    cpu = cpu_model()
    try:
        import torch

        tv = torch.__version__
    except ImportError:
        tv = "?"
    return (
        f"{datetime.date.today().isoformat()}, {cpu}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, torch {tv}"
    )


def md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def load_line(start: list[float] | None) -> str:
    """The load average when the matrix started and when it ended (the cases' timing and any race
    they had depend on it; none should)."""
    end = loadavg()
    fmt = lambda la: "/".join(f"{x:.1f}" for x in la) if la else "?"  # noqa: E731
    return f"load average (1/5/15 min) {fmt(start)} at the start, {fmt(end)} at the end"


RECORD_KEYS = ("command", "machine", "load", "seconds", "cases", "passed", "results")


def read_records(path: Path) -> dict:
    """A run's JSON records (what ``--json`` wrote), for ``--also`` and ``--render``; TokendropError
    with one line naming the file otherwise."""
    d = read_json(path, hint="expected the --json records of a fault-matrix run")
    missing = [k for k in RECORD_KEYS if k not in d]
    if missing:
        raise TokendropError(
            f"{path}: not the records of a fault-matrix run (no {', '.join(missing)}); "
            "give the file its --json wrote"
        )
    return d


def other_run_line(path: Path) -> str:
    """One line summarising another run of the matrix from its JSON records (``--also``)."""
    d = read_records(path)
    failing = [r["case"] for r in d["results"] if not r["passed"]]
    return (
        f"* `{d['command']}` on {d['machine']}; {d['load']}; {d['seconds']:.0f} s: **{d['passed']} "
        f"of {d['cases']} pass**"
        + (f" (failing: {', '.join(failing)})" if failing else "")
        + f" -- records: `{path.name}`"
    )


def write_markdown(
    path: Path,
    recs: list[dict],
    command: str,
    seconds: float,
    only: str | None,
    load: str = "",
    also: tuple[Path, ...] = (),
) -> None:
    n, ok = len(recs), sum(r["passed"] for r in recs)
    rows = [
        "| # | category | case | command | exit (expected) | first line of stderr | traceback | "
        "disk | result |",
        "|---:|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(recs, 1):
        exp = (
            r["expected_rc"]
            if not isinstance(r["expected_rc"], list)
            else "/".join(map(str, r["expected_rc"]))
        )
        rows.append(
            "| "
            + " | ".join(
                md_cell(x)
                for x in (
                    i,
                    r["row"],
                    r["case"],
                    f"`{r['command']}`",
                    f"{r['rc']} ({exp})",
                    r["stderr_first"] or "-",
                    "yes" if r["traceback"] else "no",
                    r["disk"] or "-",
                    "pass" if r["passed"] else "**FAIL**: " + r["why"],
                )
            )
            + " |"
        )
    failing = [r for r in recs if not r["passed"]]
    text = [
        "# Reliability: the fault matrix",
        "",
        "Every bad input and fault we test, by category (the `category` column), the bad `--init` "
        "sources and the bad",
        "`model.attention_backend` settings, each run as",
        "a subprocess of the real CLI in its own directory built from small generated data.  "
        "The categories:",
        "outputs (never deleting what tokendrop did not write), corrupt files (checkpoints, "
        "prepared data, every",
        "output `verify` checks), corrupt inputs (each corpus format cut short), directory walks "
        "(tokendrop's own",
        "outputs skipped, broken links), locks, signals, moved runs, reuse, logs, bad input / full "
        "disk, bad paths",
        "(`--out` under a file, a hand-broken config, sizes that cannot fit in memory), empty "
        "scores (nothing scored",
        "on n = 0), stuck runs (a run that failed before its first checkpoint never blocks the "
        "corrected command;",
        "every suggested command is run), edge settings, `--init` and attention.  A case that "
        "signals or kills",
        "its command does so only once the command waits at a test gate "
        "(`tokendrop.runs.gate`), so no case",
        "depends on the machine's speed.  A case passes",
        "when the exit code is the expected one, there is no traceback, an error is "
        "one line of stderr",
        "(naming what the case says it must name), and the disk is intact: the watched files "
        "and directories",
        "have the same names, sizes and sha256 as before, what must not exist does not, no "
        "temp / `.old-*` /",
        "lock entry is left, and the case's own check holds.  `CASE` is the case's "
        "directory, `BASE` the",
        "shared inputs (a prepared dataset, a 4-step `tiny` run, its export).",
        "",
        f"Generated by: `{command}`" + (f" (subset: `--only {only}`)" if only else ""),
        "",
        f"Machine: {machine_line()}; {seconds:.0f} s in all" + (f"; {load}." if load else "."),
        "",
        f"**{n} cases: {ok} pass, {n - ok} fail.**",
        "",
        *(
            [
                "The same matrix, run again on another machine state:",
                "",
                *map(other_run_line, also),
                "",
            ]
            if also
            else []
        ),
        *rows,
        "",
    ]
    if failing:
        text += (
            ["## Failing cases", ""]
            + [
                f"* `{r['case']}` (row {r['row']}): {md_cell(r['why'])}"
                + (f" -- `{md_cell(r['exception'])}`" if r.get("exception") else "")
                for r in failing
            ]
            + [""]
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only the cases whose name matches this regular expression")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    ap.add_argument(
        "--md",
        default=str(REPO / "docs" / "reliability.md"),
        help="the Markdown report ('' = none)",
    )
    ap.add_argument(
        "--json",
        default=str(REPO / "docs" / "reliability.json"),
        help="the JSON records ('' = none)",
    )
    ap.add_argument("--work", help="work directory (default: a temp dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        type=Path,
        help="another run's JSON records (e.g. on a loaded machine), summarised in the report",
    )
    ap.add_argument(
        "--render",
        type=Path,
        help="run nothing: write the Markdown report (--md) from this run's JSON records",
    )
    a = ap.parse_args(argv)
    try:  # the records --also and --render name, read before any case runs
        rendered = read_records(a.render) if a.render else None
        for p in a.also:
            read_records(p)
    except TokendropError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if rendered is not None:
        write_markdown(
            Path(a.md),
            rendered["results"],
            rendered["command"],
            rendered["seconds"],
            None,
            rendered["load"],
            tuple(a.also),
        )
        return 0
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    all_cases = cases()
    names = [c.name for c in all_cases]
    assert len(set(names)) == len(names), "duplicate case names"
    sel = [(i, c) for i, c in enumerate(all_cases, 1) if not a.only or re.search(a.only, c.name)]
    if a.list:
        for i, c in sel:
            print(f"{i:3d} {c.row:20s} {c.name}")
        return 0
    if not sel:
        print(f"error: no case matches --only {a.only!r}", file=sys.stderr)
        return 2
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    work = Path(a.work).resolve() if a.work else Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    t0 = time.time()
    load0 = loadavg()
    try:
        base = work / "base"
        build_base(base, base_items([c for _, c in sel]), log)
        base_snap = snapshot(base)
        cases_dir = work / "cases"
        cases_dir.mkdir(exist_ok=True)
        recs: dict[int, dict] = {}
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
            futs = {ex.submit(run_case, c, i, cases_dir, base): i for i, c in sel}
            for f in cf.as_completed(futs):
                r = f.result()
                recs[futs[f]] = r
                log(
                    f"[{len(recs)}/{len(sel)}] {'pass' if r['passed'] else 'FAIL'} {r['case']} "
                    f"({r['seconds']} s){'' if r['passed'] else ': ' + r['why']}"
                )
        ordered = [recs[i] for i, _ in sel]
        if snapshot(base) != base_snap:
            log("warning: a case changed the shared BASE inputs")
        seconds = time.time() - t0
        cmd = (
            "python scripts/fault_matrix.py"
            + (f" --jobs {a.jobs}" if a.jobs != 1 else "")
            + (f" --only {shlex.quote(a.only)}" if a.only else "")
        )
        load = load_line(load0)
        if a.md:
            write_markdown(Path(a.md), ordered, cmd, seconds, a.only, load, tuple(a.also))
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(
                json.dumps(
                    {
                        "command": cmd,
                        "machine": machine_line(),
                        "load": load,
                        "seconds": round(seconds, 1),
                        "cases": len(ordered),
                        "passed": sum(r["passed"] for r in ordered),
                        "results": ordered,
                    },
                    indent=1,
                )
                + "\n"
            )
        n_ok = sum(r["passed"] for r in ordered)
        print(
            f"{len(ordered)} cases: {n_ok} pass, {len(ordered) - n_ok} fail ({seconds:.0f} s)"
            + (f"; report: {a.md}" if a.md else "")
        )
        return 0 if n_ok == len(ordered) else 1
    finally:
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
