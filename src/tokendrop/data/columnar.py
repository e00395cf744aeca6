"""Columnar inputs, read with ``pyarrow`` (no ``datasets`` needed): Parquet files, Arrow IPC files
(stream or file format, as ``datasets`` writes them), and Hugging Face ``datasets`` directories
written by ``save_to_disk``.

* A Parquet file (``.parquet``) is read in row groups, only its text column (``text_field``).
* An Arrow file (``.arrow``) is memory-mapped and read record batch by record batch (zero-copy).
* A ``datasets`` directory is a ``Dataset`` (``state.json`` + ``dataset_info.json`` +
  ``data-*.arrow``, read in the order ``state.json`` lists them) or a ``DatasetDict``
  (``dataset_dict.json`` + one such directory per split); ``DIR@SPLIT`` picks a split, and a
  ``DatasetDict`` with several splits needs one.

The text column must be a string column, or a dictionary-encoded one (pandas' categorical dtype;
each batch is decoded to its strings); a null entry is an error (like a non-string JSONL field).
Work units (:mod:`.units`) are ranges of row groups (Parquet) or record batches (Arrow), so any of
these files can be prepared by several workers; every reader streams one batch at a time.

Memory does not grow with the number of rows or the longest cell beyond what pyarrow decodes: a
Parquet file is read ``_BATCH_ROWS`` rows at a time through a ``_READ_BUFFER`` read buffer (not a
row group's column chunk at once), an Arrow file is memory-mapped, and the strings of a batch reach
Python a run of rows of at most ``part_bytes`` bytes at a time; a longer cell comes as an iterator
of its parts of at most ``part_bytes`` bytes each, decoded from the Arrow buffer without a copy of
the whole (:func:`read_texts`).  Pyarrow itself decodes a Parquet data page whole, and a page holds
whole values: a Parquet cell of N bytes costs a few times N bytes of pyarrow memory while it is read
(docs/design.md "Data and masking" has the measurements).  So a Parquet page longer than
``MAX_PAGE_BYTES`` uncompressed is refused before anything is decoded, naming the file, the row
group and the limit: the text column's page headers are read from the file (:func:`_page_sizes`;
pyarrow exposes no page sizes, only a column chunk's total, which is checked first and spares the
walk for every chunk no larger than the limit).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator

import numpy as np

from tokendrop.errors import DataError
from tokendrop.runs.files import read_json

PARQUET, ARROW = "parquet", "arrow"
_BATCH_ROWS = 64  # rows per Parquet read batch
_READ_BUFFER = 1 << 20  # bytes: Parquet column chunks are read through a buffer of this size
# bytes: the largest uncompressed Parquet page of the text column read (pyarrow decodes a page
# whole; the longest text parsed whole elsewhere, tokendrop.data.corpus.LINE_CHARS, is as long)
MAX_PAGE_BYTES = 1 << 26


def _pa():
    try:
        import pyarrow as pa  # type: ignore
        import pyarrow.parquet  # noqa: F401  (registers pa.parquet)
    except ImportError:
        raise DataError(
            "pyarrow is not installed; it reads Parquet/Arrow inputs: pip install pyarrow"
        ) from None
    return pa


def is_datasets_dir(path: str) -> bool:
    """A directory ``datasets``' ``save_to_disk`` wrote (a Dataset or a DatasetDict)."""
    return os.path.isfile(os.path.join(path, "dataset_dict.json")) or (
        os.path.isfile(os.path.join(path, "state.json"))
        and os.path.isfile(os.path.join(path, "dataset_info.json"))
    )


def _read_datasets_json(path: str) -> dict:
    return read_json(path, DataError, hint="expected the file datasets' save_to_disk writes")


def datasets_files(path: str, split: str | None) -> list[str]:
    """The Arrow files of a ``save_to_disk`` directory (of ``split`` for a DatasetDict), in
    order."""
    spec = f"{path}@{split}" if split is not None else path
    dd = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(dd):
        splits = _read_datasets_json(dd).get("splits")
        if (
            not isinstance(splits, list)
            or not all(isinstance(s, str) for s in splits)
            or not splits
        ):
            raise DataError(
                f"{dd}: no list of splits; expected the dataset_dict.json datasets' "
                "save_to_disk writes"
            )
        if split is None:
            if len(splits) > 1:
                raise DataError(
                    f"{path}: a datasets DatasetDict with splits {', '.join(splits)}; name one "
                    f"as {path}@SPLIT"
                )
            split = splits[0]
        if split not in splits:
            raise DataError(f"{spec}: no split {split!r}; expected one of {', '.join(splits)}")
        path = os.path.join(path, split)
    elif split is not None:
        raise DataError(
            f"{spec}: {path} is a datasets Dataset, not a DatasetDict with splits; drop @{split}"
        )
    state_p = os.path.join(path, "state.json")
    if not (os.path.isfile(state_p) and os.path.isfile(os.path.join(path, "dataset_info.json"))):
        raise DataError(
            f"{path}: not a datasets save_to_disk directory (no state.json + dataset_info.json); "
            "expected the output of Dataset.save_to_disk"
        )
    state = _read_datasets_json(state_p)
    if state.get("_indices_filename"):
        raise DataError(
            f"{state_p}: the dataset has an indices mapping (select/shuffle not flattened); save "
            "it again after dataset.flatten_indices()"
        )
    files = state.get("_data_files")
    if (
        not isinstance(files, list)
        or not files
        or not all(isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files)
    ):
        raise DataError(
            f"{state_p}: no _data_files list; expected the state.json datasets' save_to_disk writes"
        )
    out = []
    for f in files:
        p = os.path.join(path, f["filename"])
        if not os.path.isfile(p):
            raise DataError(
                f"{p}: missing, but {state_p} lists it; the datasets directory is incomplete"
            )
        out.append(p)
    return out


# ----------------------------------------------------------------------------------------------
# opening, checking, planning


def _is_stream(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(6) != b"ARROW1"


_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the Arrow IPC stream's end-of-stream marker


def _open_arrow(path: str):
    """A reader of the Arrow IPC file at ``path`` (stream or file format).  A stream must end with
    the end-of-stream marker its writer's ``close()`` writes: pyarrow's reader takes a stream cut
    at a record batch boundary for a complete one, so a truncated file would be read quietly short.
    (The file format's footer is checked by pyarrow itself.)"""
    pa = _pa()
    if _is_stream(path):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - len(_EOS)))
            if f.read() != _EOS:
                raise DataError(
                    f"{path}: cannot read as Arrow IPC stream (no end-of-stream marker at its "
                    "end): the file "
                    "is truncated or its writer was not closed; re-export it"
                )
        return pa.ipc.open_stream(pa.memory_map(path, "r"))
    return pa.ipc.open_file(pa.memory_map(path, "r"))


def _arrow_batches(reader) -> Iterator:
    if hasattr(reader, "num_record_batches"):  # file format: random access
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


def _bad_file(path: str, fmt: str, e: Exception) -> DataError:
    what = "Parquet" if fmt == PARQUET else "Arrow IPC (stream or file)"
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return DataError(
        f"{path}: cannot read as {what} ({msg}); the file is corrupt or not {what}: re-export it"
    )


def _parquet(path: str):
    """The Parquet file at ``path``, its pages' CRC checksums verified where the writer stored them
    (``write_page_checksum``): a flipped byte in such a page is an error, not changed text."""
    return _pa().parquet.ParquetFile(
        path, page_checksum_verification=True, buffer_size=_READ_BUFFER
    )


def _varint(f) -> int:
    """An unsigned LEB128 varint of Thrift's compact protocol, read from ``f``."""
    out = shift = 0
    while shift < 70:
        b = f.read(1)
        if not b:
            raise ValueError("a Parquet page header ends early")
        out |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return out
        shift += 7
    raise ValueError("a Parquet page header holds a varint over 10 bytes")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _skip(f, kind: int, in_list: bool = False) -> None:
    """Skip a Thrift compact value of type ``kind`` (a bool in a list or map takes a byte; in a
    field header it is the type itself)."""
    if kind in (1, 2):
        if in_list:
            f.read(1)
    elif kind == 3:
        f.read(1)
    elif kind in (4, 5, 6):
        _varint(f)
    elif kind == 7:
        f.seek(8, 1)
    elif kind == 8:
        f.seek(_varint(f), 1)
    elif kind in (9, 10):
        head = f.read(1)
        if not head:
            raise ValueError("a Parquet page header ends early")
        n = head[0] >> 4
        for _ in range(_varint(f) if n == 15 else n):
            _skip(f, head[0] & 0x0F, True)
    elif kind == 11:
        n = _varint(f)
        kinds = f.read(1)[0] if n else 0
        for _ in range(n):
            _skip(f, kinds >> 4, True)
            _skip(f, kinds & 0x0F, True)
    elif kind == 12:
        _struct(f, ())
    else:
        raise ValueError(f"a Parquet page header holds an unknown Thrift type {kind}")


def _struct(f, wanted: tuple[int, ...]) -> dict[int, int]:
    """Read a Thrift compact struct from ``f``: the i32 fields whose ids are ``wanted``, the rest
    skipped."""
    out: dict[int, int] = {}
    fid = 0
    while True:
        head = f.read(1)
        if not head:
            raise ValueError("a Parquet page header ends early")
        if head[0] == 0:
            return out
        kind, delta = head[0] & 0x0F, head[0] >> 4
        fid = fid + delta if delta else _zigzag(_varint(f))
        if fid in wanted and kind == 5:
            out[fid] = _zigzag(_varint(f))
        else:
            _skip(f, kind)


def _page_sizes(path: str, chunk) -> Iterator[int]:
    """The uncompressed sizes of the pages of a column chunk (``ColumnChunkMetaData``), read from
    their Thrift ``PageHeader`` s (field 2: uncompressed_page_size, 3: compressed_page_size) and
    nothing else of the file."""
    offsets = [o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o]
    pos = min(offsets)
    end = pos + chunk.total_compressed_size
    with open(path, "rb") as f:
        while pos < end:
            f.seek(pos)
            header = _struct(f, (2, 3))
            if 2 not in header or 3 not in header or header[3] < 0:
                raise ValueError("a Parquet page header without its sizes")
            yield header[2]
            pos = f.tell() + header[3]


def _check_pages(path: str, pf, text_field: str, groups) -> None:
    """Refuse (DataError) a page of ``text_field`` in row groups ``groups`` longer than
    ``MAX_PAGE_BYTES`` uncompressed, before pyarrow decodes it (it would, whole)."""
    md = pf.metadata
    for g in groups:
        rg = md.row_group(g)
        chunk = next(
            rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema == text_field
        )
        if chunk.total_uncompressed_size <= MAX_PAGE_BYTES:
            continue
        size = max(_page_sizes(path, chunk), default=0)
        if size > MAX_PAGE_BYTES:
            raise DataError(
                f"{path}: row group {g}: column {text_field!r} has a page of {size:,} bytes, over "
                f"the limit of {MAX_PAGE_BYTES:,} (a page is decoded whole and holds whole "
                "cells); split its longest texts into several rows, or write it with smaller pages"
            )


def _is_string(t) -> bool:
    pa = _pa()
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or getattr(pa.types, "is_string_view", lambda _: False)(t)
    )


def _is_text(t) -> bool:
    """A string type, or a dictionary-encoded one (pandas' categorical column)."""
    return _is_string(t) or (_pa().types.is_dictionary(t) and _is_string(t.value_type))


def _check_schema(path: str, schema, text_field: str) -> int:
    names = list(schema.names)
    if text_field not in names:
        raise DataError(
            f"{path}: no column {text_field!r}; its columns are {', '.join(names) or '(none)'}; "
            "set --text-field to the column holding the text"
        )
    t = schema.field(text_field).type
    if not _is_text(t):
        raise DataError(
            f"{path}: column {text_field!r} is {t}, not a string column; set --text-field to the "
            "column holding the text"
        )
    return names.index(text_field)


def byte_share(size: int, rows_before: int, total_rows: int) -> int:
    """The on-disk bytes counted as read once ``rows_before`` of ``total_rows`` rows are
    (progress)."""
    return size * rows_before // total_rows if total_rows else size


def plan(path: str, fmt: str, text_field: str, unit_bytes: int) -> list[tuple[int, int, int]]:
    """Check the file (readable, a string ``text_field`` column) and cut it into work units:
    ``(first, end, weight)``: ranges of row groups (Parquet) or record batches (Arrow) of about
    ``unit_bytes`` of data each, and their share of the file's on-disk bytes (:func:`byte_share`).
    Reads only metadata (Parquet) or maps the file (Arrow)."""
    pa = _pa()
    sizes: list[tuple[int, int]] = []  # (bytes, rows) per row group / batch
    try:
        if fmt == PARQUET:
            pf = _parquet(path)
            _check_schema(path, pf.schema_arrow, text_field)
            md = pf.metadata
            _check_pages(path, pf, text_field, range(md.num_row_groups))
            sizes = [
                (md.row_group(i).total_byte_size, md.row_group(i).num_rows)
                for i in range(md.num_row_groups)
            ]
        else:
            reader = _open_arrow(path)
            _check_schema(path, reader.schema, text_field)
            sizes = [(b.nbytes, b.num_rows) for b in _arrow_batches(reader)]
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise _bad_file(path, fmt, e) from None
    size = os.path.getsize(path)
    total = sum(nr for _, nr in sizes)
    units: list[tuple[int, int, int]] = []
    first = acc = rows = rows0 = 0
    for i, (nb, nr) in enumerate(sizes):
        acc += nb
        rows += nr
        if acc >= unit_bytes or i == len(sizes) - 1:
            units.append(
                (first, i + 1, byte_share(size, rows, total) - byte_share(size, rows0, total))
            )
            first, acc, rows0 = i + 1, 0, rows
    return units or [(0, 0, size)]


# ----------------------------------------------------------------------------------------------
# reading


def read_texts(
    path: str,
    fmt: str,
    text_field: str,
    span: tuple[int, int] | None = None,
    progress: Callable[[float], None] | None = None,
    stats: dict | None = None,
    part_bytes: int = 1 << 20,
) -> Iterator[str | Iterator[str]]:
    """The text column's strings of row groups / record batches ``span`` = ``[first, end)`` (all
    when None), in order; a string longer than ``part_bytes`` UTF-8 bytes comes as an iterator of
    its decoded parts of at most ``part_bytes`` bytes each (:func:`_cell_parts`), the others as
    ``str``.  ``progress(rows_before, total_rows)``: the file's rows up to the reading position
    (called once at the start of the span and after every batch)."""
    pa = _pa()
    import pyarrow.compute as pc  # type: ignore

    try:
        if fmt == PARQUET:
            pf = _parquet(path)
            md = pf.metadata
            first, end = span if span is not None else (0, md.num_row_groups)
            row0 = sum(md.row_group(i).num_rows for i in range(first))
            total = md.num_rows
            groups = list(range(first, end))
            _check_pages(path, pf, text_field, groups)
            batches = (
                pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=groups, columns=[text_field])
                if groups
                else []
            )
            col = 0
        else:
            reader = _open_arrow(path)
            col = _check_schema(path, reader.schema, text_field)
            first, end = span if span is not None else (0, 1 << 62)
            batches, row0, total = _arrow_span(path, first, end)
        done = 0
        if progress is not None:
            progress(row0, total)
        for b in batches:
            arr = b.column(col)
            if pa.types.is_dictionary(arr.type):  # a categorical column: this batch's strings
                arr = arr.dictionary_decode()
            if arr.null_count:
                i = row0 + done + arr.is_null().to_pylist().index(True)
                raise DataError(
                    f"{path}: row {i}: column {text_field!r} is null; expected a string in every "
                    "row (drop or fill the empty rows)"
                )
            lens = pc.binary_length(arr).to_numpy(zero_copy_only=False)
            if stats is not None:
                stats["input_bytes"] = stats.get("input_bytes", 0) + int(lens.sum())
            yield from _strings(arr, lens, part_bytes)
            done += len(arr)
            if progress is not None:
                progress(row0 + done, total)
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise _bad_file(path, fmt, e) from None


def _strings(arr, lens, part_bytes: int) -> Iterator[str | Iterator[str]]:
    """The strings of ``arr`` (byte lengths ``lens``): runs of rows of at most ``part_bytes``
    bytes in all as ``str``, a longer row as :func:`_cell_parts`."""
    n = len(arr)
    if n == 0 or (int(lens.max()) <= part_bytes and int(lens.sum()) <= part_bytes):
        yield from arr.to_pylist()
        return
    i = 0
    while i < n:
        if lens[i] > part_bytes:
            yield _cell_parts(arr, i, part_bytes)
            i += 1
            continue
        j, size = i, 0
        while j < n and lens[j] <= part_bytes and size + lens[j] <= part_bytes:
            size += int(lens[j])
            j += 1
        yield from arr.slice(i, j - i).to_pylist()
        i = j


def _cell_parts(arr, i: int, part_bytes: int) -> Iterator[str]:
    """String ``i`` of ``arr`` decoded in parts of at most ``part_bytes`` of its UTF-8 bytes (a
    character cut between two parts is completed by the next), read from the array's data buffer
    in place: only one part is copied at a time."""
    pa = _pa()
    cell = arr.slice(i, 1)
    if not (pa.types.is_string(cell.type) or pa.types.is_large_string(cell.type)):
        cell = cell.cast(pa.large_string())  # a string view: one copy of this cell
    bufs = cell.buffers()
    width = np.int64 if pa.types.is_large_string(cell.type) else np.int32
    start, stop = (int(x) for x in np.frombuffer(bufs[1], dtype=width)[cell.offset :][:2])
    data = memoryview(bufs[2])
    decoder = codecs.getincrementaldecoder("utf-8")()
    for a in range(start, stop, part_bytes):
        b = min(a + part_bytes, stop)
        yield decoder.decode(bytes(data[a:b]), b == stop)


def _arrow_span(path: str, first: int, end: int) -> tuple[Iterator, int, int]:
    """Batches ``[first, end)`` of an Arrow file, lazily (the file is memory-mapped: a skipped batch
    is never touched), the index of the span's first row, and the file's number of rows."""
    counts = [b.num_rows for b in _arrow_batches(_open_arrow(path))]
    end = min(end, len(counts))

    def gen() -> Iterator:
        for i, b in enumerate(_arrow_batches(_open_arrow(path))):
            if i >= end:
                return
            if i >= first:
                yield b

    return gen(), sum(counts[:first]), sum(counts)
