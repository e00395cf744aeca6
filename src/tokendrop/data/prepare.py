"""Corpus -> prepared directory of pre-tokenized, memory-mapped MLM sequences; and reading it back.

A prepared directory (written by :func:`prepare`, read by :class:`PreparedData`)::

    meta.json            metadata (written last; its presence marks the directory complete)
    train.bin, eval.bin  token ids, shape (num_sequences, T), uint16 (vocab <= 65536) else uint32,
                         C order, no header -- open with np.memmap
    token_counts.npy     int64 (vocab_size,): how often each id occurs in the train split's documents
    tokenizer.json, vocab.txt, tokenizer_config.json   the tokenizer (see tokenizer.py)

Sequences (DESIGN.md section 4):

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

Writing is atomic: everything goes to ``<out>.tmp-XXXXXXXX`` beside the target, which is renamed to
``<out>`` only after meta.json is written; any error removes it.  A run killed hard leaves only the
``.tmp-`` directory, which :meth:`PreparedData.open` rejects (no meta.json) and the next
``prepare`` into the same place removes (:func:`tokendrop.fsutil.atomic_directory`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections import deque
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..fsutil import atomic_directory
from . import DataError
from .corpus import HF, WIKI, Source, finish, iter_raw, resolve_corpus
from .tokenizer import (
    SPECIAL_KEYS,
    _guess_lowercase,
    build_tokenizer,
    is_lowercase,
    plain_copy,
    read_vocab,
    save_tokenizer,
    special_ids,
    train_tokenizer,
    vocab_sha256,
)

FORMAT = "tokendrop-prepared"
FORMAT_VERSION = 1
SPLITS = ("train", "eval")
_CHUNK_CHARS = 1 << 20  # text per tokenization task
_CHUNK_DOCS = 2048


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


# ----------------------------------------------------------------------------------------------
# tokenization workers

_W: dict[str, Any] = {}


def _worker_init(tok_json: str, dtype: str) -> None:
    from tokenizers import Tokenizer

    _W["tok"] = Tokenizer.from_str(tok_json)
    _W["dtype"] = np.dtype(dtype)


def _encode(tok, dtype: np.dtype, fmt: str, raws: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Clean (wiki) + tokenize a chunk: (concatenated ids, per-document lengths, empty docs skipped)."""
    docs = [finish(fmt, r) for r in raws] if fmt == WIKI else raws
    docs = [d for d in docs if d]
    encs = tok.encode_batch_fast(docs, add_special_tokens=False) if docs else []
    id_lists = [e.ids for e in encs]
    lens = np.fromiter((len(x) for x in id_lists), dtype=np.int64, count=len(id_lists))
    keep = lens > 0
    total = int(lens.sum())
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=dtype, count=total) if total else np.zeros(0, dtype)
    n_empty = len(raws) - int(keep.sum())
    return ids, lens[keep], n_empty


def _encode_task(args: tuple[str, list[str]]) -> tuple[np.ndarray, np.ndarray, int]:
    fmt, raws = args
    return _encode(_W["tok"], _W["dtype"], fmt, raws)


def _chunks(sources: Sequence[Source], text_field: str, progress, stats: dict) -> Iterator[tuple[str, list[str]]]:
    for src in sources:
        buf: list[str] = []
        size = 0
        n = 0
        for raw in iter_raw(src, text_field, progress, stats):
            n += 1
            buf.append(raw)
            size += len(raw)
            if size >= _CHUNK_CHARS or len(buf) >= _CHUNK_DOCS:
                yield src.fmt, buf
                buf, size = [], 0
        if buf:
            yield src.fmt, buf
        stats.setdefault("raw_documents", {})[src.path] = n


def _make_pool(workers: int, tok_json: str, dtype: np.dtype):
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    # Children tokenize single-threaded (the pool is the parallelism); setting the variable while
    # forking also silences tokenizers' fork warning.
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return ctx.Pool(workers, initializer=_worker_init, initargs=(tok_json, dtype.str))
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def _threaded_chunks(chunks: Iterator, depth: int = 4) -> Iterator:
    """Run a chunk generator in a background thread (reading/decompressing overlaps tokenization,
    which releases the GIL).  Errors are re-raised in the consumer; stops early if the consumer does."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def run() -> None:
        try:
            for c in chunks:
                while not stop.is_set():
                    try:
                        q.put(c, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # forwarded to the consumer
            q.put(e)

    th = threading.Thread(target=run, name="tokendrop-reader", daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        th.join(timeout=5)


@contextlib.contextmanager
def _tokenizers_parallelism(enabled: bool):
    """tokenizers reads TOKENIZERS_PARALLELISM at every batch call; respect a user's explicit setting."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    if old is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if enabled else "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


def _tokenize_corpus(
    sources: Sequence[Source], tok, dtype: np.dtype, workers: int, text_field: str, docs_path: str, progress: bool
) -> dict:
    """Tokenize every document into ``docs_path`` (ids concatenated); returns lengths and counts.

    Parallelism: ``workers == 1`` -- everything in this thread.  Otherwise text sources are read in a
    background thread while ``encode_batch`` tokenizes each chunk on all cores (Rust threads, GIL
    released); Wikipedia dumps, whose markup cleaning is Python, go through ``workers`` processes
    that each clean and tokenize whole chunks.  The output order is the corpus order either way.
    """
    from tqdm.auto import tqdm

    total = sum(s.size for s in sources) or None
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="tokenize", disable=not progress, dynamic_ncols=True)
    stats: dict = {}
    lengths: list[np.ndarray] = []
    n_empty = 0
    n_tokens = 0
    plain = plain_copy(tok)
    mode = "inline" if workers <= 1 else ("processes" if any(s.fmt == WIKI for s in sources) else "threads")

    with open(docs_path, "wb") as out:

        def consume(res) -> None:
            nonlocal n_empty, n_tokens
            ids, lens, empty = res
            out.write(ids.tobytes())
            lengths.append(lens)
            n_empty += empty
            n_tokens += len(ids)

        try:
            chunks = _chunks(sources, text_field, bar.update, stats)
            if mode == "processes":
                pool = _make_pool(workers, plain.to_str(), dtype)
                try:
                    pending: deque = deque()
                    for task in chunks:
                        pending.append(pool.apply_async(_encode_task, (task,)))
                        while len(pending) > 2 * workers + 1:
                            consume(pending.popleft().get())
                    while pending:
                        consume(pending.popleft().get())
                finally:
                    pool.terminate()
                    pool.join()
            else:
                with _tokenizers_parallelism(mode == "threads"):
                    if mode == "threads":
                        chunks = _threaded_chunks(chunks)
                    for fmt, raws in chunks:
                        consume(_encode(plain, dtype, fmt, raws))
        finally:
            bar.close()
    lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    return {"lengths": lens, "empty_documents": n_empty, "tokens": n_tokens, "stats": stats, "mode": mode}


# ----------------------------------------------------------------------------------------------
# writing sequences


class _Shard:
    def __init__(self, path: str, seq_len: int, dtype: np.dtype):
        self.path = path
        self.f = open(path, "wb")
        self.sha = hashlib.sha256()
        self.n = 0
        self.T = seq_len
        self.dtype = dtype

    def write(self, rows: np.ndarray) -> None:
        if len(rows):
            b = np.ascontiguousarray(rows, dtype=self.dtype).tobytes()
            self.f.write(b)
            self.sha.update(b)
            self.n += len(rows)

    def close(self) -> None:
        self.f.close()


class _Counter:
    """Token-frequency counts, accumulated in blocks."""

    def __init__(self, vocab_size: int):
        self.counts = np.zeros(vocab_size, np.int64)
        self.parts: list[np.ndarray] = []
        self.pending = 0

    def add(self, ids: np.ndarray) -> None:
        self.parts.append(ids)
        self.pending += len(ids)
        if self.pending >= 1 << 22:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.counts += np.bincount(np.concatenate(self.parts), minlength=len(self.counts))[: len(self.counts)]
            self.parts, self.pending = [], 0


class _PackedWriter:
    def __init__(self, shard: _Shard, cls: int, sep: int):
        self.shard, self.cls, self.sep = shard, cls, sep
        self.L = shard.T - 2
        self.sep_arr = np.array([sep], dtype=shard.dtype)
        self.parts: list[np.ndarray] = []
        self.pending = 0
        self.documents = 0
        self.doc_tokens = 0
        self.dropped_tail_tokens = 0

    def add(self, ids: np.ndarray) -> None:
        if self.pending:
            self.parts.append(self.sep_arr)
            self.pending += 1
        self.parts.append(ids)
        self.pending += len(ids)
        self.documents += 1
        self.doc_tokens += len(ids)
        if self.pending >= 256 * self.L:
            self._flush()

    def _flush(self) -> None:
        if not self.parts:
            return
        flat = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        n, L, sep = len(flat), self.L, self.sep
        pos = 0
        starts = []
        while True:
            if pos < n and flat[pos] == sep:  # a document separator opening a body is redundant
                pos += 1
            if n - pos < L:
                break
            starts.append(pos)
            pos += L
        if starts:
            idx = np.asarray(starts, np.int64)[:, None] + np.arange(L)
            rows = np.empty((len(starts), L + 2), dtype=self.shard.dtype)
            rows[:, 0] = self.cls
            rows[:, -1] = sep
            rows[:, 1:-1] = flat[idx]
            self.shard.write(rows)
        rest = flat[pos:]
        self.parts = [rest] if len(rest) else []
        self.pending = len(rest)

    def finish(self) -> dict:
        self._flush()
        tail = self.parts[0] if self.parts else np.zeros(0, self.shard.dtype)
        self.dropped_tail_tokens = int(np.count_nonzero(tail != self.sep))
        return {"documents": self.documents, "document_tokens": self.doc_tokens, "dropped_tail_tokens": self.dropped_tail_tokens}


class _UnpackedWriter:
    def __init__(self, shard: _Shard, cls: int, sep: int, pad: int, overflow: str):
        self.shard, self.cls, self.sep, self.pad, self.overflow = shard, cls, sep, pad, overflow
        self.T = shard.T
        self.L = shard.T - 2
        self.rows: list[np.ndarray] = []
        self.documents = 0
        self.doc_tokens = 0
        self.split_documents = 0
        self.truncated_documents = 0
        self.truncated_tokens = 0
        self.padding_tokens = 0

    def _row(self, chunk: np.ndarray) -> np.ndarray:
        row = np.full(self.T, self.pad, dtype=self.shard.dtype)
        row[0] = self.cls
        row[1 : 1 + len(chunk)] = chunk
        row[1 + len(chunk)] = self.sep
        self.padding_tokens += self.L - len(chunk)
        return row

    def add(self, ids: np.ndarray) -> None:
        n, L = len(ids), self.L
        self.documents += 1
        self.doc_tokens += n
        if n <= L:
            self.rows.append(self._row(ids))
        elif self.overflow == "split":
            self.split_documents += 1
            for i in range(0, n, L):
                self.rows.append(self._row(ids[i : i + L]))
        else:
            self.truncated_documents += 1
            self.truncated_tokens += n - L
            self.rows.append(self._row(ids[:L]))
        if len(self.rows) >= 4096:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            self.shard.write(np.stack(self.rows))
            self.rows = []

    def finish(self) -> dict:
        self._flush()
        return {
            "documents": self.documents,
            "document_tokens": self.doc_tokens,
            "split_documents": self.split_documents,
            "truncated_documents": self.truncated_documents,
            "truncated_tokens": self.truncated_tokens,
            "padding_tokens": self.padding_tokens,
        }


def _choose_eval_docs(lengths: np.ndarray, eval_fraction: float, body: int, packed: bool, seed: int) -> np.ndarray:
    """Boolean mask over documents: the held-out ones."""
    D = len(lengths)
    is_eval = np.zeros(D, bool)
    if eval_fraction <= 0 or D < 2:
        return is_eval
    order = np.random.default_rng([seed, 0x65766C]).permutation(D)
    cum = np.cumsum(lengths[order])
    k = int(np.searchsorted(cum, eval_fraction * cum[-1], side="left")) + 1
    # at least one full sequence when possible (packed: bodies of T-2 tokens incl. separators)
    need = cum + np.arange(D) if packed else np.arange(1, D + 1) * body
    k = max(k, int(np.searchsorted(need, body, side="left")) + 1)
    k = min(k, D - 1)
    is_eval[order[:k]] = True
    return is_eval


# ----------------------------------------------------------------------------------------------
# prepare


def prepare(
    corpus_paths: str | os.PathLike | Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    seq_len: int,
    vocab: str | os.PathLike | None = None,
    vocab_size: int | None = None,
    lowercase: bool = True,
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
) -> dict:
    """Tokenize a corpus into a prepared directory ``out_dir``; returns a summary dict.

    corpus_paths: files, directories, globs, ``hf:`` specs (see :mod:`.corpus`).
    seq_len: T, the length of every sequence (<= ``max_position_embeddings``).
    vocab / vocab_size: a ``vocab.txt`` to use, or the size of a WordPiece vocabulary to train on
        the corpus (exactly one of the two).
    lowercase: lower-case and strip accents (BERT "uncased").
    packed: pack documents into full sequences (default) or one padded segment per sequence.
    eval_fraction: share of the tokens held out as the eval split (whole documents).
    workers: parallelism (default: the number of cores).  1: everything in this thread.  More:
        text/JSONL files are read in a background thread while ``tokenizers`` encodes on all cores
        (its own thread pool); Wikipedia dumps (Python markup cleaning) use ``workers`` processes.
    overflow: unpacked only -- ``split`` long documents over several sequences or ``truncate`` them.
    overwrite: replace an existing ``out_dir`` (only once the new one is complete).
    seed: seed of the eval-document selection.

    Raises DataError (nothing is left behind) for a missing path, empty corpus, binary or non-UTF-8
    input, a vocab without [PAD]/[UNK]/[CLS]/[SEP]/[MASK], or T outside [8, max_position_embeddings].
    """
    t_start = time.time()
    out_dir = os.path.abspath(os.fspath(out_dir))
    # ---- arguments
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
        raise DataError(f"seq_len: expected an integer, got {seq_len!r}")
    seq_len = int(seq_len)
    if seq_len > max_position_embeddings:
        raise DataError(
            f"seq_len: T={seq_len} is larger than the model's max_position_embeddings={max_position_embeddings}; "
            f"expected T <= {max_position_embeddings}"
        )
    if seq_len < 8:
        raise DataError(f"seq_len: expected T >= 8, got {seq_len}")
    if vocab is not None and vocab_size is not None:
        raise DataError("vocab/vocab_size: give either a vocab.txt (--vocab) or a size to train one (--vocab-size), not both")
    if vocab is None and vocab_size is None:
        raise DataError("vocab/vocab_size: expected a vocab.txt (--vocab FILE) or a vocabulary size to train (--vocab-size N)")
    if vocab_size is not None and (isinstance(vocab_size, bool) or int(vocab_size) < 100):
        raise DataError(f"vocab_size: expected an integer >= 100, got {vocab_size!r}")
    if not 0.0 <= float(eval_fraction) < 0.5:
        raise DataError(f"eval_fraction: expected a fraction in [0, 0.5), got {eval_fraction}")
    if overflow not in ("split", "truncate"):
        raise DataError(f"overflow: expected 'split' or 'truncate', got {overflow!r}")
    workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))
    if os.path.exists(out_dir) and not overwrite:
        if not os.path.isdir(out_dir) or os.listdir(out_dir):
            raise DataError(f"{out_dir}: already exists; remove it or pass overwrite (--overwrite)")
    # ---- inputs (all checked before anything is written)
    sources = resolve_corpus(corpus_paths)
    warnings: list[str] = []
    if vocab is not None:
        tok = build_tokenizer(vocab, lowercase=lowercase)
        if _guess_lowercase(read_vocab(vocab)) != bool(lowercase):
            warnings.append(
                f"{vocab}: the vocabulary looks {'uncased' if lowercase is False else 'cased'} but lowercase={lowercase}; "
                "check --lowercase/--no-lowercase"
            )
        tok_source = {"type": "vocab", "vocab_file": os.path.abspath(os.fspath(vocab)), "vocab_file_sha256": vocab_sha256(vocab)}
    else:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(s.size for s in sources) or None, unit="B", unit_scale=True, desc="train vocab",
                   disable=not progress, dynamic_ncols=True)
        docs = (d for s in sources for r in iter_raw(s, text_field, bar.update) if (d := finish(s.fmt, r)))
        try:
            tok = train_tokenizer(docs, int(vocab_size), lowercase=lowercase, min_frequency=min_frequency)
        finally:
            bar.close()
        tok_source = {"type": "trained", "vocab_size_requested": int(vocab_size), "min_frequency": min_frequency}
    V = tok.get_vocab_size(with_added_tokens=True)
    ids = special_ids(tok)
    dtype = dtype_for(V)

    try:
        with atomic_directory(out_dir, prefix=os.path.basename(out_dir) + ".tmp-") as tmp_dir:
            tmp = str(tmp_dir)
            # ---- tokenize
            docs_path = os.path.join(tmp, "documents.tmp")
            t0 = time.time()
            tk = _tokenize_corpus(sources, tok, dtype, workers, text_field, docs_path, progress)
            t_tok = time.time() - t0
            lengths = tk["lengths"]
            if len(lengths) == 0:
                names = ", ".join(s.path for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
                raise DataError(f"corpus: no text found in {names}; expected at least one non-empty document")
            # ---- split + pack
            body = seq_len - 2
            is_eval = _choose_eval_docs(lengths, float(eval_fraction), body, packed, seed)
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            flat = np.memmap(docs_path, dtype=dtype, mode="r") if offsets[-1] else np.zeros(0, dtype)
            counter = _Counter(V)
            split_meta = {}
            for split in SPLITS:
                shard = _Shard(os.path.join(tmp, f"{split}.bin"), seq_len, dtype)
                if packed:
                    w = _PackedWriter(shard, ids["cls"], ids["sep"])
                else:
                    w = _UnpackedWriter(shard, ids["cls"], ids["sep"], ids["pad"], overflow)
                sel = np.flatnonzero(is_eval if split == "eval" else ~is_eval)
                for d in sel:
                    doc = np.asarray(flat[offsets[d] : offsets[d + 1]])
                    w.add(doc)
                    if split == "train":
                        counter.add(doc)
                info = w.finish()
                shard.close()
                info.update({"file": f"{split}.bin", "num_sequences": shard.n, "sha256": shard.sha.hexdigest()})
                split_meta[split] = info
            counter.flush()
            del flat
            os.remove(docs_path)
            if split_meta["train"]["num_sequences"] == 0:
                raise DataError(
                    f"corpus: too small for one training sequence of T={seq_len}: {int(lengths.sum())} tokens in "
                    f"{len(lengths)} documents ({split_meta['eval']['document_tokens']} held out for eval); "
                    "expected more text, a smaller --seq-len or --eval-fraction 0"
                )
            # ---- tokenizer, counts, meta
            save_tokenizer(tok, tmp, model_max_length=max_position_embeddings)
            np.save(os.path.join(tmp, "token_counts.npy"), counter.counts)
            raw_docs = tk["stats"].get("raw_documents", {})
            if eval_fraction > 0 and split_meta["eval"]["num_sequences"] == 0:
                warnings.append("eval split is empty: the corpus is too small to hold out a full sequence")
            trunc = {k: v for k, v in split_meta["train"].items() if k in ("truncated_documents", "truncated_tokens")}
            if trunc.get("truncated_documents") or (not packed and split_meta["eval"].get("truncated_documents")):
                warnings.append(
                    f"{split_meta['train']['truncated_documents'] + split_meta['eval']['truncated_documents']} documents "
                    f"longer than T-2={body} tokens were truncated "
                    f"({split_meta['train']['truncated_tokens'] + split_meta['eval']['truncated_tokens']} tokens dropped)"
                )
            meta = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "seq_len": seq_len,
                "packed": bool(packed),
                "overflow": None if packed else overflow,
                "dtype": dtype.name,
                "vocab_size": V,
                "vocab_hash": vocab_sha256(os.path.join(tmp, "vocab.txt")),
                "lowercase": is_lowercase(tok),
                "special_ids": ids,
                "special_tokens": dict(SPECIAL_KEYS),
                "max_position_embeddings": int(max_position_embeddings),
                "tokenizer": {
                    **tok_source,
                    "files": ["tokenizer.json", "vocab.txt", "tokenizer_config.json"],
                    "tokenizers_version": _version("tokenizers"),
                    "model": "WordPiece",
                },
                "eval_fraction": float(eval_fraction),
                "split_seed": int(seed),
                "splits": split_meta,
                "counts": {
                    "documents": int(len(lengths)),
                    "empty_documents_skipped": int(tk["empty_documents"]),
                    "tokens": int(tk["tokens"]),
                    "unk_tokens": int(counter.counts[ids["unk"]]),  # train split
                    "input_bytes": int(tk["stats"].get("input_bytes", 0)),
                },
                "token_counts_file": "token_counts.npy",
                "sources": [
                    {"path": os.path.abspath(s.path) if s.fmt != HF else s.path, "format": s.fmt, "bytes": s.size,
                     "documents": raw_docs.get(s.path, 0)}
                    for s in sources
                ],
                "warnings": warnings,
                "seconds": {"tokenize": round(t_tok, 3), "total": round(time.time() - t_start, 3)},
                "parallelism": {"workers": workers, "mode": tk["mode"]},
            }
            tmp_meta = os.path.join(tmp, "meta.json.tmp")
            with open(tmp_meta, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_meta, os.path.join(tmp, "meta.json"))
    except OSError as e:  # disk full, permissions, ...: a data problem for the user, not a crash
        raise DataError(f"{e.filename or out_dir}: {e.strerror or e} while preparing the data; nothing was written") from e
    seconds = time.time() - t_start
    summary = {
        "out": out_dir,
        "seq_len": seq_len,
        "packed": bool(packed),
        "vocab_size": V,
        "documents": int(len(lengths)),
        "tokens": int(tk["tokens"]),
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
    return summary


def _version(pkg: str) -> str:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return "unknown"


# ----------------------------------------------------------------------------------------------
# reading


class PreparedData:
    """A prepared directory, validated on open.  Shards are memory-mapped lazily."""

    def __init__(self, path: str, meta: dict):
        self.path = path
        self.meta = meta
        self.seq_len: int = int(meta["seq_len"])
        self.vocab_size: int = int(meta["vocab_size"])
        self.packed: bool = bool(meta["packed"])
        self.vocab_hash: str = meta["vocab_hash"]
        self.dtype = np.dtype(meta["dtype"])
        self.special_ids: dict[str, int] = {k: int(v) for k, v in meta["special_ids"].items()}
        self.tokenizer_path: str = path
        self._maps: dict[str, np.ndarray] = {}
        self._counts: np.ndarray | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = False) -> "PreparedData":
        """Open and check a prepared directory (sizes, vocab hash; with ``verify`` also shard sha256)."""
        p = os.path.abspath(os.fspath(path))
        if not os.path.isdir(p):
            raise DataError(f"{p}: no such prepared-data directory; expected the output of `tokendrop prepare`")
        mp_ = os.path.join(p, "meta.json")
        if not os.path.isfile(mp_):
            raise DataError(f"{p}: no meta.json; not a prepared-data directory, or its preparation did not finish")
        try:
            with open(mp_, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"{mp_}: unreadable or invalid JSON ({e}); the prepared directory is corrupt") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataError(f"{mp_}: not a tokendrop prepared-data meta file (format {meta.get('format') if isinstance(meta, dict) else None!r})")
        if meta.get("version") != FORMAT_VERSION:
            raise DataError(f"{mp_}: format version {meta.get('version')!r}; expected {FORMAT_VERSION} (re-run `tokendrop prepare`)")
        for key in ("seq_len", "vocab_size", "packed", "vocab_hash", "dtype", "special_ids", "splits"):
            if key not in meta:
                raise DataError(f"{mp_}: missing field {key!r}; the prepared directory is corrupt")
        missing = [k for k in ("pad", "unk", "cls", "sep", "mask") if k not in meta["special_ids"]]
        if missing:
            raise DataError(f"{mp_}: special_ids lacks {', '.join(missing)}; the prepared directory is corrupt")
        self = cls(p, meta)
        for name in ("vocab.txt", "tokenizer.json", "token_counts.npy"):
            if not os.path.isfile(os.path.join(p, name)):
                raise DataError(f"{os.path.join(p, name)}: missing; the prepared directory is incomplete")
        vh = vocab_sha256(os.path.join(p, "vocab.txt"))
        if vh != self.vocab_hash:
            raise DataError(f"{os.path.join(p, 'vocab.txt')}: sha256 {vh[:12]}... does not match meta.json's vocab_hash {self.vocab_hash[:12]}...")
        for split in SPLITS:
            info = meta["splits"].get(split)
            if info is None:
                raise DataError(f"{mp_}: no {split!r} split; the prepared directory is corrupt")
            f = os.path.join(p, info["file"])
            if not os.path.isfile(f):
                raise DataError(f"{f}: missing; the prepared directory is incomplete")
            want = int(info["num_sequences"]) * self.seq_len * self.dtype.itemsize
            got = os.path.getsize(f)
            if got != want:
                raise DataError(f"{f}: {got} bytes, expected {want} ({info['num_sequences']} x {self.seq_len} {self.dtype.name}); the file is truncated or corrupt")
            if verify:
                h = hashlib.sha256()
                with open(f, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 24), b""):
                        h.update(block)
                if h.hexdigest() != info.get("sha256"):
                    raise DataError(f"{f}: sha256 does not match meta.json; the file is corrupt")
        return self

    def num_sequences(self, split: str) -> int:
        return int(self._info(split)["num_sequences"])

    def _info(self, split: str) -> dict:
        if split not in SPLITS:
            raise DataError(f"split: expected 'train' or 'eval', got {split!r}")
        return self.meta["splits"][split]

    def sequences(self, split: str) -> np.ndarray:
        """(num_sequences, T) read-only memory map of the split's token ids."""
        if split not in self._maps:
            n = self.num_sequences(split)
            if n == 0:
                self._maps[split] = np.zeros((0, self.seq_len), self.dtype)
            else:
                f = os.path.join(self.path, self._info(split)["file"])
                self._maps[split] = np.memmap(f, dtype=self.dtype, mode="r", shape=(n, self.seq_len))
        return self._maps[split]

    def token_counts(self) -> np.ndarray:
        """int64 (vocab_size,): frequency of every id in the train split's documents."""
        if self._counts is None:
            f = os.path.join(self.path, self.meta.get("token_counts_file", "token_counts.npy"))
            try:
                c = np.load(f, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise DataError(f"{f}: unreadable ({e}); the prepared directory is corrupt") from None
            if c.shape != (self.vocab_size,):
                raise DataError(f"{f}: shape {c.shape}, expected ({self.vocab_size},)")
            self._counts = c.astype(np.int64, copy=False)
        return self._counts

    def tokenizer(self):
        """The ``tokenizers.Tokenizer`` the data was prepared with."""
        from .tokenizer import load_tokenizer

        return load_tokenizer(self.path)

    def vocab(self) -> list[str]:
        return read_vocab(os.path.join(self.path, "vocab.txt"))

    def __getstate__(self):  # picklable for worker processes: maps are reopened lazily
        d = dict(self.__dict__)
        d["_maps"] = {}
        return d

    def __repr__(self) -> str:
        return (f"PreparedData({self.path!r}, T={self.seq_len}, packed={self.packed}, vocab={self.vocab_size}, "
                f"train={self.num_sequences('train')}, eval={self.num_sequences('eval')})")
