"""Tokenizing one work unit of a corpus (:mod:`.units`) for :func:`.prepare.prepare`: its documents
read in chunks, cleaned (Wikipedia) and encoded, their ids and lengths written to the unit's own
directory, which appears (renamed into place) only once complete."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from tokendrop.data.corpus import WIKI, Piece, Source, finish, iter_raw
from tokendrop.runs.files import atomic_write_json, replace_dir

_CHUNK_CHARS = 1 << 20  # text per tokenization task
_CHUNK_DOCS = 2048

IDS, LENGTHS, INFO = "ids.bin", "lengths.bin", "info.json"

# ----------------------------------------------------------------------------------------------
# encoding


def _encode(
    tok, dtype: np.dtype, fmt: str, raws: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clean (wiki) + tokenize a chunk: (concatenated ids, the length of each item, whether each
    item is a :class:`~.corpus.Piece` that the next item continues)."""
    docs = [finish(fmt, r) for r in raws] if fmt == WIKI else raws
    full = [i for i, d in enumerate(docs) if d]
    encs = tok.encode_batch_fast([docs[i] for i in full], add_special_tokens=False) if full else []
    id_lists = [e.ids for e in encs]
    lens = np.zeros(len(raws), np.int64)
    lens[full] = np.fromiter((len(x) for x in id_lists), dtype=np.int64, count=len(id_lists))
    total = int(lens.sum())
    ids = (
        np.fromiter(itertools.chain.from_iterable(id_lists), dtype=dtype, count=total)
        if total
        else np.zeros(0, dtype)
    )
    cont = np.fromiter((isinstance(r, Piece) for r in raws), dtype=bool, count=len(raws))
    return ids, lens, cont


def join_pieces(lens: np.ndarray, cont: np.ndarray, carry: int) -> tuple[np.ndarray, int, int]:
    """Per-item lengths (and continuation flags, :func:`_encode`) -> (the lengths of the non-empty
    documents that end in this chunk, the empty ones, the tokens of a document that the next chunk
    continues); ``carry``: those tokens from the previous chunk."""
    if not carry and not cont.any():
        keep = lens > 0
        return lens[keep], int(len(lens) - keep.sum()), 0
    out: list[int] = []
    empty = 0
    for n, c in zip(lens.tolist(), cont.tolist()):
        carry += n
        if c:
            continue
        if carry:
            out.append(carry)
        else:
            empty += 1
        carry = 0
    return np.array(out, dtype=np.int64), empty, carry


def _chunks(raws: Iterable[str], fmt: str, counted: list[int]) -> Iterator[tuple[str, list[str]]]:
    """Raw documents (and pieces) in chunks of about ``_CHUNK_CHARS`` characters; ``counted[0]``:
    documents read."""
    buf: list[str] = []
    size = 0
    for raw in raws:
        counted[0] += not isinstance(raw, Piece)
        buf.append(raw)
        size += len(raw)
        if size >= _CHUNK_CHARS or len(buf) >= _CHUNK_DOCS:
            yield fmt, buf
            buf, size = [], 0
    if buf:
        yield fmt, buf


def tokenize_unit(
    src: Source,
    span: tuple[int, int] | None,
    dest: str,
    tmp_parent: str,
    text_field: str,
    encode: Callable[
        [Iterator[tuple[str, list[str]]]], Iterable[tuple[np.ndarray, np.ndarray, int]]
    ],
    progress: Callable[[int], None] | None = None,
    on_docs: Callable[[int], None] | None = None,
) -> dict:
    """Tokenize the documents of ``src`` (the work unit ``span`` of it; all when None) into the
    directory ``dest``: ``ids.bin`` (the ids of the non-empty documents, concatenated),
    ``lengths.bin`` (int64 per document), ``info.json`` (counts).  It is built in a temp dir under
    ``tmp_parent`` and renamed to ``dest`` only when complete.  ``encode`` maps chunks to ``(ids,
    lengths, continued)`` (:func:`_encode`) in order (inline or through worker processes); a
    document read in pieces is one document here.  -> the info dict."""
    tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".", dir=tmp_parent)
    try:
        stats: dict = {}
        counted = [0]
        lengths: list[np.ndarray] = []
        n_empty = n_tokens = carry = 0
        with open(os.path.join(tmp, IDS), "wb") as out:
            for ids, lens, cont in encode(
                _chunks(iter_raw(src, text_field, progress, stats, span), src.fmt, counted)
            ):
                lens, empty, carry = join_pieces(lens, cont, carry)
                out.write(ids.tobytes())
                lengths.append(lens)
                n_empty += empty
                n_tokens += len(ids)
                if on_docs is not None:
                    on_docs(len(lens))
            out.flush()
            os.fsync(out.fileno())
        lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        with open(os.path.join(tmp, LENGTHS), "wb") as f:
            f.write(lens.astype(np.int64).tobytes())
            os.fsync(f.fileno())
        info = {
            "documents": int(len(lens)),
            "tokens": n_tokens,
            "empty_documents": n_empty,
            "raw_documents": counted[0],
            "input_bytes": int(stats.get("input_bytes", 0)),
        }
        atomic_write_json(os.path.join(tmp, INFO), info)
        replace_dir(Path(tmp), Path(dest))
        return info
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ----------------------------------------------------------------------------------------------
# worker processes

WORKER_STATE: dict[str, Any] = {}


def _worker_init(tok_json: str, dtype: str, context: dict | None = None) -> None:
    # Ctrl-C is the parent's: it stops the pool, no worker tracebacks
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool's terminate() ends a worker quietly

    WORKER_STATE["tok"] = Tokenizer.from_str(tok_json)
    WORKER_STATE["dtype"] = np.dtype(dtype)
    WORKER_STATE.update(context or {})


def _encode_task(args: tuple[str, list[str]]) -> tuple[np.ndarray, np.ndarray, int]:
    fmt, raws = args
    return _encode(WORKER_STATE["tok"], WORKER_STATE["dtype"], fmt, raws)


def make_pool(workers: int, tok_json: str, dtype: np.dtype, context: dict | None = None):
    """``workers`` processes, each with its own single-threaded copy of the tokenizer and
    ``context`` (read by the tasks from ``WORKER_STATE``)."""
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    # Children tokenize single-threaded (the pool is the parallelism); setting the variable while
    # forking also silences tokenizers' fork warning.
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return ctx.Pool(workers, initializer=_worker_init, initargs=(tok_json, dtype.str, context))
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def pooled_encode(pool, workers: int) -> Callable[[Iterator], Iterator]:
    """``encode`` for :func:`tokenize_unit` that cleans and tokenizes the chunks in ``pool`` (this
    process reads), in order, with at most ``2 * workers + 1`` chunks in flight."""

    def encode(chunks: Iterator) -> Iterator:
        pending: deque = deque()
        for task in chunks:
            pending.append(pool.apply_async(_encode_task, (task,)))
            while len(pending) > 2 * workers + 1:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    return encode


def inline_encode(tok, dtype: np.dtype) -> Callable[[Iterator], Iterator]:
    """``encode`` for :func:`tokenize_unit` in this process."""
    return lambda chunks: (_encode(tok, dtype, fmt, raws) for fmt, raws in chunks)


@contextlib.contextmanager
def tokenizers_parallelism(enabled: bool):
    """tokenizers reads TOKENIZERS_PARALLELISM at every batch call; respect a user's explicit
    setting."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    if old is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if enabled else "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
