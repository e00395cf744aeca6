"""``tokendrop verify PATH``: check a run, a checkpoint, a prepared-data or an exported model
directory in full and say what is wrong (docs/reliability.md, category "corrupt files").

    rep = verify_path("runs/drop")
    rep.ok, rep.kind, rep.problems, rep.notes

What each kind gets:

* **run** (``pretrain --out``): ``config.toml`` parses as a config; ``metrics.jsonl`` reads (a torn
  last line, left by a killed writer, is only a note); every ``checkpoints/step-*`` is checked as a
  checkpoint; when the run's prepared data is reachable, its fingerprint equals the one the newest
  checkpoint recorded;
* **checkpoint** (``RUN/checkpoints/step-*``): ``meta.json`` holds the fields a checkpoint needs and
  its config parses; both tensor files have the recorded size and sha256 and a readable header; then
  the checks ``--resume`` makes (:func:`tokendrop.train.resume.check_checkpoint`, the one place):
  the step in meta.json, the directory name, the optimizer's step counters and the data position
  agree, and the model shape, seed and method are the run's (``RUN/config.toml``);
* **prepared** (``prepare --out``): ``meta.json`` against the shard sizes
  (:meth:`PreparedData.open`), each shard's sha256 against the recorded one and every token id below
  the vocabulary size (:meth:`PreparedData.scan`), the token counts and the tokenizer;
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
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from tokendrop.config import Config, from_dict, recorded_config, to_dict
from tokendrop.data import DataError, PreparedData
from tokendrop.data.prepared import SPLITS
from tokendrop.data.tokenizer import has_tokenizer_files, load_tokenizer
from tokendrop.errors import InteropError, TokendropError, TrainingError, check_path_arg
from tokendrop.finetuning.suite import SuiteConfig, cells_for, load_suite, model_weights
from tokendrop.finetuning.tasks import get_task
from tokendrop.models.source import resolve_init_source
from tokendrop.models.weights import read_source_tensors
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.checkpoint import sha256_file
from tokendrop.runs.files import read_json
from tokendrop.runs.metrics import scan_lines
from tokendrop.runs.rundir import read_marker, run_id
from tokendrop.train.resume import check_checkpoint

__all__ = ["VerifyReport", "verify_path", "detect_kind", "VERIFIERS"]


@dataclass
class VerifyReport:
    path: Path
    kind: str  # one of KINDS, or unknown
    problems: list[str] = field(default_factory=list)  # one line each; empty: all good
    # what was checked, and findings that are not problems
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def error_line(e: BaseException) -> str:
    return (
        " ".join(part.strip() for part in str(e).splitlines() if part.strip()) or type(e).__name__
    )


def verify_checkpoint(ck: Path, rep: VerifyReport, run_config: dict | None = None) -> dict | None:
    """Problems of one checkpoint into ``rep``; -> its meta when meta.json is usable.  Its files are
    hashed, then it is checked against itself and its run as ``--resume`` checks it
    (:func:`tokendrop.train.resume.check_checkpoint`; ``run_config``: the run's config as a dict,
    read from ``RUN/config.toml`` for a checkpoint of a run when not given)."""
    if run_config is None and ck.parent.name == "checkpoints":
        run_config = _run_config(ck.parent.parent)
    try:
        meta = ckpt_mod.read_meta(ck)
    except ckpt_mod.CheckpointError as e:
        rep.problems.append(error_line(e))
        return None
    bad = False
    for name in ckpt_mod.tensor_files(meta):  # both files, or every shard file + state.safetensors
        try:
            ckpt_mod.check_file(ck, name, meta)
        except ckpt_mod.CheckpointError as e:
            rep.problems.append(error_line(e))
            bad = True
            continue
        try:
            with safe_open(str(ck / name), framework="pt") as f:
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # noqa: BLE001 -- hash matched, so meta.json was edited too
            rep.problems.append(f"{ck / name}: not a readable safetensors file ({error_line(e)})")
            bad = True
            continue
        try:  # what resume and export refuse: NaN/inf behind a rewritten hash
            ckpt_mod.check_finite(tensors, ck / name, "restore it from a backup")
        except ckpt_mod.CheckpointError as e:
            rep.problems.append(error_line(e))
            bad = True
    try:
        from_dict(Config, recorded_config(meta["config"]))
    except (TokendropError, ValueError, KeyError, TypeError) as e:
        rep.problems.append(f"{ck / 'meta.json'}: its config does not load ({error_line(e)})")
        bad = True
    if not bad:
        try:
            rid = run_id(ck.parent.parent) if ck.parent.name == "checkpoints" else None
            check_checkpoint(ck, meta, ckpt_mod.step_counters(ck, meta), run_config, run_id=rid)
        except TrainingError as e:
            rep.problems.append(error_line(e))
            bad = True
    if not bad:
        what = (
            f"sharded by {meta['sharded'].get('world_size')} ranks, sha256 of all "
            f"{len(meta['files'])} tensor files"
            if ckpt_mod.is_sharded(meta)
            else "sha256 of both tensor files"
        )
        rep.notes.append(
            f"{ck.name}: step {meta['step']}, {what} as recorded, consistent with itself"
            + (" and the run's config" if run_config is not None else "")
        )
    return None if bad else meta


def _run_config(run: Path) -> dict | None:
    """The run's ``config.toml`` as a dict, or None when it does not load (verify_run says why)."""
    try:
        return to_dict(
            from_dict(
                Config,
                recorded_config(tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))),
            )
        )
    except (
        OSError,
        tomllib.TOMLDecodeError,
        UnicodeDecodeError,
        TokendropError,
        ValueError,
        KeyError,
        TypeError,
    ):
        return None


def verify_run(run: Path, rep: VerifyReport) -> None:

    cfg = None
    ct = run / "config.toml"
    if not ct.is_file():
        rep.problems.append(
            f"{ct}: missing; a run directory holds the resolved config (restore it from a "
            "checkpoint's meta.json or start the run again)"
        )
    else:
        try:
            cfg = from_dict(Config, recorded_config(tomllib.loads(ct.read_text(encoding="utf-8"))))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            rep.problems.append(f"{ct}: invalid TOML ({error_line(e)})")
        except (TokendropError, ValueError, KeyError, TypeError) as e:
            rep.problems.append(f"{ct}: does not load as a config ({error_line(e)})")
    root = run / "checkpoints"
    cks = (
        sorted(c for c in root.iterdir() if c.is_dir() and c.name.startswith("step-"))
        if root.is_dir()
        else []
    )
    stale = (
        sorted(c.name for c in root.iterdir() if c.name.startswith(".step-"))
        if root.is_dir()
        else []
    )
    _verify_metrics(run / "metrics.jsonl", rep, required=bool(cks))
    run_config = to_dict(cfg) if cfg is not None else None
    good = []
    for ck in cks:
        with ckpt_mod.reading(ck):  # held while checked: a training run's rotation waits
            if not ck.is_dir():
                rep.notes.append(
                    f"{ck.name}: removed by the run's checkpoint rotation before it was checked"
                )
                continue
            m = verify_checkpoint(ck, rep, run_config)
        if m is not None:
            good.append((ck, m))
    if not cks:
        rep.notes.append("no checkpoint yet (checkpoints/step-*/): nothing to resume or export")
    if stale:
        rep.notes.append(
            f"{len(stale)} unfinished checkpoint temp dir(s) ({stale[0]}, ...) from a killed "
            "writer: ignored, and removed by the next checkpoint"
        )

    if not has_tokenizer_files(run / "tokenizer"):
        rep.notes.append(
            f"{run / 'tokenizer'}: no vocab.txt or tokenizer.json (export and inspect fall back to "
            "the prepared data's)"
        )
    if good and cfg is not None:
        _check_run_data(cfg, good[-1][1], rep)
    rep.notes.insert(0, f"run: {len(cks)} checkpoint(s), {len(good)} intact")


def _verify_metrics(f: Path, rep: VerifyReport, required: bool) -> None:
    if not f.is_file():
        if required:
            rep.problems.append(
                f"{f}: missing; the run's log is gone (its checkpoints are still usable)"
            )
        return

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
    empty = [
        rec["step"] for _, rec in records if isinstance(rec, dict) and rec.get("eval_slots") == 0
    ]
    if empty:
        rep.problems.append(
            f"{f}: the evaluation of step {empty[0]} was scored on 0 prediction slots (an empty "
            "held-out split): its eval loss means nothing; prepare the data with a held-out split "
            "and train again"
        )
    rep.notes.append(f"metrics.jsonl: {len(records)} records")


def _check_run_data(cfg, meta: dict, rep: VerifyReport) -> None:

    recorded = meta.get("data_fingerprint")
    path = cfg.data.path
    if not path or not Path(path).is_dir():
        rep.notes.append(
            f"data.path {path or '(none)'}: not reachable from here; the data was not checked "
            "(--resume needs it, or moved data with the same fingerprint: --set data.path=DIR)"
        )
        return
    try:
        now = PreparedData.open(path).fingerprint()
    except DataError as e:
        rep.problems.append(f"data.path: {error_line(e)}")
        return
    if isinstance(recorded, dict):
        diff = [k for k in recorded if recorded[k] != now.get(k)]
        if diff:
            rep.problems.append(
                f"{path}: not the data the run was trained on (its {', '.join(diff)} differ from "
                "the fingerprint the newest checkpoint recorded); point data.path "
                "at the run's data"
            )
            return
    rep.notes.append(
        f"data.path {path}: opens"
        + (", fingerprint as recorded" if isinstance(recorded, dict) else "")
    )


def verify_prepared(p: Path, rep: VerifyReport) -> None:

    try:
        pd = PreparedData.open(p)
    except DataError as e:
        rep.problems.append(error_line(e))
        return
    for split in SPLITS:
        if pd.num_sequences(split) == 0:
            rep.notes.append(f"{split}: empty split")
            continue
        try:
            s = pd.scan(split)
        except OSError as e:
            rep.problems.append(
                f"{p / pd.meta['splits'][split]['file']}: unreadable ({e.strerror or e})"
            )
            continue
        if s["problem"]:
            rep.problems.append(s["problem"])
        elif s["recorded_sha256"] is None:
            rep.notes.append(
                f"{split}: no sha256 recorded; size and token ids checked (max id {s['max_id']})"
            )
        else:
            rep.notes.append(
                f"{split}: {pd.num_sequences(split)} sequences, sha256 as recorded, max id "
                f"{s['max_id']} < {pd.vocab_size}"
            )
    try:
        pd.token_counts()
    except DataError as e:
        rep.problems.append(error_line(e))
    try:
        load_tokenizer(p)
    except DataError as e:
        rep.problems.append(f"{p}: the tokenizer does not load ({error_line(e)})")
    rep.notes.insert(
        0,
        f"prepared: T={pd.seq_len}, {'packed' if pd.packed else 'unpacked'}, vocabulary "
        f"{pd.vocab_size}",
    )


def verify_export(p: Path, rep: VerifyReport) -> None:

    try:
        src = resolve_init_source(str(p))
        tensors = read_source_tensors(src)
    except (InteropError, TokendropError) as e:
        rep.problems.append(error_line(e))
        return
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            rep.problems.append(
                f"{src.weights_file}: tensor {name} holds NaN or inf values; the file is corrupt "
                "(export the model again)"
            )
    if src.tokenizer_dir is not None:
        try:
            load_tokenizer(p)
        except DataError as e:
            rep.problems.append(f"{p}: the tokenizer does not load ({error_line(e)})")
    else:
        rep.notes.append(f"{p}: no tokenizer files (vocab.txt / tokenizer.json)")
    rep.notes.insert(
        0,
        f"export: {src.layout}, {len(tensors)} tensors parsed, sha256 {src.sha256[:12]}... "
        "(a Hugging Face directory records no hashes: corruption that leaves values finite "
        "cannot be detected)",
    )


def read_checked_json(f: Path, rep: VerifyReport, what: str, fix: str) -> Any:
    """``f`` parsed, or None with a problem naming it (missing / unreadable / invalid JSON)."""
    if not f.is_file():
        rep.problems.append(f"{f}: missing; {what}; {fix}")
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        rep.problems.append(f"{f}: not UTF-8 text (corrupt); {fix}")
    except ValueError as e:
        rep.problems.append(
            f"{f}: invalid JSON ({error_line(e)}); the file is torn or was edited; {fix}"
        )
    except OSError as e:
        rep.problems.append(f"{f}: unreadable ({e.strerror or e}); {fix}")
    return None


def merge_report(rep: VerifyReport, sub: VerifyReport, prefix: str, notes: bool = True) -> None:
    rep.problems.extend(sub.problems)
    if notes:
        rep.notes.extend(f"{prefix}: {n}" for n in sub.notes)


def verify_finetune(p: Path, rep: VerifyReport, fix: str = "") -> dict | None:
    """A ``finetune`` output (or an evaluation cell: ``fix`` says how to recompute it); -> its
    metrics.json when that and everything it implies is intact."""
    fix = fix or f"fine-tune again (`tokendrop finetune ... --out {p} --overwrite`)"
    r = read_checked_json(
        p / "metrics.json",
        rep,
        "a finetune output holds metrics.json, written when it finished",
        fix,
    )
    if r is None:
        return None
    mf = p / "metrics.json"
    if (
        not isinstance(r, dict)
        or not isinstance(r.get("task"), str)
        or not isinstance(r.get("scores"), dict)
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in r["scores"].values()
        )
    ):
        rep.problems.append(
            f"{mf}: not a finetune record (needs 'task' and numeric 'scores'); the file "
            f"was edited; {fix}"
        )
        return None
    bad = False
    metrics = r.get("metrics") if isinstance(r.get("metrics"), dict) else {}
    empty = [
        s
        for s, m in metrics.items()
        if isinstance(m, dict) and any(m.get(k) == 0 for k in ("n", "total"))
    ]
    if empty:  # an accuracy of 0.00 over no example is no score
        rep.problems.append(
            f"{mf}: split {empty[0]} was scored on n = 0 examples (an empty dev set), so its "
            f"scores mean nothing; give a dev file with examples and {fix}"
        )
        bad = True
    kind = _task_kind(r["task"])
    if kind == "span":
        want = [p / "predictions" / "dev.json"]
    elif kind is not None:  # every other kind writes predictions/<split>.tsv
        want = [p / "predictions" / f"{split}.tsv" for split in metrics]
    else:
        want = []
    for f in want:
        if not f.is_file():
            rep.problems.append(f"{f}: missing (metrics.json reports its split); {fix}")
            bad = True
        elif f.suffix == ".json" and _json_or_none(f) is None:
            rep.problems.append(f"{f}: invalid JSON; the file is torn or was edited; {fix}")
            bad = True
        elif f.suffix == ".tsv" and not _tsv_ok(f):
            rep.problems.append(
                f"{f}: not a predictions table (first line 'index<TAB>prediction<TAB>label'); {fix}"
            )
            bad = True
    saved = p / "model"
    if "saved_model" in r or saved.is_dir():
        if not saved.is_dir():
            rep.problems.append(f"{saved}: missing, but metrics.json records a saved model; {fix}")
            bad = True
        else:
            sub = VerifyReport(saved, "export")
            recorded = r.get("saved_model_sha256")
            wf = saved / "model.safetensors"
            if isinstance(recorded, str) and wf.is_file():
                now = sha256_file(wf)
                if now != recorded:
                    sub.problems.append(
                        f"{wf}: corrupt (sha256 {now[:12]}... differs from {recorded[:12]}... "
                        f"recorded in {mf}); {fix}"
                    )
                else:
                    sub.notes.append("sha256 as recorded in metrics.json")
            elif not isinstance(recorded, str):
                sub.notes.append(
                    "metrics.json records no sha256 of the saved model (written by an older "
                    "tokendrop): only its structure is checked"
                )
            if not sub.problems:
                verify_export(saved, sub)
            bad = bad or bool(sub.problems)
            merge_report(rep, sub, "model")
    scores = ", ".join(f"{k} {v:.2f}" for k, v in r["scores"].items())
    rep.notes.insert(
        0,
        f"finetune: task {r['task']} ({scores}); checked metrics.json"
        + (f", {len(want)} prediction file(s)" if want else "")
        + (", the saved model" if saved.is_dir() else ""),
    )
    return None if bad else r


def _task_kind(task: str) -> str | None:

    try:
        return get_task(task).kind
    except (TokendropError, ValueError, KeyError):
        return None


def _tsv_ok(f: Path) -> bool:
    try:
        with open(f, encoding="utf-8") as fh:
            return fh.readline().rstrip("\n").split("\t")[:2] == ["index", "prediction"]
    except (OSError, UnicodeDecodeError):
        return False


# ----------------------------------------------------------------------------------------------
# evaluate


def verify_evaluate(p: Path, rep: VerifyReport) -> None:

    fix = "run the same `tokendrop evaluate` command again (it recomputes what is missing)"
    suite: SuiteConfig | None = None
    st = p / "suite.toml"
    if not st.is_file():
        rep.problems.append(f"{st}: missing; an evaluation records its suite there; {fix}")
    else:
        try:
            suite = load_suite(st, recorded=True)
            suite.validate()
        except (TokendropError, ValueError, tomllib.TOMLDecodeError) as e:
            rep.problems.append(f"{st}: does not load as a suite ({error_line(e)}); {fix}")
    cells_root = p / "cells"
    # every cell directory: cells/<model>/<task>/<cell>
    found: dict[str, dict[str, dict | None]] = {}
    temps = 0
    if cells_root.is_dir():
        for mdir in sorted(cells_root.iterdir()):
            if not mdir.is_dir():
                continue
            for tdir in sorted(t for t in mdir.iterdir() if t.is_dir()):
                for cdir in sorted(c for c in tdir.iterdir() if c.is_dir()):
                    if cdir.name.startswith("."):
                        temps += 1
                        continue
                    sub = VerifyReport(cdir, "finetune")
                    r = verify_finetune(
                        cdir,
                        sub,
                        fix=f"remove {cdir} and run the same `tokendrop evaluate` command "
                        "again (it recomputes the cell)",
                    )
                    rep.problems.extend(sub.problems)
                    found.setdefault(mdir.name, {})[f"{tdir.name}/{cdir.name}"] = r
    res = None
    if (p / "results.json").is_file() or found:
        res = read_checked_json(
            p / "results.json", rep, "an evaluation rewrites it after every cell", fix
        )
        if res is not None and (
            not isinstance(res, dict) or not isinstance(res.get("models"), dict)
        ):
            rep.problems.append(
                f"{p / 'results.json'}: not an evaluation summary (no 'models'); {fix}"
            )
            res = None
    models = res["models"] if res else {}
    per_model = len(cells_for(suite)) if suite is not None else None
    done_all = total = 0
    for key, info in models.items():
        info = info if isinstance(info, dict) else {}
        label = info.get("label", key)
        present = found.get(key, {})  # a damaged cell is reported above, once
        intact = {c: r for c, r in present.items() if r is not None}
        recorded = info.get("cells_done", 0)
        if isinstance(recorded, int) and recorded > len(present):
            rep.problems.append(
                f"{p / 'results.json'}: counts {recorded} finished cell(s) of model {label} but "
                f"only {len(present)} are under {cells_root / key}; its tables cite "
                f"lost results; {fix}"
            )
        done_all += len(intact)
        total += per_model if per_model is not None else len(intact)
        _check_weights(p, key, info, intact, rep)
    others = sorted(set(found) - set(models))
    if others:
        rep.notes.append(
            f"{len(others)} model(s) with cells not in results.json ({others[0]}, ...): an earlier "
            "evaluate call on other models; checked, not tabled"
        )
    if temps:
        rep.notes.append(
            f"{temps} unfinished cell temp dir(s) from a killed fine-tuning: ignored, removed by "
            "the next evaluate"
        )
    n_cells = sum(len(v) for v in found.values())
    head = f"evaluate: {len(models)} model(s), {n_cells} cell(s) checked"
    if res is None and not found:
        head += "; no cell finished yet (nothing to tabulate)"
    elif total:
        head += f"; {done_all} of {total} cells of results.json's models finished"
        if done_all < total:
            rep.notes.append(
                f"incomplete: {total - done_all} cell(s) still to compute; run the same `tokendrop "
                "evaluate` command again to compute them"
            )
    rep.notes.insert(0, head)


def _check_weights(
    p: Path, key: str, info: dict, cells: dict[str, dict], rep: VerifyReport
) -> None:
    """Note cells computed from weights other than those the model has now (``evaluate`` recomputes
    them)."""

    path = info.get("path")
    if not isinstance(path, str) or not Path(path).exists():
        rep.notes.append(
            f"model {info.get('label', key)}: {path} not reachable from here; the weights its "
            "cells record were not compared"
        )
        return
    try:
        sha, _ = model_weights(path)
    except (TokendropError, OSError) as e:
        rep.notes.append(
            f"model {info.get('label', key)}: its weights do not verify ({error_line(e)})"
        )
        return
    stale = [c for c, r in cells.items() if "model_sha256" in r and r["model_sha256"] != sha]
    unhashed = [c for c, r in cells.items() if "model_sha256" not in r]
    if stale:
        rep.notes.append(
            f"stale: {len(stale)} cell(s) of model {info.get('label', key)} ({stale[0]}, ...) were "
            f"computed from other weights than {path} holds now (sha256 "
            f"{(sha or 'none')[:12]}...); `tokendrop evaluate` recomputes them"
        )
    if unhashed:
        rep.notes.append(
            f"{len(unhashed)} cell(s) of model {info.get('label', key)} record no weights hash "
            "(older tokendrop): not compared"
        )


KINDS = ("run", "checkpoint", "prepared", "export", "finetune", "evaluate", "study", "campaign")


def detect_kind(path: str | os.PathLike) -> str:
    """One of ``KINDS`` or ``unknown`` (see the module doc)."""
    p = Path(path)
    if not p.is_dir():
        return "unknown"
    marker = (read_marker(p) or {}).get("kind")
    if marker in KINDS:
        return marker
    meta = p / "meta.json"
    if meta.is_file():
        try:
            fmt = read_json(meta).get("format")
        except TokendropError:
            fmt = None
        if fmt == "tokendrop-prepared":
            return "prepared"
        # or shards/
        if (
            (p / "model.safetensors").exists()
            or (p / "state.safetensors").exists()
            or p.parent.name == "checkpoints"
        ):
            return "checkpoint"
        if any((p / n).exists() for n in ("train.bin", "eval.bin", "token_counts.npy")):
            return "prepared"
    if (
        (p / "checkpoints").is_dir()
        or (p / "config.toml").is_file()
        or (p / "metrics.jsonl").is_file()
    ):
        return "run"
    if (p / "config.json").is_file():
        return "export"
    return "unknown"


def verify_path(
    path: str | os.PathLike,
    extra: Mapping[str, Callable[[Path, VerifyReport], object]] | None = None,
) -> VerifyReport:
    """Check ``path`` in full (nothing is written); see the module doc for what each kind gets.
    ``extra``: checks for the kinds the harnesses write (``study``, ``campaign``;
    ``tokendrop.lab.verifiers.VERIFIERS``), by kind."""
    check_path_arg("verify", "path", path)
    verifiers = {**VERIFIERS, **(extra or {})}
    p = Path(path)
    if not p.exists():
        return VerifyReport(p, "unknown", [f"{p}: no such file or directory"])
    if not p.is_dir():
        return VerifyReport(
            p,
            "unknown",
            [
                f"{p}: not a directory; expected a tokendrop run, checkpoint, prepared-data "
                "or exported model directory"
            ],
        )
    kind = detect_kind(p)
    rep = VerifyReport(p, kind)
    if kind in verifiers:
        verifiers[kind](p, rep)
    elif kind in KINDS:
        rep.problems.append(
            f"{p}: a {kind} directory; `tokendrop verify` checks it (the library alone has no "
            f"check for this kind)"
        )
    else:
        rep.problems.append(
            f"{p}: not a tokendrop run (config.toml, checkpoints/), checkpoint (meta.json + "
            "model.safetensors), prepared-data (meta.json + shards), exported model (config.json), "
            "finetune (metrics.json), evaluate (suite.toml), study (study-state.json) or campaign "
            "(PART.json) directory; nothing to verify"
        )
    return rep


VERIFIERS: dict[str, Callable[[Path, VerifyReport], object]] = {
    "run": verify_run,
    "checkpoint": verify_checkpoint,
    "prepared": verify_prepared,
    "export": verify_export,
    "finetune": verify_finetune,
    "evaluate": verify_evaluate,
}


def _json_or_none(f: Path) -> Any:
    try:
        return read_json(f)
    except TokendropError:
        return None
