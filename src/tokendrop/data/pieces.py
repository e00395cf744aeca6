"""Short sequences from packed ones (sequence-length warm-up, docs/design.md "Schedules").

A packed sequence is ``[CLS] b_1 ... b_{T-2} [SEP]``.  At a warm-up length L (a divisor of T) it
becomes T/L pieces, each framed as ``tokendrop prepare`` would have framed a sequence of length L:
piece j is ``[CLS] b_{j(L-2)+1} ... b_{(j+1)(L-2)} [SEP]``.  A micro-batch of B sequences so becomes
B T/L pieces: the same number of tokens, the same compiled token count, and every piece has the
frame that masking, token-dropping's pinned [CLS]/[SEP], ScTD's [CLS] tap and per-document
attention expect.  The last 2 (T/L - 1) body tokens of each sequence do not fit (the frames of the
extra pieces take their place): a share 2/L - 2/T of the body, left out of that step only.

Masking is drawn on the pieces (``build_batch`` over the piece rows, P_L = round(mask_prob L)
slots per piece, k = round(rate n) of each piece's own n maskable positions), each piece with its
own generator ``[seed, epoch, index T/L + j, PIECE_DOMAIN + L]``: the masks depend on the seed, the
epoch, the sequence, the piece and L only -- not on workers, ranks or when the length changed.
"""

from __future__ import annotations

import numpy as np

from tokendrop.data.masking import MLMMasker, build_batch

PIECE_DOMAIN = 0x5E9 << 16  # + L: the masking generators of pieces of length L
MIN_PIECE = 8  # the shortest warm-up length (a frame and a few body tokens)


def frame_pieces(rows: np.ndarray, length: int, cls_id: int, sep_id: int) -> np.ndarray:
    """(B, T) packed sequences -> (B T/L, L) framed pieces (module doc); ``length`` divides T."""
    b, t = rows.shape
    n = t // length
    body = length - 2
    out = np.empty((b * n, length), dtype=rows.dtype)
    out[:, 0] = cls_id
    out[:, 1:-1] = rows[:, 1 : 1 + n * body].reshape(b * n, body)
    out[:, -1] = sep_id
    return out


def piece_keys(indices: np.ndarray, seq_len: int, length: int) -> np.ndarray:
    """The generator index of each piece: sequence index x T/L + piece number (row order of
    ``frame_pieces``)."""
    n = seq_len // length
    return (
        np.asarray(indices, np.int64)[:, None] * n + np.arange(n, dtype=np.int64)[None, :]
    ).reshape(-1)


def piece_batch(
    seqs: np.ndarray,
    indices: np.ndarray,
    length: int,
    masker: MLMMasker,
    seed: int,
    epoch: int,
    domain: int,
    ranked: bool,
    cls_id: int,
    sep_id: int,
) -> dict[str, np.ndarray]:
    """The numpy batch of the sequences ``seqs[indices]`` (N, T) as framed pieces of ``length``
    (B T/L rows, sequence r's pieces in rows r T/L ...), masked on the pieces by ``masker`` (sized
    for ``length``), piece j of sequence i with the generator key i T/L + j in ``domain``."""
    rows = frame_pieces(np.asarray(seqs[indices]), length, cls_id, sep_id)
    return build_batch(
        rows,
        np.arange(len(rows)),
        masker,
        seed,
        epoch,
        domain,
        ranked=ranked,
        keys=piece_keys(indices, seqs.shape[1], length),
    )


__all__ = ["frame_pieces", "piece_keys", "piece_batch", "PIECE_DOMAIN", "MIN_PIECE"]
