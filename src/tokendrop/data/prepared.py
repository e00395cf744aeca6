"""Reading a prepared directory: :class:`PreparedData` (validated on open, shards memory-mapped).
The layout is described in :mod:`.prepare`, which writes it.

What is checked, and when (docs/reliability.md, category "corrupt files"):

* at :meth:`PreparedData.open` (cheap, every open): ``meta.json``'s field types and values (integers
  are integers, ``seq_len`` > 0, ``vocab_size`` > 0, ``dtype`` uint16/uint32 and wide enough for the
  vocabulary, special ids inside it, each split's ``num_sequences`` x T x itemsize equal to its
  shard's size on disk), the vocabulary's sha256 (of vocab.txt; of tokenizer.json for a tokenizer
  used as it is, ``meta["tokenizer"]["backend"] == "file"``), and that the tokenizer and count files
  exist;
* token ids below ``vocab_size``: per batch, in :func:`tokendrop.data.loader.build_batch` (a max
  over the B x T ids of the batch, negligible next to the masking), so every sequence that is
  trained or evaluated on is checked without reading whole shards at open;
* in full (:meth:`PreparedData.scan`, used by ``open(verify=True)`` and ``tokendrop verify``): each
  shard's sha256 against ``meta.json`` and its largest id, in one read of 16 MiB chunks.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from tokendrop.data.tokenizer import (
    SPECIAL_KEYS,
    load_tokenizer,
    read_vocab,
    special_added_ids,
    vocab_sha256,
    vocab_tokens,
)
from tokendrop.errors import DataError

FORMAT = "tokendrop-prepared"
FORMAT_VERSION = 1
SPLITS = ("train", "eval")
DTYPES = ("uint16", "uint32")
FINGERPRINT_KEYS = (
    "vocab_hash",
    "tokens",
    "seq_len",
    "packed",
    "train_sequences",
    "eval_sequences",
)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_meta(meta: dict, where: str) -> None:
    """Field types and values of a prepared directory's meta.json (one-line DataError naming the
    field)."""

    def bad(field: str, want: str) -> DataError:
        return DataError(
            f"{where}: {field} must be {want}, got {_get(field)!r}; the prepared directory is "
            "corrupt or was edited (re-run `tokendrop prepare`)"
        )

    def _get(field: str):
        d = meta
        for k in field.split("."):
            d = d.get(k) if isinstance(d, dict) else None
        return d

    for key in ("seq_len", "vocab_size"):
        if not _is_int(meta[key]) or meta[key] <= 0:
            raise bad(key, "a positive integer")
    if not isinstance(meta["packed"], bool):
        raise bad("packed", "true or false")
    if not isinstance(meta["vocab_hash"], str) or len(meta["vocab_hash"]) != 64:
        raise bad("vocab_hash", "a sha256 hex string")
    if meta["dtype"] not in DTYPES:
        raise bad("dtype", f"one of {', '.join(DTYPES)}")
    if np.iinfo(np.dtype(meta["dtype"])).max < meta["vocab_size"] - 1:
        raise bad("dtype", f"wide enough for vocab_size {meta['vocab_size']}")
    if not isinstance(meta["special_ids"], dict):
        raise bad("special_ids", "an object mapping pad/unk/cls/sep/mask to ids")
    for k, v in meta["special_ids"].items():
        if not _is_int(v) or not 0 <= v < meta["vocab_size"]:
            raise bad(f"special_ids.{k}", f"an integer id in [0, {meta['vocab_size']})")
    if not isinstance(meta["splits"], dict):
        raise bad("splits", "an object with 'train' and 'eval' entries")
    for split in SPLITS:
        info = meta["splits"].get(split)
        if info is None:
            raise DataError(f"{where}: no {split!r} split; the prepared directory is corrupt")
        if not isinstance(info, dict):
            raise bad(f"splits.{split}", "an object")
        f = info.get("file")
        if not isinstance(f, str) or not f or os.path.basename(f) != f or f.startswith("."):
            raise bad(f"splits.{split}.file", "a file name inside the prepared directory")
        if not _is_int(info.get("num_sequences")) or info["num_sequences"] < 0:
            raise bad(f"splits.{split}.num_sequences", "an integer >= 0")
        if "sha256" in info and not isinstance(info["sha256"], str):
            raise bad(f"splits.{split}.sha256", "a sha256 hex string")
    counts = meta.get("counts")
    if counts is not None and (
        not isinstance(counts, dict)
        or not _is_int(counts.get("tokens", 0))
        or counts.get("tokens", 0) < 0
    ):
        raise bad("counts.tokens", "an integer >= 0")


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
        # "bert": WordPiece with vocab.txt (every directory before BPE support); "file":
        # tokenizer.json as it is
        self.tokenizer_backend: str = (meta.get("tokenizer") or {}).get("backend", "bert")
        self.vocab_file: str = "tokenizer.json" if self.tokenizer_backend == "file" else "vocab.txt"
        self._maps: dict[str, np.ndarray] = {}
        self._counts: np.ndarray | None = None
        self._scans: dict[str, dict] = {}

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = False) -> PreparedData:
        """Open and check a prepared directory (sizes, vocab hash; with ``verify`` also shard
        sha256)."""
        p = os.path.abspath(os.fspath(path))
        if not os.path.isdir(p):
            what = (
                "a file, not a directory"
                if os.path.exists(p)
                else "no such prepared-data directory"
            )
            raise DataError(f"{p}: {what}; expected the output of `tokendrop prepare`")
        mp_ = os.path.join(p, "meta.json")
        if not os.path.isfile(mp_):
            raise DataError(
                f"{p}: no meta.json; not a prepared-data directory, or its "
                "preparation did not finish"
            )
        try:
            with open(mp_, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise DataError(
                f"{mp_}: unreadable or invalid JSON ({e}); the prepared directory is corrupt"
            ) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataError(
                f"{mp_}: not a tokendrop prepared-data meta file (format "
                f"{meta.get('format') if isinstance(meta, dict) else None!r})"
            )
        if meta.get("version") != FORMAT_VERSION:
            raise DataError(
                f"{mp_}: format version {meta.get('version')!r}; expected {FORMAT_VERSION} (re-run "
                "`tokendrop prepare`)"
            )
        for key in (
            "seq_len",
            "vocab_size",
            "packed",
            "vocab_hash",
            "dtype",
            "special_ids",
            "splits",
        ):
            if key not in meta:
                raise DataError(f"{mp_}: missing field {key!r}; the prepared directory is corrupt")
        check_meta(meta, mp_)
        missing = [k for k in ("pad", "unk", "cls", "sep", "mask") if k not in meta["special_ids"]]
        if missing:
            raise DataError(
                f"{mp_}: special_ids lacks {', '.join(missing)}; the prepared directory is corrupt"
            )
        self = cls(p, meta)
        if self.tokenizer_backend not in ("bert", "file"):
            raise DataError(
                f"{mp_}: tokenizer.backend must be 'bert' or 'file', got "
                f"{self.tokenizer_backend!r}; "
                "the prepared directory is corrupt or was edited (re-run `tokendrop prepare`)"
            )
        tok_files = (meta.get("tokenizer") or {}).get("files") or ["tokenizer.json"]
        for name in dict.fromkeys([self.vocab_file, *tok_files, "token_counts.npy"]):
            if not os.path.isfile(os.path.join(p, name)):
                raise DataError(
                    f"{os.path.join(p, name)}: missing; the prepared directory is incomplete"
                )
        vf = os.path.join(p, self.vocab_file)
        vh = vocab_sha256(vf)
        if vh != self.vocab_hash:
            raise DataError(
                f"{vf}: sha256 {vh[:12]}... does not match meta.json's vocab_hash "
                f"{self.vocab_hash[:12]}..."
            )
        if self.tokenizer_backend != "file":
            with open(vf, encoding="utf-8") as fh:
                lines = sum(1 for _ in fh)
            if self.vocab_size > lines:
                raise DataError(
                    f"{mp_}: vocab_size {self.vocab_size} but {vf} holds {lines} tokens; the "
                    "prepared directory was edited or is corrupt (re-run `tokendrop prepare`)"
                )
        for split in SPLITS:
            info = meta["splits"][split]
            f = os.path.join(p, info["file"])
            if not os.path.isfile(f):
                raise DataError(f"{f}: missing; the prepared directory is incomplete")
            want = info["num_sequences"] * self.seq_len * self.dtype.itemsize
            got = os.path.getsize(f)
            if got != want:
                raise DataError(
                    f"{f}: {got} bytes, expected {want} ({info['num_sequences']} x {self.seq_len} "
                    f"{self.dtype.name}); the file is truncated or corrupt"
                )
        cls = self.special_ids.get("cls")
        for split in SPLITS:  # the first and last rows (cheap; verify reads every row)
            rows = self.sequences(split)
            if cls is not None and len(rows):
                bad = int(rows[0, 0] != cls) + int(len(rows) > 1 and rows[-1, 0] != cls)
                if bad:
                    raise DataError(self._misaligned(split, f"{bad} of its first and last rows"))
        if verify:
            for split in SPLITS:
                problem = self.scan(split)["problem"]
                if problem:
                    raise DataError(problem)
        return self

    def _misaligned(self, split: str, which: str) -> str:
        f = os.path.join(self.path, self._info(split)["file"])
        return (
            f"{f}: {which} of T = {self.seq_len} do not start with [CLS], as every prepared row "
            "does: meta.json's seq_len or num_sequences was edited, or the file is corrupt "
            "(re-run `tokendrop prepare`)"
        )

    def scan(self, split: str) -> dict:
        """Read a split's shard once (16 MiB chunks): its sha256 and largest token id.  ->
        ``{"file", "sha256", "recorded_sha256", "max_id", "problem"}``; ``problem`` is a one-line
        message (sha256 not the recorded one, or an id >= vocab_size) or "".  Cached per
        instance."""
        if split in self._scans:
            return self._scans[split]
        info = self._info(split)
        f = os.path.join(self.path, info["file"])
        h = hashlib.sha256()
        hi = -1
        cls, off_rows = self.special_ids.get("cls"), 0
        row = self.seq_len * self.dtype.itemsize
        step = max(1, (1 << 24) // row) * row  # whole rows per block
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(step), b""):
                h.update(block)
                if len(block) >= self.dtype.itemsize:
                    ids = np.frombuffer(block, self.dtype, len(block) // self.dtype.itemsize)
                    hi = max(hi, int(ids.max()))
                    if cls is not None and len(ids) % self.seq_len == 0:
                        off_rows += int((ids.reshape(-1, self.seq_len)[:, 0] != cls).sum())
        sha = h.hexdigest()
        rec = info.get("sha256")
        problem = ""
        if rec is not None and sha != rec:
            problem = (
                f"{f}: sha256 does not match meta.json; the file is corrupt (re-run "
                "`tokendrop prepare`)"
            )
        elif off_rows:
            problem = self._misaligned(split, f"{off_rows} of its rows")
        elif hi >= self.vocab_size:
            problem = (
                f"{f}: holds token id {hi}, outside the vocabulary of {self.vocab_size} ids; the "
                "file was edited "
                "or is corrupt (re-run `tokendrop prepare`)"
            )
        self._scans[split] = {
            "file": f,
            "sha256": sha,
            "recorded_sha256": rec,
            "max_id": hi,
            "problem": problem,
        }
        return self._scans[split]

    def fingerprint(self) -> dict:
        """What identifies the data a run trains on, wherever it lies: vocabulary hash, token count,
        T, packing and the splits' sequence counts (plus the shards' recorded sha256 when meta.json
        has them). ``pretrain`` records it in every checkpoint; ``--resume`` accepts moved data only
        if it is equal."""
        fp = {
            "vocab_hash": self.vocab_hash,
            "tokens": int((self.meta.get("counts") or {}).get("tokens", 0)),
            "seq_len": self.seq_len,
            "packed": self.packed,
            "train_sequences": self.num_sequences("train"),
            "eval_sequences": self.num_sequences("eval"),
        }
        for split in SPLITS:
            if isinstance(self._info(split).get("sha256"), str):
                fp[f"{split}_sha256"] = self._info(split)["sha256"]
        return fp

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
                self._maps[split] = np.memmap(
                    f, dtype=self.dtype, mode="r", shape=(n, self.seq_len)
                )
        return self._maps[split]

    def token_counts(self) -> np.ndarray:
        """int64 (vocab_size,): frequency of every id in the train split's documents."""
        if self._counts is None:
            f = os.path.join(self.path, self.meta.get("token_counts_file", "token_counts.npy"))
            try:
                c = np.load(f, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise DataError(
                    f"{f}: unreadable ({e}); the prepared directory is corrupt"
                ) from None
            if c.shape != (self.vocab_size,):
                raise DataError(f"{f}: shape {c.shape}, expected ({self.vocab_size},)")
            self._counts = c.astype(np.int64, copy=False)
        return self._counts

    def tokenizer(self):
        """The ``tokenizers.Tokenizer`` the data was prepared with."""
        return load_tokenizer(self.path)

    def vocab(self) -> list[str]:
        """Every token by id: vocab.txt's lines, or (a tokenizer used as it is) the tokenizer's
        tokens, ``""`` for an id nothing maps to.  Can be shorter than ``vocab_size`` (a padded
        embedding)."""
        if self.tokenizer_backend == "file":
            return vocab_tokens(self.tokenizer())
        specials = (self.meta.get("special_tokens") or SPECIAL_KEYS).values()
        return read_vocab(os.path.join(self.path, "vocab.txt"), specials=specials)

    def special_token_ids(self) -> list[int] | None:
        """Ids that are never a random replacement token in MLM masking beyond the five special ids:
        for a tokenizer used as it is, its special added tokens (``<|endoftext|>``, ``<|padding|>``,
        ...); None for BERT WordPiece data, whose masker excludes ``[...]`` tokens (``[unusedN]``)
        by name, as it always has (so the masking of existing data does not change)."""
        if self.tokenizer_backend != "file":
            return None

        return special_added_ids(self.tokenizer())

    def __getstate__(self):  # picklable for worker processes: maps are reopened lazily
        d = dict(self.__dict__)
        d["_maps"] = {}
        return d

    def __repr__(self) -> str:
        return (
            f"PreparedData({self.path!r}, T={self.seq_len}, packed={self.packed}, "
            f"vocab={self.vocab_size}, "
            f"train={self.num_sequences('train')}, eval={self.num_sequences('eval')})"
        )
