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
* :func:`load_tokenizer` -- the one loading path (prepare ``--tokenizer``, prepared data,
  fine-tuning, export): a Hugging Face tokenizer/model directory, a prepared-data directory, a
  ``tokenizer.json`` or a ``vocab.txt``; ids identical to ``transformers.AutoTokenizer`` (see
  :func:`read_tokenizer_spec` for what is read, :func:`tokenizer_from_spec` for what is built).
  Two backends: BERT WordPiece, rebuilt from the vocabulary as ``BertTokenizer`` does (``"bert"``),
  and any other ``tokenizer.json`` (byte-level BPE of ModernBERT, Unigram, ...) loaded as it is, as
  ``PreTrainedTokenizerFast`` / ``TokenizersBackend`` do (``"file"``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from ..errors import DataError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SPECIAL_KEYS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}
# their ids in a vocabulary that starts with SPECIAL_TOKENS (train_tokenizer's, tokendrop.data.testing's);
# a prepared directory's own ids are PreparedData.special_ids
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
    missing = [s for s in specials if s not in seen]
    if missing:
        raise DataError(f"{path}: vocabulary lacks the special token(s) {' '.join(missing)}; a BERT vocab needs {' '.join(specials)}")
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


def num_ids(tok: Tokenizer) -> int:
    """The size of the id space: largest id + 1 (added tokens included; a vocabulary may have holes)."""
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


# ----------------------------------------------------------------------------------------------
# loading: the one path (prepare --tokenizer, prepared dirs, fine-tuning, export)

HF_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer")
BERT_MODEL_TYPES = ("bert", "distilbert", "electra")  # config.json model types whose tokenizer is one of those
# tokenizer_class values under which transformers loads tokenizer.json as it is (v4: the first, v5 writes the second)
FILE_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
# config.json model types whose tokenizer.json AutoTokenizer loads as it is, whatever tokenizer_class says
FILE_TOKENIZER_MODEL_TYPES = ("modernbert",)
MAX_INPUT_CHARS_PER_WORD = 100  # BERT's: a longer word becomes [UNK]
_UNLIMITED = 10**12  # transformers writes int(1e30) as model_max_length when there is no limit


@dataclass(frozen=True)
class TokenizerSpec:
    """What a tokenizer directory declares, read the way ``transformers.AutoTokenizer`` reads it.

    ``vocab_source`` is the file the ids come from: ``tokenizer.json`` when present (AutoTokenizer
    prefers it), else ``vocab.txt``.  With a ``tokenizer_config.json`` the normalisation is the
    config's (``do_lower_case`` default True, ``strip_accents`` None = follow lower-casing,
    ``tokenize_chinese_chars`` default True), as ``BertTokenizer`` rebuilds it -- those defaults
    also apply to a model dir whose ``config.json`` names a BERT model type but which has no
    tokenizer_config.json; otherwise a tokenizer.json's own BertNormalizer (transformers then
    loads the file as it is); a bare vocab.txt has ``lowercase=None`` (guessed on load).
    Special-token names: tokenizer_config.json, overridden by special_tokens_map.json unless the
    config has ``added_tokens_decoder`` (transformers' precedence).

    ``backend``: ``"bert"`` (the above: WordPiece rebuilt as BertTokenizer) or ``"file"``: a
    ``tokenizer.json`` used as it is (``model_type`` its model: BPE, Unigram, ...); then only the
    special-token names, ``model_max_length`` and the config's ``added_tokens_decoder`` are read
    beside it, and ``lowercase`` says whether its normalizer lower-cases (informational).
    """

    directory: str
    vocab_source: str
    lowercase: bool | None
    strip_accents: bool | None
    tokenize_chinese_chars: bool
    special_tokens: dict[str, str]  # "pad"/"unk"/"cls"/"sep"/"mask" -> token
    model_max_length: int | None  # None: not declared, or transformers' "no limit"
    config_file: str | None
    files: tuple[str, ...]  # the HF_TOKENIZER_FILES present in ``directory``
    added_tokens: tuple[dict, ...] = field(default=(), repr=False)  # {"id", "content", flags...}
    backend: str = "bert"  # "bert" | "file"
    model_type: str = "WordPiece"  # tokenizer.json's model.type ("WordPiece" for a vocab.txt)

    def describe(self) -> dict:
        """JSON-able summary for meta files (no added-token list)."""
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


def _read_json_object(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: invalid UTF-8 at byte {e.start}; expected a JSON file") from None
    except ValueError as e:
        raise DataError(f"{path}: invalid JSON ({e})") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(d, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def _token_name(value, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):  # a serialised AddedToken
        value = value.get("content")
    if not isinstance(value, str) or not value:
        raise DataError(f"{where}: expected a token string, got {value!r}")
    return value


def _flag(cfg: dict, key: str, default, path: str, allow_none: bool = False):
    v = cfg.get(key, default)
    if isinstance(v, bool) or (allow_none and v is None):
        return v
    raise DataError(f"{path}: {key} must be {'true, false or null' if allow_none else 'true or false'}, got {v!r}")


def _check_tokenizer_class(name, path: str) -> None:
    if name is not None and str(name).removesuffix("Fast") not in BERT_TOKENIZER_CLASSES:
        raise DataError(f"{path}: tokenizer_class {name!r} is not a BERT WordPiece tokenizer; expected "
                        f"one of {', '.join(BERT_TOKENIZER_CLASSES)}, or PreTrainedTokenizerFast with a tokenizer.json")


def _model_type(data: dict, path: str) -> str:
    """tokenizer.json's ``model.type`` (very old files omit it: WordPiece has a prefix and no merges)."""
    model = data.get("model")
    if not isinstance(model, dict) or "vocab" not in model:
        raise DataError(f"{path}: not a valid tokenizers JSON file (no model vocabulary); expected a tokenizer.json saved by tokenizers/transformers")
    mtype = model.get("type")
    if mtype is None:
        mtype = ("WordPiece" if "continuing_subword_prefix" in model and "merges" not in model
                 else "BPE" if "merges" in model else "Unigram" if isinstance(model["vocab"], list) else "unknown")
    return str(mtype)


def _wordpiece_model(data: dict, path: str) -> dict:
    """The ``model`` section of a tokenizer.json, checked to be BERT's WordPiece."""
    mtype = _model_type(data, path)
    model = data["model"]
    if mtype != "WordPiece":
        raise DataError(f"{path}: a {mtype} tokenizer, not a BERT WordPiece tokenizer; expected model.type \"WordPiece\" "
                        "(BERT checkpoints: tokenizer.json or vocab.txt + tokenizer_config.json), or, to use this "
                        "tokenizer.json as it is, a tokenizer_config.json beside it with tokenizer_class "
                        "PreTrainedTokenizerFast and the special tokens")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise DataError(f"{path}: WordPiece continuing_subword_prefix {model['continuing_subword_prefix']!r}; BERT's is '##'")
    if model.get("max_input_chars_per_word", MAX_INPUT_CHARS_PER_WORD) != MAX_INPUT_CHARS_PER_WORD:
        raise DataError(f"{path}: WordPiece max_input_chars_per_word {model['max_input_chars_per_word']!r}; BERT's (and "
                        f"transformers.BertTokenizer's) is {MAX_INPUT_CHARS_PER_WORD}")
    if not isinstance(model["vocab"], dict) or not model["vocab"]:
        raise DataError(f"{path}: model.vocab must be a non-empty token -> id object")
    return model


def _special_names(d: str, cfg: dict | None, cfg_path: str, files: tuple[str, ...]) -> dict[str, str]:
    """The five special-token names: [PAD]..[MASK] unless tokenizer_config.json names others, and
    special_tokens_map.json over both unless the config has ``added_tokens_decoder`` (transformers' precedence)."""
    names = dict(SPECIAL_KEYS)
    if cfg is not None:
        for k in SPECIAL_KEYS:
            names[k] = _token_name(cfg.get(f"{k}_token"), f"{cfg_path}: {k}_token") or names[k]
    stm_path = os.path.join(d, "special_tokens_map.json")
    if "special_tokens_map.json" in files and (cfg is None or "added_tokens_decoder" not in cfg):
        stm = _read_json_object(stm_path)
        for k in SPECIAL_KEYS:
            names[k] = _token_name(stm.get(f"{k}_token"), f"{stm_path}: {k}_token") or names[k]
    return names


def _model_max_length(cfg: dict | None, cfg_path: str) -> int | None:
    ml = cfg.get("model_max_length") if cfg is not None else None
    if ml is None:
        return None
    if isinstance(ml, bool) or not isinstance(ml, (int, float)) or ml < 1:
        raise DataError(f"{cfg_path}: model_max_length must be a positive integer, got {ml!r}")
    return int(ml) if ml < _UNLIMITED else None


def _config_added_tokens(cfg: dict | None, cfg_path: str) -> list[dict] | None:
    """tokenizer_config.json's ``added_tokens_decoder`` as [{"id", "content", flags...}], or None without one."""
    if cfg is None or not isinstance(cfg.get("added_tokens_decoder"), dict):
        return None
    added = []
    for k, v in cfg["added_tokens_decoder"].items():
        if not isinstance(v, dict) or not isinstance(v.get("content"), str) or not str(k).isdigit():
            raise DataError(f"{cfg_path}: added_tokens_decoder[{k!r}] is not an id -> token object")
        added.append({**v, "id": int(k)})
    return added


def _normalizer_lowercases(norm) -> bool:
    if not isinstance(norm, dict):
        return False
    if norm.get("type") == "Sequence":
        return any(_normalizer_lowercases(n) for n in norm.get("normalizers") or [])
    return norm.get("type") == "Lowercase" or bool(norm.get("lowercase", False))


def _loads_as_is(d: str, data: dict, source: str, cfg: dict | None, files: tuple[str, ...]) -> bool:
    """Whether transformers loads this tokenizer.json as it is (the ``"file"`` backend): a non-WordPiece
    file whose directory declares its special tokens (tokenizer_config.json without a tokenizer_class or
    with PreTrainedTokenizerFast / TokenizersBackend, or a special_tokens_map.json) or sits in a model
    directory whose config.json names ModernBERT (AutoTokenizer then ignores tokenizer_class); or any
    file declared PreTrainedTokenizerFast.  A BERT WordPiece tokenizer.json otherwise takes the BERT path."""
    tclass = cfg.get("tokenizer_class") if cfg is not None else None
    if tclass in FILE_TOKENIZER_CLASSES:
        return True
    if _model_type(data, source) == "WordPiece":
        return False
    if tclass is None and (cfg is not None or "special_tokens_map.json" in files):
        return True
    mc_path = os.path.join(d, "config.json")
    if os.path.isfile(mc_path):
        mc = _read_json_object(mc_path)
        if mc.get("model_type") in FILE_TOKENIZER_MODEL_TYPES:
            return True
        if cfg is None and mc.get("tokenizer_class") in FILE_TOKENIZER_CLASSES:
            return True
    return False


def read_tokenizer_spec(path: str | os.PathLike) -> TokenizerSpec:
    """Read what a tokenizer directory (or a tokenizer.json / vocab.txt file in one) declares.

    DataError (one line, naming the file) for a missing path, no tokenizer.json/vocab.txt, invalid
    JSON, a tokenizer that is neither BERT WordPiece nor a tokenizer.json transformers uses as it is
    (see :func:`_loads_as_is`: e.g. a bare BPE tokenizer.json whose special tokens nothing declares,
    another ``tokenizer_class``, a non-BERT normalizer), or malformed settings.
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        d = p
        tj, vt = os.path.join(d, "tokenizer.json"), os.path.join(d, "vocab.txt")
        sub = os.path.join(d, "tokenizer")  # a tokendrop run / checkpoint keeps its tokenizer there
        if not (os.path.isfile(tj) or os.path.isfile(vt)) and any(
                os.path.isfile(os.path.join(sub, n)) for n in ("tokenizer.json", "vocab.txt")):
            return read_tokenizer_spec(sub)
        if os.path.isfile(tj):
            source = tj
        elif os.path.isfile(vt):
            source = vt
        else:
            raise DataError(f"{p}: no tokenizer.json or vocab.txt in this directory; expected a tokenizer directory "
                            "(tokenizer.json, or vocab.txt + tokenizer_config.json) or a prepared-data directory")
    elif os.path.isfile(p):
        d, source = os.path.dirname(os.path.abspath(p)), p
    else:
        raise DataError(f"{p}: no such tokenizer file or directory")
    files = tuple(n for n in HF_TOKENIZER_FILES if os.path.isfile(os.path.join(d, n)))
    cfg_path = os.path.join(d, "tokenizer_config.json")
    cfg = _read_json_object(cfg_path) if "tokenizer_config.json" in files else None
    is_json = source.endswith(".json")
    data = _read_json_object(source) if is_json else None
    if is_json and _loads_as_is(d, data, source, cfg, files):
        return TokenizerSpec(
            directory=d, vocab_source=source, lowercase=_normalizer_lowercases(data.get("normalizer")),
            strip_accents=None, tokenize_chinese_chars=False,
            special_tokens=_special_names(d, cfg, cfg_path, files), model_max_length=_model_max_length(cfg, cfg_path),
            config_file=cfg_path if cfg is not None else None, files=files,
            added_tokens=tuple(_config_added_tokens(cfg, cfg_path) or ()), backend="file",
            model_type=_model_type(data, source))
    model = _wordpiece_model(data, source) if is_json else None

    if cfg is not None:
        _check_tokenizer_class(cfg.get("tokenizer_class"), cfg_path)
    elif os.path.isfile(os.path.join(d, "config.json")):
        # a model dir without tokenizer_config.json: transformers picks the tokenizer class from the
        # model's config.json and builds it with its defaults (BertTokenizer: do_lower_case=True)
        mc_path = os.path.join(d, "config.json")
        mc = _read_json_object(mc_path)
        if mc.get("tokenizer_class") is not None:
            _check_tokenizer_class(mc["tokenizer_class"], mc_path)
            cfg = {}
        elif mc.get("model_type") in BERT_MODEL_TYPES:
            cfg = {}
        elif mc.get("model_type"):
            raise DataError(f"{mc_path}: model_type {mc['model_type']!r} does not use a BERT WordPiece tokenizer; "
                            f"expected one of {', '.join(BERT_MODEL_TYPES)}")
    names = _special_names(d, cfg, cfg_path, files)
    max_len = _model_max_length(cfg, cfg_path)
    if cfg is not None:  # BertTokenizer(**tokenizer_config): its defaults where the config is silent
        lowercase = _flag(cfg, "do_lower_case", True, cfg_path)
        strip_accents = _flag(cfg, "strip_accents", None, cfg_path, allow_none=True)
        chinese = _flag(cfg, "tokenize_chinese_chars", True, cfg_path)
    elif is_json:
        norm = data.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer" or not norm.get("clean_text", True):
            raise DataError(f"{source}: normalizer {norm.get('type')!r} is not BERT's (BertNormalizer with clean_text); "
                            "add a tokenizer_config.json (tokenizer_class BertTokenizer, do_lower_case) beside it")
        pre = (data.get("pre_tokenizer") or {}).get("type")
        if pre != "BertPreTokenizer":
            raise DataError(f"{source}: pre_tokenizer {pre!r} is not BERT's (BertPreTokenizer)")
        lowercase = bool(norm.get("lowercase", True))
        strip_accents = norm.get("strip_accents")
        chinese = bool(norm.get("handle_chinese_chars", True))
    else:
        lowercase, strip_accents, chinese = None, None, True

    added = _config_added_tokens(cfg, cfg_path)
    if added is None and is_json:
        added = [t for t in (data.get("added_tokens") or []) if isinstance(t, dict)]
        if any(not isinstance(t.get("content"), str) or not isinstance(t.get("id"), int) for t in added):
            raise DataError(f"{source}: added_tokens entries need an integer id and a content string")
    elif added is None:
        added = []
    if is_json:
        unk = model.get("unk_token", UNK)
        if unk != names["unk"]:
            raise DataError(f"{source}: WordPiece unk_token {unk!r} differs from the declared unk_token {names['unk']!r}")
    return TokenizerSpec(
        directory=d, vocab_source=source, lowercase=lowercase, strip_accents=strip_accents,
        tokenize_chinese_chars=chinese, special_tokens=names, model_max_length=max_len,
        config_file=cfg_path if "tokenizer_config.json" in files else None, files=files, added_tokens=tuple(added),
    )


def spec_vocab(spec: TokenizerSpec) -> dict[str, int]:
    """token -> id of the spec's vocabulary (tokenizer.json's model vocab, or vocab.txt's lines), checked."""
    src = spec.vocab_source
    if src.endswith(".json"):
        raw = _wordpiece_model(_read_json_object(src), src)["vocab"]
        ids = sorted(raw.values()) if all(isinstance(i, int) and not isinstance(i, bool) for i in raw.values()) else None
        if ids != list(range(len(raw))):
            raise DataError(f"{src}: model.vocab ids must be the integers 0..{len(raw) - 1}, each once")
        vocab = dict(raw)
    else:
        vocab = {t: i for i, t in enumerate(read_vocab(src, specials=()))}
    missing = [t for t in spec.special_tokens.values() if t not in vocab]
    if missing:
        declared = f" (declared in {os.path.basename(spec.config_file)})" if spec.config_file else ""
        raise DataError(f"{src}: vocabulary lacks the special token(s) {' '.join(missing)}{declared}; a BERT vocab needs "
                        f"{' '.join(spec.special_tokens[k] for k in SPECIAL_KEYS)}")
    return vocab


def tokenizer_from_spec(spec: TokenizerSpec, lowercase: bool | None = None) -> Tokenizer:
    """The BERT WordPiece tokenizer a spec describes, giving ``AutoTokenizer``'s ids.

    ``encode(a)`` / ``encode(a, b)`` add ``[CLS] A [SEP] (B [SEP])`` (the declared names) with
    token-type ids; no truncation or padding.  ``lowercase`` overrides the declared casing.
    A ``"file"`` spec gives :func:`_file_tokenizer` (``lowercase`` must then be None).
    """
    if spec.backend == "file":
        if lowercase is not None:
            raise DataError(f"{spec.vocab_source}: a {spec.model_type} tokenizer used as it is; its own normalizer "
                            "decides the casing (drop the lower-casing option)")
        return _file_tokenizer(spec)
    vocab = spec_vocab(spec)
    names = spec.special_tokens
    lc = spec.lowercase if lowercase is None else bool(lowercase)
    if lc is None:
        lc = _guess_lowercase(sorted(vocab, key=vocab.__getitem__))
    tok = Tokenizer(WordPiece(vocab, unk_token=names["unk"], continuing_subword_prefix="##",
                              max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=spec.tokenize_chinese_chars,
                                                strip_accents=spec.strip_accents, lowercase=lc)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls, sep = names["cls"], names["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=[f"{cls}:0", "$A:0", f"{sep}:0"],
        pair=[f"{cls}:0", "$A:0", f"{sep}:0", "$B:1", f"{sep}:1"],
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    where = spec.config_file if spec.config_file and not spec.vocab_source.endswith(".json") else spec.vocab_source
    for a in sorted(spec.added_tokens, key=lambda t: t["id"]):
        at = _added_token(a)
        (tok.add_special_tokens if at.special else tok.add_tokens)([at])
        if tok.token_to_id(a["content"]) != a["id"]:
            raise DataError(f"{where}: added token {a['content']!r} is declared with id {a['id']} but gets id "
                            f"{tok.token_to_id(a['content'])}; the added tokens do not fit the vocabulary")
    have = {a["content"] for a in spec.added_tokens}
    tok.add_special_tokens([names[k] for k in SPECIAL_KEYS if names[k] not in have])
    return tok


def _added_token(a: dict) -> AddedToken:
    return AddedToken(a["content"], single_word=bool(a.get("single_word", False)), lstrip=bool(a.get("lstrip", False)),
                      rstrip=bool(a.get("rstrip", False)), normalized=bool(a.get("normalized", not a.get("special"))),
                      special=bool(a.get("special", False)))


def _file_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    """A tokenizer.json used as it is, the way ``transformers.TokenizersBackend`` (v5) /
    ``PreTrainedTokenizerFast`` (v4) set it up: the file's model, normalizer, pre-tokenizer, added
    tokens and post-processor unchanged, truncation and padding cleared (transformers clears them per
    call unless asked), tokenizer_config.json's ``added_tokens_decoder`` entries the file lacks added
    (each must get its declared id), and a declared special token that is not yet an added token made
    one (it keeps its id in the vocabulary).

    Two deliberate differences, both one-line DataErrors or documented:

    * a declared special token that is nowhere in the vocabulary is an error (transformers would
      append it as a new id that no model embedding row was trained for);
    * a file without a post-processor that frames a text with the declared cls/sep tokens gets ours,
      ``cls $A sep`` / ``cls $A sep $B sep`` (type ids 0/1, after the file's own post-processor if
      that one adds no tokens, e.g. ByteLevel offsets): the pipeline's packed rows and fine-tuning
      inputs are framed that way.  transformers would then encode without cls/sep.  A post-processor
      that adds other tokens (e.g. ``<s> ... </s>`` with cls_token ``[CLS]``) is an error.
    """
    src = spec.vocab_source
    try:
        tok = Tokenizer.from_file(src)
    except Exception as e:  # noqa: BLE001 - the Rust loader's exceptions
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{src}: the tokenizers library cannot load this file ({msg}); expected a tokenizer.json "
                        "saved by tokenizers/transformers") from None
    tok.no_truncation()
    tok.no_padding()
    have = {t.content for t in tok.get_added_tokens_decoder().values()}
    where = spec.config_file or src
    for a in sorted(spec.added_tokens, key=lambda t: t["id"]):
        if a["content"] in have:
            continue
        at = _added_token(a)
        (tok.add_special_tokens if at.special else tok.add_tokens)([at])
        if tok.token_to_id(a["content"]) != a["id"]:
            raise DataError(f"{where}: added token {a['content']!r} is declared with id {a['id']} but gets id "
                            f"{tok.token_to_id(a['content'])} in {os.path.basename(src)}; the added tokens do not fit "
                            "the vocabulary")
        have.add(a["content"])
    names = spec.special_tokens
    declared = f"declared in {os.path.basename(spec.config_file)}" if spec.config_file else "the default name"
    missing = [f"{k}_token {names[k]!r}" for k in SPECIAL_KEYS if tok.token_to_id(names[k]) is None]
    if missing:
        raise DataError(f"{src}: no id for the special token(s) {', '.join(missing)} ({declared}); every one of "
                        f"pad/unk/cls/sep/mask must be in the tokenizer (transformers would append a new, untrained id)")
    tok.add_special_tokens([AddedToken(names[k], special=True) for k in SPECIAL_KEYS if names[k] not in have])
    cls, sep = names["cls"], names["sep"]
    cls_id, sep_id = tok.token_to_id(cls), tok.token_to_id(sep)
    probe = "a b"
    plain = tok.encode(probe, add_special_tokens=False).ids
    framed = tok.encode(probe).ids
    if framed != [cls_id, *plain, sep_id]:
        pp = tok.post_processor
        if pp is not None and pp.num_special_tokens_to_add(False) > 0:
            raise DataError(f"{src}: post_processor frames a text as {tok.id_to_token(framed[0])!r} ... "
                            f"{tok.id_to_token(framed[-1])!r}, not with the declared cls_token {cls!r} and sep_token "
                            f"{sep!r}; expected [CLS] text [SEP] framing (the packed rows use it)")
        ours = processors.TemplateProcessing(
            single=[f"{cls}:0", "$A:0", f"{sep}:0"], pair=[f"{cls}:0", "$A:0", f"{sep}:0", "$B:1", f"{sep}:1"],
            special_tokens=[(cls, cls_id), (sep, sep_id)])
        tok.post_processor = ours if pp is None else processors.Sequence([pp, ours])
    return tok


def load_tokenizer(path: str | os.PathLike, lowercase: bool | None = None) -> Tokenizer:
    """The one tokenizer-loading path: prepare, prepared data, fine-tuning and export all use it.

    ``path``: a Hugging Face tokenizer/model directory, a prepared-data directory, or a
    tokenizer.json / vocab.txt file (its directory's tokenizer_config.json and
    special_tokens_map.json apply).  The ids are ``transformers.AutoTokenizer.from_pretrained``'s:
    tokenizer.json is preferred over vocab.txt, tokenizer_config.json's ``do_lower_case``,
    ``strip_accents``, ``tokenize_chinese_chars`` and special-token names are honoured, words over
    100 characters become the unknown token.  A bare vocab.txt (no config) gets its casing guessed
    from the vocabulary (no upper-case tokens -> uncased); ``lowercase`` overrides the casing.

    The result adds ``[CLS]``/``[SEP]`` (and token-type ids for pairs) in ``encode``; use
    ``add_special_tokens=False`` for raw pieces.  DataError (one line, naming the file) otherwise.
    """
    return tokenizer_from_spec(read_tokenizer_spec(path), lowercase=lowercase)


def special_ids(tok: Tokenizer, names: dict[str, str] | None = None) -> dict[str, int]:
    """{"pad","unk","cls","sep","mask"} -> id, looked up by ``names`` (a tokenizer's declared special
    tokens, e.g. ``TokenizerSpec.special_tokens``; default [PAD] [UNK] [CLS] [SEP] [MASK])."""
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


def has_tokenizer_files(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a tokenizer (a tokenizer.json or a vocab.txt)."""
    return any(os.path.isfile(os.path.join(os.fspath(directory), n)) for n in ("tokenizer.json", "vocab.txt"))


def tokenizer_vocab_sha256(path: str | os.PathLike) -> str:
    """The vocabulary hash that prepared data records (``meta["vocab_hash"]``) for the tokenizer at ``path``.

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
    """Write a tokenizer_config.json describing ``spec`` into ``directory`` (for a source that has none,
    so that the copy reloads as the same tokenizer, for transformers and for us): BertTokenizer with
    the spec's casing, or PreTrainedTokenizerFast for a tokenizer.json used as it is; the special-token
    names and ``model_max_length`` either way.  -> the file's path."""
    if spec.backend == "file":
        cfg: dict = {"tokenizer_class": "PreTrainedTokenizerFast"}
    else:
        cfg = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(spec.lowercase),
               "strip_accents": spec.strip_accents, "tokenize_chinese_chars": spec.tokenize_chinese_chars}
    cfg.update({f"{k}_token": v for k, v in spec.special_tokens.items()})
    if spec.model_max_length is not None:
        cfg["model_max_length"] = spec.model_max_length
    out = os.path.join(os.fspath(directory), "tokenizer_config.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return out
