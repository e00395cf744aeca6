"""Resumed and reused: runs whose data moved, evaluation cells reused by content, logs that survive
a kill, an empty held-out split."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome, text_lines
from faultlib.commands import EV, prepare, pretrain, run_cli
from faultlib.files import edit_json, metrics, shard_path
from faultlib.setups import chain, fresh_run, make_dir
from tokendrop.runs.metrics import scan_lines


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


def eval_loss_not_zero(c: Path, o: Outcome) -> str | None:
    """Row 7: an empty held-out split is an error (one line), or evaluation is off with a warning;
    never an eval loss of 0.0."""
    if o.rc == 2:
        return None if len(text_lines(o.stderr)) == 1 else "error is not one line"
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
        for ln in text_lines(err)
    )


def prepare_empty_eval(c: Path, o: Outcome) -> str | None:
    if o.rc == 2:
        return None if len(text_lines(o.stderr)) == 1 else "error is not one line"
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


def rows() -> list[Case]:
    """Runs that move, results keyed by content, logs that survive a kill."""
    C: list[Case] = []
    add = C.append
    # runs that move
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

    # results keyed by content
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

    # logs that survive a kill
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
    return C
