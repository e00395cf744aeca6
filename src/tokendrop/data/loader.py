"""MLM batches from a prepared directory: deterministic, resumable, rank-sharded, static shapes.

Order.  For a split of N sequences, epoch e is the permutation ``default_rng([seed, e, 0x5EED])
.permutation(N)`` (or ``arange(N)`` with ``shuffle=False``).  With per-rank batch B and world size
W (G = B*W), global step s of an epoch takes permutation entries ``[s*G, (s+1)*G)`` and rank r the
contiguous slice ``[s*G + r*B, s*G + (r+1)*B)``.  So one process with batch 2B sees exactly what
ranks 0 and 1 with batch B see, concatenated, and ranks never share a sequence within an epoch.
``loop=True`` (training): ``N // G`` steps per epoch, the incomplete tail is dropped, then the next
epoch re-permutes.  ``loop=False`` (eval): one pass over all N sequences; the last batch is filled
with placeholder rows whose ``mlm_weights`` are all 0, so every rank yields the same number of
batches and weighted losses are exact.

Masking (BERT).  Of the positions that are not [CLS]/[SEP]/[PAD]/[MASK], ``k = min(P, max(1,
round(mask_prob * n_maskable)))`` are chosen uniformly without replacement, sorted; 80% become
[MASK], 10% a random id (drawn uniformly from the vocabulary minus every bracketed token such as
[PAD] or [unused0]), 10% stay.  P = round(mask_prob * T) prediction slots per sequence; the slots
after the k real ones have position 0, label 0, weight 0.  The random draws of a sequence come from
``default_rng([seed, epoch, index])`` (eval split: ``[seed, epoch, index, 1]``): the masks depend
only on the seed, the epoch and the sequence, never on workers, ranks or batch composition.
A ``variable_rate`` loader (a masking-rate schedule) draws every sequence at ``mask_prob``, its
largest rate, exactly as above, remembers each slot's rank in the draw and, when a batch is taken,
cuts it to the rate last given to ``set_mask_rate`` (``cut_to_rate``: the k = round(rate * n)
slots of lowest rank stay, the others get their ids back), so the rate is exact with workers.
A sequence-length warm-up (``set_seq_len(L)``, L < T, packed data) cuts the batch taken next into
framed pieces of length L and masks those (``tokendrop.data.pieces``); the consumer builds such a
batch itself from the memory-mapped rows (the workers' full-length batch of that step is unused).

Resume.  ``state_dict()`` describes the next batch to be *yielded* (prefetched batches are not
counted); ``load_state_dict()`` makes iteration continue with exactly that batch, also with a
different world size as long as the global batch divides the sequences consumed so far.  With
``loop=True`` every ``iter(loader)`` continues from the current position; with ``loop=False``
every ``iter(loader)`` starts a new pass at the first batch (so repeated evals see the same
batches), unless ``load_state_dict()`` was called since the last ``iter()``.

Checks.  Every batch's ids are checked against the vocabulary size (one max over the B x T ids):
an edited or corrupt shard is a one-line DataError naming the file and the sequence, never an
embedding lookup out of range.  (``PreparedData.open`` checks meta.json against the shard sizes;
``tokendrop verify`` reads whole shards.)

Workers.  ``num_workers`` forked processes build batches (worker w builds batches w, w+nw, ...
into ``prefetch`` shared-memory slots of its own and announces each on a small queue; the consumer
reads the workers round-robin, so the order is fixed, and copies each batch out of its slot).
``num_workers=0`` builds them synchronously.  Workers stop when the iterator is exhausted, closed or
garbage-collected, on ``close()``, at interpreter exit (daemon processes), and when their parent
dies, killed or not (Linux ``PR_SET_PDEATHSIG``, and a check of the parent pid while they wait);
they hold none of the parent's run-directory locks (``tokendrop.runs.rundir.lock``)."""

from __future__ import annotations

import copy
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from tokendrop.data.masking import MLMMasker, build_batch, cut_to_rate, num_prediction_slots
from tokendrop.data.pieces import MIN_PIECE, PIECE_DOMAIN, piece_batch
from tokendrop.data.prepared import PreparedData
from tokendrop.errors import DataError

PERM_KEY = 0x5EED
_EVAL_DOMAIN = 1


class EpochPlan:
    """Which global sequence indices batch (epoch, step) holds for this rank."""

    def __init__(self, N: int, B: int, W: int, rank: int, seed: int, shuffle: bool, loop: bool):
        self.N, self.B, self.W, self.rank, self.seed, self.shuffle, self.loop = (
            N,
            B,
            W,
            rank,
            seed,
            shuffle,
            loop,
        )
        self.G = B * W
        self.steps_per_epoch = N // self.G if loop else -(-N // self.G)
        self._perm_epoch = None
        self._perm = None

    def perm(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            if self.shuffle:
                self._perm = np.random.default_rng([self.seed, epoch, PERM_KEY]).permutation(self.N)
            else:
                self._perm = np.arange(self.N, dtype=np.int64)
            self._perm_epoch = epoch
        return self._perm

    def indices(self, epoch: int, step: int) -> np.ndarray:
        perm = self.perm(epoch)
        lo = step * self.G + self.rank * self.B
        out = np.full(self.B, -1, np.int64)
        chunk = perm[lo : min(lo + self.B, self.N)] if lo < self.N else perm[:0]
        if self.loop:
            chunk = chunk[: self.B]
        out[: len(chunk)] = chunk
        return out

    def batch(
        self, seqs, epoch: int, step: int, masker: MLMMasker, domain: int, ranked: bool
    ) -> dict[str, np.ndarray]:
        """The numpy batch (epoch, step) of this rank (a data mixture's plan,
        tokendrop.data.mixture, has its own)."""
        return build_batch(
            seqs, self.indices(epoch, step), masker, self.seed, epoch, domain, ranked=ranked
        )

    def piece_batch(
        self,
        seqs,
        epoch: int,
        step: int,
        length: int,
        masker: MLMMasker,
        ranked: bool,
        cls_id: int,
        sep_id: int,
    ) -> dict[str, np.ndarray]:
        """Batch (epoch, step) as framed pieces of ``length`` (``tokendrop.data.pieces``; training
        loops)."""
        return piece_batch(
            seqs,
            self.indices(epoch, step),
            length,
            masker,
            self.seed,
            epoch,
            PIECE_DOMAIN + length,
            ranked,
            cls_id,
            sep_id,
        )

    def extra_state(self, epoch: int, step: int) -> dict[str, Any]:
        return {}  # a mixture's plan records its sources' counts

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def at(self, epoch0: int, step0: int, ordinal: int) -> tuple[int, int] | None:
        """(epoch, step) of the ordinal-th batch after (epoch0, step0); None past the end
        (loop=False)."""
        s = step0 + ordinal
        if self.loop:
            return epoch0 + s // self.steps_per_epoch, s % self.steps_per_epoch
        if s >= self.steps_per_epoch:
            return None
        return epoch0, s


_END = "__end__"
_ERR = "__error__"


class _SlotLayout:
    """Byte layout of one batch in a shared-memory slot: ids (B,T), positions, labels, weights
    (B,P)."""

    def __init__(self, B: int, T: int, P: int, dtype: np.dtype, ranked: bool = False):
        self.fields = []
        off = 0
        extra = (
            (("mlm_rank", (B, P), np.dtype(np.int32)), ("num_maskable", (B,), np.dtype(np.int32)))
            if ranked
            else ()
        )
        for name, shape, dt in (
            ("input_ids", (B, T), dtype),
            ("mlm_positions", (B, P), np.dtype(np.int32)),
            ("mlm_labels", (B, P), dtype),
            ("mlm_weights", (B, P), np.dtype(np.uint8)),
            *extra,
        ):
            self.fields.append((name, shape, dt, off))
            off += -(-int(np.prod(shape)) * dt.itemsize // 64) * 64  # 64-byte aligned
        self.nbytes = off

    def views(self, buf: np.ndarray, slot: int) -> dict[str, np.ndarray]:
        base = slot * self.nbytes
        return {
            name: buf[base + off : base + off + int(np.prod(shape)) * dt.itemsize]
            .view(dt)
            .reshape(shape)
            for name, shape, dt, off in self.fields
        }


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int, by_signal: bool) -> bool:
    """In a worker: have the kernel SIGKILL it when its parent dies (Linux ``PR_SET_PDEATHSIG``;
    ``by_signal`` only when forked from the parent's main thread, since the signal follows the
    forking thread).  False when the parent is already gone."""
    if by_signal and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the parent-pid check in the loop still ends the worker
    return os.getppid() == parent


def _worker_main(
    pd: PreparedData,
    split: str,
    plan: EpochPlan,
    masker: MLMMasker,
    domain: int,
    epoch0: int,
    step0: int,
    wid: int,
    nw: int,
    raw,
    layout: _SlotLayout,
    nslots: int,
    free,
    q,
    stop,
    ranked: bool = False,
    parent: int = 0,
    by_signal: bool = False,
) -> None:
    """Build batches wid, wid+nw, ... into shared-memory slots (round-robin); announce them on
    ``q``.  The worker ends when its parent (pid ``parent``) is gone, also when it was killed and
    never set ``stop``."""
    try:  # numpy only: nothing here touches torch (the process is forked from a torch program)
        if parent and not _die_with_parent(parent, by_signal):
            return
        orphan = (lambda: os.getppid() != parent) if parent else (lambda: False)
        buf = np.frombuffer(raw, dtype=np.uint8)
        seqs = pd.sequences(split)
        o = wid
        j = 0
        while not stop.is_set():
            es = plan.at(epoch0, step0, o)
            if es is None:
                break
            e, s = es
            b = plan.batch(seqs, e, s, masker, domain, ranked)
            while not stop.is_set() and not free.acquire(timeout=0.1):  # wait for a consumed slot
                if orphan():
                    return
            if stop.is_set() or orphan():
                break
            slot = j % nslots
            for name, v in layout.views(buf, slot).items():
                v[...] = b[name]
            q.put((e, s, slot))
            o += nw
            j += 1
        if not stop.is_set():
            q.put(_END)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # reported to the consumer
        try:
            kind = "DataError" if isinstance(exc, DataError) else type(exc).__name__
            q.put((_ERR, kind, str(exc), traceback.format_exc()))
        except Exception:
            pass


def _shutdown(procs: list, queues: list, stop) -> None:
    stop.set()  # workers poll it at least every 0.1 s
    deadline = time.monotonic() + 0.5
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=2.0)
    for q in queues:
        try:
            q.cancel_join_thread()
            q.close()
        except Exception:
            pass
    procs.clear()
    queues.clear()


class _Workers:
    """Worker processes producing the batches from (epoch0, step0) onwards, consumed in order.

    Each worker owns ``prefetch`` shared-memory batch slots and a semaphore counting free ones; only
    tiny (epoch, step, slot) messages go through its queue, so handing a batch over costs the
    consumer one small read and a copy.
    """

    def __init__(self, loader: MLMLoader, epoch0: int, step0: int):
        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.nw = loader.num_workers
        self.nslots = max(1, loader.prefetch)
        self.layout = _SlotLayout(
            loader.batch_size,
            loader.seq_len,
            loader.num_slots,
            loader.data.dtype,
            loader.variable_rate,
        )
        self.stop = ctx.Event()
        self.queues = [ctx.Queue() for _ in range(self.nw)]
        self.free = [ctx.Semaphore(self.nslots) for _ in range(self.nw)]
        self.raws = [ctx.RawArray("B", self.layout.nbytes * self.nslots) for _ in range(self.nw)]
        self.bufs = [np.frombuffer(r, dtype=np.uint8) for r in self.raws]
        self.procs = []
        for w in range(self.nw):
            p = ctx.Process(
                target=_worker_main,
                args=(
                    loader.data,
                    loader.split,
                    loader._plan,
                    loader.masker,
                    loader._domain,
                    epoch0,
                    step0,
                    w,
                    self.nw,
                    self.raws[w],
                    self.layout,
                    self.nslots,
                    self.free[w],
                    self.queues[w],
                    self.stop,
                    loader.variable_rate,
                    os.getpid(),
                    threading.current_thread() is threading.main_thread(),
                ),
                name=f"tokendrop-data-{w}",
                daemon=True,
            )
            p.start()
            self.procs.append(p)
        self.ordinal = 0
        self._finalizer = weakref.finalize(self, _shutdown, self.procs, self.queues, self.stop)

    def next(self, convert):
        """``convert(views)`` of the next batch (views are valid only during the call), or None at
        the end."""
        w = self.ordinal % self.nw
        q, p = self.queues[w], self.procs[w]
        while True:
            try:
                item = q.get(timeout=1.0)
                break
            except queue.Empty:
                if not p.is_alive():
                    try:  # it may have announced its last batch just before exiting
                        item = q.get(timeout=0.5)
                        break
                    except queue.Empty:
                        raise RuntimeError(
                            f"data worker {w} exited unexpectedly (exit code {p.exitcode})"
                        ) from None
        if isinstance(item, tuple) and item and item[0] == _ERR:
            _, kind, msg, tb = item
            if kind == "DataError":
                raise DataError(msg)
            raise RuntimeError(f"data worker {w} failed: {kind}: {msg}\n{tb}")
        if item == _END:
            return None
        e, s, slot = item
        out = convert(self.layout.views(self.bufs[w], slot))
        self.free[w].release()
        self.ordinal += 1
        return e, s, out

    def close(self) -> None:
        self._finalizer()


class MLMLoader:
    """Iterable of MLM batches (dicts of CPU tensors with static shapes) from a prepared split.

    Keys: ``input_ids`` (B,T) int64, ``attention_mask`` (B,T) int64 (all ones when packed),
    ``token_type_ids`` (B,T) int64 zeros, ``mlm_positions`` (B,P) int64, ``mlm_labels`` (B,P) int64
    (original ids), ``mlm_weights`` (B,P) float32 (1 real slot, 0 unused).  See the module doc for
    order, masking and resume semantics.
    """

    def __init__(
        self,
        data: PreparedData | str | os.PathLike,
        split: str = "train",
        batch_size: int = 32,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        mask_prob: float = 0.15,
        num_workers: int = 1,
        prefetch: int = 4,
        shuffle: bool = True,
        loop: bool = True,
        variable_rate: bool = False,
        pin_memory: bool = False,
    ):
        """``variable_rate``: ``mask_prob`` is the largest rate; each batch is masked at the rate
        ``set_mask_rate`` last set when it is taken (the consumer's side: exact with workers).
        ``pin_memory``: the batches' tensors in page-locked memory (CUDA is available), so the
        consumer's ``non_blocking`` copies to the GPU are asynchronous."""
        # or a data mixture
        self.data = PreparedData.open(data) if isinstance(data, (str, os.PathLike)) else data
        if split not in ("train", "eval"):
            raise DataError(f"split: expected 'train' or 'eval', got {split!r}")
        if batch_size <= 0:
            raise DataError(f"batch_size: expected a positive integer, got {batch_size}")
        if world_size <= 0 or not 0 <= rank < world_size:
            raise DataError(
                f"rank/world_size: expected 0 <= rank < world_size, got rank={rank}, "
                f"world_size={world_size}"
            )
        if num_workers < 0:
            raise DataError(f"num_workers: expected >= 0, got {num_workers}")
        self.split = split
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.num_workers = int(num_workers)
        self.prefetch = int(prefetch)
        self.shuffle = bool(shuffle)
        self.loop = bool(loop)
        self.seq_len = self.data.seq_len
        self.masker = MLMMasker(
            self.data.special_ids,
            self.data.vocab(),
            self.seq_len,
            mask_prob,
            exclude_ids=self.data.special_token_ids(),
        )
        # meta.json's: every batch's ids are checked against it
        self.masker.vocab_size = self.data.vocab_size
        self.num_slots = self.masker.num_slots
        self.variable_rate = bool(variable_rate)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.mask_rate = self.masker.mask_prob
        self.piece_len = self.seq_len  # < seq_len: a sequence-length warm-up's pieces (set_seq_len)
        self._piece_maskers: dict[int, MLMMasker] = {}
        self._domain = _EVAL_DOMAIN if split == "eval" else 0
        N = self.data.num_sequences(split)
        # a data mixture (tokendrop.data.mixture) brings its own
        make_plan = getattr(self.data, "make_plan", None)
        self._plan = (
            make_plan(
                split,
                self.batch_size,
                self.world_size,
                self.rank,
                self.seed,
                self.shuffle,
                self.loop,
            )
            if make_plan
            else EpochPlan(
                N, self.batch_size, self.world_size, self.rank, self.seed, self.shuffle, self.loop
            )
        )
        if self.loop and self._plan.steps_per_epoch == 0:
            raise DataError(
                f"{self.data.path}: the {split} split has {N} sequences, fewer than one global "
                f"batch of {self._plan.G} ({self.batch_size} per rank x {self.world_size} ranks); "
                "expected more data or a smaller batch"
            )
        self._epoch = 0
        self._step = 0
        self._iter_id = 0
        self._state_version = 0
        self._resume_pending = False
        self._workers: _Workers | None = None
        self._pad = self.data.special_ids["pad"]

    # ---- bookkeeping
    @property
    def num_sequences(self) -> int:
        return self._plan.N

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch (loop=True: full global batches; loop=False: the one pass, tail
        included)."""
        return self._plan.steps_per_epoch

    def __len__(self) -> int:
        return self._plan.steps_per_epoch

    @property
    def epoch(self) -> int:
        return self._epoch

    def batch_indices(self, epoch: int, step: int) -> np.ndarray:
        """Global sequence indices of this rank's batch (epoch, step); -1 marks placeholder rows."""
        return self._plan.indices(epoch, step)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "position": self._step,
            "consumed": self._step * self._plan.G,  # sequences of this epoch consumed by all ranks
            "global_batch": self._plan.G,
            "seed": self.seed,
            "split": self.split,
            "shuffle": self.shuffle,
            "num_sequences": self._plan.N,
            **self._plan.extra_state(self._epoch, self._step),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = {
            "split": self.split,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_sequences": self._plan.N,
        }
        for key, value in mine.items():
            if key in state and state[key] != value:
                raise DataError(
                    f"loader state: {key}={state[key]!r} does not match this loader's {value!r}; "
                    "cannot resume a different data stream"
                )
        self._plan.load_extra_state(state)
        try:
            epoch = int(state["epoch"])
            consumed = (
                int(state["consumed"])
                if "consumed" in state
                else int(state["position"]) * self._plan.G
            )
        except (KeyError, TypeError, ValueError):
            raise DataError(
                f"loader state: expected 'epoch' and 'position' integers, got {state!r}"
            ) from None
        if consumed % self._plan.G:
            raise DataError(
                f"loader state: {consumed} sequences of epoch {epoch} consumed, not a multiple of "
                "the global batch "
                f"{self._plan.G}; resume with a global batch that divides it"
            )
        step = consumed // self._plan.G
        if self.loop and step >= self._plan.steps_per_epoch:
            epoch, step = (
                epoch + step // self._plan.steps_per_epoch,
                step % self._plan.steps_per_epoch,
            )
        self._epoch, self._step = epoch, step
        self._state_version += 1  # an active iterator restarts its workers from here
        self._resume_pending = True  # loop=False: the next iter() continues from here

    def set_mask_rate(self, rate: float) -> None:
        """The masking rate of the batches taken from now on (``variable_rate`` loaders only)."""
        if not self.variable_rate:
            raise DataError(
                "set_mask_rate: this loader masks at a fixed rate (construct it with "
                "variable_rate=True)"
            )
        if not 0.0 < rate <= self.masker.mask_prob:
            raise DataError(
                f"set_mask_rate: expected a rate in (0, {self.masker.mask_prob}] (the loader's "
                f"mask_prob sizes the prediction slots), got {rate}"
            )
        self.mask_rate = float(rate)

    @property
    def sequences_consumed(self) -> int:
        """Sequences all ranks have taken since the start of the run (whole epochs included)."""
        return (self._epoch * self._plan.steps_per_epoch + self._step) * self._plan.G

    def set_seq_len(self, length: int) -> None:
        """The length of the sequences taken from now on: T, or a divisor L of T (packed data only):
        each sequence becomes T/L framed pieces of length L (``tokendrop.data.pieces``)."""
        length = int(length)
        if length != self.seq_len and (
            not self.data.packed or length < MIN_PIECE or self.seq_len % length
        ):
            raise DataError(
                f"set_seq_len: expected {self.seq_len} or a divisor of it >= {MIN_PIECE} of packed "
                f"data, got {length} ({'packed' if self.data.packed else 'unpacked'} data)"
            )
        self.piece_len = length

    def _piece_batch(self, seqs, e: int, s: int) -> dict[str, torch.Tensor]:
        """Batch (e, s) as framed pieces of length ``piece_len``, masked on the pieces."""
        L = self.piece_len
        if L not in self._piece_maskers:
            m = copy.copy(self.masker)
            m.seq_len, m.num_slots = L, num_prediction_slots(L, self.masker.mask_prob)
            self._piece_maskers[L] = m
        m = self._piece_maskers[L]
        b = self._plan.piece_batch(
            seqs,
            e,
            s,
            L,
            m,
            self.variable_rate,
            self.data.special_ids["cls"],
            self.data.special_ids["sep"],
        )
        if self.variable_rate:
            b = cut_to_rate(b, self.mask_rate, m.num_slots)
        return self._to_torch(b["input_ids"], b["mlm_positions"], b["mlm_labels"], b["mlm_weights"])

    def _take(self, v: dict[str, np.ndarray]) -> dict[str, torch.Tensor] | None:
        """A worker's batch, or None while pieces are taken (built by the consumer instead)."""
        return None if self.piece_len != self.seq_len else self._views_to_torch(v)

    # ---- iteration
    def _to_torch(self, inp, pos, lab, wts) -> dict[str, torch.Tensor]:
        """Tensors owning their memory (the inputs may be views of a shared slot that is reused)."""
        input_ids = self._tensor(inp, np.int64)
        if self.data.packed:
            attn = torch.ones_like(input_ids)
        else:
            attn = (input_ids != self._pad).long()
        out = {
            "input_ids": input_ids,
            "attention_mask": attn,
            "token_type_ids": torch.zeros_like(input_ids),
            "mlm_positions": self._tensor(pos, np.int64),
            "mlm_labels": self._tensor(lab, np.int64),
            "mlm_weights": self._tensor(wts, np.float32),
        }
        # (packed rows: the trainer does not send them)
        if self.pin_memory and not self.data.packed:
            out["attention_mask"], out["token_type_ids"] = (
                attn.pin_memory(),
                out["token_type_ids"].pin_memory(),
            )
        return out

    def _tensor(self, a, dtype) -> torch.Tensor:
        """A copy of array ``a`` as a tensor (page-locked when the loader pins)."""
        a = np.asarray(a, dtype=dtype)
        if not self.pin_memory:
            return torch.from_numpy(np.array(a))
        t = torch.empty(a.shape, dtype=torch.from_numpy(a[:0]).dtype, pin_memory=True)
        t.numpy()[...] = a
        return t

    def _views_to_torch(self, v: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        if self.variable_rate:
            v = cut_to_rate(v, self.mask_rate, self.num_slots)
        return self._to_torch(v["input_ids"], v["mlm_positions"], v["mlm_labels"], v["mlm_weights"])

    def _advance(self) -> None:
        self._step += 1
        if self.loop and self._step >= self._plan.steps_per_epoch:
            self._epoch += 1
            self._step = 0

    def close(self) -> None:
        """Stop background workers (iteration can start again later)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.close()
        if not self.loop and not self._resume_pending:
            self._epoch, self._step = 0, 0  # every pass over an eval split starts at its beginning
        self._resume_pending = False
        self._iter_id += 1
        return self._iterate(self._iter_id)

    def _iterate(self, iter_id: int) -> Iterator[dict[str, torch.Tensor]]:
        seqs = self.data.sequences(self.split)
        version = self._state_version
        try:
            while True:
                if self._iter_id != iter_id:  # superseded by a newer iter(loader)
                    return
                if self._state_version != version:  # load_state_dict() while iterating
                    self.close()
                    version = self._state_version
                if not self.loop and self._step >= self._plan.steps_per_epoch:
                    return
                if self.num_workers == 0:
                    e, s = self._epoch, self._step
                    if self.piece_len != self.seq_len:
                        out = self._piece_batch(seqs, e, s)
                    else:
                        b = self._plan.batch(
                            seqs, e, s, self.masker, self._domain, self.variable_rate
                        )
                        out = self._views_to_torch(b)
                else:
                    if self._workers is None:
                        self._workers = _Workers(self, self._epoch, self._step)
                    item = self._workers.next(self._take)
                    if item is None:
                        return
                    e, s, out = item
                    if (e, s) != (self._epoch, self._step):  # guards the ordering invariant
                        raise RuntimeError(
                            f"data workers out of sync: got batch {(e, s)}, expected "
                            f"{(self._epoch, self._step)}"
                        )
                    if out is None:
                        out = self._piece_batch(seqs, e, s)
                self._advance()
                yield out
        finally:
            if self._iter_id == iter_id:
                self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
