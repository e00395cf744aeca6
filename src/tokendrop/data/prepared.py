"""Reading a prepared directory: :class:`PreparedData` (validated on open, shards memory-mapped).
The layout is described in :mod:`.prepare`, which writes it."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from . import DataError
from .tokenizer import SPECIAL_KEYS, read_vocab, vocab_sha256

FORMAT = "tokendrop-prepared"
FORMAT_VERSION = 1
SPLITS = ("train", "eval")



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
        self._maps: dict[str, np.ndarray] = {}
        self._counts: np.ndarray | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = False) -> "PreparedData":
        """Open and check a prepared directory (sizes, vocab hash; with ``verify`` also shard sha256)."""
        p = os.path.abspath(os.fspath(path))
        if not os.path.isdir(p):
            raise DataError(f"{p}: no such prepared-data directory; expected the output of `tokendrop prepare`")
        mp_ = os.path.join(p, "meta.json")
        if not os.path.isfile(mp_):
            raise DataError(f"{p}: no meta.json; not a prepared-data directory, or its preparation did not finish")
        try:
            with open(mp_, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"{mp_}: unreadable or invalid JSON ({e}); the prepared directory is corrupt") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataError(f"{mp_}: not a tokendrop prepared-data meta file (format {meta.get('format') if isinstance(meta, dict) else None!r})")
        if meta.get("version") != FORMAT_VERSION:
            raise DataError(f"{mp_}: format version {meta.get('version')!r}; expected {FORMAT_VERSION} (re-run `tokendrop prepare`)")
        for key in ("seq_len", "vocab_size", "packed", "vocab_hash", "dtype", "special_ids", "splits"):
            if key not in meta:
                raise DataError(f"{mp_}: missing field {key!r}; the prepared directory is corrupt")
        missing = [k for k in ("pad", "unk", "cls", "sep", "mask") if k not in meta["special_ids"]]
        if missing:
            raise DataError(f"{mp_}: special_ids lacks {', '.join(missing)}; the prepared directory is corrupt")
        self = cls(p, meta)
        tok_files = (meta.get("tokenizer") or {}).get("files") or ["tokenizer.json"]
        for name in dict.fromkeys(["vocab.txt", *tok_files, "token_counts.npy"]):
            if not os.path.isfile(os.path.join(p, name)):
                raise DataError(f"{os.path.join(p, name)}: missing; the prepared directory is incomplete")
        vh = vocab_sha256(os.path.join(p, "vocab.txt"))
        if vh != self.vocab_hash:
            raise DataError(f"{os.path.join(p, 'vocab.txt')}: sha256 {vh[:12]}... does not match meta.json's vocab_hash {self.vocab_hash[:12]}...")
        for split in SPLITS:
            info = meta["splits"].get(split)
            if info is None:
                raise DataError(f"{mp_}: no {split!r} split; the prepared directory is corrupt")
            f = os.path.join(p, info["file"])
            if not os.path.isfile(f):
                raise DataError(f"{f}: missing; the prepared directory is incomplete")
            want = int(info["num_sequences"]) * self.seq_len * self.dtype.itemsize
            got = os.path.getsize(f)
            if got != want:
                raise DataError(f"{f}: {got} bytes, expected {want} ({info['num_sequences']} x {self.seq_len} {self.dtype.name}); the file is truncated or corrupt")
            if verify:
                h = hashlib.sha256()
                with open(f, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 24), b""):
                        h.update(block)
                if h.hexdigest() != info.get("sha256"):
                    raise DataError(f"{f}: sha256 does not match meta.json; the file is corrupt")
        return self

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
                self._maps[split] = np.memmap(f, dtype=self.dtype, mode="r", shape=(n, self.seq_len))
        return self._maps[split]

    def token_counts(self) -> np.ndarray:
        """int64 (vocab_size,): frequency of every id in the train split's documents."""
        if self._counts is None:
            f = os.path.join(self.path, self.meta.get("token_counts_file", "token_counts.npy"))
            try:
                c = np.load(f, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise DataError(f"{f}: unreadable ({e}); the prepared directory is corrupt") from None
            if c.shape != (self.vocab_size,):
                raise DataError(f"{f}: shape {c.shape}, expected ({self.vocab_size},)")
            self._counts = c.astype(np.int64, copy=False)
        return self._counts

    def tokenizer(self):
        """The ``tokenizers.Tokenizer`` the data was prepared with."""
        from .tokenizer import load_tokenizer

        return load_tokenizer(self.path)

    def vocab(self) -> list[str]:
        specials = (self.meta.get("special_tokens") or SPECIAL_KEYS).values()
        return read_vocab(os.path.join(self.path, "vocab.txt"), specials=specials)

    def __getstate__(self):  # picklable for worker processes: maps are reopened lazily
        d = dict(self.__dict__)
        d["_maps"] = {}
        return d

    def __repr__(self) -> str:
        return (f"PreparedData({self.path!r}, T={self.seq_len}, packed={self.packed}, vocab={self.vocab_size}, "
                f"train={self.num_sequences('train')}, eval={self.num_sequences('eval')})")
