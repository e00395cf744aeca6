"""``tokendrop verify PATH``: check a run, a checkpoint, a prepared-data or an exported model directory
in full and say what is wrong (docs/reliability.md, category "corrupt files").

    rep = verify_path("runs/drop")
    rep.ok, rep.kind, rep.problems, rep.notes

What each kind gets:

* **run** (``pretrain --out``): ``config.toml`` parses as a config; ``metrics.jsonl`` reads (a torn
  last line, left by a killed writer, is only a note); every ``checkpoints/step-*`` is checked as a
  checkpoint; when the run's prepared data is reachable, its fingerprint equals the one the newest
  checkpoint recorded;
* **checkpoint** (``RUN/checkpoints/step-*``): ``meta.json`` holds the fields a checkpoint needs and
  its config parses; both tensor files have the recorded size and sha256 and a readable header;
* **prepared** (``prepare --out``): ``meta.json`` against the shard sizes (:meth:`PreparedData.open`),
  each shard's sha256 against the recorded one and every token id below the vocabulary size
  (:meth:`PreparedData.scan`), the token counts and the tokenizer;
* **export** (``export``'s output, or any Hugging Face BERT directory): config.json, every tensor
  parsed with the shapes config.json implies and finite, the tokenizer.  Such a directory records
  no hashes, so bit flips that leave the values finite cannot be detected (a note says so);
* **finetune** (``finetune --out``, and each cell of an evaluation): ``metrics.json`` parses and
  holds the task and its scores; the predictions it implies are there and parse; a saved model
  (``--save-model``) has the sha256 ``metrics.json`` recorded and is checked as an export;
* **evaluate** (``evaluate --out``): ``suite.toml`` loads, ``results.json`` parses; every cell is
  checked as a finetune output; every cell ``results.json`` counts as finished is there and intact;
  the cells still to compute, and those computed from weights other than the model's now (its
  ``model_sha256``), are noted (``tokendrop evaluate`` computes them);
* **study** (``study --out``): ``study-state.json``, ``study.toml`` and ``study.json`` parse; every
  run under ``runs/`` is checked as a run, every prepared dataset under ``data/`` as prepared data,
  ``eval/`` as an evaluation; unfinished runs are noted;
* **campaign** (``bench --campaign --out``): every ``PART.json`` parses and its part finished
  (``complete``), the files it lists and its ``PART.md`` are there.

Nothing is written.  Problems are one line each, naming the file and the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokendrop.runs.rundir import read_marker
from tokendrop.runs.verify_outputs import VERIFIERS, legacy_kind
from tokendrop.runs.verify_runs import (
    VerifyReport,
    _verify_checkpoint,
    _verify_export,
    _verify_prepared,
    _verify_run,
)

__all__ = ["VerifyReport", "verify_path", "detect_kind"]

KINDS = ("run", "checkpoint", "prepared", "export", "finetune", "evaluate", "study", "campaign")


def detect_kind(path: str | os.PathLike) -> str:
    """One of ``KINDS`` or ``unknown`` (see the module doc)."""
    p = Path(path)
    if not p.is_dir():
        return "unknown"
    marker = (read_marker(p) or {}).get("kind")
    if marker in KINDS:
        return marker
    legacy = legacy_kind(p)  # finetune / evaluate / study / campaign output from before output markers
    if legacy:
        return legacy
    meta = p / "meta.json"
    if meta.is_file():
        try:
            fmt = json.loads(meta.read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError, AttributeError):
            fmt = None
        if fmt == "tokendrop-prepared":
            return "prepared"
        if (p / "model.safetensors").exists() or (p / "state.safetensors").exists() or p.parent.name == "checkpoints":  # or shards/
            return "checkpoint"
        if any((p / n).exists() for n in ("train.bin", "eval.bin", "token_counts.npy")):
            return "prepared"
    if (p / "checkpoints").is_dir() or (p / "config.toml").is_file() or (p / "metrics.jsonl").is_file():
        return "run"
    if (p / "config.json").is_file():
        return "export"
    return "unknown"


def verify_path(path: str | os.PathLike) -> VerifyReport:
    """Check ``path`` in full (nothing is written); see the module doc for what each kind gets."""
    p = Path(path)
    if not p.exists():
        return VerifyReport(p, "unknown", [f"{p}: no such file or directory"])
    if not p.is_dir():
        return VerifyReport(p, "unknown", [f"{p}: not a directory; expected a tokendrop run, checkpoint, prepared-data "
                                           "or exported model directory"])
    kind = detect_kind(p)
    rep = VerifyReport(p, kind)
    if kind == "run":
        _verify_run(p, rep)
    elif kind == "checkpoint":
        _verify_checkpoint(p, rep)
    elif kind == "prepared":
        _verify_prepared(p, rep)
    elif kind == "export":
        _verify_export(p, rep)
    elif kind in KINDS:  # finetune, evaluate, study, campaign
        VERIFIERS[kind](p, rep)
    else:
        rep.problems.append(f"{p}: not a tokendrop run (config.toml, checkpoints/), checkpoint (meta.json + "
                            "model.safetensors), prepared-data (meta.json + shards), exported model (config.json), "
                            "finetune (metrics.json), evaluate (suite.toml), study (study-state.json) or campaign "
                            "(PART.json) directory; nothing to verify")
    return rep
