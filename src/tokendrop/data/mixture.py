"""Data mixtures: several prepared directories sampled with weights (``data.paths`` /
``data.weights``).

The standard guard against forgetting in continued pretraining: a domain corpus mixed with a general
"replay" corpus, e.g. 70/30.  :class:`Mixture` stands in for a :class:`PreparedData` (the loader,
``pretrain`` and the importance warm start read it as they read one directory); every source must
share the tokenizer (vocabulary sha256), T and packing.

Order (training, ``loop=True``; docs/design.md §2.4.1).  The global stream of training slots n = 0,
1, 2, ... (slot n is row n mod G of global micro-batch n // G, G = per-rank batch x world, ranks
taking contiguous rows as in :mod:`.loader`) is assigned to sources i.i.d.: slot n comes from source
i when u_n falls in [W_{i-1}, W_i) (W the cumulative normalised weights), u_n the (n mod 4096)-th
draw of ``default_rng([seed, n // 4096, 0x313C]).random(4096)``.  So the assignment depends on the
seed and the slot only, never on the batch size, ranks or workers.  Source i serves its slots in
order from its own stream: its c-th slot is sequence ``perm_i(e)[c mod N_i]`` with e = c // N_i and
``perm_i(e) = default_rng([seed, e, 0x5EED, 1 + i]).permutation(N_i)`` (each source its own epochs,
the smaller ones simply repeat sooner), masked with ``default_rng([seed, e, index, 16 + 2 i])``.
Which c a slot gets needs the count of earlier slots of each source: carried in the loader state
(``mixture_consumed``) and counted forward from there, 4096 slots per draw.

Held-out evaluation (``loop=False``) is one pass over every source's eval split in turn
(concatenated; masks ``[seed, 0, index, 17 + 2 i]``), unweighted.

Resume.  The loader state records the slots consumed (``consumed``, ``epoch`` 0) and each source's
count; a resumed loader continues bit-identically, also with another world size or micro-batch as
long as the new global micro-batch divides the slots consumed.  ``realised(state)`` gives the
proportions drawn so far (logged in metrics.jsonl as ``mix_0``, ``mix_1``, ...).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tokendrop.data import DataError
from tokendrop.data.loader import PERM_KEY, EpochPlan
from tokendrop.data.masking import build_batch
from tokendrop.data.pieces import PIECE_DOMAIN, piece_batch
from tokendrop.data.prepared import PreparedData

_MIX_KEY = 0x313C
_BLOCK = 4096  # slots per source draw
_DOMAIN = 16  # mask streams of source i: 16 + 2 i (training), 17 + 2 i (evaluation)


def _normalised(weights: list[float], k: int) -> np.ndarray:
    w = np.asarray(weights if weights else [1.0] * k, np.float64)
    return w / w.sum()


class MixturePlan(EpochPlan):
    """Which sequences of which source each batch holds (training: weighted i.i.d. draws per
    slot)."""

    def __init__(
        self,
        sizes: list[int],
        weights: np.ndarray,
        B: int,
        W: int,
        rank: int,
        seed: int,
        shuffle: bool = True,
    ):
        # N = all sources' sequences: steps_per_epoch is a nominal epoch of the mixture (N // G
        # batches)
        super().__init__(int(sum(sizes)), B, W, rank, seed, shuffle, True)
        self.sizes = np.asarray(sizes, np.int64)
        self.weights = weights
        self.cum = np.cumsum(weights)
        self.cum[-1] = 1.0
        self._base = (0, np.zeros(len(sizes), np.int64))  # (slot, each source's slots before it)
        self._cursor = self._base
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def sources(self, lo: int, hi: int) -> np.ndarray:
        """The source of every slot in [lo, hi)."""
        b0, b1 = lo // _BLOCK, (hi - 1) // _BLOCK + 1
        u = np.concatenate(
            [np.random.default_rng([self.seed, b, _MIX_KEY]).random(_BLOCK) for b in range(b0, b1)]
        )
        return np.searchsorted(self.cum, u[lo - b0 * _BLOCK : hi - b0 * _BLOCK], side="right")

    def consumed_at(self, n: int) -> np.ndarray:
        """Slots of each source among slots [0, n): counted forward from the last such count (or the
        resumed position)."""
        at, counts = self._cursor if self._cursor[0] <= n else self._base
        if n < at:
            raise RuntimeError(f"mixture: slot {n} lies before the resumed position {at}")
        counts = counts.copy()
        while at < n:
            end = min(n, (at // _BLOCK + 1) * _BLOCK)
            counts += np.bincount(self.sources(at, end), minlength=len(self.sizes))
            at = end
        self._cursor = (n, counts)
        return counts

    def perm_of(self, source: int, epoch: int) -> np.ndarray:
        key = (source, epoch)
        if key not in self._perms:
            n = int(self.sizes[source])
            self._perms = {
                k: v for k, v in self._perms.items() if k[0] != source or k[1] == epoch - 1
            }
            self._perms[key] = (
                np.random.default_rng([self.seed, epoch, PERM_KEY, 1 + source]).permutation(n)
                if self.shuffle
                else np.arange(n, dtype=np.int64)
            )
        return self._perms[key]

    def _draws(self, epoch: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This rank's B slots of batch (epoch, step): each slot's source, that source's epoch, and
        the position in that epoch's permutation."""
        lo = (epoch * self.steps_per_epoch + step) * self.G + self.rank * self.B
        src = self.sources(lo, lo + self.B)
        onehot = src[:, None] == np.arange(len(self.sizes))
        # earlier rows of the same source
        within = (np.cumsum(onehot, axis=0) - onehot)[np.arange(self.B), src]
        draw = self.consumed_at(lo)[src] + within
        return src, draw // self.sizes[src], draw % self.sizes[src]

    def _groups(self, epoch: int, step: int):
        """(source, its epoch, the batch rows it fills, their sequence indices in that source)."""
        src, ep, pos = self._draws(epoch, step)
        for i, e in sorted({(int(a), int(b)) for a, b in zip(src, ep)}):
            rows = np.flatnonzero((src == i) & (ep == e))
            yield i, e, rows, self.perm_of(i, e)[pos[rows]]

    def batch(
        self, seqs: list, epoch: int, step: int, masker, domain: int, ranked: bool
    ) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, e, rows, idx in self._groups(epoch, step):
            b = build_batch(
                seqs[i], idx, masker, self.seed, e, _DOMAIN + 2 * i + domain, ranked=ranked
            )
            for k, v in b.items():
                out.setdefault(k, np.zeros((self.B, *v.shape[1:]), v.dtype))[rows] = v
        return out

    def piece_batch(
        self,
        seqs: list,
        epoch: int,
        step: int,
        length: int,
        masker,
        ranked: bool,
        cls_id: int,
        sep_id: int,
    ) -> dict[str, np.ndarray]:
        """Batch (epoch, step) as framed pieces of ``length``: each slot's sequence cut as a single
        source's would be (``tokendrop.data.pieces``), its pieces masked in source i's own
        domain."""
        n = seqs[0].shape[1] // length
        out: dict[str, np.ndarray] = {}
        for i, e, rows, idx in self._groups(epoch, step):
            b = piece_batch(
                seqs[i],
                idx,
                length,
                masker,
                self.seed,
                e,
                PIECE_DOMAIN + length + ((1 + i) << 28),
                ranked,
                cls_id,
                sep_id,
            )
            # slot r's pieces: rows r n ... r n + n - 1
            at = (rows[:, None] * n + np.arange(n)).reshape(-1)
            for k, v in b.items():
                out.setdefault(k, np.zeros((self.B * n, *v.shape[1:]), v.dtype))[at] = v
        return out

    def extra_state(self, epoch: int, step: int) -> dict[str, Any]:
        n = (epoch * self.steps_per_epoch + step) * self.G
        return {
            "epoch": 0,
            "position": n // self.G,
            "consumed": n,
            "mixture_consumed": self.consumed_at(n).tolist(),
            "mixture_weights": self.weights.tolist(),
            "mixture_sizes": self.sizes.tolist(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        mine = {"mixture_weights": self.weights.tolist(), "mixture_sizes": self.sizes.tolist()}
        for key, value in mine.items():
            got = state.get(key)
            if (
                not isinstance(got, list)
                or len(got) != len(value)
                or not np.allclose(got, value, rtol=0, atol=1e-12)
            ):
                raise DataError(
                    f"loader state: {key}={state.get(key)!r} does not match this mixture's "
                    f"{value!r}; cannot resume a different mixture (data.paths / "
                    "data.weights changed)"
                )
        counts = np.asarray(state["mixture_consumed"], np.int64)
        if counts.shape != self.sizes.shape or int(counts.sum()) != int(state["consumed"]):
            raise DataError(
                f"loader state: mixture_consumed {state['mixture_consumed']!r} does not add up to "
                f"the {state['consumed']} slots consumed; the checkpoint is corrupt"
            )
        self._base = self._cursor = (int(state["consumed"]), counts)


class ConcatPlan(EpochPlan):
    """Held-out pass over every source's split in turn (``loop=False``)."""

    def __init__(self, sizes: list[int], B: int, W: int, rank: int, seed: int, shuffle: bool):
        super().__init__(int(sum(sizes)), B, W, rank, seed, shuffle, False)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def piece_batch(
        self,
        seqs: list,
        epoch: int,
        step: int,
        length: int,
        masker,
        ranked: bool,
        cls_id: int,
        sep_id: int,
    ) -> dict[str, np.ndarray]:
        raise DataError(
            "set_seq_len: the held-out pass over a mixture runs at full length (the warm-up "
            "is for training)"
        )

    def batch(
        self, seqs: list, epoch: int, step: int, masker, domain: int, ranked: bool
    ) -> dict[str, np.ndarray]:
        idx = self.indices(epoch, step)
        home = int(np.argmax(np.diff(self.offsets) > 0)) if self.N else 0
        out = build_batch(
            seqs[home],
            np.full(self.B, -1, np.int64),
            masker,
            self.seed,
            epoch,
            _DOMAIN,
            ranked=ranked,
        )
        for i in range(len(seqs)):
            rows = np.flatnonzero((idx >= self.offsets[i]) & (idx < self.offsets[i + 1]))
            if len(rows):
                b = build_batch(
                    seqs[i],
                    idx[rows] - self.offsets[i],
                    masker,
                    self.seed,
                    epoch,
                    _DOMAIN + 2 * i + 1,
                    ranked=ranked,
                )
                for k, v in b.items():
                    out[k][rows] = v
        return out


class Mixture:
    """Prepared directories read as one, sampled with weights; answers what a :class:`PreparedData`
    answers (the tokenizer, T, special ids, vocabulary: the first source's, which all share)."""

    def __init__(self, sources: list[PreparedData], weights: list[float] | None = None):
        self.sources = list(sources)
        self.weights = _normalised(list(weights or []), len(self.sources))

    @classmethod
    def open(cls, paths: list[str | os.PathLike], weights: list[float] | None = None) -> Mixture:
        """Open every directory and check they share the vocabulary, T and packing (one-line
        DataError naming the directory that differs)."""
        if not paths:
            raise DataError("data.paths: no prepared data directories given")
        sources = [PreparedData.open(p) for p in paths]
        first = sources[0]
        for i, s in enumerate(sources[1:], 1):
            for what, a, b in (
                ("vocabulary (vocab_hash)", s.vocab_hash, first.vocab_hash),
                ("sequence length T", s.seq_len, first.seq_len),
                ("packing", s.packed, first.packed),
            ):
                if a != b:
                    show = (lambda v: f"{v[:12]}...") if isinstance(a, str) else repr
                    raise DataError(
                        f"data.paths[{i}]: {s.path} has another {what} ({show(a)}) than "
                        f"data.paths[0] {first.path} ({show(b)}); every source of a mixture must "
                        "be prepared with the same tokenizer, --seq-len and packing"
                    )
            if s.num_sequences("train") == 0:
                raise DataError(f"data.paths[{i}]: {s.path} has no training sequences")
        if first.num_sequences("train") == 0:
            raise DataError(f"data.paths[0]: {first.path} has no training sequences")
        return cls(sources, weights)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("sources", "weights"):
            raise AttributeError(name)
        return getattr(self.sources[0], name)

    def num_sequences(self, split: str) -> int:
        return sum(s.num_sequences(split) for s in self.sources)

    def sequences(self, split: str) -> list[np.ndarray]:
        return [s.sequences(split) for s in self.sources]

    def token_counts(self) -> np.ndarray:
        """Every id's count over all sources' training documents, each scaled by its weight over its
        share of the tokens (the frequencies the mixture is trained on)."""
        counts = [s.token_counts().astype(np.float64) for s in self.sources]
        totals = [max(1.0, c.sum()) for c in counts]
        mixed = sum(w * c / t for w, c, t in zip(self.weights, counts, totals)) * sum(totals)
        return np.rint(mixed).astype(np.int64)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "sources": [s.fingerprint() for s in self.sources],
            "weights": self.weights.tolist(),
        }

    def make_plan(
        self, split: str, B: int, W: int, rank: int, seed: int, shuffle: bool, loop: bool
    ) -> EpochPlan:
        sizes = [s.num_sequences(split) for s in self.sources]
        if loop:
            return MixturePlan(sizes, self.weights, B, W, rank, seed, shuffle)
        return ConcatPlan(sizes, B, W, rank, seed, shuffle)

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"path": s.path, "weight": float(w), "train_sequences": s.num_sequences("train")}
            for s, w in zip(self.sources, self.weights)
        ]

    def __repr__(self) -> str:
        return (
            "Mixture("
            + ", ".join(f"{s.path!r}: {w:.3g}" for s, w in zip(self.sources, self.weights))
            + ")"
        )


def realised(state: dict[str, Any]) -> dict[str, float]:
    """``{"mix_0": share, ...}``: the share of training slots each source has served so far (from a
    loader's ``state_dict()``); {} for a single directory."""
    counts = state.get("mixture_consumed")
    if not counts:
        return {}
    total = max(1, sum(counts))
    return {f"mix_{i}": c / total for i, c in enumerate(counts)}


def open_data(path: str = "", paths: list[str] | None = None, weights: list[float] | None = None):
    """``data.path`` as a :class:`PreparedData`, or ``data.paths`` as a :class:`Mixture`."""
    return Mixture.open(paths, weights) if paths else PreparedData.open(path)


__all__ = ["Mixture", "MixturePlan", "ConcatPlan", "realised", "open_data"]
