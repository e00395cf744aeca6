"""Corpus readers: documents (plain strings) from text, JSONL, Wikipedia XML dumps, Parquet, Arrow,
``datasets`` directories and HF datasets.

Formats (picked by file name; compression by magic bytes, so a gzip file named ``.txt`` works too;
gzip, bzip2 and zstandard (``.zst``, needs ``zstandard``)):

* BERT text (``.txt``, ``.txt.gz``, ``.txt.bz2``, ``.txt.zst``, anything else given explicitly):
  UTF-8, one sentence or paragraph per line, one document per block, blocks separated by blank
  lines.
* JSONL (``.jsonl``, ``.ndjson``, optionally compressed): one JSON object per line, the document
  text in ``text_field`` (default ``"text"``).
* Parquet (``.parquet``), Arrow IPC (``.arrow``) and ``datasets`` ``save_to_disk`` directories
  (``DIR`` or ``DIR@SPLIT``): the string column ``text_field`` (or a dictionary-encoded one, as
  pandas writes a categorical column), read with ``pyarrow`` (:mod:`.columnar`).
* Wikipedia XML dumps (``.xml``, ``.xml.bz2``, ``.xml.gz``): MediaWiki export files, streamed with
  ``expat`` (one page held at a time); redirects and pages outside namespace 0 are skipped and
  the wiki markup is removed by :func:`clean_wikitext`.
* ``hf:NAME[:CONFIG][@SPLIT]`` or ``hf:LOCAL_DIR[@SPLIT]``: a Hugging Face ``datasets`` dataset
  (streamed when loaded by name; ``load_from_disk`` for a local directory); needs ``datasets``.

Directories are searched recursively for files with the extensions above (hidden files skipped);
a ``save_to_disk`` directory met there is read as a dataset (not as loose Arrow files); glob
patterns (``*``, ``?``, ``[``, ``**``) are expanded.  Everything is sorted so the document
order is deterministic.  Problems raise :class:`tokendrop.data.DataError`.

Documents are returned as one string, lines joined with ``"\\n"``; they never contain a blank line.

Every reader streams.  :func:`iter_raw` reads a whole source or one work unit of it (``span``): a
byte range of an uncompressed text/JSONL file that starts and ends at a document boundary (see
:func:`split_points`), or a range of row groups / record batches of a Parquet/Arrow file.

Memory does not grow with the longest line or document: a text file is read in parts of at most
``PIECE_CHARS`` bytes, and a document longer than ``PIECE_CHARS`` characters (from any format) is
handed on in pieces of at most that many characters, each but the last a :class:`Piece` (the next
item continues the same document).  A piece ends before a single space between two non-space
characters, so WordPiece (BERT's normaliser and pre-tokeniser) gives the pieces exactly the ids of
the whole; a text with no such space in ``PIECE_CHARS`` characters is refused, naming the line.  A
JSONL line is parsed whole: one longer than ``LINE_CHARS`` characters is refused, naming the line.
A Parquet/Arrow cell longer than ``PIECE_CHARS`` bytes is decoded from pyarrow's buffer in parts of
that size (:func:`tokendrop.data.columnar.read_texts`; a Parquet page, which pyarrow decodes
whole, over ``columnar.MAX_PAGE_BYTES`` is refused before it is read), and a Wikipedia page's text
in the parts ``expat`` gives; a page is cleaned of its markup whole, so one over ``LINE_CHARS``
characters is refused, naming the page (:func:`read_wiki_pages`).
"""

from __future__ import annotations

import bz2
import codecs
import collections
import errno
import glob
import gzip
import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from tokendrop.data import columnar
from tokendrop.data.columnar import ARROW, PARQUET
from tokendrop.data.wikitext import REDIRECT, clean_wikitext
from tokendrop.errors import DataError, option
from tokendrop.runs.rundir import read_marker

TEXT, JSONL, WIKI, HF = "text", "jsonl", "wiki", "hf"

_TEXT_EXT = (".txt", ".text")
_JSONL_EXT = (".jsonl", ".ndjson")
_WIKI_EXT = (".xml",)
_COLUMNAR_EXT = {".parquet": PARQUET, ".arrow": ARROW}
_COMPRESS_EXT = (".gz", ".bz2", ".zst", ".zstd")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PIECE_CHARS = 1 << 20  # the longest part of a line read, and of a document handed to the tokenizer
LINE_CHARS = 1 << 26  # the longest text parsed whole: a JSONL line, a Wikipedia page's fields
# the format of a prepare's ``<out>.partial/plan.json`` (:mod:`.units`)
WORK_FORMAT = "tokendrop-prepare-work"


class Piece(str):
    """A part of a document longer than ``PIECE_CHARS``: the next item a reader yields continues
    the same document (the last part is a plain ``str``)."""

    __slots__ = ()


@dataclass(frozen=True)
class Source:
    """One input: a file (or an ``hf:`` spec) and its format."""

    path: str
    fmt: str  # text | jsonl | wiki | hf | parquet | arrow
    size: int = 0  # bytes on disk (0 for hf)


def _strip_compress_ext(name: str) -> str:
    low = name.lower()
    for ext in _COMPRESS_EXT:
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def format_of(path: str) -> str:
    """The reader used for ``path`` (by its name; unknown extensions are read as BERT text)."""
    low = os.path.basename(path).lower()
    for ext, fmt in _COLUMNAR_EXT.items():
        if low.endswith(ext):
            return fmt
    base = _strip_compress_ext(low)
    if base.endswith(_JSONL_EXT):
        return JSONL
    if base.endswith(_WIKI_EXT):
        return WIKI
    return TEXT


def _known_ext(path: str) -> bool:
    low = os.path.basename(path).lower()
    base = _strip_compress_ext(low)
    return base.endswith(_TEXT_EXT + _JSONL_EXT + _WIKI_EXT) or low.endswith(tuple(_COLUMNAR_EXT))


def _has_glob(p: str) -> bool:
    return any(c in p for c in "*?[")


def resolve_corpus(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    text_field: str = "text",
    notes: list[str] | None = None,
) -> list[Source]:
    """Expand files, directories, globs and ``datasets`` directories (``DIR[@SPLIT]``) into an
    ordered list of :class:`Source` (no duplicates; a ``datasets`` directory becomes its Arrow
    files).

    Raises DataError for a missing path, a glob or directory without corpus files, a file that is
    unreadable, not valid gzip/bz2/zstd, or binary (checked on its first 64 KiB), and a
    Parquet/Arrow file without a string column ``text_field`` or that pyarrow cannot read.  A
    directory's files of other formats (``.md``, ``.csv``, ``.py`` ...) are not read; ``notes``
    gets one line per directory that had such files, saying which.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise DataError(
            "corpus: no input paths given; expected one or more files, directories or globs"
        )
    out: list[Source] = []
    seen: set[str] = set()

    def add(p: str, fmt: str, size: int) -> None:
        key = p if fmt == HF else os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(Source(p, fmt, size))

    def add_files(files: Iterable[str]) -> None:
        for f in files:
            add(f, format_of(f), os.path.getsize(f))

    for p in paths:
        if p.startswith("hf:"):
            add(p, HF, 0)
        elif os.path.isdir(p):
            add_files(_walk(p, notes))
        elif os.path.isfile(p):
            add_files([p])
        elif "@" in p and os.path.isdir(p.rsplit("@", 1)[0]):
            d, split = p.rsplit("@", 1)
            add_files(columnar.datasets_files(d, split))
        elif _has_glob(p):
            matches = sorted(m for m in glob.glob(p, recursive=True) if os.path.isfile(m))
            if not matches:
                raise DataError(f"{p}: glob pattern matches no files")
            add_files(_outside_own_outputs(p, matches))
        elif os.path.lexists(p):
            raise _bad_link(p) or DataError(f"{p}: not a regular file or directory")
        else:
            raise DataError(f"{p}: no such file or directory")
    for s in out:
        if s.fmt in (PARQUET, ARROW):
            columnar.plan(s.path, s.fmt, text_field, 1 << 62)  # readable, with a string text column
        elif s.fmt != HF:
            _sniff(s)
    return out


def own_output(d: str) -> str | None:
    """What tokendrop wrote ``d`` as (its output marker's kind, ``prepared`` for a prepared
    directory from before markers, ``prepare work`` for a ``<out>.partial`` work directory), or
    None: such a directory is never read as corpus (a prepared directory's vocab.txt, a run's
    metrics.jsonl ...)."""
    marker = read_marker(d)
    if marker is not None:
        return str(marker["kind"])
    for name, fmt, kind in (
        ("meta.json", "tokendrop-prepared", "prepared"),
        ("plan.json", WORK_FORMAT, "prepare work"),
    ):
        f = os.path.join(d, name)
        if os.path.isfile(f):
            try:
                with open(f, encoding="utf-8") as fh:
                    if json.load(fh).get("format") == fmt:
                        return kind
            except (OSError, ValueError, AttributeError):
                pass
    return None


def _bad_link(p: str) -> DataError | None:
    """A DataError for ``p`` when it is a symbolic link that cannot be followed (a loop, or a target
    that does not exist), else None."""
    try:
        os.stat(p)
        return None
    except OSError as e:
        if not os.path.islink(p):
            return DataError(f"{p}: cannot read ({e.strerror}); check its permissions")
        target = os.readlink(p)
        if e.errno == errno.ELOOP:
            return DataError(
                f"{p}: a symbolic link loop (-> {target}); remove the link or point it at a file"
            )
        return DataError(
            f"{p}: a dangling symbolic link (-> {target}, which does not exist); remove the link "
            "or restore its target"
        )


def _walk(top: str, notes: list[str] | None = None) -> list[str]:
    """Corpus files under ``top``, sorted; a ``save_to_disk`` directory gives its Arrow files.

    Hidden entries are skipped; so are directories tokendrop wrote (:func:`own_output`), each said
    on stderr in one line.  Linked directories are followed; a link back into a directory the walk
    is already in (a loop), a link loop and a dangling link are DataErrors naming the link.
    Files of other formats are left out: ``notes`` gets one line naming how many of each."""
    if columnar.is_datasets_dir(top):
        return columnar.datasets_files(top, None)
    kind = own_output(top)
    if kind is not None:
        raise DataError(
            f"{top}: tokendrop's own {kind} output, not a corpus; give the directory "
            "of the text files"
        )
    found: list[str] = []
    other: list[str] = []  # files of other formats, not read
    chains = {top: frozenset([os.path.realpath(top)])}  # the real directories above each one walked
    for root, dirs, files in os.walk(top, followlinks=True, onerror=_walk_error):
        keep = []
        for d in sorted(x for x in dirs if not x.startswith(".")):
            p = os.path.join(root, d)
            kind = own_output(p)
            if kind is not None:
                print(
                    f"note: {p}: skipped, tokendrop's own {kind} output (not read as corpus)",
                    file=sys.stderr,
                )
                continue
            real = os.path.realpath(p)
            if real in chains[root]:
                raise DataError(
                    f"{p}: a symbolic link to {real}, a directory this walk is already in (a "
                    "loop); remove the link"
                )
            chains[p] = chains[root] | {real}
            keep.append(d)
        dirs[:] = keep
        for f in files:
            if f.startswith("."):
                continue
            p = os.path.join(root, f)
            bad = _bad_link(p) if os.path.islink(p) else None
            # an unreadable link is an error whatever its name: it may be meant as corpus
            if bad is not None:
                raise bad
            if _known_ext(f):
                found.append(p)
            else:
                other.append(p)
    parents = {os.path.dirname(f) for f in found}
    datasets_dirs = sorted(
        {r for r in parents if columnar.is_datasets_dir(r)}
        | {
            r
            for r in map(os.path.dirname, parents)
            if os.path.isfile(os.path.join(r, "dataset_dict.json"))
        }
    )
    inside = tuple(d + os.sep for d in datasets_dirs)
    # a datasets directory is read as a dataset (its files in state.json's order), not as loose
    # Arrow files
    found = sorted(f for f in found if not f.startswith(inside))
    found += [f for d in datasets_dirs for f in columnar.datasets_files(d, None)]
    other = sorted(f for f in other if not f.startswith(inside))
    if other and notes is not None:
        kinds = collections.Counter(
            os.path.splitext(_strip_compress_ext(os.path.basename(f)))[1] or "(no extension)"
            for f in other
        )
        notes.append(
            f"{top}: {len(other)} file(s) not read as corpus, by extension: "
            + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            + f" (e.g. {other[0]}); name a file on the command line to read it as plain text"
        )
    if not found:
        raise DataError(
            f"{top}: directory contains no corpus files; expected *.txt, *.jsonl (optionally "
            ".gz/.bz2/.zst), "
            "*.xml[.bz2], *.parquet, *.arrow or a datasets save_to_disk directory"
        )
    return found


def _outside_own_outputs(pattern: str, matches: list[str]) -> list[str]:
    """The glob's matches less those inside a directory tokendrop wrote below the pattern's fixed
    leading directories (a ``**`` walks like a directory does; each skipped directory said once)."""
    parts = pattern.split(os.sep)
    fixed = os.sep.join(parts[: next(i for i, x in enumerate(parts) if _has_glob(x))])
    kinds: dict[str, str | None] = {}
    keep = []
    for m in matches:
        d, skip = os.path.dirname(m), None
        chain = []
        while d and d != fixed and len(d) > len(fixed) and d not in chain:
            chain.append(d)
            d = os.path.dirname(d)
        for d in reversed(chain):  # outermost first
            if d not in kinds:
                kinds[d] = own_output(d)
                if kinds[d] is not None:
                    print(
                        f"note: {d}: skipped, tokendrop's own {kinds[d]} output (not "
                        "read as corpus)",
                        file=sys.stderr,
                    )
            if kinds[d] is not None:
                skip = d
                break
        if skip is None:
            keep.append(m)
    if not keep:
        raise DataError(
            f"{pattern}: glob pattern matches only files inside tokendrop's own outputs; give "
            "the corpus files"
        )
    return keep


def _walk_error(e: OSError) -> None:
    raise DataError(
        f"{e.filename}: cannot list the directory ({e.strerror}); check its permissions"
    ) from None


# ----------------------------------------------------------------------------------------------
# opening files


def _open_raw(path: str) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """(decompressed binary stream, raw file) -- compression detected from the magic bytes."""
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open: {e.strerror}") from None
    magic = raw.read(4)
    raw.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    if magic[:3] == b"BZh":
        return bz2.BZ2File(raw, mode="rb"), raw
    if magic == _ZSTD_MAGIC:
        try:
            import zstandard  # type: ignore
        except ImportError:
            raw.close()
            raise DataError(
                f"{path}: zstandard-compressed, and the zstandard package is not installed: "
                "pip install zstandard"
            ) from None
        try:
            # the stream reader ends quietly at a truncated frame: refuse it first
            check_zstd_frames(raw, path)
        except BaseException:
            raw.close()
            raise
        raw.seek(0)
        reader = zstandard.ZstdDecompressor().stream_reader(
            raw, read_across_frames=True, closefd=False
        )
        return io.BufferedReader(_ZstdErrors(reader), 1 << 20), raw
    return raw, raw


_ZSTD_SKIPPABLE = 0x184D2A50  # ..0x184D2A5F: skippable frames (a 4-byte size, then that many bytes)


def check_zstd_frames(f, path: str) -> int:
    """Walk the zstandard frames of the seekable binary file ``f`` by their headers (no
    decompression): every frame must be complete -- its blocks up to the one marked last, and the
    content checksum when the frame declares one.  -> the number of frames.  DataError naming the
    frame and its byte offset for a file cut short (``zstandard``'s stream reader ends such a file
    quietly, as if it were complete) or bytes between frames that are not a frame.  A file cut
    exactly between two frames is a valid shorter file and cannot be told apart (docs/design.md)."""
    size = f.seek(0, io.SEEK_END)
    pos = frames = at = 0

    def cut(what: str) -> DataError:
        return DataError(
            f"{path}: cannot decompress: zstandard frame {frames + 1} (from byte {at}) is "
            "truncated: the file ends at byte "
            f"{size}, inside its {what}; the file is cut short: copy or compress it again"
        )

    def read(n: int, what: str) -> int:
        f.seek(pos)
        b = f.read(n)
        if len(b) < n:
            raise cut(what)
        return int.from_bytes(b, "little")

    while pos < size:
        at = pos
        magic = read(4, "magic number")
        pos += 4
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            pos += 4 + read(4, "size")
            if pos > size:
                raise cut("skippable content")
            frames += 1
            continue
        if magic != int.from_bytes(_ZSTD_MAGIC, "little"):
            raise DataError(
                f"{path}: cannot decompress: the bytes at {at} are not a zstandard frame (frame "
                f"{frames + 1}); the file is "
                "corrupt or has other data appended: compress it again"
            )
        fhd = read(1, "frame header")
        fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
        pos += (
            1
            + (0 if single else 1)
            + (0, 1, 2, 4)[dict_flag]
            + ((1 if single else 0), 2, 4, 8)[fcs_flag]
        )
        while True:  # blocks, up to the one marked last
            hdr = read(3, "headers")
            last, btype, bsize = hdr & 1, (hdr >> 1) & 3, hdr >> 3
            if btype == 3:
                raise DataError(
                    f"{path}: cannot decompress: zstandard frame {frames + 1} (at byte {at}) has a "
                    "block of reserved type at "
                    f"byte {pos}; the file is corrupt: compress it again"
                )
            pos += 3 + (1 if btype == 1 else bsize)  # an RLE block stores its one byte
            if pos > size:
                raise cut(f"block that ends at byte {pos}")
            if last:
                break
        if checksum:
            pos += 4
            if pos > size:
                raise cut("content checksum")
        frames += 1
    if frames == 0:
        raise DataError(
            f"{path}: cannot decompress: an empty zstandard file (no frame); expected "
            "compressed text"
        )
    return frames


class _ZstdErrors(io.RawIOBase):
    """A zstandard stream reader whose decompression errors are OSErrors, as gzip's and bz2's
    are."""

    def __init__(self, reader):
        self.reader = reader

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self.reader.readinto(b)
        except Exception as e:  # zstandard.ZstdError
            raise OSError(str(e) or type(e).__name__) from None

    def close(self) -> None:
        self.reader.close()
        super().close()


def is_compressed(path: str) -> bool:
    """gzip/bzip2/zstandard by the magic bytes (such a file is one work unit: it cannot be cut)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    return magic[:2] == b"\x1f\x8b" or magic[:3] == b"BZh" or magic == _ZSTD_MAGIC


# files named as a table or a JSON document: read as plain text, their syntax would be the corpus
_STRUCTURED = {
    ".json": "a JSON document (a SQuAD file, a config) would be read as one document of JSON "
    'syntax; give JSON Lines instead (.jsonl, one {"text": ...} object per line)',
    ".csv": "a CSV table would be read as plain text, commas and quotes included; write its text "
    "column to .txt or .jsonl (or Parquet) and give that",
    ".tsv": "a TSV table would be read as plain text, tabs and every column included; write its "
    "text column to .txt or .jsonl (or Parquet) and give that",
}


def _refuse_structured(path: str, head: bytes) -> None:
    """A file read as BERT text that is not: a JSON/CSV/TSV file by name, or one whose lines end in
    a lone CR (it would read as one line), refused naming the file and the fix."""
    ext = os.path.splitext(_strip_compress_ext(os.path.basename(path)))[1]
    if ext in _STRUCTURED:
        raise DataError(f"{path}: {_STRUCTURED[ext]}")
    if head.count(b"\r") > 1 and b"\n" not in head:
        raise DataError(
            f"{path}: its lines end in a lone CR (old Mac line ends), so it would read as one "
            "line; convert them to LF first, e.g. tr '\\r' '\\n' < IN > OUT"
        )


def _sniff(src: Source) -> None:
    """Fail early on files that cannot be corpus text: unreadable, broken compression, binary."""
    f, raw = _open_raw(src.path)
    try:
        head = f.read(65536)
    except (OSError, EOFError) as e:
        raise DataError(
            f"{src.path}: cannot decompress ({e}); the file is truncated or corrupt: copy or "
            "compress it again"
        ) from None
    finally:
        raw.close()
    if b"\x00" in head:
        raise DataError(
            f"{src.path}: contains NUL bytes, looks like a binary file; expected UTF-8 text"
        )
    if src.fmt == TEXT:
        _refuse_structured(src.path, head)
    # invalid UTF-8 at the very start is reported here; later errors during reading (with a line
    # number)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a multi-byte character cut by the 64 KiB window
            ctrl = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32)
            what = "looks like a binary file" if ctrl > 8 else f"invalid UTF-8 at byte {e.start}"
            raise DataError(f"{src.path}: {what}; expected UTF-8 text") from None


def _where(span: tuple[int, int] | None, lineno: int, offset: int) -> str:
    """A line's place for a message: its number when reading from the start, else its byte
    offset."""
    return f"line {lineno}" if not span or span[0] == 0 else f"byte {offset}"


def _line_parts(
    path: str,
    progress: Callable[[int], None] | None,
    stats: dict | None = None,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[int, int, str, bool]]:
    """(line number, byte offset of the line, text, last) for every line, in parts of at most
    ``PIECE_CHARS`` bytes (``last``: the part ends its line; the newline is not included), with
    progress in raw (on-disk) bytes; ``span`` = ``[start, end)``: only the lines of that byte range
    of an uncompressed file (both ends at line starts, :func:`split_points`); line numbers then
    count from the range.

    ``stats["input_bytes"]`` is increased by the decompressed size read.
    """
    f, raw = _open_raw(path)
    start, end = span if span is not None else (0, None)
    if start:
        raw.seek(start)
    seg = max(PIECE_CHARS, 4)
    last = start
    nbytes = 0
    next_report = 1 << 18  # progress every 1024 lines or 256 KiB
    try:
        lineno = 0
        offset = column = 0
        # the line being read continues (its decoder keeps a character cut between parts)
        decoder = None
        while end is None or start + nbytes < end:
            try:
                bline = f.readline(seg)
            except (OSError, EOFError) as e:
                raise DataError(
                    f"{path}: cannot decompress after line {lineno} ({e}); the file is "
                    "truncated or corrupt"
                ) from None
            if not bline:
                if decoder is not None:  # the file ended right after a full part
                    yield (
                        lineno,
                        offset,
                        _decode_part(
                            decoder, b"", True, path, _where(span, lineno, offset), column
                        ),
                        True,
                    )
                break
            if decoder is None:
                lineno += 1
                offset, column = start + nbytes, 0
                decoder = codecs.getincrementaldecoder("utf-8")()
            nbytes += len(bline)
            ends = bline.endswith(b"\n") or len(bline) < seg  # a newline, or the end of the file
            text = _decode_part(decoder, bline, ends, path, _where(span, lineno, offset), column)
            if offset == 0 and column == 0 and text.startswith("\ufeff"):
                text = text[1:]
            column += len(bline)
            if ends:
                text = text.rstrip("\r\n")
                decoder = None
            if progress is not None and ((lineno & 1023) == 0 or nbytes >= next_report):
                pos = raw.tell()
                progress(pos - last)
                last = pos
                next_report = nbytes + (1 << 18)
            yield lineno, offset, text, ends
        if progress is not None:
            progress((os.path.getsize(path) if end is None else end) - last)
    finally:
        if stats is not None:
            stats["input_bytes"] = stats.get("input_bytes", 0) + nbytes
        f.close()
        raw.close()


def _decode_part(decoder, b: bytes, final: bool, path: str, where: str, column: int) -> str:
    if b"\x00" in b:
        raise DataError(
            f"{path}: {where}: contains NUL bytes, looks like a binary file; expected UTF-8 text"
        )
    try:
        return decoder.decode(b, final)
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path}: {where}: invalid UTF-8 at column {column + e.start + 1}; expected UTF-8 text"
        ) from None


def _lines(
    path: str,
    progress: Callable[[int], None] | None,
    stats: dict | None = None,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[int, int, str]]:
    """(line number, byte offset, decoded line without trailing newline), as :func:`_line_parts`
    reads them; a line longer than ``LINE_CHARS`` characters is refused (DataError naming it)."""
    parts: list[str] = []
    size = 0
    for lineno, offset, text, last in _line_parts(path, progress, stats, span):
        parts.append(text)
        size += len(text)
        if size > LINE_CHARS:
            raise DataError(
                f"{path}: {_where(span, lineno, offset)}: longer than {LINE_CHARS:,} characters, "
                "the limit for a line that is parsed whole; split its document over several lines"
            )
        if last:
            yield lineno, offset, "".join(parts)
            parts, size = [], 0


def _cut(buf: str, limit: int) -> int:
    """The index of the last single space or line break between two non-space characters of
    ``buf`` at or before ``limit`` (the first character of the next piece), or 0 when there is
    none (a document of one word per line is cut at its line breaks)."""
    best = 0
    for sep in (" ", "\n"):
        i = buf.rfind(sep, 1, min(limit, len(buf) - 2) + 1)
        while i > 0 and (buf[i - 1].isspace() or buf[i + 1].isspace()):
            i = buf.rfind(sep, 1, i)
        best = max(best, i)
    return best


class _Pieces:
    """The document being read, handed on in pieces of at most ``PIECE_CHARS`` characters."""

    def __init__(self, path: str):
        self.path = path
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str, where: str) -> Iterator[str]:
        """Append ``text``; yield the pieces (:class:`Piece`) that are complete."""
        self.parts.append(text)
        self.size += len(text)
        while self.size > PIECE_CHARS:
            buf = "".join(self.parts)
            cut = _cut(buf, PIECE_CHARS)
            if not cut:
                raise DataError(
                    f"{self.path}: {where}: {PIECE_CHARS:,} characters without a single space "
                    "or line break between two words; a document is tokenized in pieces of at "
                    f"most {PIECE_CHARS:,} characters cut there: "
                    "break the text with spaces or newlines"
                )
            yield Piece(buf[:cut])
            self.parts, self.size = [buf[cut:]], len(buf) - cut

    def end(self) -> Iterator[str]:
        """Yield the rest of the document (a plain ``str``), if any; start the next one."""
        if self.parts:
            yield "".join(self.parts)
        self.parts, self.size = [], 0

    def __bool__(self) -> bool:
        return bool(self.parts)


def _in_pieces(doc: str, path: str, where: str) -> Iterator[str]:
    """``doc`` itself, or its pieces when it is longer than ``PIECE_CHARS`` characters."""
    if len(doc) <= PIECE_CHARS:
        yield doc
        return
    pieces = _Pieces(path)
    yield from pieces.add(doc, where)
    yield from pieces.end()


def _line_end(f) -> tuple[int, bool]:
    """Read to the end of the current line of the binary file ``f`` in bounded parts: (bytes read,
    the line is blank: ASCII whitespace only)."""
    n, blank = 0, True
    while True:
        b = f.readline(max(PIECE_CHARS, 4))
        n += len(b)
        blank = blank and not b.strip()
        if not b or b.endswith(b"\n"):
            return n, blank


def split_points(path: str, fmt: str, unit_bytes: int) -> list[int]:
    """Byte offsets that cut an uncompressed text/JSONL file into work units of about
    ``unit_bytes``, each at a document boundary, so the units read one after the other give exactly
    the documents of the whole file: for JSONL the start of a line, for text the start of the line
    after a blank line (one of ASCII whitespace only; a line blank only by Unicode whitespace is not
    taken as a cut). Reads only from each target offset to the next boundary."""
    size = os.path.getsize(path)
    cuts: list[int] = []
    target = unit_bytes
    with open(path, "rb") as f:
        while target < size:
            f.seek(target - 1)
            # the start of the first line beginning at or after target
            pos = target - 1 + _line_end(f)[0]
            while fmt == TEXT and pos < size:
                n, blank = _line_end(f)
                pos += n
                if blank:  # a blank line ends a document
                    break
            if pos >= size:
                break
            cuts.append(pos)
            target = pos + unit_bytes
    return cuts


# ----------------------------------------------------------------------------------------------
# readers (raw documents; wiki pages still need clean_wikitext)


def read_text(
    path: str,
    progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
    span: tuple[int, int] | None = None,
) -> Iterator[str]:
    """BERT format: one document per block of non-blank lines (each line stripped, joined with
    ``"\\n"``); a document longer than ``PIECE_CHARS`` in pieces (module doc)."""
    lines = (
        (text, last, (lineno, offset))
        for lineno, offset, text, last in _line_parts(path, progress, stats, span)
    )
    yield from _joined_lines(lines, _Pieces(path), lambda at: _where(span, *at), blank_ends=True)


def _joined_lines(
    lines: Iterable[tuple[str, bool, Any]],
    doc: _Pieces,
    where_of: Callable[[Any], str],
    blank_ends: bool,
) -> Iterator[str]:
    """The documents' pieces of ``lines``: (a part of a line, whether the line ends with it, its
    place for ``where_of``).  Each line is stripped, whitespace inside a line is kept only where
    more text follows (at most ``PIECE_CHARS`` of it), the lines of a document are joined with
    ``"\\n"``, and with ``blank_ends`` a blank line ends a document (else it is dropped)."""
    started = False  # the current line has text (else it is blank so far)
    ws = ""  # whitespace after the current line's text so far: kept only if more text follows
    for text, last, at in lines:
        core = text.rstrip()
        tail = text[len(core) :]
        if not started:
            core = core.lstrip()
        if core:
            where = where_of(at)
            if started:
                yield from doc.add(ws + core, where)
            else:
                yield from doc.add("\n" + core if doc else core, where)
                started = True
            ws = tail
        elif started:
            ws = (ws + tail)[:PIECE_CHARS]
        if last:
            if blank_ends and not started:
                yield from doc.end()
            started, ws = False, ""
    yield from doc.end()


def read_jsonl(
    path: str,
    text_field: str = "text",
    progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
    span: tuple[int, int] | None = None,
) -> Iterator[str]:
    """One JSON object per line; the document is ``obj[text_field]`` (blank lines inside
    collapsed)."""
    for lineno, offset, line in _lines(path, progress, stats, span):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path}: {_where(span, lineno, offset)}: invalid JSON ({e.msg}); expected one "
                "JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise DataError(
                f"{path}: {_where(span, lineno, offset)}: expected a JSON object, got "
                f"{type(obj).__name__}"
            )
        if text_field not in obj:
            raise DataError(
                f"{path}: {_where(span, lineno, offset)}: no field {text_field!r} (its fields: "
                f"{', '.join(map(str, list(obj)[:10])) or 'none'}); name the field that holds "
                f"the text with {option('--text-field FIELD', 'text_field=FIELD')}"
            )
        text = obj[text_field]
        if not isinstance(text, str):
            raise DataError(
                f"{path}: {_where(span, lineno, offset)}: field {text_field!r} is "
                f"{type(text).__name__}; "
                "expected a string"
            )
        yield from _in_pieces(_normalise_block(text), path, _where(span, lineno, offset))


def _normalise_block(text: str) -> str:
    return "\n".join(s for s in (ln.strip() for ln in text.splitlines()) if s)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


class _WikiPages:
    """The expat handlers of :func:`read_wiki_pages`: the articles finished so far in ``done``;
    only the field being read is held (a page's text in the parts expat gives), and a field longer
    than ``LINE_CHARS`` characters is refused as soon as it is."""

    def __init__(self, path: str, parser):
        self.path = path
        self.root = False
        self.field: str | None = None  # "title" | "ns" | "text" being read
        self.parts: list[str] = []
        self.size = 0
        self.title = self.ns = self.text = None
        self.redirect = False
        self.pages = 0
        self.done: list[tuple[str, str]] = []
        parser.buffer_text = True
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.data

    def start(self, name: str, attrs) -> None:
        tag = _local(name)
        if not self.root:
            self.root = True
            if tag != "mediawiki":
                raise DataError(
                    f"{self.path}: root element <{tag}>; expected a MediaWiki XML "
                    "export (<mediawiki>)"
                )
        elif tag in ("title", "ns", "text"):
            self.field, self.parts, self.size = tag, [], 0
        elif tag == "redirect":
            self.redirect = True

    def data(self, text: str) -> None:
        if self.field is None or (self.field == "text" and self.ns not in (None, "0")):
            return  # outside the fields read, or the text of a page that is skipped anyway
        self.size += len(text)
        if self.size > LINE_CHARS:
            raise DataError(
                f"{self.path}: page {self.pages + 1} ({self.title!r}): its <{self.field}> is "
                f"longer than {LINE_CHARS:,} characters, the limit for a page, whose markup is "
                "removed whole; remove the page from the dump"
            )
        self.parts.append(text)

    def end(self, name: str) -> None:
        tag = _local(name)
        if tag == self.field:
            value = "".join(self.parts)
            if tag == "title":
                self.title = value
            elif tag == "ns":
                self.ns = value.strip()
            else:
                self.text = value
            self.field, self.parts = None, []
        elif tag == "page":
            self.pages += 1
            text = self.text
            if (
                self.ns in (None, "0")
                and not self.redirect
                and text is not None
                and not REDIRECT.match(text)
            ):
                self.done.append((self.title or "", text))
            self.title = self.ns = self.text = None
            self.redirect = False


def read_wiki_pages(
    path: str, progress: Callable[[int], None] | None = None, stats: dict | None = None
) -> Iterator[tuple[str, str]]:
    """(title, raw wikitext) of every article: namespace 0, not a redirect.  Streamed with expat
    in parts of ``PIECE_CHARS`` bytes; memory holds one page (its text up to ``LINE_CHARS``
    characters: a longer one is refused, naming the file, the page and the limit)."""
    f, raw = _open_raw(path)
    parser = expat.ParserCreate(namespace_separator="}")
    pages = _WikiPages(path, parser)
    last = 0
    try:
        while True:
            data = f.read(max(PIECE_CHARS, 4))
            parser.Parse(data, not data)
            yield from pages.done
            pages.done.clear()
            if progress is not None:
                pos = raw.tell()
                progress(pos - last)
                last = pos
            if not data:
                break
        if not pages.root:
            raise DataError(f"{path}: no XML element; expected a MediaWiki XML dump")
    except expat.ExpatError as e:
        raise DataError(f"{path}: invalid XML ({e}); expected a MediaWiki XML dump") from None
    except (OSError, EOFError) as e:
        raise DataError(
            f"{path}: cannot decompress ({e}); the file is truncated or corrupt"
        ) from None
    finally:
        if stats is not None:
            try:
                stats["input_bytes"] = stats.get("input_bytes", 0) + f.tell()
            except (OSError, ValueError):
                pass
        f.close()
        raw.close()


def read_hf(spec: str, text_field: str = "text") -> Iterator[str]:
    """``hf:NAME[:CONFIG][@SPLIT]`` (streamed from the Hub) or ``hf:LOCAL_DIR[@SPLIT]``
    (load_from_disk)."""
    try:
        import datasets  # type: ignore
    except ImportError:
        raise DataError(
            f"{spec}: the Hugging Face 'datasets' package is not installed; pip install "
            "'tokendrop[online]'"
        ) from None
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
        raise DataError(
            f"{spec}: no column {text_field!r}; expected the text field among {', '.join(cols)} "
            f"(name it with {option('--text-field COLUMN', 'text_field=COLUMN')})"
        )
    for i, ex in enumerate(ds):
        text = ex.get(text_field)
        if not isinstance(text, str):
            raise DataError(
                f"{spec}: row {i}: field {text_field!r} is {type(text).__name__}; expected a string"
            )
        yield from _in_pieces(_normalise_block(text), spec, f"row {i}")


def iter_raw(
    src: Source,
    text_field: str = "text",
    progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
    span: tuple[int, int] | None = None,
) -> Iterator[str]:
    """Raw documents of one source (wiki pages still in wikitext: pass them through :func:`finish`);
    with ``span``, only those of that work unit (a byte range of a text/JSONL file, a range of row
    groups or record batches of a Parquet/Arrow file).  A long document comes in pieces: each
    :class:`Piece` is continued by the next item (module doc)."""
    if src.fmt == TEXT:
        return read_text(src.path, progress, stats, span)
    if src.fmt == JSONL:
        return read_jsonl(src.path, text_field, progress, stats, span)
    if src.fmt == WIKI:
        return (t for _, t in read_wiki_pages(src.path, progress, stats))
    if src.fmt == HF:
        return read_hf(src.path, text_field)
    if src.fmt in (PARQUET, ARROW):
        return _read_columnar(src, text_field, progress, stats, span)
    raise DataError(f"{src.path}: unknown format {src.fmt!r}")


def _read_columnar(
    src: Source,
    text_field: str,
    progress: Callable[[int], None] | None,
    stats: dict | None,
    span: tuple[int, int] | None,
) -> Iterator[str]:
    """Parquet/Arrow documents; progress in on-disk bytes: the file's size shared out by rows
    (:func:`columnar.byte_share`)."""
    last = None

    def rows(before: int, total: int) -> None:
        nonlocal last
        now = columnar.byte_share(src.size, before, total)
        if progress is not None and last is not None:
            progress(now - last)
        last = now

    cells = columnar.read_texts(
        src.path, src.fmt, text_field, span, rows, stats, part_bytes=PIECE_CHARS
    )
    for i, text in enumerate(cells):
        where = f"row {i + 1}{' of its work unit' if span else ''}"
        if isinstance(text, str):
            yield from _in_pieces(_normalise_block(text), src.path, where)
        else:  # a cell of more than PIECE_CHARS bytes, in parts
            yield from _normalised_pieces(text, _Pieces(src.path), where)


def _normalised_pieces(parts: Iterable[str], doc: _Pieces, where: str) -> Iterator[str]:
    """The pieces of ``_normalise_block("".join(parts))`` (each line stripped, blank lines dropped)
    holding only a part and a piece at a time: the lines of the parts are read as :func:`read_text`
    reads the parts of a long line (a line break cut between two parts makes a blank line, which
    is dropped)."""

    def lines() -> Iterator[tuple[str, bool, None]]:
        for part in parts:
            for frag in part.splitlines(keepends=True):
                line = frag.splitlines()[0]
                yield line, len(line) < len(frag), None  # a line break: the line ends

    yield from _joined_lines(lines(), doc, lambda _: where, blank_ends=False)


def finish(fmt: str, raw: str) -> str:
    """Turn a raw document of format ``fmt`` into clean text (wiki markup removed for ``wiki``)."""
    return clean_wikitext(raw) if fmt == WIKI else raw


def iter_documents(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    text_field: str = "text",
    skip_empty: bool = True,
) -> Iterator[str]:
    """Clean documents of all inputs, in order (files, directories, globs, ``hf:`` specs); each
    document whole (its pieces joined)."""
    for src in resolve_corpus(paths, text_field):
        pieces: list[str] = []
        for raw in iter_raw(src, text_field):
            if isinstance(raw, Piece):
                pieces.append(str(raw))
                continue
            doc = finish(src.fmt, "".join(pieces) + raw if pieces else raw)
            pieces = []
            if doc or not skip_empty:
                yield doc
