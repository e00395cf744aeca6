"""WordPiece tokenizer (BERT's) through the ``tokenizers`` library.

* :func:`build_tokenizer` -- from a ``vocab.txt`` (e.g. bert-base-uncased's), BERT normalisation
  (optional lower-casing + accent stripping, Chinese characters split, control characters removed),
  BERT pre-tokenisation, WordPiece with ``##`` continuation pieces, and the ``[CLS] A [SEP] (B
  [SEP])`` post-processor with token-type ids, so ``tok.encode(a)`` / ``tok.encode(a, b)`` give
  model inputs with character offsets.
* :func:`train_tokenizer` -- a new WordPiece vocabulary learned from documents; the special tokens
  take ids 0-4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
* :func:`save_tokenizer` writes ``tokenizer.json`` + ``vocab.txt`` + ``tokenizer_config.json`` (the
  latter two make the directory loadable by ``transformers.BertTokenizer(Fast)`` too).
* :func:`load_tokenizer` -- the one loading path (prepare ``--tokenizer``, prepared data,
  fine-tuning, export): a Hugging Face tokenizer/model directory, a prepared-data directory, a
  tokendrop run, a ``tokenizer.json`` or a ``vocab.txt``.  The tokenizer is
  ``transformers.AutoTokenizer.from_pretrained(dir, local_files_only=True).backend_tokenizer``, the
  exact ``tokenizers`` object transformers uses (transformers decides tokenizer.json vs vocab.txt,
  casing, special tokens, added tokens); :func:`read_tokenizer_spec` adds only the checks
  transformers does not make and the fields prepared data records.  A bare ``vocab.txt`` (nothing
  beside it declares a tokenizer; transformers cannot load it) gets BERT's WordPiece from
  :func:`build_tokenizer`.
* :func:`readable_token` -- a vocabulary token as a reader writes it (a byte-level BPE piece, see
  :func:`is_byte_level`, as its text), for what ``inspect`` shows.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from tokendrop.errors import DataError
from tokendrop.runs.files import read_json

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SPECIAL_KEYS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}
# their ids in a vocabulary that starts with SPECIAL_TOKENS (train_tokenizer's, the tests' toy
# vocabularies); a prepared directory's own ids are PreparedData.special_ids
SPECIAL_IDS = {k: i for i, k in enumerate(SPECIAL_KEYS)}
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


def vocab_sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_vocab(path: str | os.PathLike, specials: Iterable[str] = SPECIAL_TOKENS) -> list[str]:
    """The tokens of a ``vocab.txt`` (one per line, id = line number), validated.

    DataError if the file is missing, not UTF-8, empty, has duplicate or blank entries, or lacks
    one of ``specials`` (default [PAD] [UNK] [CLS] [SEP] [MASK]; pass a tokenizer's declared names).
    """
    specials = tuple(specials)
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: vocabulary file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the vocabulary ({e.strerror})") from None
    if b"\x00" in data:
        raise DataError(
            f"{path}: contains NUL bytes, looks like a binary file; expected a vocab.txt with "
            "one token per line"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path}: invalid UTF-8 at byte {e.start}; expected a UTF-8 vocab.txt with "
            "one token per line"
        ) from None
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
            raise DataError(
                f"{path}: line {i + 1}: duplicate token {t!r} (also on line {seen[t] + 1}); ids "
                "would be ambiguous"
            )
        seen[t] = i
    missing = [s for s in specials if s not in seen]
    if missing:
        raise DataError(
            f"{path}: vocabulary lacks the special token(s) {' '.join(missing)}; a BERT vocab "
            f"needs {' '.join(specials)}"
        )
    return tokens


def _assemble(tok: Tokenizer, vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
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
    tok = Tokenizer(
        WordPiece(
            vocab, unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100
        )
    )
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
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise DataError(
            f"vocab_size: expected at least {len(SPECIAL_TOKENS) + 1}, got {vocab_size}"
        )
    tok = Tokenizer(
        WordPiece(unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100)
    )
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
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


def num_ids(tok: Tokenizer) -> int:
    """The size of the id space: largest id + 1 (added tokens included; a vocabulary may have
    holes)."""
    return max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1


def vocab_tokens(tok: Tokenizer) -> list[str]:
    """Every token by id, added tokens included, ``""`` for an id nothing maps to (unlike
    :func:`vocab_list`, which requires contiguous ids, as a vocab.txt has)."""
    out = [""] * num_ids(tok)
    for t, i in tok.get_vocab(with_added_tokens=True).items():
        out[i] = t
    return out


def special_added_ids(tok: Tokenizer) -> list[int]:
    """Ids of the tokenizer's special added tokens ([CLS], <|endoftext|>, ...), sorted."""
    return sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special)


def is_lowercase(tok: Tokenizer) -> bool:
    return _normalizer_lowercases(json.loads(tok.to_str()).get("normalizer"))


def save_tokenizer(
    tok: Tokenizer, directory: str | os.PathLike, model_max_length: int = 512
) -> str:
    """Write tokenizer.json, vocab.txt and tokenizer_config.json into ``directory``; returns
    vocab.txt's path."""
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
        "unk_token": UNK,
        "sep_token": SEP,
        "pad_token": PAD,
        "cls_token": CLS,
        "mask_token": MASK,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return vocab_path


def guess_lowercase(tokens: list[str]) -> bool:
    """An uncased vocab has (almost) no upper-case letters outside the bracketed special tokens."""
    upper = sum(
        1
        for t in tokens
        if not (t.startswith("[") and t.endswith("]")) and any(c.isupper() for c in t)
    )
    return upper < max(10, len(tokens) // 1000)


# ----------------------------------------------------------------------------------------------
# loading: the one path (prepare --tokenizer, prepared dirs, fine-tuning, export)

HF_TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer")
# config.json model types whose tokenizer is one of those
BERT_MODEL_TYPES = (
    "bert",
    "distilbert",
    "electra",
)
# tokenizer_class values under which transformers loads tokenizer.json as it is (v4: the first, v5
# writes the second)
FILE_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
_UNLIMITED = 10**12  # transformers writes int(1e30) as model_max_length when there is no limit


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer directory as ``transformers.AutoTokenizer.from_pretrained`` loads it.

    ``tokenizer`` is AutoTokenizer's ``backend_tokenizer`` (the exact ``tokenizers.Tokenizer``:
    transformers decides tokenizer.json vs vocab.txt, casing, special tokens and added tokens), or
    None for a bare vocab.txt (no tokenizer_config.json, no config.json: transformers cannot load
    it;
    :func:`tokenizer_from_spec` builds BERT's WordPiece with the casing guessed from the vocabulary,
    ``lowercase=None``).  The other fields are read off what transformers loaded: the special-token
    names (``[PAD]``.. where it declares none), ``model_max_length`` (None: no limit), the casing.

    ``backend``: ``"bert"`` for BERT's WordPiece (BertNormalizer + BertPreTokenizer, ``##``
    pieces; prepared data keeps a vocab.txt, whose sha256 is the vocabulary hash), ``"file"`` for
    any other tokenizer.json (byte-level BPE of ModernBERT, Unigram, ...) or one declared
    PreTrainedTokenizerFast (the tokenizer.json itself is then the reference).
    """

    directory: str
    vocab_source: str  # tokenizer.json when present, else vocab.txt
    lowercase: bool | None
    strip_accents: bool | None
    tokenize_chinese_chars: bool
    special_tokens: dict[str, str]  # "pad"/"unk"/"cls"/"sep"/"mask" -> token
    model_max_length: int | None  # None: not declared, or transformers' "no limit"
    config_file: str | None
    files: tuple[str, ...]  # the HF_TOKENIZER_FILES present in ``directory``
    backend: str = "bert"  # "bert" | "file"
    model_type: str = "WordPiece"  # the tokenizer's model: WordPiece, BPE, Unigram, ...
    tokenizer: Tokenizer | None = field(default=None, repr=False, compare=False)

    def describe(self) -> dict:
        """JSON-able summary for meta files."""
        return {
            "path": os.path.abspath(self.directory),
            "backend": self.backend,
            "vocab_source": os.path.basename(self.vocab_source),
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "model_max_length": self.model_max_length,
            "special_tokens": dict(self.special_tokens),
        }


def _normalizer_lowercases(norm) -> bool:
    if not isinstance(norm, dict):
        return False
    if norm.get("type") == "Sequence":
        return any(_normalizer_lowercases(n) for n in norm.get("normalizers") or [])
    return norm.get("type") == "Lowercase" or bool(norm.get("lowercase", False))


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _tokenizer_dir(path: str | os.PathLike) -> tuple[str, str]:
    """A path -> (the directory transformers loads, tokenizer.json or vocab.txt in it): a tokenizer
    or model directory, a prepared-data directory, a tokendrop run (its ``tokenizer/``), or a file
    in one."""
    p = os.fspath(path)
    if os.path.isfile(p):
        p = os.path.dirname(os.path.abspath(p))
    elif not os.path.isdir(p):
        raise DataError(f"{p}: no such tokenizer file or directory")
    tj, vt = os.path.join(p, "tokenizer.json"), os.path.join(p, "vocab.txt")
    if not (os.path.isfile(tj) or os.path.isfile(vt)) and has_tokenizer_files(
        os.path.join(p, "tokenizer")
    ):
        # a tokendrop run / checkpoint keeps it there
        return _tokenizer_dir(os.path.join(p, "tokenizer"))
    if os.path.isfile(tj):
        return p, tj
    if os.path.isfile(vt):
        return p, vt
    raise DataError(
        f"{p}: no tokenizer.json or vocab.txt in this directory; expected a tokenizer directory "
        "(tokenizer.json, or vocab.txt + tokenizer_config.json) or a prepared-data directory"
    )


def _check_wordpiece_class(d: str, cfg: dict | None, cfg_path: str) -> str | None:
    """A directory with a vocab.txt and no tokenizer.json is a WordPiece vocabulary: the tokenizer
    class that tokenizer_config.json (else config.json: tokenizer_class, model_type) declares must
    be BERT's (transformers would otherwise build another tokenizer from nothing).  -> that class's
    name (BertTokenizer when only a BERT model_type or nothing in a config says), None for a bare
    vocab.txt."""
    declared = [(cfg.get("tokenizer_class"), cfg_path)] if cfg is not None else []
    mc_path = os.path.join(d, "config.json")
    mc = read_json(mc_path, DataError) if os.path.isfile(mc_path) else None
    if cfg is None and mc is not None:
        declared.append((mc.get("tokenizer_class"), mc_path))
        if (
            mc.get("tokenizer_class") is None
            and mc.get("model_type")
            and mc["model_type"] not in BERT_MODEL_TYPES
        ):
            raise DataError(
                f"{mc_path}: model_type {mc['model_type']!r} does not use a BERT WordPiece "
                f"tokenizer; expected one of {', '.join(BERT_MODEL_TYPES)}"
            )
    for name, where in declared:
        if name is not None and str(name).removesuffix("Fast") not in BERT_TOKENIZER_CLASSES:
            raise DataError(
                f"{where}: tokenizer_class {name!r} is not a BERT WordPiece tokenizer; expected "
                f"one of {', '.join(BERT_TOKENIZER_CLASSES)}, or PreTrainedTokenizerFast with "
                "a tokenizer.json"
            )
    if cfg is None and mc is None:
        return None
    name = next((str(n).removesuffix("Fast") for n, _ in declared if n is not None), None)
    if name is None and mc is not None and mc.get("model_type") in BERT_MODEL_TYPES:
        name = BERT_TOKENIZER_CLASSES[BERT_MODEL_TYPES.index(mc["model_type"])]
    return name or "BertTokenizer"


def _source_tokens(source: str, cfg: dict | None) -> set[str]:
    """The tokens the source files define (tokenizer.json's vocabulary and added tokens, or
    vocab.txt's lines, plus tokenizer_config.json's ``added_tokens_decoder``): a special token
    outside it would be one transformers appends with a new id that no embedding row was trained
    for."""
    if source.endswith(".json"):
        try:
            raw = Tokenizer.from_file(source)
        except Exception as e:  # noqa: BLE001 - the Rust loader's exceptions
            raise DataError(
                f"{source}: not a valid tokenizers JSON file ({_first_line(e)}); expected a "
                "tokenizer.json "
                "saved by tokenizers/transformers"
            ) from None
        tokens = set(raw.get_vocab(with_added_tokens=True))
    else:
        tokens = set(read_vocab(source, specials=()))
    added = (cfg or {}).get("added_tokens_decoder")
    if isinstance(added, dict):
        tokens |= {
            v["content"]
            for v in added.values()
            if isinstance(v, dict) and isinstance(v.get("content"), str)
        }
    return tokens


def _auto_tokenizer(d: str, wordpiece_class: str | None = None):
    """``transformers.AutoTokenizer.from_pretrained(d, local_files_only=True)``, quietly; DataError
    if it fails.  A vocab.txt directory is loaded with its declared BERT class (``wordpiece_class``
    + Fast), which AutoTokenizer picks too, except beside a config.json of another model type (e.g.
      a ModernBERT
    model trained with a WordPiece vocabulary), where it would look for a tokenizer.json."""
    import transformers
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    # its warnings about the model's config.json are not ours to print
    hf_logging.set_verbosity_error()
    try:
        cls = (
            getattr(transformers, wordpiece_class + "Fast")
            if wordpiece_class
            else transformers.AutoTokenizer
        )
        at = cls.from_pretrained(d, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises for a directory it cannot load
        raise DataError(
            f"{d}: transformers.AutoTokenizer cannot load this tokenizer ({type(e).__name__}: "
            f"{_first_line(e)}); expected a Hugging Face tokenizer directory"
        ) from None
    finally:
        hf_logging.set_verbosity(level)
    if getattr(at, "backend_tokenizer", None) is None:
        raise DataError(
            f"{d}: transformers loads a {type(at).__name__} without a tokenizers backend; expected "
            "a tokenizer.json or a BERT vocab.txt"
        )
    return at


def _is_bert_wordpiece(data: dict) -> bool:
    model, norm, pre = (
        data.get("model") or {},
        data.get("normalizer") or {},
        data.get("pre_tokenizer") or {},
    )
    return (
        model.get("type") == "WordPiece"
        and model.get("continuing_subword_prefix", "##") == "##"
        and norm.get("type") == "BertNormalizer"
        and pre.get("type") == "BertPreTokenizer"
    )


def _frame_with_cls_sep(tok: Tokenizer, cls: str, sep: str, where: str) -> None:
    """Make ``tok.encode(a)`` / ``encode(a, b)`` give ``cls A sep (B sep)``: the packed rows and the
    fine-tuning inputs are framed so.  A post-processor that already does is kept; one that adds no
    tokens (none, ByteLevel offsets, transformers' empty template) gets ours after it (transformers
    would then encode without cls/sep: a documented difference); one that frames with other tokens
    (``<s> ... </s>`` with cls_token ``[CLS]``) is a DataError."""
    cls_id, sep_id = tok.token_to_id(cls), tok.token_to_id(sep)
    plain, framed = tok.encode("a b", add_special_tokens=False).ids, tok.encode("a b").ids
    if framed == [cls_id, *plain, sep_id]:
        return
    pp = tok.post_processor
    if pp is not None and pp.num_special_tokens_to_add(False) > 0:
        raise DataError(
            f"{where}: post_processor frames a text as {tok.id_to_token(framed[0])!r} ... "
            f"{tok.id_to_token(framed[-1])!r}, not with the declared cls_token {cls!r} and "
            f"sep_token {sep!r}; expected [CLS] text [SEP] framing (the packed rows use it)"
        )
    ours = processors.TemplateProcessing(
        single=[f"{cls}:0", "$A:0", f"{sep}:0"],
        pair=[f"{cls}:0", "$A:0", f"{sep}:0", "$B:1", f"{sep}:1"],
        special_tokens=[(cls, cls_id), (sep, sep_id)],
    )
    tok.post_processor = ours if pp is None else processors.Sequence([pp, ours])


def _check_special_names(
    names: dict[str, str], declared: bool, have: set[str], source: str, model_type: str, d: str
) -> None:
    missing = [k for k in SPECIAL_KEYS if names[k] not in have]
    if not missing:
        return
    if source.endswith("vocab.txt"):
        raise DataError(
            f"{source}: vocabulary lacks the special token(s) "
            f"{' '.join(names[k] for k in missing)}; a BERT "
            f"vocab needs {' '.join(names[k] for k in SPECIAL_KEYS)}"
        )
    if not declared and model_type != "WordPiece":
        raise DataError(
            f"{source}: a {model_type} tokenizer, not a BERT WordPiece tokenizer, and nothing "
            "declares its special tokens; expected a BERT tokenizer, or, to use this "
            "tokenizer.json as it is, a tokenizer_config.json beside it (tokenizer_class "
            "PreTrainedTokenizerFast, the special tokens)"
        )
    where = (
        "as transformers reads tokenizer_config.json / special_tokens_map.json"
        if declared
        else "the default name"
    )
    raise DataError(
        f"{source}: no id for the special token(s) "
        f"{', '.join(f'{k}_token {names[k]!r}' for k in missing)} ({where} in {d}); every one of "
        "pad/unk/cls/sep/mask must be in the tokenizer (transformers would append a "
        "new, untrained id)"
    )


def read_tokenizer_spec(path: str | os.PathLike) -> TokenizerSpec:
    """Load the tokenizer at ``path`` with ``transformers.AutoTokenizer`` (nothing is downloaded)
    and describe it; its ``backend_tokenizer`` is ``spec.tokenizer``, framed ``cls A sep (B sep)``
    with the declared special tokens, without truncation or padding.

    What transformers does not check, checked here (DataError, one line naming the file): a
    vocab.txt directory must declare a BERT tokenizer (class or model_type); every special token
    must be in the source's vocabulary (transformers would append a new id); a non-WordPiece
    tokenizer.json must have its special tokens declared; a post-processor must not frame with other
    tokens."""
    d, source = _tokenizer_dir(path)
    files = tuple(n for n in HF_TOKENIZER_FILES if os.path.isfile(os.path.join(d, n)))
    cfg_path = os.path.join(d, "tokenizer_config.json")
    cfg = read_json(cfg_path, DataError) if "tokenizer_config.json" in files else None
    config_file = cfg_path if cfg is not None else None
    wordpiece_class = None if source.endswith(".json") else _check_wordpiece_class(d, cfg, cfg_path)
    if not source.endswith(".json") and wordpiece_class is None:
        # a bare vocab.txt: transformers cannot load it; ours, casing guessed (build_tokenizer)
        read_vocab(source)
        return TokenizerSpec(
            directory=d,
            vocab_source=source,
            lowercase=None,
            strip_accents=None,
            tokenize_chinese_chars=True,
            special_tokens=dict(SPECIAL_KEYS),
            model_max_length=None,
            config_file=None,
            files=files,
        )
    have = _source_tokens(source, cfg)
    at = _auto_tokenizer(d, wordpiece_class)
    tok = at.backend_tokenizer
    data = json.loads(tok.to_str())
    model_type = str((data.get("model") or {}).get("type", "unknown"))
    declared = {k: getattr(at, f"{k}_token", None) for k in SPECIAL_KEYS}
    names = {k: str(declared[k]) if declared[k] else SPECIAL_KEYS[k] for k in SPECIAL_KEYS}
    _check_special_names(names, any(declared.values()), have, source, model_type, d)
    tok.no_truncation()
    tok.no_padding()
    _frame_with_cls_sep(tok, names["cls"], names["sep"], source)
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    tok.add_special_tokens(
        [AddedToken(names[k], special=True) for k in SPECIAL_KEYS if names[k] not in added]
    )
    ml = getattr(at, "model_max_length", None)
    max_len = int(ml) if isinstance(ml, (int, float)) and 0 < ml < _UNLIMITED else None
    bert = (
        _is_bert_wordpiece(data)
        and (cfg or {}).get("tokenizer_class") not in FILE_TOKENIZER_CLASSES
    )
    norm = data.get("normalizer") or {}
    return TokenizerSpec(
        directory=d,
        vocab_source=source,
        lowercase=bool(norm.get("lowercase")) if bert else _normalizer_lowercases(norm),
        strip_accents=norm.get("strip_accents") if bert else None,
        tokenize_chinese_chars=bool(norm.get("handle_chinese_chars", True)) if bert else False,
        special_tokens=names,
        model_max_length=max_len,
        config_file=config_file,
        files=files,
        backend="bert" if bert else "file",
        model_type=model_type,
        tokenizer=tok,
    )


def tokenizer_from_spec(spec: TokenizerSpec, lowercase: bool | None = None) -> Tokenizer:
    """A fresh copy of the spec's tokenizer (``lowercase`` overrides a BERT tokenizer's casing); for
    a bare vocab.txt, BERT's WordPiece built from it (:func:`build_tokenizer`), casing guessed
    unless given."""
    if spec.tokenizer is None:
        lc = (
            guess_lowercase(read_vocab(spec.vocab_source)) if lowercase is None else bool(lowercase)
        )
        return build_tokenizer(spec.vocab_source, lowercase=lc)
    tok = Tokenizer.from_str(spec.tokenizer.to_str())
    if lowercase is not None:
        if spec.backend != "bert":
            raise DataError(
                f"{spec.vocab_source}: a {spec.model_type} tokenizer used as it is; its own "
                "normalizer decides the casing (drop the lower-casing option)"
            )
        norm = json.loads(tok.to_str())["normalizer"]
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=norm.get("clean_text", True),
            handle_chinese_chars=norm.get("handle_chinese_chars", True),
            strip_accents=norm.get("strip_accents"),
            lowercase=bool(lowercase),
        )
    return tok


def load_tokenizer(path: str | os.PathLike, lowercase: bool | None = None) -> Tokenizer:
    """The one tokenizer-loading path: prepare, prepared data, fine-tuning and export all use it.

    ``path``: a Hugging Face tokenizer/model directory, a prepared-data directory, a tokendrop run,
    or a tokenizer.json / vocab.txt file (its directory is loaded).  The tokenizer is
    ``transformers.AutoTokenizer.from_pretrained(dir).backend_tokenizer`` (see
    :func:`read_tokenizer_spec`); a bare vocab.txt (no config beside it) gets BERT's WordPiece with
    the casing guessed from the vocabulary (no upper-case tokens -> uncased).  ``lowercase``
    overrides a WordPiece tokenizer's casing.

    The result adds ``cls A sep (B sep)`` (and token-type ids for pairs) in ``encode``; use
    ``add_special_tokens=False`` for raw pieces.  DataError (one line, naming the file) otherwise.
    """
    return tokenizer_from_spec(read_tokenizer_spec(path), lowercase=lowercase)


def special_ids(tok: Tokenizer, names: dict[str, str] | None = None) -> dict[str, int]:
    """{"pad","unk","cls","sep","mask"} -> id, looked up by ``names`` (a tokenizer's declared
    special tokens, e.g. ``TokenizerSpec.special_tokens``; default [PAD] [UNK] [CLS] [SEP]
    [MASK])."""
    names = dict(SPECIAL_KEYS) if names is None else names
    out = {}
    for k in SPECIAL_KEYS:
        i = tok.token_to_id(names[k])
        if i is None:
            raise DataError(f"tokenizer: no id for the {k} token {names[k]!r}")
        out[k] = i
    return out


def plain_copy(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer without special added tokens or post-processor, for corpus text.

    Corpus text that happens to contain ``[SEP]`` or ``[MASK]`` is then tokenized as ordinary
    characters (``[``, ``sep``, ``]``), as BERT's own data pipeline does, so special ids only ever
    come from the packing frame.  (This is the one deliberate difference from
    ``AutoTokenizer(text, add_special_tokens=False)``, which maps a literal ``[SEP]`` to its id.)
    Non-special added tokens are kept.
    """
    d = json.loads(tok.to_str())
    d["added_tokens"] = [t for t in d.get("added_tokens") or [] if not t.get("special")]
    d["post_processor"] = None
    d["truncation"] = None
    d["padding"] = None
    return Tokenizer.from_str(json.dumps(d))


@functools.cache
def _byte_level_chars() -> dict[str, int]:
    """Byte-level BPE's printable stand-in character -> the byte it encodes (GPT-2's table)."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), 256),
    ]
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + n)] = b
            n += 1
    return out


def readable_token(token: str, byte_level: bool) -> str:
    """``token`` as a reader would write it: a byte-level BPE piece as its text ("Ġthe" -> "▁the",
    "Ã©" -> "é"; a piece that is part of a character as its bytes, "<0xC3>"), spaces shown as "▁"
    and newlines/tabs escaped.  Other vocabularies (WordPiece, SentencePiece's "▁") are readable as
    they are."""
    if byte_level and token:
        table = _byte_level_chars()
        if all(c in table for c in token):
            raw = bytes(table[c] for c in token)
            try:
                token = raw.decode("utf-8")
            except UnicodeDecodeError:
                return "".join(f"<0x{b:02X}>" for b in raw)
    return (
        token.replace(" ", "\u2581").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    )


def is_byte_level(tok: Tokenizer) -> bool:
    """Whether ``tok`` decodes byte-level BPE pieces (GPT-2's, ModernBERT's): its decoder is, or
    contains, ``ByteLevel``."""
    dec = json.loads(tok.to_str()).get("decoder") or {}
    parts = dec.get("decoders") or [] if dec.get("type") == "Sequence" else [dec]
    return any(isinstance(p, dict) and p.get("type") == "ByteLevel" for p in parts)


def has_tokenizer_files(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a tokenizer (a tokenizer.json or a vocab.txt)."""
    return any(
        os.path.isfile(os.path.join(os.fspath(directory), n))
        for n in ("tokenizer.json", "vocab.txt")
    )


def tokenizer_vocab_sha256(path: str | os.PathLike) -> str:
    """The vocabulary hash that prepared data records (``meta["vocab_hash"]``) for the tokenizer at
    ``path``.

    BERT WordPiece: the sha256 of its vocab.txt (the file prepare copies), or of the vocab.txt
    prepare writes for a tokenizer.json without one; a tokenizer.json used as it is: the sha256 of
    that file (for BPE the merges, not only the vocabulary, decide the ids, and prepare copies the
    file byte for byte)."""
    spec = read_tokenizer_spec(path)
    if spec.backend == "file":
        return vocab_sha256(spec.vocab_source)
    vt = os.path.join(spec.directory, "vocab.txt")
    if os.path.isfile(vt):
        return vocab_sha256(vt)
    text = "\n".join(vocab_list(tokenizer_from_spec(spec))) + "\n"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_tokenizer_config(spec: TokenizerSpec, directory: str | os.PathLike) -> str:
    """Write a tokenizer_config.json describing ``spec`` into ``directory`` (for a source that has
    none, so that the copy reloads as the same tokenizer, for transformers and for us):
    BertTokenizer with the spec's casing, or PreTrainedTokenizerFast for a tokenizer.json used as it
    is; the special-token names and ``model_max_length`` either way.  -> the file's path."""
    if spec.backend == "file":
        cfg: dict = {"tokenizer_class": "PreTrainedTokenizerFast"}
    else:
        cfg = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": bool(spec.lowercase),
            "strip_accents": spec.strip_accents,
            "tokenize_chinese_chars": spec.tokenize_chinese_chars,
        }
    cfg.update({f"{k}_token": v for k, v in spec.special_tokens.items()})
    if spec.model_max_length is not None:
        cfg["model_max_length"] = spec.model_max_length
    out = os.path.join(os.fspath(directory), "tokenizer_config.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return out
