"""BERT's masking of a batch of sequences (the loader's "Masking" paragraph, docs/design.md §2.5):
``MLMMasker`` chooses each sequence's prediction slots and their 80/10/10 replacements from a
generator keyed by (seed, epoch, sequence), ``build_batch`` assembles a batch of masked rows,
``cut_to_rate`` narrows a batch drawn at the largest rate of a masking-rate schedule to the current
rate.  Pure numpy: the loader's worker processes and the consumer call the same functions."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from tokendrop.errors import DataError


def num_prediction_slots(seq_len: int, mask_prob: float = 0.15) -> int:
    """P = round(mask_prob * T) (half up), at least 1."""
    return max(1, int(math.floor(mask_prob * seq_len + 0.5)))


class MLMMasker:
    """BERT's 80/10/10 masking of one sequence with a fixed number of prediction slots."""

    def __init__(
        self,
        special_ids: dict[str, int],
        vocab: list[str] | int,
        seq_len: int,
        mask_prob: float = 0.15,
        mask_frac: float = 0.8,
        random_frac: float = 0.1,
        exclude_ids: Iterable[int] | None = None,
    ):
        """``vocab``: the tokens by id (or their number).  The 10% random replacements are drawn
        from every id except the special ids and, with a token list, either the ``[...]`` tokens
        (``[unusedN]``: BERT WordPiece, ``exclude_ids`` None) or ``exclude_ids`` and the ids no
        token maps to (``""``; a tokenizer used as it is passes its special added tokens)."""
        if not 0.0 < mask_prob < 1.0:
            raise DataError(f"mask_prob: expected a fraction in (0, 1), got {mask_prob}")
        if mask_frac < 0 or random_frac < 0 or mask_frac + random_frac > 1:
            raise DataError(
                "mask_frac/random_frac: expected non-negative fractions summing to <= 1, got "
                f"{mask_frac}, {random_frac}"
            )
        self.mask_prob = float(mask_prob)
        self.mask_frac = float(mask_frac)
        self.random_frac = float(random_frac)
        self.seq_len = int(seq_len)
        self.num_slots = num_prediction_slots(seq_len, mask_prob)
        self.mask_id = int(special_ids["mask"])
        self.no_mask_ids = np.array(
            sorted({int(special_ids[k]) for k in ("pad", "cls", "sep", "mask")}), np.int64
        )
        specials = {int(v) for v in special_ids.values()}
        # ids >= this are refused
        self.vocab_size = int(vocab) if isinstance(vocab, int) else len(vocab)
        if isinstance(vocab, int):
            pool = [i for i in range(vocab) if i not in specials]
        elif exclude_ids is not None:
            skip = specials | {int(i) for i in exclude_ids}
            pool = [i for i, t in enumerate(vocab) if t and i not in skip]
        else:
            pool = [
                i
                for i, t in enumerate(vocab)
                if not (t.startswith("[") and t.endswith("]")) and i not in specials
            ]
            if not pool:
                pool = [i for i in range(len(vocab)) if i not in specials]
        self.random_pool = np.array(pool, np.int64)

    def maskable(self, ids: np.ndarray) -> np.ndarray:
        return ~np.isin(ids, self.no_mask_ids)

    def mask_row(
        self, row: np.ndarray, rng: np.random.Generator, maskable: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(input ids, positions (k,), labels (k,), k) for one sequence; ``row`` is not modified."""
        inp, pos, labels, _, _ = self.mask_row_ranked(row, rng, maskable)
        return inp, pos, labels, len(pos)

    def mask_row_ranked(
        self, row: np.ndarray, rng: np.random.Generator, maskable: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """``mask_row`` (the same draws, the same result) plus each slot's rank in the random draw
        order, and n: a batch cut to a lower rate r keeps the slots of rank < round(r n)
        (``cut_to_rate``), which is a uniform sample of that size, corrupted as the full draw
        corrupted it."""
        if maskable is None:
            maskable = self.maskable(row)
        cand = np.flatnonzero(maskable)
        n = len(cand)
        inp = row.astype(np.int64)
        if n == 0:
            return inp, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
        k = min(self.num_slots, max(1, int(math.floor(self.mask_prob * n + 0.5))))
        chosen = rng.choice(cand, size=k, replace=False)  # random order: the draw order is the rank
        order = np.argsort(chosen, kind="stable")
        pos = chosen[order]
        u = rng.random(k)
        inp, pos, labels = self._corrupt(inp, pos, u, rng)
        return inp, pos, labels, order, n

    def _corrupt(self, inp: np.ndarray, pos: np.ndarray, u: np.ndarray, rng: np.random.Generator):
        labels = inp[pos].copy()
        inp[pos[u < self.mask_frac]] = self.mask_id
        rnd = (u >= self.mask_frac) & (u < self.mask_frac + self.random_frac)
        nr = int(rnd.sum())
        if nr:
            inp[pos[rnd]] = self.random_pool[rng.integers(0, len(self.random_pool), nr)]
        return inp, pos, labels


def _rng(seed: int, epoch: int, index: int, domain: int) -> np.random.Generator:
    key = [seed, epoch, index] if domain == 0 else [seed, epoch, index, domain]
    return np.random.default_rng(key)


def build_batch(
    seqs: np.ndarray,
    indices: np.ndarray,
    masker: MLMMasker,
    seed: int,
    epoch: int,
    domain: int = 0,
    ranked: bool = False,
    keys: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Compact numpy batch for ``indices`` (-1 = placeholder row with zero weights).  ``ranked``:
    also ``mlm_rank`` (B,P; -1 for unused slots) and ``num_maskable`` (B,), for ``cut_to_rate``.
    ``keys``: the generator index of each row (default ``indices``; warm-up pieces,
    ``tokendrop.data.pieces``)."""
    B = len(indices)
    P = masker.num_slots
    valid = indices >= 0
    fill = int(indices[valid][0]) if valid.any() else 0
    safe = np.where(valid, indices, fill)
    rows = np.asarray(seqs[safe]) if len(seqs) else np.zeros((B, masker.seq_len), np.int64)
    # the per-batch bound check (edited/corrupt shards)
    if rows.size and int(rows.max()) >= masker.vocab_size:
        r, c = np.unravel_index(int(np.argmax(rows >= masker.vocab_size)), rows.shape)
        where = getattr(seqs, "filename", None) or "prepared data"
        raise DataError(
            f"{where}: sequence {int(safe[r])} holds token id {int(rows[r, c])} at position "
            f"{int(c)}, outside the vocabulary of {masker.vocab_size} ids; the shard was edited or "
            "is corrupt (`tokendrop verify DIR` checks every shard; re-run `tokendrop prepare`)"
        )
    maskable = masker.maskable(rows)
    inp = rows.astype(np.int64)
    pos = np.zeros((B, P), np.int64)
    lab = np.zeros((B, P), np.int64)
    wts = np.zeros((B, P), np.float32)
    rank = np.full((B, P), -1, np.int64) if ranked else None
    num = np.zeros(B, np.int64)
    for i in range(B):
        if not valid[i]:
            continue
        rng = _rng(seed, epoch, int(indices[i] if keys is None else keys[i]), domain)
        if ranked:
            ids, p, lbl, r, num[i] = masker.mask_row_ranked(rows[i], rng, maskable[i])
            rank[i, : len(r)] = r
        else:
            ids, p, lbl, _ = masker.mask_row(rows[i], rng, maskable[i])
        k = len(p)
        inp[i] = ids
        pos[i, :k] = p
        lab[i, :k] = lbl
        wts[i, :k] = 1.0
    out = {"input_ids": inp, "mlm_positions": pos, "mlm_labels": lab, "mlm_weights": wts}
    if ranked:
        out.update(mlm_rank=rank, num_maskable=num)
    return out


def cut_to_rate(b: dict[str, np.ndarray], rate: float, num_slots: int) -> dict[str, np.ndarray]:
    """A ranked batch (``build_batch(ranked=True)``, drawn at the largest rate) masked at ``rate``
    instead: row i keeps its slots of rank < k_i = min(P, max(1, round(rate n_i))) (n_i: its
    maskable positions), the others get their original ids back; kept slots first, in position
    order, then unused ones (position 0, label 0, weight 0) -- the same layout as a batch masked at
    ``rate``."""
    n = b["num_maskable"]
    k = np.where(
        n > 0, np.minimum(num_slots, np.maximum(1, np.floor(rate * n + 0.5).astype(np.int64))), 0
    )
    rank = np.asarray(b["mlm_rank"], np.int64)
    used = rank >= 0
    keep = used & (rank < k[:, None])
    inp = np.array(b["input_ids"], dtype=np.int64)
    pos = np.asarray(b["mlm_positions"], np.int64)
    lab = np.asarray(b["mlm_labels"], np.int64)
    rows, cols = np.nonzero(used & ~keep)
    inp[rows, pos[rows, cols]] = lab[rows, cols]
    # kept slots first, each group in position order
    order = np.argsort(~keep, axis=1, kind="stable")
    kept = np.take_along_axis(keep, order, axis=1)
    return {
        "input_ids": inp,
        "mlm_positions": np.take_along_axis(pos, order, axis=1) * kept,
        "mlm_labels": np.take_along_axis(lab, order, axis=1) * kept,
        "mlm_weights": kept.astype(np.float32),
    }


def unigram_entropy(
    counts: np.ndarray, special_ids: dict[str, int] | Iterable[int] = ()
) -> float | None:
    """The entropy (nats) of the corpus's token frequencies, special ids left out: the MLM loss of a
    model that predicts every masked token by its frequency alone, the level a trained MLM must get
    below.  ``counts``: per-id counts (``PreparedData.token_counts``); None when they are all
    zero."""
    c = np.asarray(counts, dtype=np.float64).copy()
    ids = special_ids.values() if isinstance(special_ids, dict) else special_ids
    for i in ids:
        if 0 <= int(i) < len(c):
            c[int(i)] = 0.0
    total = c.sum()
    if total <= 0:
        return None
    p = c[c > 0] / total
    return float(-(p * np.log(p)).sum())


def unigram_note(loss: float, entropy: float | None) -> str:
    """What an MLM loss means beside the unigram entropy of the data (the loss of predicting every
    masked token by its corpus frequency alone)."""
    if entropy is None or not math.isfinite(loss):
        return ""
    if loss < entropy:
        return f"unigram entropy {entropy:.3f} nats: {entropy - loss:.3f} below it"
    return (
        f"unigram entropy {entropy:.3f} nats: NOT below it yet -- the model predicts masked tokens "
        "no better than their corpus frequencies"
    )
