"""Bounded memory for every corpus reader (docs/reliability.md, "bad input, full disk"): a line or
document longer than ``corpus.PIECE_CHARS`` is read and tokenized in pieces, with exactly the ids
of the whole; text that cannot be cut and a JSONL line over ``corpus.LINE_CHARS`` are refused in one
line naming the file, the line and the limit.  The limits are set to a few dozen characters here,
so kilobytes stand for the megabytes of a real corpus."""

import bz2
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from toydata import toy_documents, write_toy_vocab

from tokendrop.data import corpus, prepare
from tokendrop.errors import DataError

PIECE = 64


def _long_docs() -> list[str]:
    """A normal document, one long single-line document, a long document of many lines (one with
    multi-byte characters and runs of spaces), and normal ones after."""
    docs = toy_documents(6, seed=3, min_words=5, max_words=30)
    one_line = " ".join(d.replace("\n", " ") for d in toy_documents(40, seed=4))
    many = "\n".join(
        f"é{i} {d.replace(chr(10), '  ')} ünï" for i, d in enumerate(toy_documents(30, seed=5))
    )
    return [docs[0], one_line, docs[1], many, *docs[2:]]


def _write(path: Path, docs: list[str]) -> Path:
    name = path.name
    if ".jsonl" in name:
        text = "".join(json.dumps({"text": d}) + "\n" for d in docs)
    else:
        text = "\n\n".join(docs) + "\n"
    data = text.encode("utf-8")
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".bz2"):
        data = bz2.compress(data)
    elif name.endswith(".zst"):
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(data)
    elif name.endswith((".parquet", ".arrow")):
        pa = pytest.importorskip("pyarrow")
        table = pa.table({"text": docs})
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            pq.write_table(table, path, row_group_size=3)
        else:
            with pa.ipc.new_file(path, table.schema) as w:
                w.write_table(table, max_chunksize=3)
        return path
    path.write_bytes(data)
    return path


def _prepare(src: Path, out: Path, vocab: str, workers: int = 1) -> dict:
    prepare([src], out, seq_len=32, vocab=vocab, eval_fraction=0.2, workers=workers, progress=False)
    return {f: (out / f).read_bytes() for f in ("train.bin", "eval.bin", "token_counts.npy")}


@pytest.mark.parametrize(
    "name",
    [
        "c.txt",
        "c.txt.gz",
        "c.txt.bz2",
        "c.txt.zst",
        "c.jsonl",
        "c.jsonl.gz",
        "c.parquet",
        "c.arrow",
    ],
)
def test_long_documents_in_pieces_give_the_ids_of_the_whole(name, tmp_path, monkeypatch):
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    src = _write(tmp_path / name, _long_docs())
    whole = _prepare(src, tmp_path / "whole", vocab)
    monkeypatch.setattr(corpus, "PIECE_CHARS", PIECE)
    raws = list(corpus.iter_raw(corpus.resolve_corpus([src])[0]))
    assert max(map(len, raws)) <= PIECE and sum(isinstance(r, corpus.Piece) for r in raws) > 40
    # the pieces join to the documents
    assert list(corpus.iter_documents([src])) == [d for d in _long_docs()]
    assert _prepare(src, tmp_path / "pieces", vocab) == whole


def test_pieces_with_worker_processes_and_work_units(tmp_path, monkeypatch):
    from tokendrop.data import units

    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    src = _write(tmp_path / "c.txt", _long_docs() * 4)
    whole = _prepare(src, tmp_path / "whole", vocab)
    monkeypatch.setattr(corpus, "PIECE_CHARS", PIECE)
    monkeypatch.setattr(units, "MIN_UNIT_BYTES", 2000)  # work units cut inside long lines' files
    monkeypatch.setattr(units, "UNIT_BYTES", 2000)
    assert len(units.plan_units(corpus.resolve_corpus([src]), "text")) > 2
    assert _prepare(src, tmp_path / "pieces", vocab, workers=2) == whole


def test_a_line_longer_than_the_part_size_keeps_its_characters(tmp_path, monkeypatch):
    """Parts of a line are cut by bytes: a multi-byte character cut between two parts, a \\r\\n cut
    between them, and blank lines made of more spaces than a part are read as in one piece."""
    monkeypatch.setattr(corpus, "PIECE_CHARS", 8)
    text = "aé " * 9 + "ü\r\n" + " " * 30 + "\n" + "x" + " y" * 5 + "\r\n"
    p = tmp_path / "c.txt"
    p.write_bytes(text.encode())
    monkeypatch.setattr(corpus, "PIECE_CHARS", 8)
    assert list(corpus.iter_documents([p])) == [("aé " * 9).strip() + " ü", "x" + " y" * 5]
    assert corpus.split_points(str(p), corpus.TEXT, 4) == [
        len(("aé " * 9 + "ü\r\n" + " " * 30 + "\n").encode())
    ]


@pytest.mark.parametrize("name", ["c.txt", "c.jsonl"])
def test_a_document_of_one_word_per_line_is_cut_at_its_line_breaks(name, tmp_path, monkeypatch):
    """A long document with no space, one word per line (a word list, a column of tokens), is cut
    at its line breaks, with the ids of the whole, where it was refused for want of a space."""
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    words = [w for d in toy_documents(20, seed=6) for w in d.split()]
    docs = ["short one", "\n".join(words), *toy_documents(12, seed=7)]
    src = _write(tmp_path / name, docs)
    whole = _prepare(src, tmp_path / "whole", vocab)
    monkeypatch.setattr(corpus, "PIECE_CHARS", PIECE)
    raws = list(corpus.iter_raw(corpus.resolve_corpus([src])[0]))
    assert max(map(len, raws)) <= PIECE and sum(isinstance(r, corpus.Piece) for r in raws) > 5
    assert list(corpus.iter_documents([src])) == docs
    assert _prepare(src, tmp_path / "pieces", vocab) == whole


@pytest.mark.parametrize("name", ["c.txt", "c.txt.gz", "c.jsonl", "c.parquet"])
def test_text_without_a_place_to_cut_is_refused_naming_the_line_and_limit(
    name, tmp_path, monkeypatch
):
    monkeypatch.setattr(corpus, "PIECE_CHARS", PIECE)
    src = _write(tmp_path / name, ["a b c", "word " * 5 + "x" * 200])
    with pytest.raises(DataError) as e:
        list(corpus.iter_documents([src]))
    msg = str(e.value)
    where = "row 2" if name.endswith(".parquet") else ("line 2" if ".jsonl" in name else "line 3")
    assert (
        "\n" not in msg
        and msg.startswith(str(src))
        and where in msg
        and f"{PIECE:,} characters" in msg
    ), msg


def test_a_jsonl_line_over_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "LINE_CHARS", 100)
    src = _write(tmp_path / "c.jsonl", ["short", "long " * 40])
    with pytest.raises(DataError) as e:
        list(corpus.iter_documents([src]))
    msg = str(e.value)
    assert "\n" not in msg and "c.jsonl: line 2: longer than 100 characters" in msg, msg


def test_packing_a_long_document_in_blocks_is_the_same(tmp_path):
    """The writer cuts a long document block by block; one block of the whole stream (the
    reference) gives the same rows and counts."""
    from tokendrop.data.shards import PackedWriter, ShardWriter, TokenCounter

    rng = np.random.default_rng(0)
    docs = [rng.integers(5, 100, n).astype(np.uint16) for n in (7, 40_000, 3, 0, 9_000, 13)]
    docs[1][3583::3584] = 3  # separators where a block ends: the boundary rule across blocks
    out = []
    for rows in (PackedWriter.BLOCK_ROWS, 10**9):
        shard = ShardWriter(str(tmp_path / f"s{rows}.bin"), 16, np.dtype(np.uint16))
        w = PackedWriter(shard, 2, 3)
        w.BLOCK_ROWS = rows
        for d in docs:
            w.add(d)
        info = w.finish()
        shard.close()
        out.append(((tmp_path / f"s{rows}.bin").read_bytes(), info))
    assert out[0] == out[1] and out[0][1]["document_tokens"] == sum(map(len, docs))
    counter = TokenCounter(100)
    counter.add(np.concatenate(docs * 60))  # over the counter's block
    counter.flush()
    assert counter.counts.tolist() == np.bincount(np.concatenate(docs * 60), minlength=100).tolist()


@pytest.mark.parametrize("name", ["c.parquet", "c.arrow"])
def test_a_long_cell_comes_from_pyarrow_in_bounded_parts(name, tmp_path):
    """A cell over ``part_bytes`` is an iterator of its parts (each at most that many bytes, a
    multi-byte character completed by the next part), the short rows around it plain strings."""
    from tokendrop.data import columnar

    long = "é" + " ab" * 100 + "ü"
    src = _write(tmp_path / name, ["short", long, "x"])
    fmt = columnar.PARQUET if name.endswith(".parquet") else columnar.ARROW
    got = list(columnar.read_texts(str(src), fmt, "text", part_bytes=16))
    assert got[0] == "short" and got[2] == "x" and not isinstance(got[1], str)
    parts = list(got[1])
    assert len(parts) > 10 and max(len(p.encode()) for p in parts) <= 16
    assert "".join(parts) == long


# pyarrow's writer options that change what a page header holds (dictionary pages, v2 data pages,
# checksums, statistics, compression, small pages with a page index)
_WRITERS = [
    {},
    {"use_dictionary": False},
    {"data_page_version": "2.0"},
    {"write_page_checksum": True, "compression": "zstd"},
    {"compression": "none", "write_statistics": False},
    {"write_page_index": True, "data_page_size": 512},
]


@pytest.mark.parametrize("writer", _WRITERS)
def test_the_parquet_page_sizes_are_read_from_the_page_headers(writer, tmp_path):
    """The text column's pages, read from their Thrift headers alone, add up to the column chunk's
    uncompressed size less the headers, whatever the writer wrote."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tokendrop.data import columnar

    rows = [f"word{i % 50} " * (i % 37 + 1) for i in range(3000)]
    path = tmp_path / "c.parquet"
    table = pa.table({"id": list(range(len(rows))), "text": rows})
    pq.write_table(table, path, row_group_size=1000, **writer)
    md = pq.ParquetFile(path).metadata
    for g in range(md.num_row_groups):
        chunk = md.row_group(g).column(1)
        sizes = list(columnar._page_sizes(str(path), chunk))
        headers = chunk.total_uncompressed_size - sum(sizes)  # page headers, statistics included
        assert sizes and 0 < headers < 1024 * len(sizes), (sizes, chunk.total_uncompressed_size)


@pytest.mark.parametrize("writer", [{}, {"data_page_version": "2.0", "compression": "zstd"}])
def test_a_parquet_page_over_the_limit_is_refused_before_it_is_decoded(
    writer, tmp_path, monkeypatch
):
    """A cell longer than ``columnar.MAX_PAGE_BYTES`` makes a page that long: refused by the plan
    and the reader in one line naming the file, the row group and the limit, before pyarrow reads
    the page (its decoding is never called); a file of as many bytes in short rows is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tokendrop.data import columnar

    limit = 4096
    monkeypatch.setattr(columnar, "MAX_PAGE_BYTES", limit)
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["a b", "word " * 2000, "c"]}), path, **writer)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda *a, **k: pytest.fail("decoded"))
    for read in (
        lambda: columnar.plan(str(path), columnar.PARQUET, "text", 1 << 20),
        lambda: list(columnar.read_texts(str(path), columnar.PARQUET, "text")),
        lambda: list(corpus.iter_documents([path])),
    ):
        with pytest.raises(DataError) as e:
            read()
        msg = str(e.value)
        head = f"{path}: row group 0: column 'text' has a page"
        assert "\n" not in msg and msg.startswith(head), msg
        assert f"over the limit of {limit:,}" in msg
    monkeypatch.undo()
    short = tmp_path / "s.parquet"
    rows = [f"w{i} x" for i in range(4000)]  # > the limit in all, in pages of many short rows
    small = {**writer, "use_dictionary": False, "data_page_size": 1024, "write_batch_size": 64}
    pq.write_table(pa.table({"text": rows}), short, **small)
    monkeypatch.setattr(columnar, "MAX_PAGE_BYTES", limit)
    assert pq.ParquetFile(short).metadata.row_group(0).column(0).total_uncompressed_size > limit
    assert list(columnar.read_texts(str(short), columnar.PARQUET, "text")) == rows


@pytest.mark.parametrize("parts", [1, 3, 7, 64])
def test_a_cell_read_in_parts_is_normalised_as_a_whole(parts, monkeypatch):
    """Lines stripped and blank ones dropped, across any cut of the parts (a \\r\\n, a line
    separator or a run of spaces cut between two parts): the pieces join to ``_normalise_block``
    of the whole, and each is at most ``PIECE_CHARS``."""
    monkeypatch.setattr(corpus, "PIECE_CHARS", 40)
    text = (
        "  first line  \r\n\r\n second\u2028third   word\n"
        + " ".join(f"w{i}" for i in range(60))
        + " \n\n\x0c tail é \r\n"
    )
    cuts = [text[i : i + parts] for i in range(0, len(text), parts)]
    pieces = list(corpus._normalised_pieces(cuts, corpus._Pieces("f"), "row 1"))
    assert "".join(pieces) == corpus._normalise_block(text)
    assert max(map(len, pieces)) <= 40 and any(isinstance(p, corpus.Piece) for p in pieces)


def test_a_wiki_page_over_the_limit_is_refused_naming_the_page(tmp_path, monkeypatch):
    """A page is cleaned whole: its text over ``LINE_CHARS`` is refused as it is read (one line:
    the file, the page and the limit); a long page of another namespace is skipped, not held."""
    monkeypatch.setattr(corpus, "LINE_CHARS", 100)
    page = "<page><title>{}</title><ns>{}</ns><revision><text>{}</text></revision></page>"
    xml = "<mediawiki>{}</mediawiki>".format(
        page.format("Small", 0, "a b")
        + page.format("Talk", 1, "t " * 80)
        + page.format("Huge", 0, "w " * 60)
    )
    src = tmp_path / "d.xml"
    src.write_text(xml, encoding="utf-8")
    with pytest.raises(DataError) as e:
        list(corpus.iter_documents([src]))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{src}: page 3 ('Huge'): its <text>"), msg
    assert "100 characters" in msg
    monkeypatch.setattr(corpus, "LINE_CHARS", 1000)
    assert list(corpus.iter_documents([src])) == ["a b", ("w " * 60).strip()]
