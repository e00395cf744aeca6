"""Corpus -> prepared directory of pre-tokenized, memory-mapped MLM sequences; and reading it back.

A prepared directory (written by :func:`prepare`, read by :class:`PreparedData`)::

    meta.json            metadata (written last; its presence marks the directory complete)
    train.bin, eval.bin  token ids, shape (num_sequences, T), uint16 (vocab <= 65536) else uint32,
                         C order, no header -- open with np.memmap
    token_counts.npy     int64 (vocab_size,): how often each id occurs in the train split's
                         documents
    tokenizer.json, vocab.txt, tokenizer_config.json
                         the tokenizer (see tokenizer.py); with
                         ``tokenizer=DIR`` the source's own files, byte for byte (tokenizer.json,
                         vocab.txt, tokenizer_config.json, special_tokens_map.json, those present),
                         plus vocab.txt / tokenizer_config.json derived from tokenizer.json when the
                         source lacks them (listed in ``meta["tokenizer"]["generated_files"]``).  A
                         tokenizer.json used as it is (BPE of ModernBERT, ...; ``meta["tokenizer"]
                         ["backend"] == "file"``) gets no vocab.txt: the tokenizer is the reference.

``meta["vocab_hash"]`` identifies the vocabulary (:func:`.tokenizer.tokenizer_vocab_sha256`): the
sha256 of vocab.txt for BERT WordPiece, of tokenizer.json for a tokenizer used as it is.
``meta["vocab_size"]`` is the size of the id space the data is for: the tokenizer's ids, or, when
``tokenizer=DIR`` is a tokenizer.json used as it is in a model directory whose config.json declares
a larger ``vocab_size`` (ModernBERT pads its embedding to a multiple of 64: 50368 rows for 50285
tokenizer ids), that size, so the data matches the model's embedding
(``meta["tokenizer"]["num_ids"]`` keeps the tokenizer's count).

Sequences (docs/design.md §2.4):

* packed (the paper's default): ``[CLS] t1 ... t_{T-2} [SEP]``, exactly T tokens, no [PAD], no NSP.
  The split's documents are concatenated in corpus order with one [SEP] between consecutive
  documents and cut into bodies of T-2 tokens; a document separator that would open a body is
  omitted (the previous sequence's closing [SEP] already separates).  Every document token appears
  exactly once, in order, except the final incomplete body (< T-2 tokens), which is dropped and
  counted (``meta["splits"][split]["dropped_tail_tokens"]``).
* unpacked (baseline): one document segment per sequence, ``[CLS] tokens [SEP] [PAD]...``.  A
  document longer than T-2 tokens is, by default (``overflow="split"``), continued in further
  sequences (consecutive chunks of T-2 tokens; nothing lost; counted as ``split_documents``), or
  with ``overflow="truncate"`` cut after T-2 tokens (counted: ``truncated_documents`` and
  ``truncated_tokens``, and reported in the summary).  The attention mask is ``ids != [PAD]``.

The held-out eval split is a seeded random subset of whole documents holding ``eval_fraction`` of
the tokens (at least one full sequence when possible), kept in corpus order.

Special ids never occur inside document tokens: corpus text is tokenized without added special
tokens (a literal "[SEP]" in the text becomes ``[``, ``sep``, ``]``), so [CLS]/[SEP]/[PAD] in the
shards are exactly the frame, separators and padding.

Tokenization runs per work unit into ``<out>.partial/`` (:mod:`.units`: parallel over ``workers``
processes, resumable after an interruption, byte-identical output for any number of workers).  The
split + pack pass then streams over the units in corpus order.  Peak memory: O(workers x chunk) for
tokenizing (each worker holds one chunk of about 1 MiB of text and its ids; an Arrow unit's
memory-mapped pages count up to the unit's size, a Parquet row group's text column may be buffered)
plus O(T x 256) for packing; the per-document
arrays (lengths, the eval order and mask: 17 bytes per document) are memory maps in the work
directory, so memory does not grow with the corpus.  Disk: the units hold every token once more
(2 or 4 bytes each) until the output is complete.

Writing is atomic: everything goes to ``<out>.tmp-XXXXXXXX`` beside the target, which is renamed to
``<out>`` only after meta.json is written; any error removes it.  A run killed hard leaves only the
``.tmp-`` directory, which :meth:`PreparedData.open` rejects (no meta.json) and the next
``prepare`` into the same place removes (:func:`tokendrop.runs.files.atomic_directory`).  The output
is marked as tokendrop's (``.tokendrop.json``), written under a lock, and never replaces a file,
a directory tokendrop did not write, or one holding an input (:mod:`tokendrop.runs.rundir`).

The reader is :mod:`.prepared` (:class:`PreparedData`), the tokenization :mod:`.tokenize`, the
sequence writers :mod:`.shards`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable
from importlib.metadata import version
from typing import Any

import numpy as np
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from tokendrop.data.corpus import HF, finish, iter_raw, resolve_corpus
from tokendrop.data.prepared import FORMAT, FORMAT_VERSION, SPLITS
from tokendrop.data.shards import (
    PackedWriter,
    ShardWriter,
    TokenCounter,
    UnpackedWriter,
    choose_eval_docs,
    dtype_for,
)
from tokendrop.data.tokenizer import (
    SPECIAL_KEYS,
    TokenizerSpec,
    build_tokenizer,
    guess_lowercase,
    is_lowercase,
    num_ids,
    read_tokenizer_spec,
    read_vocab,
    save_tokenizer,
    special_ids,
    tokenizer_from_spec,
    train_tokenizer,
    vocab_list,
    vocab_sha256,
    write_tokenizer_config,
)
from tokendrop.data.units import WorkDir, plan_units, run_units, work_key
from tokendrop.errors import DataError, check_arg, check_path_arg
from tokendrop.runs import rundir
from tokendrop.runs.files import atomic_directory, atomic_write_json, os_error_fix, read_json

# a prepared corpus with more [UNK] than this share of its training tokens gets a warning
UNK_WARN_SHARE = 0.05

# ----------------------------------------------------------------------------------------------
# prepare


def _pretrained_tokenizer(
    directory: str | os.PathLike, seq_len: int
) -> tuple[TokenizerSpec, Any, dict]:
    """A checkpoint's tokenizer directory (or a tokenizer.json / vocab.txt in one) -> (spec,
    tokenizer, meta["tokenizer"] fields); all checks up front."""
    d = os.fspath(directory)
    if not os.path.exists(d):
        raise DataError(
            f"{d}: no such directory; --tokenizer expects a tokenizer directory (tokenizer.json, "
            "or vocab.txt + tokenizer_config.json)"
        )
    spec = read_tokenizer_spec(d)
    if spec.lowercase is None:  # a bare vocab.txt: the casing would be a guess
        raise DataError(
            f"{spec.vocab_source}: no tokenizer_config.json beside it, so the casing "
            "(do_lower_case) is "
            "unknown; add one, or use --vocab FILE with --lowercase/--no-lowercase"
        )
    tok = tokenizer_from_spec(spec)
    if spec.model_max_length is not None and seq_len > spec.model_max_length:
        raise DataError(
            f"seq_len: T={seq_len} is longer than {spec.config_file}'s model_max_length="
            f"{spec.model_max_length}; expected T <= {spec.model_max_length}"
        )
    src_vocab = os.path.join(spec.directory, "vocab.txt")
    if spec.backend == "bert" and os.path.isfile(src_vocab):
        # the prepared directory's vocab_hash, the masker's vocabulary and an export all take
        # vocab.txt: it must list exactly the tokenizer's ids (AutoTokenizer itself reads
        # tokenizer.json when present)
        have, want = read_vocab(src_vocab, specials=spec.special_tokens.values()), vocab_list(tok)
        if have != want:
            i = next(
                (i for i, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want))
            )
            got = repr(have[i]) if i < len(have) else "end of file"
            exp = repr(want[i]) if i < len(want) else "end of vocabulary"
            what = (
                "tokenizer.json"
                if spec.vocab_source.endswith(".json")
                else "the tokenizer (with its added tokens)"
            )
            raise DataError(
                f"{src_vocab}: differs from {what} at id {i} ({got} vs {exp}); remove or "
                "regenerate vocab.txt so that both list the same tokens"
            )
    source = {
        "type": "pretrained",
        **spec.describe(),
        "source_sha256": {n: vocab_sha256(os.path.join(spec.directory, n)) for n in spec.files},
        "do_lower_case": is_lowercase(tok),
    }
    return spec, tok, source


def _model_vocab_size(spec: TokenizerSpec, directory: str | os.PathLike, n_ids: int) -> int:
    """The id space prepared data is for: the tokenizer's ``n_ids``, or, for a tokenizer.json used
    as it is, a larger ``vocab_size`` that the model directory's config.json declares (an embedding
    padded past the tokenizer, as ModernBERT's); a config.json declaring fewer rows than that
    tokenizer has ids is a DataError.  BERT WordPiece data keeps the tokenizer's size, as always
    (``pretrain --init`` compares it with the model's)."""
    mc_path = os.path.join(os.fspath(directory), "config.json")
    if spec.backend != "file" or not os.path.isfile(mc_path):
        return n_ids

    v = read_json(mc_path, DataError).get("vocab_size")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        return n_ids
    if v < n_ids:
        raise DataError(
            f"{mc_path}: vocab_size {v} is smaller than the {n_ids} ids of the tokenizer "
            f"({spec.vocab_source}); the model cannot embed every token, expected a tokenizer and "
            "a model that belong together"
        )
    return v


def _copy_pretrained_tokenizer(spec: TokenizerSpec, tok, dst: str) -> tuple[list[str], list[str]]:
    """Copy the source's tokenizer files unchanged into ``dst``; write vocab.txt (from the
    tokenizer; BERT WordPiece only) and tokenizer_config.json (the settings the source declares
    elsewhere: tokenizer.json's normalizer, config.json's BERT defaults, or the special-token names
    of a tokenizer.json used as it is) when the source lacks them, so the directory exports and
    reloads as the same tokenizer.  A tokenizer.json used as it is takes no vocab.txt (a source's
    one, which nothing reads, is not copied).  -> (files present, files generated)."""
    copied = [n for n in spec.files if spec.backend == "bert" or n != "vocab.txt"]
    for name in copied:
        shutil.copyfile(os.path.join(spec.directory, name), os.path.join(dst, name))
    generated = []
    if spec.backend == "bert" and "vocab.txt" not in spec.files:
        with open(os.path.join(dst, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(vocab_list(tok)) + "\n")
        generated.append("vocab.txt")
    if "tokenizer_config.json" not in spec.files:
        write_tokenizer_config(spec, dst)
        generated.append("tokenizer_config.json")
    files = [
        n
        for n in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
        if n in copied or n in generated
    ]
    return files, generated


def prepare(
    corpus_paths: str | os.PathLike | Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    seq_len: int,
    vocab: str | os.PathLike | None = None,
    vocab_size: int | None = None,
    lowercase: bool | None = None,
    packed: bool = True,
    eval_fraction: float = 0.01,
    workers: int | None = None,
    max_position_embeddings: int = 512,
    progress: bool = True,
    text_field: str = "text",
    overflow: str = "split",
    overwrite: bool = False,
    seed: int = 0,
    min_frequency: int = 2,
    tokenizer: str | os.PathLike | None = None,
    unit_bytes: int | None = None,
) -> dict:
    """Tokenize a corpus into a prepared directory ``out_dir``; returns a summary dict.

    corpus_paths: files, directories, globs, ``hf:`` specs (see :mod:`.corpus`).
    seq_len: T, the length of every sequence (<= ``max_position_embeddings``).
    vocab / vocab_size / tokenizer: exactly one of: a ``vocab.txt`` to use, the size of a WordPiece
        vocabulary to train on the corpus, or a published checkpoint's tokenizer directory
        (``tokenizer.json``, or ``vocab.txt`` + ``tokenizer_config.json``; see
        :func:`.tokenizer.read_tokenizer_spec`): the ids are then exactly
        ``transformers.AutoTokenizer.from_pretrained(tokenizer)``'s, framed ``[CLS] ... [SEP]``
        with the declared special tokens, and the source's tokenizer files are kept unchanged.
    lowercase: lower-case and strip accents (BERT "uncased"); default True.  Not with
        ``tokenizer``, whose tokenizer_config.json decides.
    packed: pack documents into full sequences (default) or one padded segment per sequence.
    eval_fraction: share of the tokens held out as the eval split (whole documents).
    workers: parallelism (default: the number of cores).  1: everything in this process.  More:
        ``workers`` processes tokenize the corpus's work units (:mod:`.units`), each reading its
        own; the output is the same byte for byte for any number.
    overflow: unpacked only -- ``split`` long documents over several sequences or ``truncate`` them.
    overwrite: replace an existing ``out_dir`` (only once the new one is complete), and only
    prepared
        data tokendrop wrote (its ``.tokendrop.json`` marker) that holds none of the inputs; without
        it a non-empty ``out_dir`` is refused.  A file is never replaced.
    seed: seed of the eval-document selection.
    unit_bytes: size of a work unit (default: the corpus's size / 64 within [1 MB, 32 MB];
        :mod:`.units`); the output does not depend on it.

    Resumable: the finished work units are kept in ``<out_dir>.partial`` until the output is
    complete; an interrupted call, repeated, continues from them (:mod:`.units`).

    Raises DataError (nothing is left behind) for a missing path, empty corpus, binary or non-UTF-8
    input, a vocab without [PAD]/[UNK]/[CLS]/[SEP]/[MASK], or T outside [8,
    max_position_embeddings]."""
    check_arg(
        "prepare",
        "corpus_paths",
        corpus_paths,
        (),
        "a path or a list of paths (files, directories, globs, hf: specs)",
        valid=isinstance(corpus_paths, (str, os.PathLike))
        or (
            isinstance(corpus_paths, (list, tuple))
            and all(isinstance(c, (str, os.PathLike)) for c in corpus_paths)
        ),
    )
    check_path_arg("prepare", "out_dir", out_dir)
    check_arg("prepare", "seq_len", seq_len, int, "an int (the sequence length T)")
    for name, v in (("vocab", vocab), ("tokenizer", tokenizer)):
        check_path_arg("prepare", name, v, optional=True)
    check_arg("prepare", "vocab_size", vocab_size, (int, type(None)), "an int or None")
    args = dict(locals())
    del args["name"], args["v"]
    with rundir.lock(out_dir, DataError):  # one writer: a second prepare into out_dir fails at once
        return _prepare(**args)


def _prepare(
    corpus_paths,
    out_dir,
    seq_len,
    vocab,
    vocab_size,
    lowercase,
    packed,
    eval_fraction,
    workers,
    max_position_embeddings,
    progress,
    text_field,
    overflow,
    overwrite,
    seed,
    min_frequency,
    tokenizer,
    unit_bytes,
) -> dict:
    """:func:`prepare` under the output's lock: check the arguments, resolve the inputs and the
    tokenizer (all before anything is written), tokenize the work units, write the shards, the
    tokenizer files, token counts and meta.json into a temporary directory that is then published,
    remove the work units; -> the summary."""
    t_start = time.time()
    out_dir = os.path.abspath(os.fspath(out_dir))
    seq_len, lowercase, workers = _check_arguments(
        seq_len,
        max_position_embeddings,
        vocab,
        vocab_size,
        lowercase,
        tokenizer,
        eval_fraction,
        overflow,
        workers,
    )
    # refused: a file or link, a non-empty directory without overwrite, with overwrite one that is
    # not prepared data tokendrop wrote or that holds an input (checked again once the inputs are
    # resolved)
    rundir.prepare_output(
        out_dir, "prepared", overwrite, inputs=[vocab, tokenizer], error=DataError
    )
    warnings: list[str] = []
    sources = _resolve_sources(corpus_paths, text_field, unit_bytes, out_dir, overwrite, warnings)
    work_path = out_dir + ".partial"
    tok, tok_meta, V, key = _resolve_tokenizer(
        tokenizer,
        vocab,
        vocab_size,
        lowercase,
        min_frequency,
        seq_len,
        sources,
        text_field,
        work_path,
        overwrite,
        progress,
        warnings,
    )
    ids = special_ids(tok, tok_meta["names"])
    dtype = dtype_for(V)
    key = key or work_key(sources, text_field, tok=tok, dtype=dtype)
    plan = lambda: plan_units(sources, text_field, unit_bytes)  # noqa: E731
    with _work_units(
        work_path, key, plan, overwrite, dtype, tok, vocab_size is not None, out_dir
    ) as work:
        t0 = time.time()
        infos = run_units(work, sources, tok, dtype, workers, text_field, progress)
        t_tok = time.time() - t0
        _check_some_text(infos, sources)
        with atomic_directory(out_dir, prefix=os.path.basename(out_dir) + ".tmp-") as tmp_dir:
            tmp = str(tmp_dir)
            rundir.write_marker(tmp_dir, "prepared")
            split_meta, counter = _write_shards(
                work,
                infos,
                tmp,
                seq_len,
                packed,
                overflow,
                ids,
                dtype,
                V,
                float(eval_fraction),
                seed,
            )
            settings = {
                "seq_len": seq_len,
                "packed": bool(packed),
                "overflow": overflow,
                "dtype": dtype,
                "V": V,
                "ids": ids,
                "eval_fraction": float(eval_fraction),
                "seed": int(seed),
                "workers": workers,
                "max_position_embeddings": int(max_position_embeddings),
                "units": len(work.units),
                "unit_sources": [u.source for u in work.units],
                "seconds": {"tokenize": round(t_tok, 3), "total": round(time.time() - t_start, 3)},
            }
            meta = _write_meta(
                tmp, tok, tok_meta, split_meta, counter, infos, sources, warnings, settings
            )
    return _summary(out_dir, seq_len, packed, V, meta, warnings, time.time() - t_start)


def _check_arguments(
    seq_len,
    max_position_embeddings,
    vocab,
    vocab_size,
    lowercase,
    tokenizer,
    eval_fraction,
    overflow,
    workers,
) -> tuple[int, bool | None, int]:
    """:func:`prepare`'s arguments checked (DataError naming the first bad one) -> (seq_len as an
    int, lowercase with its default: True unless a tokenizer directory decides, workers with its
    default: the number of cores)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
        raise DataError(f"seq_len: expected an integer, got {seq_len!r}")
    seq_len = int(seq_len)
    if seq_len > max_position_embeddings:
        raise DataError(
            f"seq_len: T={seq_len} is larger than the model's "
            f"max_position_embeddings={max_position_embeddings}; "
            f"expected T <= {max_position_embeddings}"
        )
    if seq_len < 8:
        raise DataError(f"seq_len: expected T >= 8, got {seq_len}")
    if tokenizer is not None and (vocab is not None or vocab_size is not None):
        raise DataError(
            "tokenizer: give a tokenizer directory (--tokenizer) or a vocab.txt (--vocab) or a "
            "size to train one (--vocab-size), only one of them"
        )
    if tokenizer is not None and lowercase is not None:
        raise DataError(
            f"lowercase: with a tokenizer directory ({os.fspath(tokenizer)}) its "
            "tokenizer_config.json "
            "decides the casing (do_lower_case); drop --lowercase/--no-lowercase"
        )
    if vocab is not None and vocab_size is not None:
        raise DataError(
            "vocab/vocab_size: give either a vocab.txt (--vocab) or a size to train one "
            "(--vocab-size), not both"
        )
    if tokenizer is None and vocab is None and vocab_size is None:
        raise DataError(
            "vocab/vocab_size: expected a vocab.txt (--vocab FILE), a vocabulary size to train "
            "(--vocab-size N) "
            "or a checkpoint's tokenizer directory (--tokenizer DIR)"
        )
    lowercase = True if lowercase is None and tokenizer is None else lowercase
    if vocab_size is not None and (isinstance(vocab_size, bool) or int(vocab_size) < 100):
        raise DataError(f"vocab_size: expected an integer >= 100, got {vocab_size!r}")
    if not 0.0 <= float(eval_fraction) < 0.5:
        raise DataError(f"eval_fraction: expected a fraction in [0, 0.5), got {eval_fraction}")
    if overflow not in ("split", "truncate"):
        raise DataError(f"overflow: expected 'split' or 'truncate', got {overflow!r}")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1
    ):
        raise DataError(
            f"workers: expected a positive number of processes (as --workers), got {workers!r}"
        )
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    return seq_len, lowercase, workers


def _resolve_sources(
    corpus_paths, text_field: str, unit_bytes, out_dir: str, overwrite: bool, warnings: list[str]
) -> list:
    """The corpus's sources (:func:`.corpus.resolve_corpus`; its notes of files left out go to
    ``warnings``), after checking ``unit_bytes``; the output is refused if it holds one of
    them."""
    if unit_bytes is not None and (
        isinstance(unit_bytes, bool)
        or not isinstance(unit_bytes, (int, np.integer))
        or unit_bytes < 1
    ):
        raise DataError(
            f"unit_bytes: expected a positive number of bytes per work unit, got {unit_bytes!r}"
        )
    sources = resolve_corpus(corpus_paths, text_field, warnings)
    rundir.prepare_output(
        out_dir,
        "prepared",
        overwrite,
        inputs=[s.path for s in sources if s.fmt != HF],
        error=DataError,
    )
    return sources


def _resolve_tokenizer(
    tokenizer,
    vocab,
    vocab_size,
    lowercase,
    min_frequency,
    seq_len,
    sources,
    text_field: str,
    work_path: str,
    overwrite: bool,
    progress: bool,
    warnings: list[str],
) -> tuple[Any, dict, int, Any]:
    """The tokenizer the corpus is cut with: a checkpoint's tokenizer directory, a vocab.txt, or one
    trained on the corpus -> (tokenizer, the ``tok_meta`` of :func:`_write_meta`, V: the size of the
    data's id space, the work key of a trained tokenizer or None).  Appends to ``warnings``."""
    key = None
    spec: TokenizerSpec | None = None
    names = dict(SPECIAL_KEYS)
    if tokenizer is not None:
        spec, tok, tok_source = _pretrained_tokenizer(tokenizer, seq_len)
        names = dict(spec.special_tokens)
    elif vocab is not None:
        tok, tok_source = _vocab_tokenizer(vocab, lowercase, warnings)
    else:
        tok, tok_source, key = _trained_tokenizer(
            sources,
            text_field,
            vocab_size,
            lowercase,
            min_frequency,
            work_path,
            overwrite,
            progress,
        )
    n_ids = num_ids(tok)
    V = n_ids if spec is None else _model_vocab_size(spec, tokenizer, n_ids)
    # the corpus has fewer distinct pieces
    if spec is None and vocab is None and V < int(vocab_size):
        warnings.append(
            f"vocab_size: the corpus supports only {V} word pieces; trained a vocabulary of {V}, "
            f"not the {int(vocab_size)} asked for (model.vocab_size comes from the data)"
        )
    backend = spec.backend if spec is not None else "bert"
    tok_meta = {
        "spec": spec,
        "source": tok_source,
        "backend": backend,
        "n_ids": n_ids,
        "names": names,
    }
    return tok, tok_meta, V, key


def _vocab_tokenizer(vocab, lowercase, warnings: list[str]) -> tuple[Any, dict]:
    """A BERT WordPiece tokenizer on ``vocab`` (a vocab.txt) -> (tokenizer, meta["tokenizer"]
    fields); warns when the vocabulary's casing looks unlike ``lowercase``."""
    tok = build_tokenizer(vocab, lowercase=lowercase)
    if guess_lowercase(read_vocab(vocab)) != bool(lowercase):
        warnings.append(
            f"{vocab}: the vocabulary looks {'uncased' if lowercase is False else 'cased'} but "
            f"lowercase={lowercase}; "
            "check --lowercase/--no-lowercase"
        )
    source = {
        "type": "vocab",
        "vocab_file": os.path.abspath(os.fspath(vocab)),
        "vocab_file_sha256": vocab_sha256(vocab),
    }
    return tok, source


def _trained_tokenizer(
    sources,
    text_field: str,
    vocab_size,
    lowercase,
    min_frequency,
    work_path: str,
    overwrite: bool,
    progress: bool,
) -> tuple[Any, dict, dict]:
    """A WordPiece tokenizer trained on the corpus, or the one an interrupted run trained (kept in
    its work directory) -> (tokenizer, meta["tokenizer"] fields, work key)."""
    source = {
        "type": "trained",
        "vocab_size_requested": int(vocab_size),
        "min_frequency": min_frequency,
    }
    trained = {
        "vocab_size": int(vocab_size),
        "lowercase": bool(lowercase),
        "min_frequency": int(min_frequency),
    }
    key = work_key(sources, text_field, trained=trained)
    plan = WorkDir.check(work_path, key, overwrite)
    saved = WorkDir.saved_tokenizer(work_path) if plan is not None else None
    tok = (
        Tokenizer.from_str(saved)
        if saved
        else _train(sources, text_field, vocab_size, lowercase, min_frequency, progress)
    )
    return tok, source, key


@contextlib.contextmanager
def _work_units(
    work_path: str,
    key: dict,
    make_plan,
    overwrite: bool,
    dtype: np.dtype,
    tok,
    keep_tokenizer: bool,
    out_dir: str,
):
    """The work directory (:meth:`.units.WorkDir.open`; a trained tokenizer kept beside the units
    when ``keep_tokenizer``), removed once the block completes.  On bad input (DataError) or a disk
    error (an OSError, raised as a DataError naming the file) inside the block it is removed if
    this call created it; on Ctrl-C it is kept (the KeyboardInterrupt says where) to continue
    from."""
    work = None
    created = False
    try:
        work, created = WorkDir.open(
            work_path,
            key,
            make_plan,
            overwrite,
            dtype,
            tokenizer_json=tok.to_str() if keep_tokenizer else None,
        )
        yield work
    except DataError:
        if created:  # bad input found while tokenizing: nothing is left behind
            work.remove()
        raise
    except OSError as e:  # disk full, permissions, ...: a data problem for the user, not a crash
        if created:
            work.remove()
        raise DataError(
            f"{e.filename or out_dir}: {e.strerror or e} while preparing the data; nothing was "
            f"written ({os_error_fix(e)})"
        ) from e
    except KeyboardInterrupt as e:
        if work is not None and os.path.isdir(work.path):
            e.kept = (
                f"the finished work units are kept in {work.path}: run the same command "
                "again to continue"
            )
        raise
    work.remove()


def _check_some_text(infos: list[dict], sources) -> None:
    """DataError when the work units hold no document."""
    if sum(i["documents"] for i in infos) == 0:
        some = ", ".join(s.path for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
        raise DataError(
            f"corpus: no text found in {some}; expected at least one non-empty document"
        )


def _summary(
    out_dir: str, seq_len: int, packed, V: int, meta: dict, warnings: list[str], seconds: float
) -> dict:
    """:func:`prepare`'s return value, from the written ``meta``."""
    split_meta = meta["splits"]
    return {
        "out": out_dir,
        "seq_len": seq_len,
        "packed": bool(packed),
        "vocab_size": V,
        "documents": meta["counts"]["documents"],
        "tokens": meta["counts"]["tokens"],
        "train_sequences": split_meta["train"]["num_sequences"],
        "eval_sequences": split_meta["eval"]["num_sequences"],
        "dropped_tail_tokens": sum(split_meta[s].get("dropped_tail_tokens", 0) for s in SPLITS),
        "split_documents": sum(split_meta[s].get("split_documents", 0) for s in SPLITS),
        "truncated_documents": sum(split_meta[s].get("truncated_documents", 0) for s in SPLITS),
        "truncated_tokens": sum(split_meta[s].get("truncated_tokens", 0) for s in SPLITS),
        "input_bytes": meta["counts"]["input_bytes"],
        "seconds": round(seconds, 3),
        "mb_per_s": round(meta["counts"]["input_bytes"] / 1e6 / max(seconds, 1e-9), 3),
        "warnings": warnings,
    }


def _train(
    sources, text_field: str, vocab_size: int, lowercase: bool, min_frequency: int, progress: bool
):
    """A WordPiece vocabulary trained on the corpus (one pass over it, in this process)."""
    bar = tqdm(
        total=sum(s.size for s in sources) or None,
        unit="B",
        unit_scale=True,
        desc="train vocab",
        disable=not progress,
        dynamic_ncols=True,
    )
    docs = (
        d for s in sources for r in iter_raw(s, text_field, bar.update) if (d := finish(s.fmt, r))
    )
    try:
        return train_tokenizer(
            docs, int(vocab_size), lowercase=lowercase, min_frequency=min_frequency
        )
    finally:
        bar.close()


def _write_shards(
    work: WorkDir,
    infos: list[dict],
    tmp: str,
    seq_len: int,
    packed: bool,
    overflow: str,
    ids: dict,
    dtype: np.dtype,
    V: int,
    eval_fraction: float,
    seed: int,
) -> tuple[dict, TokenCounter]:
    """The split + pack pass: the held-out documents chosen over all units' lengths (memory maps in
    the work dir), then each split's documents streamed unit by unit, in corpus order, into
    ``tmp/{split}.bin``.  -> (``meta["splits"]``, the train split's token counts)."""
    lengths_path = os.path.join(work.path, "lengths.bin")
    with open(lengths_path, "wb") as f:
        for i in range(len(infos)):
            f.write(work.unit_arrays(i)[1].tobytes())
    n_docs = sum(i["documents"] for i in infos)
    lengths = np.memmap(lengths_path, dtype=np.int64, mode="r", shape=(n_docs,))
    body = seq_len - 2
    is_eval = choose_eval_docs(lengths, eval_fraction, body, packed, seed, scratch=work.path)
    counter = TokenCounter(V)
    split_meta = {}
    for split in SPLITS:
        shard = ShardWriter(os.path.join(tmp, f"{split}.bin"), seq_len, dtype)
        if packed:
            w = PackedWriter(shard, ids["cls"], ids["sep"])
        else:
            w = UnpackedWriter(shard, ids["cls"], ids["sep"], ids["pad"], overflow)
        first = 0
        for i in range(len(infos)):
            flat, lens = work.unit_arrays(i)
            offsets = np.zeros(len(lens) + 1, np.int64)
            np.cumsum(lens, out=offsets[1:])
            mask = np.asarray(is_eval[first : first + len(lens)])
            first += len(lens)
            for d in np.flatnonzero(mask if split == "eval" else ~mask):
                # memory-mapped: a long document is read block by block
                doc = flat[offsets[d] : offsets[d + 1]]
                w.add(doc)
                if split == "train":
                    counter.add(doc)
        info = w.finish()
        shard.close()
        info.update(
            {"file": f"{split}.bin", "num_sequences": shard.n, "sha256": shard.sha.hexdigest()}
        )
        split_meta[split] = info
    counter.flush()
    if split_meta["train"]["num_sequences"] == 0:
        raise DataError(
            f"corpus: too small for one training sequence of T={seq_len}: "
            f"{int(sum(i['tokens'] for i in infos))} tokens in {n_docs} documents "
            f"({split_meta['eval']['document_tokens']} held out for eval); expected more text, a "
            "smaller --seq-len or --eval-fraction 0"
        )
    return split_meta, counter


def _write_meta(
    tmp: str,
    tok,
    tok_meta: dict,
    split_meta: dict,
    counter: TokenCounter,
    infos: list[dict],
    sources,
    warnings: list[str],
    st: dict,
) -> dict:
    """The tokenizer files, token_counts.npy and (last: it marks the directory complete)
    meta.json."""
    spec, tok_source, backend, ids = (
        tok_meta["spec"],
        tok_meta["source"],
        tok_meta["backend"],
        st["ids"],
    )
    if spec is None:
        save_tokenizer(tok, tmp, model_max_length=st["max_position_embeddings"])
        tok_files, generated = ["tokenizer.json", "vocab.txt", "tokenizer_config.json"], []
    else:
        tok_files, generated = _copy_pretrained_tokenizer(spec, tok, tmp)
        if spec.backend == "bert":
            tok_source["vocab_file_sha256"] = vocab_sha256(os.path.join(tmp, "vocab.txt"))
    np.save(os.path.join(tmp, "token_counts.npy"), counter.counts)
    # pretrain then runs without evaluation (and says so)
    if split_meta["eval"]["num_sequences"] == 0:
        warnings.append(
            "eval split is empty (--eval-fraction 0): pretraining on this data is not evaluated"
            if st["eval_fraction"] == 0
            else "eval split is empty: the corpus is too small to hold out "
            "a full sequence; pretraining on this data is not evaluated (use more text or a larger "
            "--eval-fraction)"
        )
    trunc = {
        k: v
        for k, v in split_meta["train"].items()
        if k in ("truncated_documents", "truncated_tokens")
    }
    if trunc.get("truncated_documents") or (
        not st["packed"] and split_meta["eval"].get("truncated_documents")
    ):
        cut_docs = sum(split_meta[s]["truncated_documents"] for s in ("train", "eval"))
        warnings.append(
            f"{cut_docs} documents "
            f"longer than T-2={st['seq_len'] - 2} tokens were truncated "
            f"({split_meta['train']['truncated_tokens'] + split_meta['eval']['truncated_tokens']} "
            "tokens dropped)"
        )
    unk, total = int(counter.counts[ids["unk"]]), int(counter.counts.sum())
    if total and unk > UNK_WARN_SHARE * total:
        warnings.append(
            f"{unk / total:.0%} of the training split's {total:,} tokens are [UNK] under this "
            "vocabulary: it does not cover the text (another language or script?); pretraining "
            "would learn little; train a vocabulary on this corpus (leave out --vocab/--tokenizer) "
            "or give one that covers it"
        )
    raw_docs: dict[int, int] = {}
    for info, src_i in zip(infos, st["unit_sources"]):
        raw_docs[src_i] = raw_docs.get(src_i, 0) + info["raw_documents"]
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seq_len": st["seq_len"],
        "packed": st["packed"],
        "overflow": None if st["packed"] else st["overflow"],
        "dtype": st["dtype"].name,
        "vocab_size": st["V"],
        "vocab_hash": vocab_sha256(
            os.path.join(tmp, "tokenizer.json" if backend == "file" else "vocab.txt")
        ),
        "lowercase": is_lowercase(tok),
        "special_ids": ids,
        "special_tokens": tok_meta["names"],
        "max_position_embeddings": st["max_position_embeddings"],
        "tokenizer": {
            **tok_source,
            "files": tok_files,
            "generated_files": generated,
            "tokenizers_version": _version("tokenizers"),
            "model": spec.model_type if spec is not None else "WordPiece",
            "backend": backend,
            "num_ids": tok_meta["n_ids"],
        },
        "eval_fraction": st["eval_fraction"],
        "split_seed": st["seed"],
        "splits": split_meta,
        "counts": {
            "documents": int(sum(i["documents"] for i in infos)),
            "empty_documents_skipped": int(sum(i["empty_documents"] for i in infos)),
            "tokens": int(sum(i["tokens"] for i in infos)),
            "unk_tokens": int(counter.counts[ids["unk"]]),  # train split
            "input_bytes": int(sum(i["input_bytes"] for i in infos)),
        },
        "token_counts_file": "token_counts.npy",
        "sources": [
            {
                "path": os.path.abspath(s.path) if s.fmt != HF else s.path,
                "format": s.fmt,
                "bytes": s.size,
                "documents": raw_docs.get(k, 0),
            }
            for k, s in enumerate(sources)
        ],
        "warnings": warnings,
        "seconds": st["seconds"],
        "parallelism": {
            "workers": st["workers"],
            "mode": "processes" if st["workers"] > 1 else "inline",
            "units": st["units"],
        },
    }
    atomic_write_json(os.path.join(tmp, "meta.json"), meta, indent=2)  # last: marks it complete
    return meta


def _version(pkg: str) -> str:
    try:
        return version(pkg)
    except Exception:
        return "unknown"
