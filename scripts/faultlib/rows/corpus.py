"""Corpus inputs: records longer than the reader's part, files cut short, directory walks."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome
from faultlib.commands import prepare, run_cli, shorten
from faultlib.setups import chain_checks, make_file, says_in_output, write_corpus


def one_long_line(c: Path) -> None:
    """A 3 MB corpus on one line: words of the toy vocabulary, no newline inside."""
    words = [w for w in (c / "other-vocab.txt").read_text().split() if w.isalpha()][:50] or ["a"]
    line = " ".join(words[i % len(words)] for i in range(600_000))
    (c / "x.txt").write_text(line[:3_000_000] + "\n")


def one_long_cell(name: str, cut: bool = True) -> Callable[[Path], None]:
    """CASE/NAME: a Parquet or Arrow file of a short row, then one 3 MB cell of words of the toy
    vocabulary (``cut``), or of 2.1 MB without a space (not)."""

    def setup(c: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if cut:
            one_long_line(c)
            long = (c / "x.txt").read_text().strip()
            (c / "x.txt").unlink()
        else:
            long = "x" * 2_100_000
        t = pa.table({"text": ["a b c", long]})
        if name.endswith(".parquet"):
            pq.write_table(t, c / name)
        else:
            with pa.ipc.new_file(c / name, t.schema) as w:
                w.write_table(t)

    return setup


def one_huge_parquet_page(c: Path) -> None:
    """CASE/x.parquet: a short row, then a cell of 64 Mi + 6 bytes (one page that long, zstd: a
    small file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"text": ["a b c", "ab cd " * ((1 << 26) // 6 + 2)]})
    pq.write_table(t, c / "x.parquet", compression="zstd")


def one_huge_wiki_page(c: Path) -> None:
    """CASE/x.xml: a MediaWiki dump whose second article's text is 64 Mi + 2 characters."""
    with open(c / "x.xml", "w", encoding="utf-8") as f:
        f.write("<mediawiki><page><title>Small</title><ns>0</ns><revision><text>a b c")
        f.write("</text></revision></page><page><title>Huge</title><ns>0</ns><revision><text>")
        for _ in range(32):
            f.write("ab" * (1 << 20))
        f.write("cd</text></revision></page></mediawiki>\n")


def corpus_bytes(c: Path, docs: int = 200) -> bytes:
    write_corpus(c / "src.txt", docs)
    data = (c / "src.txt").read_bytes()
    (c / "src.txt").unlink()
    return data


def truncated_input(name: str) -> Callable[[Path], None]:
    """CASE/NAME: a corpus file of NAME's format cut short (the way a copy or download ends
    early)."""

    def setup(c: Path) -> None:
        import bz2
        import gzip
        import io

        text = corpus_bytes(c)
        docs = [d for d in text.decode().split("\n\n") if d.strip()]
        # a streaming writer's frame: blocks flushed every 4 KB, no content size
        if name.endswith(".zst"):
            import zstandard

            buf = io.BytesIO()
            w = zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False)
            for i in range(0, len(text), 4096):
                w.write(text[i : i + 4096])
                w.flush(zstandard.FLUSH_BLOCK)
            w.flush(zstandard.FLUSH_FRAME)
            blob = buf.getvalue()
        elif name.endswith(".gz"):
            blob = gzip.compress(text)
        elif name.endswith(".bz2"):
            blob = bz2.compress(text)
        elif name.endswith(".jsonl"):
            # inside the last object
            blob = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()[:-20]
        elif name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            sink = io.BytesIO()
            pq.write_table(pa.table({"text": docs}), sink, row_group_size=20)
            blob = sink.getvalue()[:-30]  # the footer cut
        elif name.endswith(".arrow"):  # a stream of 3 of its batches whose writer never closed it
            import pyarrow as pa

            t = pa.table({"text": docs})
            sink = pa.BufferOutputStream()
            w = pa.ipc.new_stream(sink, t.schema)
            for b in t.to_batches(max_chunksize=20)[:3]:
                w.write_batch(b)
            blob = sink.getvalue().to_pybytes()
        else:
            raise ValueError(name)
        if name.endswith((".zst", ".gz", ".bz2")):
            blob = blob[: len(blob) // 2]
        (c / name).write_bytes(blob)

    return setup


def prepared_inside_corpus(c: Path) -> None:
    """CASE/corpus/ holding its text and, beside it, an earlier prepare's output
    (CASE/corpus/prep)."""
    (c / "corpus").mkdir()
    shutil.copy(c / "corpus.txt", c / "corpus" / "corpus.txt")
    run_cli(prepare(str(c / "corpus"), str(c / "corpus" / "prep"), "--vocab-size", "150"), c)


def sources_are(*rel: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        got = [
            s["path"]
            for s in json.loads((c / "corpus" / "prep" / "meta.json").read_text())["sources"]
        ]
        want = [str(c / r) for r in rel]
        return (
            None if got == want else f"read as corpus: {', '.join(shorten(g, c, c) for g in got)}"
        )

    return check


def link(rel: str, target: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        (c / "corpus").mkdir(exist_ok=True)
        shutil.copy(c / "corpus.txt", c / "corpus" / "corpus.txt")
        (c / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, c / rel)

    return setup


def long_records() -> list[Case]:
    """A line, a cell or a page longer than the reader's part size."""
    C: list[Case] = []
    add = C.append
    # a line longer than the reader's part size: tokenized in pieces, or refused when it cannot be
    # cut
    add(
        Case(
            "prepare-long-line-no-spaces",
            "bad input, full disk",
            prepare("{C}/x.txt", "{C}/out", "--vocab-size", "150"),
            "refused naming the file, the line and the limit; no output",
            absent=("out",),
            setup=lambda c: (c / "x.txt").write_text("a b c\n\n" + "x" * 2_100_000 + "\n"),
            says=("{C}/x.txt", "line 3", "1,048,576 characters"),
        )
    )
    add(
        Case(
            "prepare-long-line-in-pieces",
            "bad input, full disk",
            prepare("{C}/x.txt", "{C}/out", "--vocab", "{C}/other-vocab.txt"),
            "prepared (one document of 3 MB, tokenized in pieces)",
            rc=0,
            needs=("other-vocab.txt",),
            setup=one_long_line,
            check=lambda c, o: (
                None if json.loads(o.stdout)["documents"] == 1 else "not one document"
            ),
        )
    )
    # a Parquet/Arrow cell longer than the reader's part size: read from pyarrow's buffer in
    # parts and tokenized in pieces, or refused when it cannot be cut; a Wikipedia page is cleaned
    # whole: one over the limit is refused
    for ext in (".parquet", ".arrow"):
        kind = ext[1:]
        add(
            Case(
                f"prepare-long-{kind}-cell-in-pieces",
                "bad input, full disk",
                prepare(
                    f"{{C}}/x{ext}",
                    "{C}/out",
                    "--vocab",
                    "{C}/other-vocab.txt",
                    "--eval-fraction",
                    "0",
                ),
                "prepared (a 3 MB cell read in parts, tokenized in pieces)",
                rc=0,
                needs=("other-vocab.txt",),
                setup=one_long_cell(f"x{ext}"),
                check=lambda c, o: (
                    None if json.loads(o.stdout)["documents"] == 2 else "not two documents"
                ),
            )
        )
        add(
            Case(
                f"prepare-long-{kind}-cell-no-spaces",
                "bad input, full disk",
                prepare(f"{{C}}/x{ext}", "{C}/out", "--vocab-size", "150"),
                "refused naming the file, the row and the limit; no output",
                absent=("out",),
                setup=one_long_cell(f"x{ext}", cut=False),
                says=(f"{{C}}/x{ext}", "row 2", "1,048,576 characters"),
            )
        )
    add(
        Case(
            "prepare-parquet-page-over-the-limit",
            "bad input, full disk",
            prepare("{C}/x.parquet", "{C}/out", "--vocab-size", "150"),
            "refused before the page is decoded, naming the file, the row group and the "
            "limit; no output",
            absent=("out",),
            setup=one_huge_parquet_page,
            says=("{C}/x.parquet: row group 0", "over the limit of 67,108,864"),
        )
    )
    add(
        Case(
            "prepare-wiki-page-over-the-limit",
            "bad input, full disk",
            prepare("{C}/x.xml", "{C}/out", "--vocab-size", "150"),
            "refused naming the file, the page and the limit; no output",
            absent=("out",),
            setup=one_huge_wiki_page,
            says=("{C}/x.xml", "page 2 ('Huge')", "67,108,864 characters"),
        )
    )
    return C


def cut_and_walked() -> list[Case]:
    """Every corpus format cut short; tokendrop's own outputs and broken links in a walk."""
    C: list[Case] = []
    add = C.append
    # corrupt inputs: every corpus format refuses a file cut short (never read quietly
    # short)
    for name, says in (
        ("half.txt.zst", "zstandard frame 1 (from byte 0) is truncated"),
        ("half.txt.gz", "cannot decompress"),
        ("half.jsonl.bz2", "cannot decompress"),
        ("cut.jsonl", "invalid JSON"),
        ("cut.parquet", "cannot read as Parquet"),
        ("cut.arrow", "no end-of-stream marker"),
    ):
        fmt = name.split(".", 1)[1]
        add(
            Case(
                f"prepare-truncated-{fmt.replace('.', '-')}",
                "corrupt inputs",
                prepare("{C}/" + name, "{C}/out", "--vocab-size", "150"),
                "refused naming the file; no output, no work dir",
                setup=truncated_input(name),
                absent=("out", "out.partial"),
                watch=(name,),
                says=("{C}/" + name, says),
            )
        )

    # directory walks: tokendrop's own outputs are skipped (and said), broken links
    # refused
    add(
        Case(
            "prepare-corpus-dir-holding-an-earlier-prepare",
            "directory walks",
            prepare("{C}/corpus", "{C}/corpus/prep", "--vocab-size", "150", "--overwrite"),
            "the earlier output is skipped (a note says so), not read back as corpus; the "
            "re-run replaces it",
            rc=0,
            needs=("corpus.txt",),
            setup=prepared_inside_corpus,
            one_line=False,
            watch=("corpus/corpus.txt",),
            check=chain_checks(
                says_in_output("corpus/prep: skipped, tokendrop's own prepared output"),
                sources_are("corpus/corpus.txt"),
            ),
        )
    )
    add(
        Case(
            "prepare-corpus-symlink-loop",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link; no output",
            needs=("corpus.txt",),
            setup=link("corpus/loop.txt", "loop.txt"),
            absent=("out",),
            says=("{C}/corpus/loop.txt", "symbolic link loop"),
        )
    )
    add(
        Case(
            "prepare-corpus-dangling-link",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link; no output",
            needs=("corpus.txt",),
            setup=link("corpus/gone.txt", "nowhere.txt"),
            absent=("out",),
            says=("{C}/corpus/gone.txt", "dangling symbolic link"),
        )
    )
    add(
        Case(
            "prepare-corpus-link-to-its-parent",
            "directory walks",
            prepare("{C}/corpus", "{C}/out", "--vocab-size", "150"),
            "refused naming the link (a loop); no output",
            needs=("corpus.txt",),
            setup=link("corpus/sub/up", ".."),
            absent=("out",),
            says=("{C}/corpus/sub/up", "already in"),
        )
    )
    return C


SQUAD_FILE = json.dumps(
    {"data": [{"title": "a", "paragraphs": [{"context": "hello world", "qas": []}]}]}
).encode()


# text in a script the toy vocabulary (other-vocab.txt) has no word piece of
CJK_TEXT = ("字典 中文 文本 " * 20 + "\n\n").encode() * 100


def read_as_meant() -> list[Case]:
    """A corpus file that would be read wrong: not plain text (a JSON document, a CSV table,
    lone-CR line ends) or JSON Lines without the text field, refused with its fix instead of read
    as one document; a corpus its vocabulary does not cover, warned."""
    C: list[Case] = []
    add = C.append
    for name, data, says in (
        ("squad.json", SQUAD_FILE, "give JSON Lines instead"),
        ("table.csv", b"id,text\n1,hello world\n2,another line\n", "write its text column"),
        ("cr.txt", b"one line\rtwo lines\rthree lines\r" * 50, "convert them to LF first"),
    ):
        add(
            Case(
                f"prepare-{name.replace('.', '-')}-as-corpus",
                "bad input, full disk",
                prepare("{C}/" + name, "{C}/out", "--vocab-size", "150"),
                "refused naming the file and the fix; no output",
                setup=make_file(name, data),
                watch=(name,),
                absent=("out",),
                says=("{C}/" + name, says),
            )
        )
    add(
        Case(
            "prepare-jsonl-without-the-text-field",
            "bad input, full disk",
            prepare("{C}/x.jsonl", "{C}/out", "--vocab-size", "150"),
            "refused naming the file, the line, the fields it has and --text-field; no output",
            setup=make_file("x.jsonl", b'{"body": "hello world"}\n{"body": "more text"}\n'),
            absent=("out",),
            says=("{C}/x.jsonl: line 1: no field 'text' (its fields: body)", "--text-field"),
        )
    )
    add(
        Case(
            "prepare-mostly-unk-under-its-vocab",
            "edge settings",
            prepare("{C}/cjk.txt", "{C}/out", "--vocab", "{C}/other-vocab.txt"),
            "prepared, with a warning on stderr that the vocabulary does not cover the text",
            rc=0,
            needs=("other-vocab.txt",),
            setup=make_file("cjk.txt", CJK_TEXT),
            one_line=False,
            check=says_in_output("tokens are [UNK] under this vocabulary", "train a vocabulary"),
        )
    )
    return C
