"""prepare at scale: work units, workers, resume after SIGKILL, the streamed eval split, and the
columnar / zstd inputs (Parquet, Arrow, datasets save_to_disk directories, .zst)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa  # a dependency of tokendrop (Parquet/Arrow inputs)
import pyarrow.parquet as pq
import pytest
from toydata import toy_documents, write_documents, write_toy_vocab

from tokendrop.cli import main
from tokendrop.data import DataError, prepare
from tokendrop.data.corpus import JSONL, TEXT, iter_documents, read_jsonl, read_text, split_points
from tokendrop.data.shards import PackedWriter, ShardWriter, UnpackedWriter, choose_eval_docs
from tokendrop.data.tokenizer import build_tokenizer

REPO = Path(__file__).resolve().parents[3]
OUTPUTS = ("train.bin", "eval.bin", "token_counts.npy")


def digests(out) -> dict:
    return {f: hashlib.sha256((Path(out) / f).read_bytes()).hexdigest() for f in OUTPUTS}


def debris(parent) -> list[str]:
    return sorted(
        n
        for n in os.listdir(parent)
        if ".tmp-" in n or n.endswith(".partial") or n.endswith(".lock")
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~250 KB: a text file and a JSONL file, documents of 1-400 words."""
    d = tmp_path_factory.mktemp("corpus")
    vocab = write_toy_vocab(d / "vocab.txt")
    docs = toy_documents(num_docs=500, seed=3, max_words=400)
    write_documents(d / "a.txt", docs[:300])
    with open(d / "b.jsonl", "w", encoding="utf-8") as f:
        for i, doc in enumerate(docs[300:]):
            f.write(json.dumps({"text": doc, "id": i}) + "\n" + ("\n" if i % 7 == 0 else ""))
    return vocab, [str(d / "a.txt"), str(d / "b.jsonl")], docs


# ----------------------------------------------------------------------------------------------
# reference: the whole corpus in memory, as prepare did before work units


def _reference_eval(
    lengths: np.ndarray, eval_fraction: float, body: int, packed: bool, seed: int
) -> np.ndarray:
    D = len(lengths)
    is_eval = np.zeros(D, bool)
    if eval_fraction <= 0 or D < 2:
        return is_eval
    order = np.random.default_rng([seed, 0x65766C]).permutation(D)
    cum = np.cumsum(lengths[order])
    k = int(np.searchsorted(cum, eval_fraction * cum[-1], side="left")) + 1
    need = cum + np.arange(D) if packed else np.arange(1, D + 1) * body
    k = max(k, int(np.searchsorted(need, body, side="left")) + 1)
    k = min(k, D - 1)
    is_eval[order[:k]] = True
    return is_eval


def _reference_shards(
    tmp: Path, vocab: str, paths: list[str], T: int, packed: bool, eval_fraction: float, seed: int
):
    tok = build_tokenizer(vocab)
    sp = {k: tok.token_to_id(f"[{k.upper()}]") for k in ("cls", "sep", "pad")}
    docs = [
        np.array(e.ids, np.uint16)
        for e in tok.encode_batch(list(iter_documents(paths)), add_special_tokens=False)
    ]
    docs = [d for d in docs if len(d)]
    is_eval = _reference_eval(
        np.array([len(d) for d in docs], np.int64), eval_fraction, T - 2, packed, seed
    )
    out = {}
    for split, sel in (("train", ~is_eval), ("eval", is_eval)):
        shard = ShardWriter(str(tmp / f"ref-{split}.bin"), T, np.dtype(np.uint16))
        w = (
            PackedWriter(shard, sp["cls"], sp["sep"])
            if packed
            else UnpackedWriter(shard, sp["cls"], sp["sep"], sp["pad"], "split")
        )
        for i in np.flatnonzero(sel):
            w.add(docs[i])
        w.finish()
        shard.close()
        out[f"{split}.bin"] = shard.sha.hexdigest()
    return out


# ----------------------------------------------------------------------------------------------
# determinism


@pytest.mark.parametrize("packed", [True, False])
def test_any_workers_and_unit_size_write_the_same_bytes(tmp_path, corpus, packed, capsys):
    vocab, paths, _ = corpus
    kw = dict(seq_len=32, vocab=vocab, packed=packed, eval_fraction=0.05, seed=4)
    prepare(paths, tmp_path / "one", workers=1, progress=False, **kw)  # every file one unit
    want = digests(tmp_path / "one")
    assert json.loads((tmp_path / "one" / "meta.json").read_text())["parallelism"]["units"] == 2
    assert {f: want[f] for f in ("train.bin", "eval.bin")} == _reference_shards(
        tmp_path, vocab, paths, 32, packed, 0.05, 4
    )
    # (3, None): fewer units than workers, read here and tokenized by the workers chunk by chunk
    for workers, unit in ((1, 9000), (2, 9000), (2, 40000), (3, None)):
        out = tmp_path / f"w{workers}-u{unit}"
        prepare(
            paths,
            out,
            workers=workers,
            unit_bytes=unit,
            progress=workers == 2 and unit == 9000,
            **kw,
        )
        meta = json.loads((out / "meta.json").read_text())
        assert meta["parallelism"]["units"] > 4 if unit else meta["parallelism"]["units"] == 2, (
            meta["parallelism"]
        )
        assert digests(out) == want, (workers, unit)
        assert [s["documents"] for s in meta["sources"]] == [300, 200]
        assert not (tmp_path / f"w{workers}-u{unit}.partial").exists()
    err = capsys.readouterr().err
    assert "tokenize" in err and "docs" in err  # progress: bytes, rate/ETA (tqdm) and documents
    assert debris(tmp_path) == []


def _edge_text(rng: random.Random, docs: list[str]) -> str:
    seps = ["\n", "  \n", "\t\n", "\r\n", "\u00a0\n", "\u3000\n", " \r\n", "\x0c\n"]
    parts = ["\ufeff"]
    for d in docs:
        parts.append(("\r\n" if rng.random() < 0.3 else "\n").join(d.split("\n")))
        parts.append("\n" + "".join(rng.choice(seps) for _ in range(rng.randint(1, 3))))
    return "".join(parts)


def test_units_cut_at_document_boundaries(tmp_path):
    rng = random.Random(0)
    docs = [d.replace("Ba", "Bä") for d in toy_documents(num_docs=120, seed=5, max_words=80)]
    txt = tmp_path / "edge.txt"
    txt.write_bytes(_edge_text(rng, docs).encode("utf-8"))
    jl = tmp_path / "edge.jsonl"
    jl.write_text(
        "".join(
            json.dumps({"text": d}) + "\n" + ("  \n" if i % 5 == 0 else "")
            for i, d in enumerate(docs)
        )
    )
    whole_txt, whole_jl = list(read_text(str(txt))), list(read_jsonl(str(jl)))
    assert len(whole_txt) == len(whole_jl) == 120
    for fmt, path, whole in ((TEXT, txt, whole_txt), (JSONL, jl, whole_jl)):
        size = path.stat().st_size
        for unit in (1, 50, 333, 1000, 4096, size - 1, size):
            cuts = [0, *split_points(str(path), fmt, unit), size]
            assert cuts == sorted(set(cuts)) and len(cuts) >= 2
            got = []
            for a, b in zip(cuts, cuts[1:]):
                got += list(
                    read_text(str(path), span=(a, b))
                    if fmt == TEXT
                    else read_jsonl(str(path), span=(a, b))
                )
            assert got == whole, (fmt, unit)


@pytest.mark.parametrize("packed", [True, False])
def test_streamed_eval_choice_equals_the_in_memory_one(tmp_path, packed):
    rng = np.random.default_rng(0)
    for D, frac, body in (
        (2, 0.3, 6),
        (7, 0.01, 30),
        (1000, 0.01, 126),
        (5000, 0.2, 510),
        (3000, 0.0, 10),
    ):
        lengths = rng.integers(1, 300, D).astype(np.int64)
        want = _reference_eval(lengths, frac, body, packed, seed=D)
        assert np.array_equal(choose_eval_docs(lengths, frac, body, packed, D, chunk=97), want)
        mm = np.memmap(tmp_path / "l.bin", dtype=np.int64, mode="w+", shape=(D,))
        mm[:] = lengths
        scratch = tmp_path / f"s{D}"
        scratch.mkdir()
        assert np.array_equal(
            np.asarray(choose_eval_docs(mm, frac, body, packed, D, scratch=str(scratch), chunk=64)),
            want,
        )


# ----------------------------------------------------------------------------------------------
# resume


def _cli_env() -> dict:
    return dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )


def test_sigkilled_prepare_resumes_to_the_same_bytes(tmp_path, corpus):
    vocab, paths, _ = corpus
    base = [
        "--corpus",
        *paths,
        "--seq-len",
        "32",
        "--vocab",
        vocab,
        "--eval-fraction",
        "0.05",
        "--quiet",
    ]
    prepare(
        paths,
        tmp_path / "want",
        seq_len=32,
        vocab=vocab,
        eval_fraction=0.05,
        workers=1,
        progress=False,
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "tokendrop",
        "prepare",
        *base,
        "--out",
        str(out),
        "--workers",
        "2",
        "--unit-mb",
        "0.004",
    ]
    units = tmp_path / "out.partial" / "units"
    rng = random.Random(1)
    kills = 0
    finished = False
    for _ in range(4):
        before = len(os.listdir(units)) if units.is_dir() else 0
        p = subprocess.Popen(
            cmd,
            env=_cli_env(),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # kill after this run finished 1-2 units of its own, then a random moment that ends early
        # when one more unit is done: each kill lets the run advance at most 3 of its ~60 units, so
        # the kills come while it is provably unfinished, however fast the machine (no time-based
        # wait)
        k, done = rng.randint(1, 2), lambda: len(os.listdir(units)) if units.is_dir() else 0
        t_end = time.time() + 120
        while p.poll() is None and time.time() < t_end and done() < before + k:
            time.sleep(0.002)
        t_kill = time.time() + rng.uniform(0, 0.05)
        while p.poll() is None and time.time() < t_kill and done() < before + k + 1:
            time.sleep(0.002)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            kills += 1
        p.wait()
        if p.returncode == 0:
            finished = True
            break
        assert p.returncode == -signal.SIGKILL, p.stderr.read()
        assert not out.exists()  # nothing partial ever looks complete
        assert (tmp_path / "out.partial" / "plan.json").is_file()
    assert kills >= 2, "the corpus was prepared before it could be interrupted twice"
    if not finished:
        r = subprocess.run(cmd, env=_cli_env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    assert digests(out) == digests(tmp_path / "want")
    assert not (tmp_path / "out.partial").exists()
    assert [n for n in debris(tmp_path)] == []


def test_resume_reuses_units_and_refuses_other_inputs(tmp_path, corpus, monkeypatch, capsys):
    import importlib

    # the package's ``prepare`` is the function
    prep_mod = importlib.import_module("tokendrop.data.prepare")
    units_mod = importlib.import_module("tokendrop.data.units")

    vocab, paths, docs = corpus
    local = [str(tmp_path / "a.txt"), paths[1]]
    Path(local[0]).write_bytes(Path(paths[0]).read_bytes())
    kw = dict(seq_len=32, vocab_size=200, eval_fraction=0.05, progress=False, unit_bytes=20000)
    real = prep_mod._write_shards

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep_mod, "_write_shards", interrupted)
    with pytest.raises(KeyboardInterrupt) as e:
        prepare(local, tmp_path / "out", workers=2, **kw)
    assert "run the same command again" in e.value.kept
    work = tmp_path / "out.partial"
    n_units = len(json.loads((work / "plan.json").read_text())["units"])
    assert (
        n_units > 4
        and len(os.listdir(work / "units")) == n_units
        and not (tmp_path / "out").exists()
    )
    # the same command: no unit tokenized again, the trained vocabulary reused (not trained again)
    monkeypatch.setattr(prep_mod, "_write_shards", real)
    monkeypatch.setattr(prep_mod, "_train", lambda *a, **k: pytest.fail("trained again"))
    calls = []
    monkeypatch.setattr(
        units_mod, "tokenize_unit", lambda *a, **k: calls.append(a) or pytest.fail("redone")
    )
    prepare(local, tmp_path / "out", workers=1, **kw)
    assert calls == [] and not work.exists()
    monkeypatch.undo()
    # an interrupted run of other inputs: refused in one line; --overwrite starts over
    monkeypatch.setattr(prep_mod, "_write_shards", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(
            local,
            tmp_path / "o2",
            seq_len=32,
            vocab=vocab,
            workers=1,
            progress=False,
            unit_bytes=20000,
        )
    monkeypatch.undo()
    with open(local[0], "a", encoding="utf-8") as f:
        f.write("\nOne more document.\n")
    with pytest.raises(
        DataError,
        match=r"o2\.partial: holds the unfinished preparation of other inputs "
        r".*a\.txt.*--overwrite",
    ) as e:
        prepare(local, tmp_path / "o2", seq_len=32, vocab=vocab, workers=1, progress=False)
    assert "\n" not in str(e.value)
    s = prepare(
        local, tmp_path / "o2", seq_len=32, vocab=vocab, workers=1, progress=False, overwrite=True
    )
    assert s["documents"] == len(docs) + 1 and not (tmp_path / "o2.partial").exists()


# ----------------------------------------------------------------------------------------------
# formats


def _table(docs: list[str], extra: bool = True):
    cols = {"text": docs}
    if extra:
        cols["id"] = list(range(len(docs)))
    return pa.table(cols)


def _write_arrow(path: Path, table, stream: bool = True, batch: int = 37) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        w = pa.ipc.new_stream(sink, table.schema) if stream else pa.ipc.new_file(sink, table.schema)
        for b in table.to_batches(max_chunksize=batch):
            w.write_batch(b)
        w.close()


def _save_to_disk_by_hand(d: Path, table, files: int = 2) -> None:
    """The layout datasets' Dataset.save_to_disk writes (state.json, dataset_info.json,
    data-*.arrow)."""
    d.mkdir(parents=True)
    n = table.num_rows
    names = []
    for i in range(files):
        name = f"data-{i:05d}-of-{files:05d}.arrow"
        _write_arrow(d / name, table.slice(i * n // files, (i + 1) * n // files - i * n // files))
        names.append({"filename": name})
    (d / "state.json").write_text(
        json.dumps(
            {
                "_data_files": names,
                "_fingerprint": "x",
                "_format_columns": None,
                "_format_kwargs": {},
                "_format_type": None,
                "_output_all_columns": False,
                "_split": None,
            }
        )
    )
    (d / "dataset_info.json").write_text(
        json.dumps({"features": {"text": {"dtype": "string", "_type": "Value"}}})
    )


def test_new_formats_give_the_same_ids_as_the_text_reader(tmp_path, corpus):
    import zstandard

    vocab, _, all_docs = corpus
    docs = all_docs[:200]
    write_documents(tmp_path / "docs.txt", docs)
    table = _table(docs)
    inputs = {}
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=23)
    inputs["parquet"] = [tmp_path / "docs.parquet"]
    _write_arrow(tmp_path / "s.arrow", table)
    inputs["arrow-stream"] = [tmp_path / "s.arrow"]
    _write_arrow(tmp_path / "f.arrow", table, stream=False)
    inputs["arrow-file"] = [tmp_path / "f.arrow"]
    _save_to_disk_by_hand(tmp_path / "ds", table)
    inputs["datasets-dir"] = [tmp_path / "ds"]
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text(
        json.dumps({"splits": ["train", "validation"]})
    )
    _save_to_disk_by_hand(tmp_path / "dd" / "train", table, files=3)
    _save_to_disk_by_hand(tmp_path / "dd" / "validation", _table(["Other text."]), files=1)
    inputs["datasetdict@train"] = [f"{tmp_path / 'dd'}@train"]
    cz = zstandard.ZstdCompressor(level=3)
    (tmp_path / "docs.txt.zst").write_bytes(cz.compress((tmp_path / "docs.txt").read_bytes()))
    inputs["txt.zst"] = [tmp_path / "docs.txt.zst"]
    jl = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    (tmp_path / "docs.jsonl.zst").write_bytes(
        cz.compress(jl[: len(jl) // 2]) + cz.compress(jl[len(jl) // 2 :])
    )
    inputs["jsonl.zst (two frames)"] = [tmp_path / "docs.jsonl.zst"]
    kw = dict(seq_len=32, vocab=vocab, eval_fraction=0.05, progress=False)
    prepare([tmp_path / "docs.txt"], tmp_path / "want", workers=1, **kw)
    want = digests(tmp_path / "want")
    for i, (name, paths) in enumerate(inputs.items()):
        out = tmp_path / f"out{i}"
        prepare(paths, out, workers=2, unit_bytes=2000, **kw)
        assert digests(out) == want, name
        meta = json.loads((out / "meta.json").read_text())
        assert sum(s["documents"] for s in meta["sources"]) == 200, name
        if name in ("parquet", "arrow-stream", "arrow-file"):
            assert meta["parallelism"]["units"] > 3, name  # row groups / record batches shared out


def test_a_real_save_to_disk_directory(tmp_path, corpus):
    datasets = pytest.importorskip("datasets")
    vocab, _, all_docs = corpus
    docs = all_docs[:120]
    write_documents(tmp_path / "docs.txt", docs)
    ds = datasets.Dataset.from_dict({"text": docs, "n": list(range(len(docs)))})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    datasets.DatasetDict({"train": ds, "test": ds.select(range(5))}).save_to_disk(
        str(tmp_path / "dd")
    )
    kw = dict(seq_len=32, vocab=vocab, eval_fraction=0.05, progress=False, workers=2)
    prepare([tmp_path / "docs.txt"], tmp_path / "want", **kw)
    prepare([tmp_path / "ds"], tmp_path / "a", **kw)
    prepare([f"{tmp_path / 'dd'}@train"], tmp_path / "b", **kw)
    assert digests(tmp_path / "a") == digests(tmp_path / "b") == digests(tmp_path / "want")


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (corpus args, what the one-line message must say)"""
    docs = ["One document here.", "Another one."]
    cases = {}
    pq.write_table(pa.table({"body": docs, "n": [1, 2]}), tmp / "nocol.parquet")
    cases["parquet without the text column"] = (
        [str(tmp / "nocol.parquet")],
        "no column 'text'; its columns are body, n",
    )
    (tmp / "junk.parquet").write_bytes(b"PAR1" + os.urandom(300))
    cases["corrupt parquet"] = ([str(tmp / "junk.parquet")], "cannot read as Parquet")
    pq.write_table(pa.table({"text": docs * 50}), tmp / "cut.parquet")
    (tmp / "cut.parquet").write_bytes((tmp / "cut.parquet").read_bytes()[:-40])
    cases["truncated parquet"] = ([str(tmp / "cut.parquet")], "cannot read as Parquet")
    _write_arrow(tmp / "good.arrow", _table(docs * 50))
    (tmp / "cut.arrow").write_bytes((tmp / "good.arrow").read_bytes()[:500])
    cases["truncated arrow"] = ([str(tmp / "cut.arrow")], "cannot read as Arrow")
    (tmp / "junk.arrow").write_bytes(os.urandom(200))
    cases["corrupt arrow"] = ([str(tmp / "junk.arrow")], "cannot read as Arrow")
    _save_to_disk_by_hand(tmp / "ints", pa.table({"text": [1, 2, 3]}), files=1)
    cases["datasets dir whose text column is not a string"] = (
        [str(tmp / "ints")],
        "column 'text' is int64, not a string",
    )
    (tmp / "notds").mkdir()
    (tmp / "notds" / "state.json").write_text(json.dumps({"something": "else"}))
    (tmp / "notds" / "dataset_info.json").write_text("{}")
    cases["datasets dir of another kind"] = ([str(tmp / "notds")], "no _data_files list")
    (tmp / "dd").mkdir()
    (tmp / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    cases["DatasetDict without a split"] = ([str(tmp / "dd")], "splits train, test; name one as")
    cases["DatasetDict with an unknown split"] = (
        [f"{tmp / 'dd'}@dev"],
        "no split 'dev'; expected one of train, test",
    )
    _write_arrow(tmp / "nulls.arrow", pa.table({"text": ["a b", None, "c"]}))
    cases["null text"] = ([str(tmp / "nulls.arrow")], "row 1: column 'text' is null")
    (tmp / "bad.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(100))
    cases["unreadable zst"] = ([str(tmp / "bad.txt.zst")], "cannot decompress")
    return cases


def test_bad_columnar_and_zstd_inputs_are_one_line_errors(tmp_path, corpus, capsys):
    vocab = corpus[0]
    bad = tmp_path / "inputs"
    bad.mkdir()
    for name, (args, says) in _bad_inputs(bad).items():
        out = tmp_path / "out"
        rc = main(
            [
                "prepare",
                "--corpus",
                *args,
                "--out",
                str(out),
                "--seq-len",
                "32",
                "--vocab",
                vocab,
                "--quiet",
                "--workers",
                "2",
            ]
        )
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.startswith("error: ") and "\n" not in err, (name, err)
        assert says in err, (name, err)
        assert args[0].split("@")[0] in err or "corpus" in err, (name, err)
        assert sorted(os.listdir(tmp_path)) == ["inputs"], (name, os.listdir(tmp_path))


def test_bad_input_found_by_a_worker_leaves_nothing(tmp_path, corpus):
    vocab, paths, docs = corpus
    lines = [json.dumps({"text": d}) for d in docs]
    lines[430] = '{"text": "cut off'
    bad = tmp_path / "in" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text("\n".join(lines) + "\n")
    offset = len("\n".join(lines[:430]).encode()) + 1
    # found while a worker process tokenizes the unit holding that line
    with pytest.raises(DataError) as e:
        prepare(
            [bad],
            tmp_path / "out",
            seq_len=32,
            vocab=vocab,
            workers=2,
            unit_bytes=5000,
            progress=False,
        )
    assert str(e.value) == (
        f"{bad}: byte {offset}: invalid JSON (Unterminated string starting at); expected one "
        "JSON object per line"
    )
    assert sorted(os.listdir(tmp_path)) == ["in"]
