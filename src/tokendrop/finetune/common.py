"""Shared helpers of the fine-tuning subpackage: the error type, atomic file writes, tokenizers."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class FinetuneError(ValueError):
    """A fine-tuning / evaluation problem, with a one-line message (file and line where it applies)."""


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``.

    A reader never sees a half-written file: either the old content (or nothing) or the new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, Path):
        return str(o)
    try:  # numpy / torch scalars
        return o.item()
    except AttributeError:
        pass
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: str | os.PathLike) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise FinetuneError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None


# ----------------------------------------------------------------------------------------------
# tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _vocab_file(path: Path) -> Path | None:
    if path.is_file() and path.name.endswith(".txt"):
        return path
    for cand in (path / "vocab.txt", path / "tokenizer" / "vocab.txt"):
        if cand.is_file():
            return cand
    return None


def _lowercase_for(path: Path, vocab: Path | None) -> bool:
    """``do_lower_case`` from a Hugging Face ``tokenizer_config.json`` next to the vocab, else a guess
    from the vocabulary: an uncased WordPiece vocab has (almost) no upper-case pieces."""
    dirs = [path] if path.is_dir() else [path.parent]
    if vocab is not None:
        dirs.append(vocab.parent)
    for d in dirs:
        tc = d / "tokenizer_config.json"
        if tc.is_file():
            try:
                conf = json.loads(tc.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                conf = {}
            if isinstance(conf.get("do_lower_case"), bool):
                return conf["do_lower_case"]
    if vocab is None:
        return True
    upper = total = 0
    with open(vocab, encoding="utf-8") as f:
        for line in f:
            tok = line.rstrip("\n")
            if not tok or (tok.startswith("[") and tok.endswith("]")):
                continue
            total += 1
            if any(c.isupper() for c in tok):
                upper += 1
    return total == 0 or upper / total < 0.01


def _wordpiece_from_vocab(vocab: Path, lowercase: bool):
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece.from_file(str(vocab), unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def load_finetune_tokenizer(path: str | os.PathLike | None, fallback: str | os.PathLike | None = None):
    """A ``tokenizers.Tokenizer`` for fine-tuning, set up for BERT inputs.

    ``path`` is the tokenizer location reported by ``load_pretrained`` (a dir with vocab.txt or
    tokenizer.json), ``fallback`` a second place to look (the model dir).  The project's
    ``tokendrop.data.tokenizer.load_tokenizer`` is used where it exists; the result is always a private
    copy with truncation/padding disabled and a BERT ``[CLS] A [SEP] (B [SEP])`` post-processor, so
    the caller's tokenizer object is never mutated.
    """
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tried = [Path(p) for p in (path, fallback) if p]
    tok = None
    for p in tried:
        if not p.exists():
            continue
        try:
            from tokendrop.data.tokenizer import load_tokenizer  # type: ignore
        except ImportError:
            load_tokenizer = None
        if load_tokenizer is not None:
            try:
                tok = load_tokenizer(p)
            except Exception:  # noqa: BLE001 - fall back to our own reader below
                tok = None
        if tok is None:
            vocab = _vocab_file(p)
            if vocab is not None:
                tok = _wordpiece_from_vocab(vocab, _lowercase_for(p, vocab))
            elif p.is_dir() and (p / "tokenizer.json").is_file():
                tok = Tokenizer.from_file(str(p / "tokenizer.json"))
        if tok is not None:
            break
    if tok is None:
        where = ", ".join(str(p) for p in tried) or "(no path)"
        raise FinetuneError(f"no tokenizer found (looked for vocab.txt / tokenizer.json in {where})")
    tok = Tokenizer.from_str(tok.to_str())  # private copy
    tok.no_truncation()
    tok.no_padding()
    ids = {}
    for t in ("[CLS]", "[SEP]", "[PAD]"):
        i = tok.token_to_id(t)
        if i is None:
            raise FinetuneError(f"tokenizer vocabulary has no {t} token")
        ids[t] = i
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A:0 [SEP]:0",
        pair="[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return tok
