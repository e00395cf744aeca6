"""Every corpus format refuses a truncated or corrupt file (one DataError naming the file) instead
of reading it quietly short; multi-frame and block-flushed zstandard files read in full; directory
walks skip what tokendrop wrote and refuse broken links (docs/design.md, "Corpus inputs")."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from toydata import toy_documents, write_documents, write_toy_vocab

from tokendrop.cli import main
from tokendrop.data import DataError
from tokendrop.data.corpus import check_zstd_frames, iter_documents

DOCS = toy_documents(60, seed=3, min_words=20, max_words=80)
TEXT = ("\n\n".join(DOCS) + "\n").encode()
JSONL = "".join(json.dumps({"text": d}) + "\n" for d in DOCS).encode()


def read_all(path) -> list[str]:
    return list(iter_documents([path]))


def refused(path, *says: str) -> str:
    with pytest.raises(DataError) as e:
        read_all(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    for s in says:
        assert s in msg, msg
    return msg


def cut(blob: bytes, frac: float = 0.5) -> bytes:
    return blob[: int(len(blob) * frac)]


# ----------------------------------------------------------------------------------------------
# compressed text / JSONL


def test_truncated_gzip_is_refused(tmp_path):
    good = tmp_path / "a.txt.gz"
    good.write_bytes(gzip.compress(TEXT))
    assert read_all(good) == DOCS
    bad = tmp_path / "b.txt.gz"
    bad.write_bytes(cut(good.read_bytes()))
    refused(bad, "truncated or corrupt")


def test_truncated_bz2_is_refused(tmp_path):
    good = tmp_path / "a.jsonl.bz2"
    good.write_bytes(bz2.compress(JSONL))
    assert read_all(good) == DOCS
    bad = tmp_path / "b.jsonl.bz2"
    bad.write_bytes(cut(good.read_bytes()))
    refused(bad)


def _block_flushed(data: bytes, checksum: bool = False) -> bytes:
    """One frame written by a streaming writer that flushes a block every 2000 bytes (what a log
    shipper or ``zstd --stream`` writes): the frame's content size is not in its header."""
    buf = io.BytesIO()
    w = zstandard.ZstdCompressor(level=3, write_checksum=checksum).stream_writer(buf, closefd=False)
    for i in range(0, len(data), 2000):
        w.write(data[i : i + 2000])
        w.flush(zstandard.FLUSH_BLOCK)
    w.flush(zstandard.FLUSH_FRAME)
    return buf.getvalue()


def _zstd_variants() -> dict[str, list[bytes]]:
    """name -> the file's frames."""
    cz = zstandard.ZstdCompressor(level=3)
    half = len(TEXT) // 2
    skippable = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"hello"
    return {
        "one frame": [cz.compress(TEXT)],
        "two frames": [cz.compress(TEXT[:half]), cz.compress(TEXT[half:])],
        "block-flushed": [_block_flushed(TEXT)],
        "block-flushed with checksum": [_block_flushed(TEXT, checksum=True)],
        "a skippable frame between two": [
            cz.compress(TEXT[:half]),
            skippable,
            cz.compress(TEXT[half:]),
        ],
        "no content size": [zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)],
    }


def _frames(path) -> int:
    with open(path, "rb") as f:
        return check_zstd_frames(f, str(path))


@pytest.mark.parametrize("name", list(_zstd_variants()))
def test_zstd_reads_in_full_and_refuses_every_cut(tmp_path, name):
    frames = _zstd_variants()[name]
    blob = b"".join(frames)
    good = tmp_path / "a.txt.zst"
    good.write_bytes(blob)
    assert read_all(good) == DOCS
    assert _frames(good) == len(frames)
    # every cut inside a frame is refused; a cut exactly between two frames is a valid shorter file
    ends = {sum(map(len, frames[: i + 1])) for i in range(len(frames))}
    bad = tmp_path / "cut.txt.zst"
    quiet = []
    # 4: the magic number (anything shorter is not taken for zstandard)
    for n in range(4, len(blob)):
        if n in ends:
            continue
        with pytest.raises(DataError):  # the frame walk every reader of a .zst runs first
            check_zstd_frames(io.BytesIO(blob[:n]), "x")
        if n % 50 == 0 or n > len(blob) - 8:  # and for some cuts the whole reader
            bad.write_bytes(blob[:n])
            try:
                got = read_all(bad)
            except DataError as e:
                assert str(bad) in str(e) and "\n" not in str(e)
                continue
            quiet.append((n, len(got)))
    assert not quiet, f"{name}: cuts read quietly (length, documents): {quiet[:5]}"


def test_the_issue_case_half_a_block_flushed_zst_corpus_is_refused_by_prepare(tmp_path, capsys):
    """Half of a .zst corpus written with block flushes was prepared as 25 of 49 documents, exit
    0."""
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    bad = tmp_path / "corpus.txt.zst"
    bad.write_bytes(cut(_block_flushed(TEXT)))
    rc = main(
        [
            "prepare",
            "--corpus",
            str(bad),
            "--out",
            str(tmp_path / "out"),
            "--seq-len",
            "32",
            "--vocab",
            vocab,
            "--quiet",
            "--workers",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert (
        rc == 2
        and err.startswith(
            f"error: {bad}: cannot decompress: zstandard frame 1 (from byte 0) is truncated"
        )
        and "\n" not in err
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_zstd_with_trailing_garbage_is_refused(tmp_path):
    bad = tmp_path / "a.txt.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(TEXT) + b"not a frame")
    refused(bad, "not a zstandard frame")


def test_truncated_jsonl_last_line_is_refused(tmp_path):
    bad = tmp_path / "a.jsonl"
    bad.write_bytes(JSONL[:-25])  # cut inside the last object: not valid JSON
    refused(bad, f"line {len(DOCS)}: invalid JSON")


def test_truncated_wikipedia_dump_is_refused(tmp_path):
    pages = "".join(
        f"<page><title>T{i}</title><ns>0</ns><revision><text>{d}</text></revision></page>"
        for i, d in enumerate(DOCS[:10])
    )
    xml = f"<mediawiki>{pages}</mediawiki>".encode()
    good = tmp_path / "a.xml.bz2"
    good.write_bytes(bz2.compress(xml))
    assert len(read_all(good)) == 10
    bad = tmp_path / "b.xml"
    bad.write_bytes(cut(xml, 0.7))
    refused(bad, "invalid XML")


# ----------------------------------------------------------------------------------------------
# Parquet and Arrow


def _table():
    return pa.table({"text": DOCS, "id": list(range(len(DOCS)))})


def test_parquet_truncated_footer_is_refused(tmp_path):
    good = tmp_path / "a.parquet"
    pq.write_table(_table(), good, row_group_size=10)
    assert read_all(good) == DOCS
    bad = tmp_path / "b.parquet"
    bad.write_bytes(good.read_bytes()[:-30])
    refused(bad, "cannot read as Parquet")


def test_parquet_corrupt_row_group_is_refused(tmp_path):
    good = tmp_path / "a.parquet"
    pq.write_table(_table(), good, row_group_size=10)  # snappy: a damaged page does not decompress
    b = bytearray(good.read_bytes())
    start = len(b) // 3
    b[start : start + 64] = b"\x55" * 64
    bad = tmp_path / "b.parquet"
    bad.write_bytes(bytes(b))
    refused(bad, "cannot read as Parquet")


def test_parquet_page_checksums_are_verified(tmp_path):
    """A flipped bit that leaves valid UTF-8 (d -> e) in an uncompressed page is found by the page's
    CRC when the writer stored one."""
    good = tmp_path / "a.parquet"
    pq.write_table(_table(), good, row_group_size=10, compression="none", write_page_checksum=True)
    b = bytearray(good.read_bytes())
    b[b.index(DOCS[30][:12].encode())] ^= 0x01
    bad = tmp_path / "b.parquet"
    bad.write_bytes(bytes(b))
    refused(bad, "CRC")


def _arrow(path, stream: bool, batches: int | None = None, close: bool = True) -> None:
    t = _table()
    with pa.OSFile(str(path), "wb") as sink:
        w = pa.ipc.new_stream(sink, t.schema) if stream else pa.ipc.new_file(sink, t.schema)
        for b in t.to_batches(max_chunksize=10)[:batches]:
            w.write_batch(b)
        if close:
            w.close()


def test_arrow_stream_cut_at_a_batch_boundary_is_refused(tmp_path):
    good = tmp_path / "a.arrow"
    _arrow(good, stream=True)
    assert read_all(good) == DOCS
    bad = tmp_path / "b.arrow"
    _arrow(bad, stream=True, batches=2, close=False)  # exactly the first two batches of a.arrow
    assert good.read_bytes().startswith(bad.read_bytes())
    refused(bad, "end-of-stream marker")
    half = tmp_path / "c.arrow"
    half.write_bytes(cut(good.read_bytes()))
    refused(half, "truncated")


def test_arrow_file_truncated_is_refused(tmp_path):
    good = tmp_path / "a.arrow"
    _arrow(good, stream=False)
    assert read_all(good) == DOCS
    bad = tmp_path / "b.arrow"
    bad.write_bytes(good.read_bytes()[:-20])
    refused(bad, "cannot read as Arrow IPC")


# ----------------------------------------------------------------------------------------------
# directory walks


def test_walk_skips_tokendrop_outputs_and_says_so(tmp_path, capsys):
    """An earlier prepare's output inside the corpus directory was read back as corpus (its
    vocab.txt became a document); re-running the first command with --overwrite was then refused."""
    corpus = tmp_path / "corpus"
    write_documents(corpus / "a.txt", DOCS)
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    argv = [
        "prepare",
        "--corpus",
        str(corpus),
        "--out",
        str(corpus / "prep"),
        "--seq-len",
        "32",
        "--vocab",
        vocab,
        "--quiet",
        "--workers",
        "1",
    ]
    assert main(argv) == 0
    first = json.loads((corpus / "prep" / "meta.json").read_text())
    capsys.readouterr()
    assert main([*argv, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"note: {corpus / 'prep'}: skipped, tokendrop's own prepared output" in err
    again = json.loads((corpus / "prep" / "meta.json").read_text())
    assert [s["path"] for s in again["sources"]] == [str(corpus / "a.txt")]
    assert again["counts"] == first["counts"]
    # a glob with ** walks the same way; the output given itself is refused
    assert [d for d in iter_documents([str(corpus / "**" / "*.txt")])] == DOCS
    with pytest.raises(DataError, match="tokendrop's own prepared output, not a corpus"):
        read_all(corpus / "prep")


@pytest.mark.parametrize("kind", ["loop", "dangling", "directory loop", "two links in a loop"])
def test_walk_refuses_broken_links_in_one_line(tmp_path, capsys, kind):
    corpus = tmp_path / "corpus"
    write_documents(corpus / "a.txt", DOCS)
    if kind == "loop":
        os.symlink("loop.txt", corpus / "loop.txt")
        says, link = "a symbolic link loop", corpus / "loop.txt"
    elif kind == "dangling":
        os.symlink("gone.txt", corpus / "b.txt")
        says, link = "a dangling symbolic link", corpus / "b.txt"
    elif kind == "directory loop":
        (corpus / "sub").mkdir()
        os.symlink("..", corpus / "sub" / "up")
        says, link = "a directory this walk is already in", corpus / "sub" / "up"
    else:
        # x/to-y -> y, y/to-x -> x: no link points at its own ancestor, yet the walk would never end
        (corpus / "x").mkdir()
        (corpus / "y").mkdir()
        os.symlink("../y", corpus / "x" / "to-y")
        os.symlink("../x", corpus / "y" / "to-x")
        says, link = "a directory this walk is already in", corpus / "x" / "to-y" / "to-x"
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    for given in (corpus, link):
        if kind in ("directory loop", "two links in a loop") and given == link:
            continue  # the link itself is a fine directory to read
        rc = main(
            [
                "prepare",
                "--corpus",
                str(given),
                "--out",
                str(tmp_path / "out"),
                "--seq-len",
                "32",
                "--vocab",
                vocab,
                "--quiet",
                "--workers",
                "1",
            ]
        )
        err = capsys.readouterr().err.strip()
        assert (
            rc == 2
            and err == err.splitlines()[0]
            and err.startswith(f"error: {link}: ")
            and says in err
        ), err
        assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_walk_follows_linked_directories(tmp_path):
    write_documents(tmp_path / "elsewhere" / "b.txt", DOCS[:5])
    corpus = tmp_path / "corpus"
    write_documents(corpus / "a.txt", DOCS[5:])
    os.symlink(tmp_path / "elsewhere", corpus / "linked")
    assert read_all(corpus) == DOCS[5:] + DOCS[:5]


def _edited(tiny_data, tmp_path, edit):
    import shutil

    d = tmp_path / "data"
    shutil.copytree(tiny_data, d)
    meta = json.loads((d / "meta.json").read_text())
    edit(meta)
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def test_a_meta_json_edited_consistently_is_refused(tiny_data, tmp_path):
    """T halved and the sequence counts doubled keep every size check true but cut each row in
    two: rows that do not start with [CLS] are found (the first and last at open, every one under
    verify); a vocab_size above vocab.txt's tokens is refused at open."""
    from tokendrop.data.prepared import PreparedData

    def halve(meta):
        meta["seq_len"] //= 2
        for split in meta["splits"].values():
            split["num_sequences"] *= 2

    d = _edited(tiny_data, tmp_path / "a", halve)
    with pytest.raises(DataError) as e:
        PreparedData.open(d)
    assert "of its first and last rows of T = 32 do not start with [CLS]" in str(e.value)
    n = sum(1 for _ in open(tiny_data / "vocab.txt", encoding="utf-8"))

    def grow(meta):
        meta["vocab_size"] = n + 100

    d = _edited(tiny_data, tmp_path / "b", grow)
    with pytest.raises(DataError) as e:
        PreparedData.open(d)
    assert f"vocab_size {n + 100} but {d / 'vocab.txt'} holds {n} tokens" in str(e.value)
    PreparedData.open(tiny_data, verify=True)  # the unedited data passes both


def test_verify_reads_every_row_start(tiny_data, tmp_path):
    """A row in the middle that does not start with [CLS] (its first and last rows intact, the
    sha256 rewritten) is found by verify, counted."""
    import hashlib

    import numpy as np

    from tokendrop.data.prepared import PreparedData

    d = _edited(tiny_data, tmp_path, lambda meta: None)
    meta = json.loads((d / "meta.json").read_text())
    f = d / meta["splits"]["train"]["file"]
    rows = np.fromfile(f, dtype=meta["dtype"]).reshape(-1, meta["seq_len"])
    rows[1, 0] = rows[1, 1]
    rows.tofile(f)
    meta["splits"]["train"]["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (d / "meta.json").write_text(json.dumps(meta))
    PreparedData.open(d)  # first and last rows: fine
    with pytest.raises(DataError, match=r"1 of its rows of T = 64 do not start with \[CLS\]"):
        PreparedData.open(d, verify=True)
