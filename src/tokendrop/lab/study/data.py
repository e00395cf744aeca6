"""The study's data: the source checkpoint (continued pretraining), the corpus (a deterministic
subset, or a generated toy corpus), and the prepared packed / unpacked directories under OUT/data,
reused when their fingerprint matches the study config."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from tokendrop.config import THREADS_AUTO
from tokendrop.data import iter_documents, prepare, vocab_sha256
from tokendrop.finetuning.task_corpus import write_task_corpus
from tokendrop.lab.sizes import CORPUS_ALL, TOY_VOCAB_SIZE, VOCAB_SOURCE
from tokendrop.lab.study.common import StudyError, log, resolve_path
from tokendrop.lab.study.spec import StudyConfig
from tokendrop.lab.toydata import write_toy_glue, write_toy_squad
from tokendrop.models.source import resolve_init_source
from tokendrop.runs.files import atomic_file, atomic_write_json, read_json
from tokendrop.runs.rundir import read_marker


def source_tokenizer(source: Path) -> Path:
    """The source's tokenizer dir (vocab.txt / tokenizer.json)."""
    tok = resolve_init_source(str(source)).tokenizer_dir
    if tok is not None:
        return Path(tok)
    raise StudyError(
        f"study.source: {source} has no tokenizer (vocab.txt or tokenizer.json); the study "
        "tokenizes its data with it"
    )


def _subset_corpus(sources: list[str], out: Path, max_bytes: int) -> dict[str, Any]:
    """Whole documents in corpus order until ``max_bytes`` of UTF-8 text; deterministic."""
    n_docs = n_bytes = 0
    h = hashlib.sha256()
    with atomic_file(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for doc in iter_documents(sources):
            lines = [ln.strip() for ln in doc.splitlines() if ln.strip()]
            if not lines:
                continue
            block = ("\n" if n_docs else "") + "\n".join(lines) + "\n"
            f.write(block)
            b = block.encode("utf-8")
            h.update(b)
            n_docs += 1
            n_bytes += len(b)
            if n_bytes >= max_bytes:
                break
    return {"documents": n_docs, "bytes": n_bytes, "sha256": h.hexdigest()}


def trained_vocab_size(study: StudyConfig, source: Path | None = None) -> int | None:
    """The size of the vocabulary trained on the corpus: study.vocab_size, else (``"source"``)
    TOY_VOCAB_SIZE for toy data without a vocab file or a source; None when none is trained."""
    if study.vocab_size != VOCAB_SOURCE:
        return int(study.vocab_size)
    return TOY_VOCAB_SIZE if study.toy_data and not study.vocab and source is None else None


def data_fingerprint(study: StudyConfig, source: Path | None = None) -> dict[str, Any]:
    """What the prepared data depends on.  With a source, ``vocab_sha256`` hashes its tokenizer
    files."""
    vocab = ""
    if source is not None:
        tok = source_tokenizer(source)
        h = hashlib.sha256()
        for name in (
            "tokenizer.json",
            "vocab.txt",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ):
            if (tok / name).is_file():
                h.update(name.encode() + b"\0" + (tok / name).read_bytes())
        vocab = h.hexdigest()
    elif study.vocab:
        vocab = vocab_sha256(resolve_path(study.vocab))
    whole = study.corpus_max_bytes == CORPUS_ALL
    fp = {
        "corpus": [str(resolve_path(c)) for c in study.corpus],
        # as an older tokendrop wrote them (0: the whole corpus / no size trained), so a study's
        # data prepared before these sizes were named is still reused
        "corpus_max_bytes": 0 if whole else study.corpus_max_bytes,
        "toy_data": study.toy_data,
        "seq_len": study.seq_len,
        "vocab_sha256": vocab,
        "vocab_size": trained_vocab_size(study, source) or 0,
        "lowercase": study.lowercase,
        "eval_fraction": study.eval_fraction,
    }
    if source is not None:
        fp["tokenizer"] = "source"
    return fp


def _check_fingerprint(ddir: Path, old: dict[str, Any], fp: dict[str, Any]) -> None:
    """StudyError naming the settings that differ when ``ddir``'s prepared.json (``old``) was
    written for another fingerprint than ``fp``."""
    if old.get("fingerprint") not in (None, fp):
        changed = [k for k in fp if old["fingerprint"].get(k) != fp[k]]
        raise StudyError(
            f"{ddir}: prepared for a different study config ({', '.join(changed)} changed); "
            "use a new --out, or remove that directory to start over"
        )


def holds_only_data(out: Path) -> bool:
    """OUT is not tokendrop's output yet and holds nothing but a ``data/`` directory: another
    study's data copied in to be reused (``cp -r OTHER/data OUT/data``)."""
    return (
        out.is_dir()
        and read_marker(out) is None
        and [c.name for c in out.iterdir()] == ["data"]
        and (out / "data").is_dir()
        and not (out / "data").is_symlink()
    )


def check_copied_data(study: StudyConfig, out: Path, source: Path | None = None) -> None:
    """A ``data/`` copied into a new OUT (:func:`holds_only_data`) is a study's prepared data with
    this study's fingerprint (``data_fingerprint``); StudyError (one line) otherwise, before
    anything is written."""
    ddir = out / "data"
    stamp = ddir / "prepared.json"
    if not stamp.is_file():
        raise StudyError(
            f"{ddir}: no prepared.json, so it is not a study's data directory; copy a study's "
            f"whole data directory (cp -r OTHER_OUT/data {ddir}) or give an empty --out"
        )
    old = read_json(stamp, StudyError, dict, "copy a study's whole data directory again")
    if old.get("fingerprint") is None:
        raise StudyError(f"{stamp}: no fingerprint; copy a study's whole data directory again")
    _check_fingerprint(ddir, old, data_fingerprint(study, source))


def prepare_data(
    study: StudyConfig, out: Path, need_unpacked: bool, source: Path | None = None
) -> dict[str, Any]:
    """Corpus (subset) -> OUT/data/packed-T (+ unpacked-T); reused when the fingerprint matches
    (also a data directory copied from another study: the paths recorded are this OUT's). With a
    ``source`` the data is tokenized with the source's tokenizer."""
    ddir = out / "data"
    ddir.mkdir(parents=True, exist_ok=True)
    fp = data_fingerprint(study, source)
    stamp = ddir / "prepared.json"
    old = read_json(stamp, expect=None, default=None) or {}
    _check_fingerprint(ddir, old, fp)
    info: dict[str, Any] = {
        "fingerprint": fp,
        **{k: v for k, v in old.items() if k != "fingerprint"},
    }
    T = study.seq_len
    corpus: list[str]
    if study.toy_data:
        cpath = ddir / "corpus.txt"
        if not cpath.is_file():
            write_task_corpus(cpath)  # the toy tasks' words, so they are in the vocabulary
        corpus = [str(cpath)]
        glue, squad = ddir / "toy-glue", ddir / "toy-squad"
        if not (glue / "SST-2" / "dev.tsv").is_file() or not (squad / "dev-v2.0.json").is_file():
            write_toy_glue(glue)
            write_toy_squad(squad)
        info["toy_tasks"] = {"glue": str(glue), "squad": str(squad)}
        info["corpus"] = {"path": str(cpath), "generated": True, "bytes": cpath.stat().st_size}
    elif study.corpus_max_bytes != CORPUS_ALL:
        cpath, max_bytes = ddir / "corpus-subset.txt", int(study.corpus_max_bytes)
        if not cpath.is_file() or "corpus" not in info:
            log(f"writing a {max_bytes / 1e6:g} MB subset of {', '.join(study.corpus)} ...")
            info["corpus"] = {
                "path": str(cpath),
                "sources": fp["corpus"],
                **_subset_corpus(fp["corpus"], cpath, max_bytes),
            }
        info["corpus"]["path"] = str(cpath)  # this OUT's, also in data copied from another
        corpus = [str(cpath)]
    else:
        corpus = fp["corpus"]
        info["corpus"] = {
            "sources": corpus,
            "bytes": sum(Path(c).stat().st_size for c in corpus if Path(c).is_file()),
        }
    auto = study.prepare_workers == THREADS_AUTO
    workers = (os.cpu_count() or 1) if auto else int(study.prepare_workers)
    if source is not None:
        tok_kw: dict[str, Any] = {"tokenizer": str(source_tokenizer(source))}
        info["tokenizer"] = {"source": str(source), "dir": tok_kw["tokenizer"]}
    else:
        vocab = str(resolve_path(study.vocab)) if study.vocab else None
        tok_kw = {
            "vocab": vocab,
            "vocab_size": None if vocab else trained_vocab_size(study),
            "lowercase": study.lowercase,
        }
    packed = ddir / f"packed-{T}"
    if not (packed / "meta.json").is_file():
        log(f"preparing {packed} (T={T}) ...")
        t0 = time.perf_counter()
        s = prepare(
            corpus,
            packed,
            seq_len=T,
            packed=True,
            eval_fraction=study.eval_fraction,
            workers=workers,
            max_position_embeddings=max(512, T),
            progress=False,
            overwrite=packed.exists(),
            **tok_kw,
        )
        info["packed"] = {
            "path": str(packed),
            "seconds": time.perf_counter() - t0,
            **{
                k: s[k]
                for k in ("vocab_size", "documents", "tokens", "train_sequences", "eval_sequences")
            },
        }
    info.setdefault("packed", {})["path"] = str(packed)
    unpacked = ddir / f"unpacked-{T}"
    if need_unpacked and not (unpacked / "meta.json").is_file():
        log(f"preparing {unpacked} (T={T}, one document segment per sequence) ...")
        t0 = time.perf_counter()
        un_kw = (
            tok_kw
            if source is not None
            else {"vocab": packed / "vocab.txt", "lowercase": study.lowercase}
        )
        s = prepare(
            corpus,
            unpacked,
            seq_len=T,
            packed=False,
            eval_fraction=study.eval_fraction,
            workers=workers,
            max_position_embeddings=max(512, T),
            progress=False,
            overwrite=unpacked.exists(),
            **un_kw,
        )
        info["unpacked"] = {
            "path": str(unpacked),
            "seconds": time.perf_counter() - t0,
            **{
                k: s[k]
                for k in (
                    "documents",
                    "tokens",
                    "train_sequences",
                    "eval_sequences",
                    "split_documents",
                    "truncated_documents",
                )
            },
        }
    if (unpacked / "meta.json").is_file():
        info.setdefault("unpacked", {})["path"] = str(unpacked)
    atomic_write_json(stamp, info)
    return info
