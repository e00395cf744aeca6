"""Writing a prepared directory's sequences: token shards, packing, unpacked rows, token counts,
and the held-out split (the layout is described in :mod:`.prepare`)."""

from __future__ import annotations

import hashlib

import numpy as np


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


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
    """Documents joined by one [SEP] into a stream cut into bodies of T-2 tokens, each written as
    ``[CLS] body [SEP]``.  Never ``[SEP][SEP]``: an empty document adds no separator, a separator
    opening a body is skipped, and a body that would end in a separator (its document ended one
    token before the row's own [SEP]) starts one token later instead (that token is dropped and
    counted in ``dropped_boundary_tokens``)."""

    def __init__(self, shard: _Shard, cls: int, sep: int):
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
            if flat[pos + L - 1] == sep:  # the body would end "[SEP]" + the row's [SEP]: start later
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
        return {"documents": self.documents, "document_tokens": self.doc_tokens, "dropped_tail_tokens": self.dropped_tail_tokens,
                "dropped_boundary_tokens": self.dropped_boundary_tokens, "empty_documents": self.empty_documents}


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
