"""``tokendrop verify`` for the directories ``pretrain``, ``prepare`` and ``export`` write: runs,
checkpoints, prepared data and exported models, and the report every kind fills.

What each kind gets is in :mod:`tokendrop.runs.verify`'s module doc (the command and its dispatch live
there; :mod:`tokendrop.runs.verify_outputs` checks the other kinds, reusing these).  Nothing is written.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tokendrop.errors import TokendropError


@dataclass
class VerifyReport:
    path: Path
    kind: str  # one of KINDS, or unknown
    problems: list[str] = field(default_factory=list)  # one line each; empty: all good
    notes: list[str] = field(default_factory=list)  # what was checked, and findings that are not problems

    @property
    def ok(self) -> bool:
        return not self.problems


def _line(e: BaseException) -> str:
    return " ".join(part.strip() for part in str(e).splitlines() if part.strip()) or type(e).__name__


# ----------------------------------------------------------------------------------------------
# kinds


def _verify_checkpoint(ck: Path, rep: VerifyReport) -> dict | None:
    """Problems of one checkpoint into ``rep``; -> its meta when meta.json is usable."""
    from safetensors import safe_open

    from tokendrop.train import checkpoint as ckpt_mod
    from tokendrop.config import Config, from_dict

    try:
        meta = ckpt_mod.read_meta(ck)
    except ckpt_mod.CheckpointError as e:
        rep.problems.append(_line(e))
        return None
    bad = False
    for name in ckpt_mod.tensor_files(meta):  # both files, or every shard file + state.safetensors
        try:
            ckpt_mod._check_file(ck, name, meta)
        except ckpt_mod.CheckpointError as e:
            rep.problems.append(_line(e))
            bad = True
            continue
        try:
            with safe_open(str(ck / name), framework="pt") as f:
                f.keys()
        except Exception as e:  # noqa: BLE001 -- hash matched, so meta.json was edited too
            rep.problems.append(f"{ck / name}: not a readable safetensors file ({_line(e)})")
            bad = True
    try:
        from_dict(Config, meta["config"])
    except (TokendropError, ValueError, KeyError, TypeError) as e:
        rep.problems.append(f"{ck / 'meta.json'}: its config does not load ({_line(e)})")
        bad = True
    if not bad:
        what = (f"sharded by {meta['sharded'].get('world_size')} ranks, sha256 of all {len(meta['files'])} tensor files"
                if ckpt_mod.is_sharded(meta) else "sha256 of both tensor files")
        rep.notes.append(f"{ck.name}: step {meta['step']}, {what} as recorded")
    return None if bad else meta


def _verify_run(run: Path, rep: VerifyReport) -> None:
    from tokendrop.config import Config, from_dict

    cfg = None
    ct = run / "config.toml"
    if not ct.is_file():
        rep.problems.append(f"{ct}: missing; a run directory holds the resolved config (restore it from a checkpoint's "
                            "meta.json or start the run again)")
    else:
        try:
            cfg = from_dict(Config, tomllib.loads(ct.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            rep.problems.append(f"{ct}: invalid TOML ({_line(e)})")
        except (TokendropError, ValueError, KeyError, TypeError) as e:
            rep.problems.append(f"{ct}: does not load as a config ({_line(e)})")
    root = run / "checkpoints"
    cks = sorted(c for c in root.iterdir() if c.is_dir() and c.name.startswith("step-")) if root.is_dir() else []
    stale = sorted(c.name for c in root.iterdir() if c.name.startswith(".step-")) if root.is_dir() else []
    _verify_metrics(run / "metrics.jsonl", rep, required=bool(cks))
    good = [(ck, m) for ck in cks if (m := _verify_checkpoint(ck, rep)) is not None]
    if not cks:
        rep.notes.append("no checkpoint yet (checkpoints/step-*/): nothing to resume or export")
    if stale:
        rep.notes.append(f"{len(stale)} unfinished checkpoint temp dir(s) ({stale[0]}, ...) from a killed writer: "
                         "ignored, and removed by the next checkpoint")
    from tokendrop.data.tokenizer import has_tokenizer_files

    if not has_tokenizer_files(run / "tokenizer"):
        rep.notes.append(f"{run / 'tokenizer'}: no vocab.txt or tokenizer.json (export and inspect fall back to the "
                         "prepared data's)")
    if good and cfg is not None:
        _check_run_data(cfg, good[-1][1], rep)
    rep.notes.insert(0, f"run: {len(cks)} checkpoint(s), {len(good)} intact")


def _verify_metrics(f: Path, rep: VerifyReport, required: bool) -> None:
    if not f.is_file():
        if required:
            rep.problems.append(f"{f}: missing; the run's log is gone (its checkpoints are still usable)")
        return
    from tokendrop.train.metrics import scan_lines

    try:
        text = f.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        rep.problems.append(f"{f}: unreadable ({e.strerror or e})")
        return
    records, bad, torn = scan_lines(text)
    if bad:
        i, why = bad[0]
        rep.problems.append(f"{f}:{i}: not a JSON record ({why}); the log was edited or is corrupt")
        return
    if torn:
        rep.notes.append(f"{f}: torn last line (a killed writer); tolerated, dropped on --resume")
    rep.notes.append(f"metrics.jsonl: {len(records)} records")


def _check_run_data(cfg, meta: dict, rep: VerifyReport) -> None:
    from tokendrop.data import DataError, PreparedData

    recorded = meta.get("data_fingerprint")
    path = cfg.data.path
    if not path or not Path(path).is_dir():
        rep.notes.append(f"data.path {path or '(none)'}: not reachable from here; the data was not checked "
                         "(--resume needs it, or moved data with the same fingerprint: --set data.path=DIR)")
        return
    try:
        now = PreparedData.open(path).fingerprint()
    except DataError as e:
        rep.problems.append(f"data.path: {_line(e)}")
        return
    if isinstance(recorded, dict):
        diff = [k for k in recorded if recorded[k] != now.get(k)]
        if diff:
            rep.problems.append(f"{path}: not the data the run was trained on (its {', '.join(diff)} differ from the "
                                "fingerprint the newest checkpoint recorded); point data.path at the run's data")
            return
    rep.notes.append(f"data.path {path}: opens" + (", fingerprint as recorded" if isinstance(recorded, dict) else ""))


def _verify_prepared(p: Path, rep: VerifyReport) -> None:
    from tokendrop.data import DataError, PreparedData
    from tokendrop.data.prepared import SPLITS
    from tokendrop.data.tokenizer import load_tokenizer

    try:
        pd = PreparedData.open(p)
    except DataError as e:
        rep.problems.append(_line(e))
        return
    for split in SPLITS:
        if pd.num_sequences(split) == 0:
            rep.notes.append(f"{split}: empty split")
            continue
        try:
            s = pd.scan(split)
        except OSError as e:
            rep.problems.append(f"{p / pd.meta['splits'][split]['file']}: unreadable ({e.strerror or e})")
            continue
        if s["problem"]:
            rep.problems.append(s["problem"])
        elif s["recorded_sha256"] is None:
            rep.notes.append(f"{split}: no sha256 recorded; size and token ids checked (max id {s['max_id']})")
        else:
            rep.notes.append(f"{split}: {pd.num_sequences(split)} sequences, sha256 as recorded, max id {s['max_id']} "
                             f"< {pd.vocab_size}")
    try:
        pd.token_counts()
    except DataError as e:
        rep.problems.append(_line(e))
    try:
        load_tokenizer(p)
    except DataError as e:
        rep.problems.append(f"{p}: the tokenizer does not load ({_line(e)})")
    rep.notes.insert(0, f"prepared: T={pd.seq_len}, {'packed' if pd.packed else 'unpacked'}, vocabulary {pd.vocab_size}")


def _verify_export(p: Path, rep: VerifyReport) -> None:
    import torch

    from tokendrop.models.hf import InteropError
    from tokendrop.models.source import read_source_tensors, resolve_init_source

    try:
        src = resolve_init_source(str(p))
        tensors = read_source_tensors(src)
    except (InteropError, TokendropError) as e:
        rep.problems.append(_line(e))
        return
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            rep.problems.append(f"{src.weights_file}: tensor {name} holds NaN or inf values; the file is corrupt "
                                "(export the model again)")
    if src.tokenizer_dir is not None:
        from tokendrop.data import DataError
        from tokendrop.data.tokenizer import load_tokenizer

        try:
            load_tokenizer(p)
        except DataError as e:
            rep.problems.append(f"{p}: the tokenizer does not load ({_line(e)})")
    else:
        rep.notes.append(f"{p}: no tokenizer files (vocab.txt / tokenizer.json)")
    rep.notes.insert(0, f"export: {src.layout}, {len(tensors)} tensors parsed, sha256 {src.sha256[:12]}... "
                        "(a Hugging Face directory records no hashes: corruption that leaves values finite "
                        "cannot be detected)")
