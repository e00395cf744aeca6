"""The GPU campaign: parts that each fit one ~9-minute call on a lent GPU machine.

    tokendrop bench --campaign priority --out $OUT             # the parts in PRIORITY order
    tokendrop bench --campaign env --out $OUT                  # one part per call
    tokendrop bench --campaign all --out /tmp/dry --dry-run     # every part, tiny sizes, on CPU

``priority`` runs the parts in ``PRIORITY`` order within ``total_s`` seconds in all (each part
within ``min(budget_s, what is left)``; a part starts only with ``min_part_s`` left, or its
section's ``min_budget_s`` where larger: ``config.part_start_s``), skipping parts an earlier call
into the same OUT finished, so a second call continues where the first stopped. Parts (``PARTS``):
``step`` (the trainer's step per ``train.compile`` mode -- eager, compiled, CUDA graphs -- dense vs
50% drop, both families, T=128 at 16k and 64k tokens per step and T=512: ms/step, MFU, FLOP bound,
GPU-busy fraction), ``env`` (versions, usable SDPA backends at bf16, ``pytest -m gpu``), ``bench``
(bert-base eager: ours dense / 50% drop / transformers', MFU, memory, the largest batch that fits),
``bench-compile`` (the same compiled), ``pretrain`` (real runs from carried data, resume, torchrun),
``quality`` (time-to-quality of a small BERT, dense vs token drop, then fine-tuning),
``bench-modern`` (the ModernBERT-architecture family, modern-base eager at T=512 and 1024: ours
dense / 50% drop / ``transformers.ModernBertForMaskedLM``), ``strong`` (time to loss from scratch on
top of the strongest dense recipe: dense vs + token drop, a 6 x 384 BERT), ``scratch`` (the paper's
setting from scratch at BERT-base width: a 12 x 768 encoder with the paper's layout, T=128, dense,
dense for 75% of the steps and token drop at two learning rates, equal steps: held-out MLM loss and
the gap at equal steps and equal FLOPs), ``bench-longctx`` (both families at T = 512 ... 8192, dense
vs 50% drop, FLOP bound, attention share, memory). Each writes ``OUT/PART.json`` + ``OUT/PART.md``
(after every phase) and stops itself within ``budget_s``."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path

import torch

from tokendrop.errors import ConfigError
from tokendrop.lab.bench.campaign.bench_part import run_bench_part
from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, write_part
from tokendrop.lab.bench.campaign.config import (
    PARTS,
    PRIORITY,
    BenchPart,
    CampaignConfig,
    PretrainPart,
    QualityPart,
    campaign_config,
    part_start_s,
)
from tokendrop.lab.bench.campaign.env_part import run_env
from tokendrop.lab.bench.campaign.longctx_part import run_longctx_part
from tokendrop.lab.bench.campaign.pretrain_part import run_pretrain_part
from tokendrop.lab.bench.campaign.quality_part import run_quality_part
from tokendrop.lab.bench.campaign.step_part import run_step_part
from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_write_json
from tokendrop.runs.gate import gate

TITLES = {
    "step": "the trainer's step per train.compile mode (eager / compiled / CUDA graphs), dense vs "
    "50% drop, both families",
    "env": "environment, SDPA backends, GPU tests",
    "bench": "bert-base step time, eager (ours dense / token drop / transformers), largest batch",
    "bench-compile": "bert-base step time, torch.compile",
    "pretrain": "bert-base-128 pretraining runs, resume, torchrun",
    "quality": "time to quality: dense vs token dropping, then fine-tuning",
    "bench-modern": "ModernBERT-architecture step time, eager (ours dense / token drop / "
    "transformers.ModernBertForMaskedLM)",
    "strong": "time to loss on top of the strong dense recipe: dense vs + token "
    "dropping, from scratch",
    "scratch": "the paper's setting from scratch at BERT-base width: dense, dense (75%) and "
    "token drop at two learning rates",
    "bench-longctx": "long context: dense vs token drop at T = 512 ... 8192, both families",
}


RUNNERS = {
    "step": run_step_part,
    "env": run_env,
    "bench": run_bench_part,
    "bench-compile": run_bench_part,
    "bench-modern": run_bench_part,
    "pretrain": run_pretrain_part,
    "bench-longctx": run_longctx_part,
    "quality": run_quality_part,
    "strong": run_quality_part,
    "scratch": run_quality_part,
}


def _runner(part: str):
    return RUNNERS[part]


def _device_name(cfg: CampaignConfig) -> str:
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "campaign.device: cuda, but CUDA is not available here (run with --dry-run on CPU)"
            )
        return torch.cuda.get_device_name(0)
    return f"cpu ({os.cpu_count()} cores)"


# OUT/: the part under way (pid, host, start); gone when it ends
IN_PROGRESS = ".campaign-in-progress.json"


def run_parts(
    cfg: CampaignConfig,
    parts: list[str] | tuple[str, ...],
    out: str | os.PathLike,
    log: Log | None = None,
) -> list[PartResult]:
    """Run the named parts (``all`` = every part) in order, each within ``cfg.budget_s``.

    ``out`` is locked for the call (a second campaign into it fails at once: "in use by pid N") and
    marked as campaign output (``tokendrop.runs.rundir``): it must be empty, absent or an earlier
    campaign's (continued: the parts run now replace their own earlier results, other parts' stay).
    While a part runs, ``OUT/.campaign-in-progress.json`` names it and its ``PART.json`` says
    ``complete: false``; a campaign killed during a part leaves both, and the next one says so."""
    names: list[str] = []
    priority = "priority" in parts
    for p in parts:
        for name in PARTS if p == "all" else PRIORITY if p == "priority" else [p]:
            if name not in PARTS:
                raise ConfigError(
                    f"bench --campaign: unknown part {name!r}; expected {', '.join(PARTS)}, "
                    "all or priority"
                )
            if name not in names:
                names.append(name)
    cfg.validate()
    device = _device_name(cfg)
    out_dir = Path(out)
    say = log or (lambda s: None)
    with rundir.lock(out_dir):
        claim_output(out_dir)
        _report_killed(out_dir)
        results = []
        total = Budget(cfg.total_s)
        for name in names:
            if priority and _finished(out_dir, name):  # an earlier call of the same campaign ran it
                say(f"[{name}] done by an earlier call ({out_dir / (name + '.json')}); next part")
                continue
            need = part_start_s(cfg, name)
            if priority and not total.allows(need):
                say(
                    f"[{name}] not started: {total.left():.0f} s of campaign.total_s left, it "
                    f"needs {need:.0f} s (the next call continues here)"
                )
                continue
            part_cfg = (
                dataclasses.replace(cfg, budget_s=min(cfg.budget_s, total.left()))
                if priority
                else cfg
            )
            results.append(_run_part(part_cfg, name, device, out_dir, say))
    return results


def _finished(out: Path, name: str) -> bool:
    """``OUT/NAME.json`` holds a part that ran to its end (``complete``)."""
    try:
        d = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and d.get("part") == name and d.get("complete") is True


def _run_part(cfg: CampaignConfig, name: str, device: str, out_dir: Path, say: Log) -> PartResult:
    budget = Budget(cfg.budget_s)
    r = PartResult(part=name, dry_run=cfg.dry_run, device=device, budget_s=cfg.budget_s)

    def save(r: PartResult = r, budget: Budget = budget, name: str = name) -> None:
        r.wall_s = budget.elapsed()
        write_part(r, out_dir, TITLES[name])

    say(f"[{name}] {TITLES[name]} (budget {cfg.budget_s:.0f}s)")
    _forget_earlier_result(out_dir, name, say)
    atomic_write_json(
        out_dir / IN_PROGRESS,
        {"part": name, "pid": os.getpid(), "host": socket.gethostname(), "started": r.started},
    )
    save()  # PART.json now says complete: false until the part ends
    try:
        # a test-only pause point (tokendrop.runs.gate): PART.json says complete: false
        gate("campaign-part")
        _runner(name)(cfg, out_dir, budget, r, save, say)
    except Exception as e:  # recorded in PART.json; the next part still runs
        r.error = " ".join(f"{type(e).__name__}: {e}".split())[:2000]
        r.data["traceback"] = traceback.format_exc()[-4000:]
        say(f"[{name}] stopped: {r.error}")
    # Ctrl-C / SIGTERM: PART.json keeps what the part finished, marked incomplete
    except BaseException as e:
        sig = getattr(e, "signum", signal.SIGINT if isinstance(e, KeyboardInterrupt) else None)
        r.error = (
            f"interrupted ({signal.Signals(sig).name if sig else type(e).__name__}) before "
            "the part finished"
        )
        save()
        (out_dir / IN_PROGRESS).unlink(missing_ok=True)
        print(
            f"[{name}] interrupted: {out_dir / (name + '.json')} holds what it finished "
            "(complete: false)",
            file=sys.stderr,
            flush=True,
        )
        # the CLI's last line says so instead of "nothing partial was kept"
        if isinstance(e, KeyboardInterrupt):
            e.kept = (
                f"the finished parts and {name}'s partial result (complete: false) were "
                f"kept in {out_dir}"
            )
        raise
    r.complete = True
    save()
    (out_dir / IN_PROGRESS).unlink(missing_ok=True)
    return r


def _is_campaign_result(out: Path) -> bool:
    """``out`` holds a part's result (PART.json naming its part): campaign output from before
    markers."""
    for name in PARTS:
        try:
            d = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("part") == name:
            return True
    return False


def claim_output(out: str | os.PathLike) -> Path:
    """Check that ``out`` may take campaign output and mark it (the caller holds
    ``rundir.lock(out)``): absent or empty, or an earlier campaign's; anything else is refused
    (``RunDirError``, one line)."""
    p = Path(out)
    if p.is_dir() and not p.is_symlink() and any(p.iterdir()):
        have = (rundir.read_marker(p) or {}).get("kind")
        if have is None and _is_campaign_result(p):  # written before campaign output was marked
            rundir.write_marker(p, "campaign")
            have = "campaign"
        if have is None:
            raise rundir.RunDirError(
                f"--out: {p} already exists, is not empty and holds no campaign output (no "
                f"{rundir.MARKER}); the campaign writes only into an empty directory or an earlier "
                "campaign's: choose another --out"
            )
        if have != "campaign":
            raise rundir.RunDirError(
                f"--out: {p} holds tokendrop {have} output, not a campaign's: choose another --out"
            )
    rundir.prepare_output(p, "campaign")  # a file or a link at OUT: refused
    rundir.create(p, "campaign")
    # temp files of a writer killed mid-write (we hold the lock: none is live)
    for f in p.iterdir():
        if f.name.startswith(".") and ".tmp-" in f.name and f.is_file() and not f.is_symlink():
            f.unlink()
    return p


def _report_killed(out: Path) -> None:
    """A campaign killed during a part (SIGKILL, a time limit) left OUT/.campaign-in-progress.json:
    say so."""
    f = out / IN_PROGRESS
    if not f.is_file():
        return
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        what = f"part {d['part']} of an earlier campaign (pid {d['pid']}, started {d['started']})"
        part = str(d["part"])
    except (OSError, ValueError, KeyError, TypeError):
        what, part = "a part of an earlier campaign", "PART"
    print(
        f"warning: {out}: {what} was killed before it finished; {part}.json holds only what it "
        "finished (complete: false) until that part runs again",
        file=sys.stderr,
        flush=True,
    )
    f.unlink(missing_ok=True)


def _forget_earlier_result(out: Path, name: str, say: Log) -> None:
    """Before part ``name`` runs again: remove the files its earlier result listed (PART.json's
    ``files``), so OUT never mixes an old run's files with the new run's.  Only plain files inside
    OUT, named relative to it, are removed; PART.json and PART.md are replaced by the new run."""
    try:
        old = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    files = old.get("files") if isinstance(old, dict) else None
    if not isinstance(files, list):
        return
    root = out.resolve()
    gone = 0
    for rel in files:
        if not isinstance(rel, str) or not rel or Path(rel).is_absolute():
            continue
        f = out / rel
        if f.is_symlink() or not f.is_file() or root not in f.resolve().parents:
            continue
        f.unlink()
        gone += 1
        parent = f.parent
        while parent != out and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    say(
        f"[{name}] replacing its earlier result (started {old.get('started', '?')}; {gone} "
        "file(s) removed)"
    )


__all__ = [
    "PARTS",
    "RUNNERS",
    "TITLES",
    "CampaignConfig",
    "BenchPart",
    "PretrainPart",
    "QualityPart",
    "PartResult",
    "Budget",
    "campaign_config",
    "run_parts",
    "part_start_s",
    "claim_output",
    "IN_PROGRESS",
]
