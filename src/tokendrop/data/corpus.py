"""Corpus readers: documents (plain strings) from text, JSONL, Wikipedia XML dumps and HF datasets.

Formats (picked by file name; compression by magic bytes, so a gzip file named ``.txt`` works too):

* BERT text (``.txt``, ``.txt.gz``, ``.txt.bz2``, anything else given explicitly): UTF-8, one
  sentence or paragraph per line, one document per block, blocks separated by blank lines.
* JSONL (``.jsonl``, ``.ndjson``, optionally ``.gz``/``.bz2``): one JSON object per line, the document
  text in ``text_field`` (default ``"text"``).
* Wikipedia XML dumps (``.xml``, ``.xml.bz2``, ``.xml.gz``): MediaWiki export files, streamed with
  ``iterparse`` (constant memory); redirects and pages outside namespace 0 are skipped and the wiki
  markup is removed by :func:`clean_wikitext`.
* ``hf:NAME[:CONFIG][@SPLIT]`` or ``hf:LOCAL_DIR[@SPLIT]``: a Hugging Face ``datasets`` dataset
  (streamed when loaded by name; ``load_from_disk`` for a local directory); needs ``datasets``.

Directories are searched recursively for files with the extensions above (hidden files skipped);
glob patterns (``*``, ``?``, ``[``, ``**``) are expanded.  Everything is sorted so the document
order is deterministic.  Problems raise :class:`tokendrop.data.DataError`.

Documents are returned as one string, lines joined with ``"\\n"``; they never contain a blank line.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import html
import io
import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from . import DataError

TEXT, JSONL, WIKI, HF = "text", "jsonl", "wiki", "hf"

_TEXT_EXT = (".txt", ".text")
_JSONL_EXT = (".jsonl", ".ndjson")
_WIKI_EXT = (".xml",)
_COMPRESS_EXT = ("", ".gz", ".bz2")


@dataclass(frozen=True)
class Source:
    """One input: a file (or an ``hf:`` spec) and its format."""

    path: str
    fmt: str  # text | jsonl | wiki | hf
    size: int = 0  # bytes on disk (0 for hf)


def _strip_compress_ext(name: str) -> str:
    low = name.lower()
    for ext in (".gz", ".bz2"):
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def format_of(path: str) -> str:
    """The reader used for ``path`` (by its name; unknown extensions are read as BERT text)."""
    base = _strip_compress_ext(os.path.basename(path))
    if base.endswith(_JSONL_EXT):
        return JSONL
    if base.endswith(_WIKI_EXT):
        return WIKI
    return TEXT


def _known_ext(path: str) -> bool:
    base = _strip_compress_ext(os.path.basename(path))
    return base.endswith(_TEXT_EXT + _JSONL_EXT + _WIKI_EXT)


def _has_glob(p: str) -> bool:
    return any(c in p for c in "*?[")


def resolve_corpus(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Source]:
    """Expand files, directories and globs into an ordered list of :class:`Source` (no duplicates).

    Raises DataError for a missing path, a glob or directory without corpus files, or a file that
    is unreadable, not valid gzip/bz2, or binary (checked on its first 64 KiB).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise DataError("corpus: no input paths given; expected one or more files, directories or globs")
    out: list[Source] = []
    seen: set[str] = set()

    def add(p: str, fmt: str, size: int) -> None:
        key = p if fmt == HF else os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(Source(p, fmt, size))

    for p in paths:
        if p.startswith("hf:"):
            add(p, HF, 0)
            continue
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(root, f) for f in files if not f.startswith(".") and _known_ext(f)]
            if not found:
                raise DataError(
                    f"{p}: directory contains no corpus files; expected *.txt, *.txt.gz, *.jsonl[.gz] or *.xml[.bz2]"
                )
            for f in sorted(found):
                add(f, format_of(f), os.path.getsize(f))
        elif os.path.isfile(p):
            add(p, format_of(p), os.path.getsize(p))
        elif _has_glob(p):
            matches = sorted(m for m in glob.glob(p, recursive=True) if os.path.isfile(m))
            if not matches:
                raise DataError(f"{p}: glob pattern matches no files")
            for f in matches:
                add(f, format_of(f), os.path.getsize(f))
        elif os.path.lexists(p):
            raise DataError(f"{p}: not a regular file or directory")
        else:
            raise DataError(f"{p}: no such file or directory")
    for s in out:
        if s.fmt != HF:
            _sniff(s)
    return out


# ----------------------------------------------------------------------------------------------
# opening files


def _open_raw(path: str) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """(decompressed binary stream, raw file) -- compression detected from the magic bytes."""
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open: {e.strerror}") from None
    magic = raw.read(3)
    raw.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    if magic == b"BZh":
        return bz2.BZ2File(raw, mode="rb"), raw
    return raw, raw


def _sniff(src: Source) -> None:
    """Fail early on files that cannot be corpus text: unreadable, broken compression, binary."""
    f, raw = _open_raw(src.path)
    try:
        head = f.read(65536)
    except (OSError, EOFError) as e:
        raise DataError(f"{src.path}: cannot decompress ({e}); expected a valid gzip/bz2 file or plain text") from None
    finally:
        raw.close()
    if b"\x00" in head:
        raise DataError(f"{src.path}: contains NUL bytes, looks like a binary file; expected UTF-8 text")
    # invalid UTF-8 at the very start is reported here; later errors during reading (with a line number)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a multi-byte character cut by the 64 KiB window
            ctrl = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32)
            what = "looks like a binary file" if ctrl > 8 else f"invalid UTF-8 at byte {e.start}"
            raise DataError(f"{src.path}: {what}; expected UTF-8 text") from None


def _decode(bline: bytes, path: str, lineno: int) -> str:
    if b"\x00" in bline:
        raise DataError(f"{path}: line {lineno}: contains NUL bytes, looks like a binary file; expected UTF-8 text")
    try:
        return bline.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: line {lineno}: invalid UTF-8 at column {e.start + 1}; expected UTF-8 text") from None


def _lines(path: str, progress: Callable[[int], None] | None, stats: dict | None = None) -> Iterator[tuple[int, str]]:
    """(line number, decoded line without trailing newline) with progress in raw (on-disk) bytes.

    ``stats["input_bytes"]`` is increased by the decompressed size read.
    """
    f, raw = _open_raw(path)
    last = 0
    nbytes = 0
    try:
        lineno = 0
        while True:
            try:
                bline = f.readline()
            except (OSError, EOFError) as e:
                raise DataError(f"{path}: cannot decompress after line {lineno} ({e}); the file is truncated or corrupt") from None
            if not bline:
                break
            lineno += 1
            nbytes += len(bline)
            line = _decode(bline, path, lineno)
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if progress is not None and (lineno & 1023) == 0:
                pos = raw.tell()
                progress(pos - last)
                last = pos
            yield lineno, line.rstrip("\r\n")
        if progress is not None:
            progress(os.path.getsize(path) - last)
    finally:
        if stats is not None:
            stats["input_bytes"] = stats.get("input_bytes", 0) + nbytes
        f.close()
        raw.close()


# ----------------------------------------------------------------------------------------------
# readers (raw documents; wiki pages still need clean_wikitext)


def read_text(path: str, progress: Callable[[int], None] | None = None, stats: dict | None = None) -> Iterator[str]:
    """BERT format: one document per block of non-blank lines."""
    lines: list[str] = []
    for _, line in _lines(path, progress, stats):
        line = line.strip()
        if line:
            lines.append(line)
        elif lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def read_jsonl(
    path: str, text_field: str = "text", progress: Callable[[int], None] | None = None, stats: dict | None = None
) -> Iterator[str]:
    """One JSON object per line; the document is ``obj[text_field]`` (blank lines inside collapsed)."""
    for lineno, line in _lines(path, progress, stats):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {lineno}: invalid JSON ({e.msg}); expected one JSON object per line") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: line {lineno}: expected a JSON object, got {type(obj).__name__}")
        if text_field not in obj:
            raise DataError(f"{path}: line {lineno}: no field {text_field!r}; expected the text field {text_field!r} (set text_field)")
        text = obj[text_field]
        if not isinstance(text, str):
            raise DataError(f"{path}: line {lineno}: field {text_field!r} is {type(text).__name__}; expected a string")
        yield _normalise_block(text)


def _normalise_block(text: str) -> str:
    return "\n".join(s for s in (ln.strip() for ln in text.splitlines()) if s)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def read_wiki_pages(
    path: str, progress: Callable[[int], None] | None = None, stats: dict | None = None
) -> Iterator[tuple[str, str]]:
    """(title, raw wikitext) of every article: namespace 0, not a redirect.  Streamed, constant memory."""
    f, raw = _open_raw(path)
    last = 0
    try:
        ctx = ET.iterparse(f, events=("start", "end"))
        root = None
        title = ns = text = None
        redirect = False
        for event, elem in ctx:
            if event == "start":
                if root is None:
                    root = elem
                    if _local(elem.tag) != "mediawiki":
                        raise DataError(f"{path}: root element <{_local(elem.tag)}>; expected a MediaWiki XML export (<mediawiki>)")
                continue
            tag = _local(elem.tag)
            if tag == "title":
                title = elem.text or ""
            elif tag == "ns":
                ns = (elem.text or "").strip()
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                text = elem.text or ""
            elif tag == "page":
                if ns in (None, "0") and not redirect and text is not None and not _REDIRECT.match(text):
                    yield title or "", text
                title = ns = text = None
                redirect = False
                root.clear()  # drop finished pages: constant memory
                if progress is not None:
                    pos = raw.tell()
                    progress(pos - last)
                    last = pos
        if progress is not None:
            progress(os.path.getsize(path) - last)
    except ET.ParseError as e:
        raise DataError(f"{path}: invalid XML ({e}); expected a MediaWiki XML dump") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: invalid UTF-8 ({e.reason}); expected a UTF-8 MediaWiki XML dump") from None
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot decompress ({e}); the file is truncated or corrupt") from None
    finally:
        if stats is not None:
            try:
                stats["input_bytes"] = stats.get("input_bytes", 0) + f.tell()
            except (OSError, ValueError):
                pass
        f.close()
        raw.close()


def read_hf(spec: str, text_field: str = "text") -> Iterator[str]:
    """``hf:NAME[:CONFIG][@SPLIT]`` (streamed from the Hub) or ``hf:LOCAL_DIR[@SPLIT]`` (load_from_disk)."""
    try:
        import datasets  # type: ignore
    except ImportError:
        raise DataError(f"{spec}: the Hugging Face 'datasets' package is not installed; pip install 'tokendrop[online]'") from None
    body = spec[3:]
    split = None
    if "@" in body:
        body, split = body.rsplit("@", 1)
    if os.path.isdir(body):
        ds = datasets.load_from_disk(body)
        if isinstance(ds, datasets.DatasetDict):
            split = split or "train"
            if split not in ds:
                raise DataError(f"{spec}: no split {split!r}; expected one of {', '.join(ds)}")
            ds = ds[split]
    else:
        name, config = (body.split(":", 1) + [None])[:2] if ":" in body else (body, None)
        try:
            ds = datasets.load_dataset(name, config, split=split or "train", streaming=True)
        except Exception as e:  # network, unknown name, ...
            raise DataError(f"{spec}: cannot load the dataset ({type(e).__name__}: {e})") from None
    cols = getattr(ds, "column_names", None)
    if cols is not None and text_field not in cols:
        raise DataError(f"{spec}: no column {text_field!r}; expected the text field among {', '.join(cols)} (set text_field)")
    for i, ex in enumerate(ds):
        text = ex.get(text_field)
        if not isinstance(text, str):
            raise DataError(f"{spec}: row {i}: field {text_field!r} is {type(text).__name__}; expected a string")
        yield _normalise_block(text)


def iter_raw(
    src: Source, text_field: str = "text", progress: Callable[[int], None] | None = None, stats: dict | None = None
) -> Iterator[str]:
    """Raw documents of one source (wiki pages still in wikitext: pass them through :func:`finish`)."""
    if src.fmt == TEXT:
        return read_text(src.path, progress, stats)
    if src.fmt == JSONL:
        return read_jsonl(src.path, text_field, progress, stats)
    if src.fmt == WIKI:
        return (t for _, t in read_wiki_pages(src.path, progress, stats))
    if src.fmt == HF:
        return read_hf(src.path, text_field)
    raise DataError(f"{src.path}: unknown format {src.fmt!r}")


def finish(fmt: str, raw: str) -> str:
    """Turn a raw document of format ``fmt`` into clean text (wiki markup removed for ``wiki``)."""
    return clean_wikitext(raw) if fmt == WIKI else raw


def iter_documents(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    text_field: str = "text",
    skip_empty: bool = True,
) -> Iterator[str]:
    """Clean documents of all inputs, in order (files, directories, globs, ``hf:`` specs)."""
    for src in resolve_corpus(paths):
        for raw in iter_raw(src, text_field):
            doc = finish(src.fmt, raw)
            if doc or not skip_empty:
                yield doc


# ----------------------------------------------------------------------------------------------
# wiki markup

_REDIRECT = re.compile(r"\s*#\s*redirect", re.I)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# elements dropped with their content (references, math, code listings, galleries, ...)
_DROP_ELEMS = (
    "ref|references|math|chem|ce|gallery|timeline|syntaxhighlight|source|pre|score|imagemap|graph|"
    "mapframe|maplink|templatedata|hiero|inputbox|categorytree|noinclude|table"
)
_SELF_CLOSING = re.compile(rf"<\s*(?:{_DROP_ELEMS})\b[^<>]*/\s*>", re.I)
_PAIRED = re.compile(rf"<\s*({_DROP_ELEMS})\b[^<>]*>.*?<\s*/\s*\1\s*>", re.I | re.S)
_BR = re.compile(r"<\s*br\s*/?\s*>|<\s*/?\s*(?:p|div|li|ul|ol|hr|blockquote|center|poem)\b[^<>]*>", re.I)
_ANY_TAG = re.compile(r"<\s*/?\s*[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?\s*>")
_INNER_TEMPLATE = re.compile(r"\{\{([^{}]*)\}\}", re.S)
_EXT_LINK = re.compile(r"\[(?:https?:|ftp:|mailto:|news:|irc:|//)[^\s\]]*(?:\s+([^\]]*))?\]", re.I)
_BARE_URL = re.compile(r"\b(?:https?|ftp)://\S+", re.I)
# innermost [[...]]: content without "[[" / "]]"; single-bracket groups such as "[1900]" are atoms,
# so "[[File:x|caption [1900]]]" closes at the right place (alternatives are disjoint: no backtracking blow-up)
_INNER_LINK = re.compile(r"\[\[((?:[^\[\]]|\[[^\[\]]*\]|\[(?!\[|[^\[\]]*\])|\](?!\]))*)\]\]")
_BOLD_ITALIC = re.compile(r"'{2,5}")
_MAGIC = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^\s*(={1,6})\s*(.*?)\s*\1\s*$")
_LIST = re.compile(r"^[*#:;]+\s*")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?)\]])")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:\-–—]\s*)*\)|\[\s*\]")
_PAREN_LEAD_PUNCT = re.compile(r"\(\s*[,;:]\s*")
_DUP_PUNCT = re.compile(r"([,;])(?:\s*[,;])+")
_LANG_PREFIX = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]+)*:")
_DROP_NS = ("file", "image", "media", "category")
_VISIBLE_INTERWIKI = {
    "w", "wikipedia", "wikt", "wiktionary", "s", "wikisource", "b", "wikibooks", "q", "wikiquote",
    "n", "wikinews", "v", "wikiversity", "voy", "wikivoyage", "species", "wikispecies", "commons",
    "c", "meta", "m", "mw", "d", "wikidata",
}
_SKIP_SECTIONS = {
    "see also", "references", "external links", "further reading", "notes", "bibliography", "sources",
    "citations", "notes and references", "references and notes", "footnotes", "works cited",
    "literature", "external link", "reference", "note", "general references", "cited sources",
}
# inline templates whose text is part of the sentence; every other template is removed
_INLINE_TEMPLATES = {
    "nowrap", "nobr", "small", "smaller", "big", "larger", "sic", "lang", "transl", "transliteration",
    "nihongo", "ill", "interlanguage link", "interlanguage link multi", "not a typo", "abbr", "em",
    "strong", "mvar", "math", "var", "keypress", "samp", "as written",
}
_DASH_TEMPLATES = {"ndash": "–", "mdash": "—", "snd": " – ", "spaced ndash": " – ", "spnd": " – ",
                   "'": "'", "\"'": "\"'", "'\"": "'\"", "`": "'", "!": "|", "=": "=", "nbsp": " "}


def _expand_template(m: re.Match) -> str:
    body = m.group(1)
    parts = [p.strip() for p in body.split("|")]
    name = parts[0].lower().replace("_", " ").strip()
    if name in _DASH_TEMPLATES:
        return _DASH_TEMPLATES[name]
    pos = [p for p in parts[1:] if "=" not in p]
    if name in ("convert", "cvt") and len(pos) >= 2:
        # {{convert|5|km|mi}} -> "5 km"; {{convert|5|to|7|km}} -> "5 to 7 km"
        if len(pos) >= 4 and pos[1] in ("to", "-", "and", "or", "by", "x", "×", "–"):
            return f"{pos[0]} {pos[1]} {pos[2]} {pos[3]}"
        return f"{pos[0]} {pos[1]}"
    if name in _INLINE_TEMPLATES and pos:
        if name in ("lang", "transl", "transliteration"):
            return pos[-1]
        if name == "nihongo":
            return pos[0]
        return pos[0]
    return ""


def _strip_templates(text: str) -> str:
    for _ in range(50):  # innermost first; nesting depth bounds the number of passes
        new = _INNER_TEMPLATE.sub(_expand_template, text)
        if new == text:
            break
        text = new
    if "{{" in text:  # unbalanced or with stray single braces: brace-counting fallback
        text = _strip_balanced(text, "{{", "}}")
    return text


def _strip_balanced(text: str, open_: str, close_: str) -> str:
    """Remove ``open_ ... close_`` spans, nesting-aware, in one pass.

    Unmatched openers and stray closers are dropped alone (the text around them is kept).
    """
    tok = re.compile(re.escape(open_) + "|" + re.escape(close_))
    stack: list[int] = []
    cuts: list[tuple[int, int]] = []
    for m in tok.finditer(text):
        if m.group() == open_:
            stack.append(m.start())
        elif stack:
            cuts.append((stack.pop(), m.end()))  # nested pairs are swallowed by the merge below
        else:
            cuts.append((m.start(), m.end()))  # stray closer
    # openers never closed: drop them alone, and keep what lies between them
    cuts += [(start, start + len(open_)) for start in stack]
    cuts.sort()
    out = []
    pos = 0
    for a, b in cuts:
        if b <= pos:
            continue
        out.append(text[pos : max(a, pos)])
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _strip_tables(lines: list[str]) -> list[str]:
    out = []
    depth = 0
    for line in lines:
        s = line.lstrip(" :")
        if s.startswith("{|"):
            depth += 1
            continue
        if depth:
            if s.startswith("|}"):
                depth -= 1
            continue
        out.append(line)
    return out


def _link(m: re.Match) -> str:
    inner = m.group(1)
    target, sep, label = inner.partition("|")
    target = target.strip()
    visible = target.startswith(":")
    t = target.lstrip(":").strip()
    low = t.lower()
    prefix = low.split(":", 1)[0].strip() if ":" in low else ""
    if not visible:
        if prefix in _DROP_NS:
            return ""
        if prefix and prefix not in _VISIBLE_INTERWIKI and _LANG_PREFIX.match(low) and not sep:
            return ""  # interlanguage link
    if sep:
        label = label.strip()
        if label:
            # file-style options never reach here (files are dropped); a label with more pipes keeps the last part
            return label.rsplit("|", 1)[-1] if prefix in _DROP_NS else label
        # pipe trick: [[Paris, Texas|]] -> Paris; [[Help:Foo (bar)|]] -> Foo
        t = t.split(":", 1)[1] if prefix else t
        return re.sub(r"\s*\(.*\)\s*$", "", t).split(",")[0].strip()
    if "#" in t:
        page, _, section = t.partition("#")
        return page.strip() or section.strip()
    return t


def _strip_links(text: str) -> str:
    text = _EXT_LINK.sub(lambda m: m.group(1) or "", text)
    for _ in range(20):
        new = _INNER_LINK.sub(_link, text)
        if new == text:
            break
        text = new
    return text.replace("[[", "").replace("]]", "")


def clean_wikitext(text: str) -> str:
    """Wikitext -> plain prose paragraphs, one per line (no blank lines).

    Removes HTML comments, references and other non-prose elements (math, code, galleries, ...),
    templates (nested; a few inline ones such as ``{{convert}}``, ``{{lang}}``, ``{{nowrap}}`` keep
    their text), tables (nested ``{| ... |}``), file/image/category and interlanguage links,
    external-link URLs, bold/italic quotes, magic words, headings, list markers, and whole
    "See also"/"References"/"External links"/... sections; ``[[a|b]]`` -> ``b``, ``[[a]]`` -> ``a``;
    HTML entities decoded.
    """
    if _REDIRECT.match(text):
        return ""
    text = _COMMENT.sub("", text)
    text = _SELF_CLOSING.sub("", text)
    text = _PAIRED.sub("", text)
    text = re.sub(r"<\s*(?:ref|references)\b[^<>]*>", "", text, flags=re.I)  # unclosed leftovers
    text = _BR.sub(" ", text)
    text = _strip_templates(text)
    lines = _strip_tables(text.split("\n"))
    text = "\n".join(lines)
    text = _strip_links(text)
    text = _ANY_TAG.sub("", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _MAGIC.sub("", text)
    text = _BARE_URL.sub("", text)
    text = html.unescape(text)
    text = text.replace("{{", "").replace("}}", "")

    out: list[str] = []
    skip_level = 0  # inside a skipped section of this heading level (0 = not skipping)
    for line in text.split("\n"):
        h = _HEADING.match(line)
        if h:
            level = len(h.group(1))
            if skip_level and level > skip_level:
                continue
            skip_level = level if h.group(2).strip().lower().rstrip(":") in _SKIP_SECTIONS else 0
            continue
        if skip_level:
            continue
        s = line.strip()
        if not s or s.startswith(("|", "!", "{|", "|}", "----")):
            continue
        s = _LIST.sub("", s)
        s = _SPACES.sub(" ", s)
        s = _EMPTY_PARENS.sub("", s)
        s = _PAREN_LEAD_PUNCT.sub("(", s)
        s = _SPACE_BEFORE_PUNCT.sub(r"\1", s)
        s = _DUP_PUNCT.sub(r"\1", s)
        s = _SPACES.sub(" ", s).strip()
        if not any(c.isalpha() for c in s):
            continue
        out.append(s)
    return "\n".join(out)
