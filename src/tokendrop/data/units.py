"""Work units of :func:`.prepare.prepare` and the work directory that makes it resumable.

The corpus is cut into *work units* that do not depend on the number of workers:

* an uncompressed text/JSONL file larger than ``unit_bytes`` -- byte ranges of about ``unit_bytes``
  each, cut at document boundaries (:func:`.corpus.split_points`: a line start for JSONL, the line
  after a blank line for text), so the units read in order give exactly the file's documents;
* a Parquet/Arrow file -- ranges of row groups / record batches of about ``unit_bytes`` of data;
* anything else (a compressed file, a Wikipedia dump, an ``hf:`` dataset, a small file) -- one unit.

Each unit is tokenized on its own (in a worker process with ``workers > 1``: reading, decompressing,
JSON parsing and tokenizing all run in the workers; a Wikipedia dump or ``hf:`` dataset, and every
unit when there are fewer units left than workers, is read by this process and cleaned + tokenized
by the workers chunk by chunk; a single unit left is tokenized here with ``tokenizers``' threads)
into its own directory of the *work directory* ``<out>.partial/``::

    plan.json          format marker, the key (inputs, tokenizer, text field) and the units
    units/000012/      ids.bin (the unit's document ids, concatenated), lengths.bin (int64 per
                       document), info.json (counts) -- renamed into place only when complete
    tmp/               units being written (emptied at every start)

A ``prepare`` that is interrupted (Ctrl-C, SIGTERM, SIGKILL, a crash) leaves ``<out>.partial``;
the same command run again continues from the finished units if the key is the same (same files
with the same sizes and modification times, the same tokenizer, text field and id width); with
another key it is refused, or started over with ``--overwrite``.  The output directory itself
appears only once complete (:mod:`.prepare`), after which the work directory is removed.  The result
is the same, byte for byte, for any number of workers, unit size, and interruptions.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from tokendrop.data import columnar
from tokendrop.data.corpus import (
    HF,
    JSONL,
    TEXT,
    WIKI,
    WORK_FORMAT,
    Source,
    is_compressed,
    split_points,
)
from tokendrop.data.encode import (
    IDS,
    INFO,
    LENGTHS,
    WORKER_STATE,
    inline_encode,
    make_pool,
    pooled_encode,
    tokenize_unit,
    tokenizers_parallelism,
)
from tokendrop.data.tokenizer import plain_copy
from tokendrop.errors import DataError
from tokendrop.runs.files import atomic_directory, atomic_write_json, discard_dir
from tokendrop.runs.gate import gate

# the largest default work unit (uncompressed text/JSONL bytes, Parquet/Arrow data bytes)
UNIT_BYTES = 32_000_000
MIN_UNIT_BYTES = 1_000_000
UNITS_WANTED = 64  # the default unit size aims at this many units (the workers' load stays even)
WORK_VERSION = 1
_MAIN_READ = (WIKI, HF)  # read by the main process, cleaned/tokenized by the workers chunk by chunk


@dataclass(frozen=True)
class Unit:
    """One work unit: source index, ``[start, end)`` in the source's coordinates (bytes, row groups
    or record batches; ``end == -1``: the whole source), and its on-disk bytes (progress)."""

    source: int
    start: int = 0
    end: int = -1
    weight: int = 0

    @property
    def span(self) -> tuple[int, int] | None:
        return None if self.end < 0 else (self.start, self.end)


def default_unit_bytes(sources: Sequence[Source]) -> int:
    """The corpus's size / 64, within [1 MB, 32 MB]: enough units to keep the workers evenly busy,
    few enough that each is worth a task.  A function of the inputs only, not of the workers."""
    return max(MIN_UNIT_BYTES, min(UNIT_BYTES, sum(s.size for s in sources) // UNITS_WANTED))


def plan_units(
    sources: Sequence[Source], text_field: str, unit_bytes: int | None = None
) -> list[Unit]:
    """The work units of ``sources``, in corpus order (independent of the number of workers);
    ``unit_bytes`` default: :func:`default_unit_bytes`."""
    unit_bytes = unit_bytes or default_unit_bytes(sources)
    units: list[Unit] = []
    for i, s in enumerate(sources):
        if s.fmt in (TEXT, JSONL) and s.size > unit_bytes and not is_compressed(s.path):
            cuts = [0, *split_points(s.path, s.fmt, unit_bytes), s.size]
            if len(cuts) > 2:
                units += [Unit(i, a, b, b - a) for a, b in zip(cuts, cuts[1:])]
                continue
        if s.fmt in (columnar.PARQUET, columnar.ARROW):
            parts = columnar.plan(s.path, s.fmt, text_field, unit_bytes)
            if len(parts) > 1:
                units += [Unit(i, a, b, w) for a, b, w in parts]
                continue
        units.append(Unit(i, 0, -1, s.size))
    return units


def work_key(
    sources: Sequence[Source],
    text_field: str,
    tok=None,
    dtype: np.dtype | None = None,
    trained: dict | None = None,
) -> dict:
    """What the finished units depend on: the inputs (path, format, size, mtime), the text field and
    the tokenizer: the sha256 of its JSON and the id width, or, for a vocabulary trained on the
    corpus (``trained``: its settings), those settings (the tokenizer trained first is kept in the
    work dir and used again: training is not guaranteed to give the same vocabulary twice)."""
    inputs = []
    for s in sources:
        if s.fmt == HF:
            inputs.append([s.path, s.fmt])
        else:
            st = os.stat(s.path)
            inputs.append([os.path.abspath(s.path), s.fmt, st.st_size, st.st_mtime_ns])
    if trained is not None:
        tokenizer = {"trained": trained}
    else:
        tokenizer = {
            "sha256": hashlib.sha256(plain_copy(tok).to_str().encode("utf-8")).hexdigest(),
            "dtype": np.dtype(dtype).name,
        }
    return {"inputs": inputs, "text_field": text_field, "tokenizer": tokenizer}


class WorkDir:
    """``<out>.partial``: the plan and the finished units of one preparation (see the module
    doc)."""

    def __init__(self, path: str, units: list[Unit], dtype: np.dtype):
        self.path = path
        self.units = units
        self.dtype = np.dtype(dtype)
        self.units_dir = os.path.join(path, "units")
        self.tmp_dir = os.path.join(path, "tmp")

    # ---- opening
    @classmethod
    def check(cls, path: str, key: dict, overwrite: bool) -> dict | None:
        """The plan of the work dir ``path`` if it can be continued with ``key``; None if there is
        none (or it is to be started over: ``overwrite``).  Refused: a work dir of another key
        without ``overwrite``, anything at ``path`` that is not ours.  Nothing is changed."""
        if not os.path.lexists(path):
            return None
        plan = cls._read_plan(path)
        if plan["key"] == key:
            return plan
        if not overwrite:
            what = _key_difference(plan["key"], key)
            raise DataError(
                f"{path}: holds the unfinished preparation of other inputs ({what}); run the "
                "command that started it to finish it, or add --overwrite to start over"
            )
        return None

    @staticmethod
    def saved_tokenizer(path: str) -> str | None:
        """The JSON of the tokenizer trained for the work dir ``path`` (``--vocab-size``), if
        any."""
        p = os.path.join(path, "tokenizer.json")
        return Path(p).read_text(encoding="utf-8") if os.path.isfile(p) else None

    @classmethod
    def open(
        cls,
        path: str,
        key: dict,
        make_plan,
        overwrite: bool,
        dtype: np.dtype,
        tokenizer_json: str | None = None,
    ) -> tuple[WorkDir, bool]:
        """Continue ``path`` if it holds the same key, else create it (``make_plan()`` -> units; a
        trained tokenizer's ``tokenizer_json`` kept beside them).  -> (work dir, created by this
        call).  Refused as :meth:`check` says."""
        plan = cls.check(path, key, overwrite)
        if plan is not None:
            self = cls(path, [Unit(*u) for u in plan["units"]], dtype)
            self._reset_tmp()
            return self, False
        if os.path.lexists(path):
            discard_dir(Path(path))
        units = make_plan()
        with atomic_directory(path) as tmp:
            (tmp / "units").mkdir()
            (tmp / "tmp").mkdir()
            if tokenizer_json is not None:
                (tmp / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
            atomic_write_json(
                tmp / "plan.json",
                {
                    "format": WORK_FORMAT,
                    "version": WORK_VERSION,
                    "key": key,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "units": [[u.source, u.start, u.end, u.weight] for u in units],
                },
            )
        return cls(path, units, dtype), True

    @staticmethod
    def _read_plan(path: str) -> dict:
        p = os.path.join(path, "plan.json")
        try:
            with open(p, encoding="utf-8") as f:
                plan = json.load(f)
        except (OSError, ValueError):
            plan = None
        if (
            not isinstance(plan, dict)
            or plan.get("format") != WORK_FORMAT
            or not os.path.isdir(path)
        ):
            raise DataError(
                f"{path}: exists and is not tokendrop's work directory of a prepare (no valid "
                "plan.json); move it away or choose another --out"
            )
        if plan.get("version") != WORK_VERSION or not isinstance(plan.get("units"), list):
            raise DataError(
                f"{p}: written by another version of tokendrop; add --overwrite to start over"
            )
        return plan

    def _reset_tmp(self) -> None:
        shutil.rmtree(self.tmp_dir, ignore_errors=True)  # units a killed run was writing
        os.makedirs(self.tmp_dir, exist_ok=True)
        os.makedirs(self.units_dir, exist_ok=True)

    # ---- units
    def unit_path(self, i: int) -> str:
        return os.path.join(self.units_dir, f"{i:06d}")

    def info(self, i: int) -> dict | None:
        """A finished unit's counts, or None (absent or inconsistent: redone)."""
        d = self.unit_path(i)
        try:
            with open(os.path.join(d, INFO), encoding="utf-8") as f:
                info = json.load(f)
            ok = (
                os.path.getsize(os.path.join(d, LENGTHS)) == 8 * info["documents"]
                and os.path.getsize(os.path.join(d, IDS)) == self.dtype.itemsize * info["tokens"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info if ok else None

    def unit_arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths) of a finished unit; ids memory-mapped."""
        d = self.unit_path(i)
        dtype = self.dtype
        lengths = np.fromfile(os.path.join(d, LENGTHS), dtype=np.int64)
        ids_path = os.path.join(d, IDS)
        ids = (
            np.memmap(ids_path, dtype=dtype, mode="r")
            if os.path.getsize(ids_path)
            else np.zeros(0, dtype)
        )
        return ids, lengths

    def remove(self) -> None:
        discard_dir(Path(self.path))


def _key_difference(old: dict, new: dict) -> str:
    if old.get("inputs") != new.get("inputs"):
        a, b = old.get("inputs") or [], new.get("inputs") or []
        if len(a) != len(b):
            return f"{len(a)} input files then, {len(b)} now"
        x = next((x for x, y in zip(a, b) if x != y), None)
        return f"{x[0] if x else 'an input'} differs or changed since"
    if old.get("text_field") != new.get("text_field"):
        return f"--text-field {old.get('text_field')!r} then"
    return "another tokenizer or vocabulary setting"


# ----------------------------------------------------------------------------------------------
# running the units


def run_units(
    work: WorkDir,
    sources: Sequence[Source],
    tok,
    dtype: np.dtype,
    workers: int,
    text_field: str,
    progress: bool,
) -> list[dict]:
    """Tokenize every unfinished unit of ``work``; -> every unit's info, in unit order."""
    units = work.units
    infos = [work.info(i) for i in range(len(units))]
    pending = [i for i, info in enumerate(infos) if info is None]
    for i in pending:  # an inconsistent leftover (edited, or a disk problem): redone
        if os.path.lexists(work.unit_path(i)):
            discard_dir(Path(work.unit_path(i)))
    total = sum(u.weight for u in units)
    bar = tqdm(
        total=total or None,
        initial=total - sum(units[i].weight for i in pending),
        unit="B",
        unit_scale=True,
        desc="tokenize",
        disable=not progress,
        dynamic_ncols=True,
        smoothing=0.1,
    )
    docs = [sum(info["documents"] for info in infos if info is not None)]

    def on_docs(n: int) -> None:
        docs[0] += n
        bar.set_postfix_str(f"{docs[0]:,} docs", refresh=False)

    plain = plain_copy(tok)
    try:
        if workers <= 1 or (
            len(pending) <= 1
            and all(sources[units[i].source].fmt not in _MAIN_READ for i in pending)
        ):
            with tokenizers_parallelism(workers > 1):
                for i in pending:
                    infos[i] = _inline(work, sources, i, plain, dtype, text_field, bar, on_docs)
        else:
            _pooled(work, sources, pending, infos, plain, dtype, workers, text_field, bar, on_docs)
        # a test-only pause point (tokendrop.runs.gate): every unit kept, no output yet
        gate("prepare-units")
    finally:
        bar.close()
        # whatever was in flight when an error stopped us
        shutil.rmtree(work.tmp_dir, ignore_errors=True)
        os.makedirs(work.tmp_dir, exist_ok=True)
    return infos


def _inline(
    work: WorkDir, sources, i: int, plain, dtype, text_field: str, bar, on_docs, encode=None
) -> dict:
    u = work.units[i]
    seen = [0]

    def prog(n: int) -> None:
        seen[0] += n
        bar.update(n)

    info = tokenize_unit(
        sources[u.source],
        u.span,
        work.unit_path(i),
        work.tmp_dir,
        text_field,
        encode or inline_encode(plain, dtype),
        prog,
        on_docs,
    )
    bar.update(u.weight - seen[0])  # the unit's share exactly, whatever the reader reported
    return info


def _pooled(
    work: WorkDir,
    sources,
    pending: list[int],
    infos: list,
    plain,
    dtype,
    workers: int,
    text_field: str,
    bar,
    on_docs,
) -> None:
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    read_bytes, read_docs = ctx.Value("q", 0), ctx.Value("q", 0)
    context = {
        "work": work,
        "sources": list(sources),
        "text_field": text_field,
        "bytes": read_bytes,
        "docs": read_docs,
    }
    pool = make_pool(workers, plain.to_str(), dtype, context)
    try:
        main_read = [
            i
            for i in pending
            if sources[work.units[i].source].fmt in _MAIN_READ or len(pending) < workers
        ]
        for i in main_read:  # this process reads; the workers clean and tokenize chunk by chunk
            infos[i] = _inline(
                work,
                sources,
                i,
                plain,
                dtype,
                text_field,
                bar,
                on_docs,
                pooled_encode(pool, workers),
            )
        running = {i: pool.apply_async(_unit_task, (i,)) for i in pending if i not in main_read}
        seen_b = seen_d = 0
        while running:
            next(iter(running.values())).wait(0.2)
            for i in [i for i, r in running.items() if r.ready()]:
                infos[i] = running.pop(i).get()  # re-raises a worker's error here
            b, d = read_bytes.value, read_docs.value
            bar.update(b - seen_b)
            if d != seen_d:
                on_docs(d - seen_d)
            seen_b, seen_d = b, d
    finally:
        pool.terminate()
        pool.join()


def _unit_task(i: int) -> dict:
    """A worker tokenizes unit ``i`` (reading it itself); progress through shared counters."""
    work: WorkDir = WORKER_STATE["work"]
    u = work.units[i]
    seen = [0]

    def add(counter, n: int) -> None:
        with counter.get_lock():
            counter.value += n

    def prog(n: int) -> None:
        seen[0] += n
        add(WORKER_STATE["bytes"], n)

    info = tokenize_unit(
        WORKER_STATE["sources"][u.source],
        u.span,
        work.unit_path(i),
        work.tmp_dir,
        WORKER_STATE["text_field"],
        inline_encode(WORKER_STATE["tok"], WORKER_STATE["dtype"]),
        prog,
        lambda n: add(WORKER_STATE["docs"], n),
    )
    add(WORKER_STATE["bytes"], u.weight - seen[0])
    return info
