"""Tokenizing a corpus for :func:`.prepare.prepare`: documents read in chunks, cleaned (Wikipedia)
and encoded inline, in a background reader thread + ``tokenizers``' threads, or in worker processes;
every document's ids written in corpus order to one flat file."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import queue
import sys
import threading
from collections import deque
from typing import Any, Iterator, Sequence

import numpy as np

from .corpus import WIKI, Source, finish, iter_raw
from .tokenizer import plain_copy

_CHUNK_CHARS = 1 << 20  # text per tokenization task
_CHUNK_DOCS = 2048

# ----------------------------------------------------------------------------------------------
# tokenization workers

_W: dict[str, Any] = {}


def _worker_init(tok_json: str, dtype: str) -> None:
    import signal

    from tokenizers import Tokenizer

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the pool, no worker tracebacks
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool's terminate() ends a worker quietly

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
