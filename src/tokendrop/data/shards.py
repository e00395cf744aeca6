"""Writing a prepared directory's sequences: token shards, packing, unpacked rows, token counts,
and the held-out split (the layout is described in :mod:`.prepare`)."""

from __future__ import annotations

import hashlib
import os

import numpy as np


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


class ShardWriter:
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


class TokenCounter:
    """Token-frequency counts, accumulated in blocks."""

    def __init__(self, vocab_size: int):
        self.counts = np.zeros(vocab_size, np.int64)
        self.parts: list[np.ndarray] = []
        self.pending = 0

    def add(self, ids: np.ndarray) -> None:
        for a in range(0, len(ids), 1 << 22):  # a long document in bounded blocks
            part = ids[a : a + (1 << 22)]
            self.parts.append(part)
            self.pending += len(part)
            if self.pending >= 1 << 22:
                self.flush()

    def flush(self) -> None:
        if self.parts:
            self.counts += np.bincount(np.concatenate(self.parts), minlength=len(self.counts))[
                : len(self.counts)
            ]
            self.parts, self.pending = [], 0


class PackedWriter:
    """Documents joined by one [SEP] into a stream cut into bodies of T-2 tokens, each written as
    ``[CLS] body [SEP]``.  Never ``[SEP][SEP]``: an empty document adds no separator, a separator
    opening a body is skipped, and a body that would end in a separator (its document ended one
    token before the row's own [SEP]) starts one token later instead (that token is dropped and
    counted in ``dropped_boundary_tokens``)."""

    BLOCK_ROWS = 256  # rows' worth of tokens cut at a time (memory: not a document's length)

    def __init__(self, shard: ShardWriter, cls: int, sep: int):
        self.shard, self.cls, self.sep = shard, cls, sep
        self.L = shard.T - 2
        self.sep_arr = np.array([sep], dtype=shard.dtype)
        self.parts: list[np.ndarray] = []
        self.pending = 0
        self.documents = 0
        self.doc_tokens = 0
        self.dropped_tail_tokens = 0
        self.dropped_boundary_tokens = 0
        self.empty_documents = 0

    def add(self, ids: np.ndarray) -> None:
        if len(ids) == 0:  # nothing to separate: a second [SEP] in a row otherwise
            self.documents += 1
            self.empty_documents += 1
            return
        if self.pending:
            self.parts.append(self.sep_arr)
            self.pending += 1
        self.documents += 1
        self.doc_tokens += len(ids)
        block = self.BLOCK_ROWS * self.L
        # a long document in bounded blocks (memory: not its length)
        for a in range(0, len(ids), block):
            part = ids[a : a + block]
            self.parts.append(part)
            self.pending += len(part)
            if self.pending >= block:
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
            # the body would end "[SEP]" + the row's [SEP]: start later
            if flat[pos + L - 1] == sep:
                k = pos
                while k + L <= n and flat[k + L - 1] == sep:
                    k += 1
                if k + L > n:  # not enough tokens yet: decide when more arrive
                    break
                self.dropped_boundary_tokens += int(np.count_nonzero(flat[pos:k] != sep))
                pos = k
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
        return {
            "documents": self.documents,
            "document_tokens": self.doc_tokens,
            "dropped_tail_tokens": self.dropped_tail_tokens,
            "dropped_boundary_tokens": self.dropped_boundary_tokens,
            "empty_documents": self.empty_documents,
        }


class UnpackedWriter:
    def __init__(self, shard: ShardWriter, cls: int, sep: int, pad: int, overflow: str):
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


def choose_eval_docs(
    lengths: np.ndarray,
    eval_fraction: float,
    body: int,
    packed: bool,
    seed: int,
    scratch: str | None = None,
    chunk: int = 1 << 20,
) -> np.ndarray:
    """Boolean mask over documents: the held-out ones.

    A seeded random order of the documents is taken until it holds ``eval_fraction`` of the tokens
    (and at least one full sequence: packed, bodies of T-2 tokens including separators; unpacked,
    one document), leaving at least one document for training.  ``lengths`` may be a memory map;
    with ``scratch`` (a directory) the order and the mask are memory maps there too, so memory use
    does not grow with the number of documents (the result is the same, the order being numpy's
    ``permutation`` done in place by ``shuffle``); the prefix sums are taken ``chunk`` documents
    at a time."""
    D = len(lengths)
    is_eval = _array(scratch, "is_eval.bin", D, np.bool_)
    if eval_fraction <= 0 or D < 2:
        return is_eval
    order = _array(scratch, "order.bin", D, np.int64)
    for a in range(0, D, chunk):
        order[a : a + chunk] = np.arange(a, min(D, a + chunk), dtype=np.int64)
    # Generator.permutation(D) is arange(D) shuffled; on a plain ndarray view of a memory map the
    # same in-place shuffle (the same draws), without holding D ids in memory
    np.random.default_rng([seed, 0x65766C]).shuffle(order.view(np.ndarray))
    total = np.int64(0)
    for a in range(0, D, chunk):
        total += np.asarray(lengths[a : a + chunk], dtype=np.int64).sum(dtype=np.int64)
    target = eval_fraction * total  # np.float64, compared with the int64 prefix sums as numpy does
    k_frac = k_seq = None
    cum0 = np.int64(0)
    for a in range(0, D, chunk):
        cum = cum0 + np.cumsum(np.asarray(lengths[order[a : a + chunk]], dtype=np.int64))
        if k_frac is None:
            j = int(np.searchsorted(cum, target, side="left"))
            k_frac = a + j if j < len(cum) else None
        if k_seq is None:
            need = (
                cum + np.arange(a, a + len(cum))
                if packed
                else np.arange(a + 1, a + len(cum) + 1) * body
            )
            j = int(np.searchsorted(need, body, side="left"))
            k_seq = a + j if j < len(need) else None
        cum0 = cum[-1]
        if k_frac is not None and k_seq is not None:
            break
    k = max(D if k_frac is None else k_frac, D if k_seq is None else k_seq) + 1
    k = min(k, D - 1)
    for a in range(0, k, chunk):
        is_eval[order[a : min(k, a + chunk)]] = True
    return is_eval


def _array(scratch: str | None, name: str, n: int, dtype) -> np.ndarray:
    """A zeroed array of ``n`` items: in memory, or a memory map ``scratch/name``."""
    if scratch is None or n == 0:
        return np.zeros(n, dtype)
    return np.memmap(os.path.join(scratch, name), dtype=dtype, mode="w+", shape=(n,))
