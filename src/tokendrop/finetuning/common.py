"""Shared helpers of the fine-tuning subpackage: the error type and the tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

from tokendrop.data import DataError
from tokendrop.data.tokenizer import read_tokenizer_spec, tokenizer_from_spec
from tokendrop.errors import TokendropError


class FinetuneError(TokendropError, ValueError):
    """A fine-tuning / evaluation problem, with a one-line message (file and line where it
    applies)."""


# ----------------------------------------------------------------------------------------------
# tokenizer


def load_finetune_tokenizer(
    path: str | os.PathLike | None, fallback: str | os.PathLike | None = None
):
    """The ``tokenizers.Tokenizer`` for fine-tuning (see :func:`finetune_tokenizer`)."""
    return finetune_tokenizer(path, fallback)[0]


def finetune_tokenizer(path: str | os.PathLike | None, fallback: str | os.PathLike | None = None):
    """-> (``tokenizers.Tokenizer``, {"pad","unk","cls","sep","mask" -> id or None}) for
    fine-tuning:
    :func:`tokendrop.data.tokenizer.load_tokenizer`, the project's one tokenizer-loading path, so
    the ids are ``transformers.AutoTokenizer``'s for a Hugging Face dir (casing from its
    tokenizer_config.json) and the pretraining data's for a tokendrop run; the special ids are those
    of the tokens the directory declares (``[PAD]``... for BERT, ``<pad>``... where a tokenizer
    names those), None where the vocabulary lacks one.

    ``path`` is the tokenizer location reported by ``load_pretrained`` (None when it found none),
    ``fallback`` a second place to look (the model dir; a run dir's ``tokenizer/`` is found too).
    The first that exists is loaded and its problems surface as a one-line FinetuneError (no
    fall-back guessing).  The result is a fresh object (no truncation, no padding) whose ``encode``
    adds ``[CLS] A [SEP] (B [SEP])`` with the tokenizer's declared special tokens (a tokenizer.json
    used as it is, e.g. ModernBERT's BPE: its own post-processor, which frames texts that way).
    """
    tried = [Path(p) for p in (path, fallback) if p]
    for p in tried:
        if p.exists():
            try:
                spec = read_tokenizer_spec(p)
                tok = tokenizer_from_spec(spec)
            except DataError as e:
                raise FinetuneError(f"tokenizer: {e}") from None
            return tok, {k: tok.token_to_id(name) for k, name in spec.special_tokens.items()}
    where = ", ".join(str(p) for p in tried) or "(no path)"
    raise FinetuneError(f"no tokenizer found (looked for tokenizer.json / vocab.txt in {where})")
