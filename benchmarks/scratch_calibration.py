"""Helpers of the study-scratch calibration (docs/study-scratch/calibration.md).

neighbours PREPARED
    What the immediate neighbours say about a token: held-out cross-entropy (nats) of smoothed
    count models p(x), p(x | left) and p(x | left, right), counted on PREPARED/train.bin and scored
    on PREPARED/eval.bin (special ids excluded as targets).  A reference for what a model that
    attends to its neighbours can reach; no masking, so it is a guide, not a bound.

successor PREPARED OUT
    A copy of PREPARED whose rows are chains of a fixed random permutation of the ordinary ids
    (row = [CLS], x, perm(x), perm(perm(x)), ...): a masked token is determined by its left
    neighbour.  A pipeline check: an MLM run on it must fall far below its unigram entropy.
"""

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

SPECIAL_MAX = 4  # ids 0-4: [PAD] [UNK] [CLS] [SEP] [MASK] (the prepared meta.json's special_ids)
KEY = 1 << 16  # uint16 ids: a pair (a, b) is the key a * KEY + b


def _count_of(train_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    keys, counts = np.unique(train_keys, return_counts=True)
    i = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[i] == query, counts[i], 0)


def neighbours(prepared: Path) -> dict[str, float]:
    tr = np.fromfile(prepared / "train.bin", dtype=np.uint16).astype(np.int64)
    ev = np.fromfile(prepared / "eval.bin", dtype=np.uint16).astype(np.int64)
    uni = np.bincount(tr, minlength=KEY).astype(float)
    p_uni = (uni + 0.5) / (uni + 0.5).sum()
    x, left, right = ev[1:-1], ev[:-2], ev[2:]
    ok = x > SPECIAL_MAX
    x, left, right = x[ok], left[ok], right[ok]
    pairs = tr[:-1] * KEY + tr[1:]
    k = 4.0  # add-k toward the lower order model
    p_left = (_count_of(pairs, left * KEY + x) + k * p_uni[x]) / (uni[left] + k)
    p_right = (_count_of(pairs, x * KEY + right) + k * p_uni[x]) / (uni[right] + k)
    c3 = _count_of((tr[:-2] * KEY + tr[1:-1]) * KEY + tr[2:], (left * KEY + x) * KEY + right)
    n3 = _count_of(tr[:-2] * KEY + tr[2:], left * KEY + right)
    p_both = (c3 + k * 0.5 * (p_left + p_right)) / (n3 + k)
    return {
        "unigram": float(-np.log(p_uni[x]).mean()),
        "left": float(-np.log(p_left).mean()),
        "left_right": float(-np.log(p_both).mean()),
        "targets": int(x.size),
    }


def successor(prepared: Path, out: Path, train_rows: int = 20000, eval_rows: int = 500) -> None:
    meta = json.loads((prepared / "meta.json").read_text())
    vocab = int(meta["vocab_size"])
    rng = np.random.default_rng(0)
    nxt = np.zeros(vocab, dtype=np.int64)
    nxt[SPECIAL_MAX + 1 :] = rng.permutation(np.arange(SPECIAL_MAX + 1, vocab))
    t = int(meta["seq_len"])
    out.mkdir(parents=True, exist_ok=False)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(prepared / name, out / name)

    def rows(n: int) -> np.ndarray:
        a = np.zeros((n, t), dtype=np.uint16)
        a[:, 0] = meta["special_ids"]["cls"]
        x = rng.integers(SPECIAL_MAX + 1, vocab, size=n)
        for j in range(1, t):
            a[:, j] = x
            x = nxt[x]
        return a

    train = rows(train_rows)
    for split, a in (("train", train), ("eval", rows(eval_rows))):
        a.tofile(out / f"{split}.bin")
        meta["splits"][split]["num_sequences"] = len(a)
        meta["splits"][split]["sha256"] = hashlib.sha256(a.tobytes()).hexdigest()
    np.save(out / "token_counts.npy", np.bincount(train.ravel(), minlength=vocab).astype(np.int64))
    (out / "meta.json").write_text(json.dumps(meta, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("neighbours").add_argument("prepared", type=Path)
    s = sub.add_parser("successor")
    s.add_argument("prepared", type=Path)
    s.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "neighbours":
        print(json.dumps(neighbours(a.prepared), indent=1))
    else:
        successor(a.prepared, a.out)


if __name__ == "__main__":
    main()
