"""Pretraining data: corpus readers, WordPiece tokenizer, prepared (pre-tokenized) shards, MLM
loader.

docs/design.md §2.4 is the spec.  The pieces:

* :mod:`.corpus` -- documents from BERT-format text (``.txt``, ``.txt.gz``; one document per block,
  blocks separated by a blank line), JSONL (configurable text field), raw Wikipedia XML dumps
  (``*.xml.bz2``, streamed; wiki markup removed), gzip/bzip2/zstandard compression, Parquet and
  Arrow files and ``datasets`` ``save_to_disk`` directories (:mod:`.columnar`, via pyarrow),
  directories and globs of these, and optionally a Hugging Face ``datasets`` source
  (``hf:NAME[:CONFIG][@SPLIT]`` or ``hf:LOCAL_DIR[@SPLIT]``).
* :mod:`.tokenizer` -- WordPiece through the ``tokenizers`` library, from a ``vocab.txt`` or trained
  on the corpus, or a checkpoint's own ``tokenizer.json`` used as it is (ModernBERT's byte-level
  BPE, ...); :func:`load_tokenizer` is what prepare, fine-tuning and export use.
* :mod:`.prepare` -- :func:`prepare` writes a prepared directory (memory-mapped token shards,
  ``meta.json``, token-frequency counts, the tokenizer) atomically, with the sequence writers of
  :mod:`.shards`, after :mod:`.units` has tokenized the corpus's work units in worker processes
  (resumable); :class:`PreparedData` (:mod:`.prepared`) opens one.
* :mod:`.loader` -- :class:`MLMLoader`: deterministic, resumable, rank-sharded MLM batches with
  static shapes, built by background worker processes.

Every user-facing problem is raised as :class:`DataError` (a ``ValueError``) with a one-line message
naming the file or field and what was expected.
"""

from __future__ import annotations

from tokendrop.data.corpus import iter_documents, resolve_corpus
from tokendrop.data.loader import MLMLoader
from tokendrop.data.masking import MLMMasker, num_prediction_slots
from tokendrop.data.prepare import prepare
from tokendrop.data.prepared import PreparedData
from tokendrop.data.tokenizer import (
    SPECIAL_TOKENS,
    build_tokenizer,
    load_tokenizer,
    read_vocab,
    save_tokenizer,
    train_tokenizer,
    vocab_sha256,
)
from tokendrop.data.wikitext import clean_wikitext
from tokendrop.errors import DataError  # noqa: F401 -- defined below every module of this package that raises it

__all__ = [
    "DataError",
    "iter_documents",
    "resolve_corpus",
    "clean_wikitext",
    "SPECIAL_TOKENS",
    "build_tokenizer",
    "load_tokenizer",
    "read_vocab",
    "save_tokenizer",
    "train_tokenizer",
    "vocab_sha256",
    "PreparedData",
    "prepare",
    "MLMLoader",
    "MLMMasker",
    "num_prediction_slots",
]
