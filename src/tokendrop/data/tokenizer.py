"""WordPiece tokenizer (BERT's) through the ``tokenizers`` library.

* :func:`build_tokenizer` -- from a ``vocab.txt`` (e.g. bert-base-uncased's), BERT normalisation
  (optional lower-casing + accent stripping, Chinese characters split, control characters removed),
  BERT pre-tokenisation, WordPiece with ``##`` continuation pieces, and the ``[CLS] A [SEP] (B [SEP])``
  post-processor with token-type ids, so ``tok.encode(a)`` / ``tok.encode(a, b)`` give model inputs
  with character offsets.
* :func:`train_tokenizer` -- a new WordPiece vocabulary learned from documents; the special tokens
  take ids 0-4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
* :func:`save_tokenizer` writes ``tokenizer.json`` + ``vocab.txt`` + ``tokenizer_config.json`` (the
  latter two make the directory loadable by ``transformers.BertTokenizer(Fast)`` too).
* :func:`load_tokenizer` accepts a prepared-data directory, any directory with ``tokenizer.json``
  or ``vocab.txt``, a ``tokenizer.json`` file or a ``vocab.txt`` file.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Iterable

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from . import DataError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SPECIAL_KEYS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


def vocab_sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_vocab(path: str | os.PathLike) -> list[str]:
    """The tokens of a ``vocab.txt`` (one per line, id = line number), validated.

    DataError if the file is missing, not UTF-8, empty, has duplicate or blank entries, or lacks
    one of [PAD] [UNK] [CLS] [SEP] [MASK].
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: vocabulary file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the vocabulary ({e.strerror})") from None
    if b"\x00" in data:
        raise DataError(f"{path}: contains NUL bytes, looks like a binary file; expected a vocab.txt with one token per line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: invalid UTF-8 at byte {e.start}; expected a UTF-8 vocab.txt with one token per line") from None
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    tokens = [t.rstrip("\r") for t in tokens]
    if not tokens:
        raise DataError(f"{path}: empty vocabulary; expected one token per line")
    seen: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if not t.strip():
            raise DataError(f"{path}: line {i + 1}: blank token; expected one token per line")
        if t in seen:
            raise DataError(f"{path}: line {i + 1}: duplicate token {t!r} (also on line {seen[t] + 1}); ids would be ambiguous")
        seen[t] = i
    missing = [s for s in SPECIAL_TOKENS if s not in seen]
    if missing:
        raise DataError(f"{path}: vocabulary lacks the special token(s) {' '.join(missing)}; a BERT vocab needs {' '.join(SPECIAL_TOKENS)}")
    return tokens


def _assemble(tok: Tokenizer, vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    tok.add_special_tokens(list(SPECIAL_TOKENS))  # ids unchanged: they are in the vocab already
    return tok


def build_tokenizer(vocab_path: str | os.PathLike, lowercase: bool = True) -> Tokenizer:
    """A BERT WordPiece tokenizer from a ``vocab.txt`` (validated by :func:`read_vocab`)."""
    tokens = read_vocab(vocab_path)
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100))
    return _assemble(tok, vocab, lowercase)


def train_tokenizer(
    documents: Iterable[str],
    vocab_size: int,
    lowercase: bool = True,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    length: int | None = None,
) -> Tokenizer:
    """Learn a WordPiece vocabulary of (at most) ``vocab_size`` tokens; specials get ids 0-4."""
    from tokenizers.trainers import WordPieceTrainer

    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise DataError(f"vocab_size: expected at least {len(SPECIAL_TOKENS) + 1}, got {vocab_size}")
    tok = Tokenizer(WordPiece(unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=limit_alphabet,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer=trainer, length=length)
    vocab = tok.get_vocab()
    if len(vocab) <= len(SPECIAL_TOKENS):
        raise DataError("corpus: no text to train a vocabulary on; expected a non-empty corpus")
    return _assemble(tok, vocab, lowercase)


def vocab_list(tok: Tokenizer) -> list[str]:
    vocab = tok.get_vocab(with_added_tokens=True)
    out = [""] * len(vocab)
    for t, i in vocab.items():
        out[i] = t
    if "" in out:
        raise DataError("tokenizer: vocabulary ids are not contiguous")
    return out


def is_lowercase(tok: Tokenizer) -> bool:
    norm = json.loads(tok.to_str()).get("normalizer") or {}
    return bool(norm.get("lowercase", False))


def save_tokenizer(tok: Tokenizer, directory: str | os.PathLike, model_max_length: int = 512) -> str:
    """Write tokenizer.json, vocab.txt and tokenizer_config.json into ``directory``; returns vocab.txt's path."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    vocab_path = os.path.join(directory, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab_list(tok)) + "\n")
    cfg = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": is_lowercase(tok),
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "model_max_length": int(model_max_length),
        "unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS, "mask_token": MASK,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return vocab_path


def _guess_lowercase(tokens: list[str]) -> bool:
    """An uncased vocab has (almost) no upper-case letters outside the bracketed special tokens."""
    upper = sum(1 for t in tokens if not (t.startswith("[") and t.endswith("]")) and any(c.isupper() for c in t))
    return upper < max(10, len(tokens) // 1000)


def load_tokenizer(path: str | os.PathLike, lowercase: bool | None = None) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from a prepared dir, a dir with tokenizer.json/vocab.txt, or a file.

    ``tokenizer.json`` is preferred when present (exactly the tokenizer used at preparation).  From a
    bare ``vocab.txt``, ``lowercase`` defaults to ``do_lower_case`` of a sibling
    tokenizer_config.json, else to a guess from the vocabulary (no upper-case tokens -> uncased).
    The result adds ``[CLS]``/``[SEP]`` (and token-type ids for pairs) in ``encode``; use
    ``add_special_tokens=False`` for raw pieces.  DataError if nothing loadable is found.
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        tj = os.path.join(p, "tokenizer.json")
        if os.path.isfile(tj) and lowercase is None:
            return _from_json(tj)
        vt = os.path.join(p, "vocab.txt")
        if os.path.isfile(vt):
            return _from_vocab(vt, lowercase)
        if os.path.isfile(tj):
            return _from_json(tj)
        raise DataError(f"{p}: no tokenizer.json or vocab.txt in this directory; expected a prepared-data or tokenizer directory")
    if os.path.isfile(p):
        if p.endswith(".json"):
            return _from_json(p)
        return _from_vocab(p, lowercase)
    raise DataError(f"{p}: no such tokenizer file or directory")


def _from_json(path: str) -> Tokenizer:
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a plain Exception on bad JSON
        raise DataError(f"{path}: not a valid tokenizers JSON file ({e})") from None
    vocab = tok.get_vocab(with_added_tokens=True)
    missing = [s for s in SPECIAL_TOKENS if s not in vocab]
    if missing:
        raise DataError(f"{path}: tokenizer lacks the special token(s) {' '.join(missing)}; a BERT vocab needs {' '.join(SPECIAL_TOKENS)}")
    return tok


def _from_vocab(path: str, lowercase: bool | None) -> Tokenizer:
    if lowercase is None:
        cfg = os.path.join(os.path.dirname(path), "tokenizer_config.json")
        if os.path.isfile(cfg):
            try:
                with open(cfg, encoding="utf-8") as f:
                    lowercase = bool(json.load(f).get("do_lower_case", True))
            except (OSError, ValueError):
                lowercase = None
        if lowercase is None:
            lowercase = _guess_lowercase(read_vocab(path))
    return build_tokenizer(path, lowercase=lowercase)


def special_ids(tok: Tokenizer) -> dict[str, int]:
    """{"pad","unk","cls","sep","mask"} -> id."""
    return {k: tok.token_to_id(v) for k, v in SPECIAL_KEYS.items()}


def plain_copy(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer without added special tokens or post-processor, for corpus text.

    Corpus text that happens to contain ``[SEP]`` or ``[MASK]`` is then tokenized as ordinary
    characters (``[``, ``sep``, ``]``), as BERT's own data pipeline does, so special ids only ever
    come from the packing frame.
    """
    d = json.loads(tok.to_str())
    d["added_tokens"] = []
    d["post_processor"] = None
    d["truncation"] = None
    d["padding"] = None
    return Tokenizer.from_str(json.dumps(d))
