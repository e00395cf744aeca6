"""Tiny synthetic vocabularies, corpora and prepared directories for tests (no external files).

    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    corpus = write_toy_corpus(tmp_path / "corpus.txt", num_docs=40)
    pd_path = toy_prepared(tmp_path / "prep", seq_len=32)      # -> PreparedData.open(pd_path)

The toy vocabulary is uncased: the 5 BERT special tokens at ids 0-4, ten ``[unusedN]``, punctuation,
the letters with their ``##`` continuations, and ``num_words`` pseudo-words made of syllables, each
a single token.  Toy documents are sentences of those words, so every word is one token.
"""

from __future__ import annotations

import os
import string

import numpy as np

from .tokenizer import SPECIAL_TOKENS

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def toy_words(num_words: int = 300, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen = set(string.ascii_lowercase)
    while len(words) < num_words:
        w = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def toy_vocab_tokens(num_words: int = 300, seed: int = 0) -> list[str]:
    tokens = list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(10)]
    tokens += list(".,;:!?'\"()-")
    tokens += list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    tokens += toy_words(num_words, seed)
    return tokens


def write_toy_vocab(path: str | os.PathLike, num_words: int = 300, seed: int = 0) -> str:
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(toy_vocab_tokens(num_words, seed)) + "\n")
    return path


def toy_documents(num_docs: int = 40, seed: int = 1, min_words: int = 1, max_words: int = 120,
                  num_words: int = 300) -> list[str]:
    """Documents (lines = sentences) of toy words; lengths vary from ``min_words`` to ``max_words``."""
    rng = np.random.default_rng(seed)
    words = toy_words(num_words)
    docs = []
    for _ in range(num_docs):
        n = int(rng.integers(min_words, max_words + 1))
        toks = list(rng.choice(words, size=n))
        lines, i = [], 0
        while i < n:
            k = int(rng.integers(3, 15))
            sent = " ".join(toks[i : i + k])
            lines.append(sent[0].upper() + sent[1:] + ".")
            i += k
        docs.append("\n".join(lines))
    return docs


def write_toy_corpus(path: str | os.PathLike, num_docs: int = 40, seed: int = 1, **kw) -> str:
    """A BERT-format text file (documents separated by one blank line)."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(toy_documents(num_docs, seed, **kw)) + "\n")
    return path


def toy_prepared(out_dir: str | os.PathLike, seq_len: int = 32, num_docs: int = 60, packed: bool = True,
                 eval_fraction: float = 0.1, seed: int = 1, **prepare_kw) -> str:
    """Write a toy vocab + corpus beside ``out_dir`` and prepare it; returns ``out_dir``."""
    from .prepare import prepare

    out_dir = os.path.abspath(os.fspath(out_dir))
    base = out_dir + ".src"
    os.makedirs(base, exist_ok=True)
    vocab = write_toy_vocab(os.path.join(base, "vocab.txt"))
    corpus = write_toy_corpus(os.path.join(base, "corpus.txt"), num_docs=num_docs, seed=seed)
    prepare_kw.setdefault("workers", 1)
    prepare_kw.setdefault("progress", False)
    prepare([corpus], out_dir, seq_len, vocab=vocab, packed=packed, eval_fraction=eval_fraction, **prepare_kw)
    return out_dir
