"""prepare() and PreparedData: packing, unpacked sequences, counts, atomic writes, bad input."""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest

from tokendrop.data import DataError, MLMLoader, PreparedData, load_tokenizer, prepare

prepare_mod = importlib.import_module("tokendrop.data.prepare")
from synthetic import SHARED_DATA
from toydata import toy_documents, toy_vocab_tokens, write_toy_corpus, write_toy_vocab

from tokendrop.data.tokenizer import build_tokenizer

SMALL = str(SHARED_DATA / "corpus" / "mixed-english-small.txt")
BERT_VOCAB = str(SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt")


@pytest.fixture
def toy(tmp_path):
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    corpus = write_toy_corpus(tmp_path / "corpus.txt", num_docs=80, max_words=150)
    return vocab, corpus


def doc_token_ids(vocab: str, corpus: str) -> list[np.ndarray]:
    tok = build_tokenizer(vocab)
    docs = open(corpus, encoding="utf-8").read().strip().split("\n\n")
    return [np.array(tok.encode(d, add_special_tokens=False).ids) for d in docs]


def leftovers(parent) -> list[str]:
    return [n for n in os.listdir(parent) if ".tmp-" in n or ".old-" in n]


@pytest.mark.parametrize("workers", [1, 2])
def test_packing_every_token_once_in_order(tmp_path, toy, workers):
    vocab, corpus = toy
    T = 24
    out = tmp_path / "packed"
    s = prepare([corpus], out, T, vocab=vocab, eval_fraction=0.0, workers=workers, progress=False)
    pd = PreparedData.open(out, verify=True)
    sp = pd.special_ids
    seqs = np.asarray(pd.sequences("train")).astype(np.int64)
    assert seqs.shape == (pd.num_sequences("train"), T) == (s["train_sequences"], T)
    assert pd.packed and pd.dtype == np.uint16 and pd.num_sequences("eval") == 0
    assert (seqs[:, 0] == sp["cls"]).all() and (seqs[:, -1] == sp["sep"]).all()
    assert not (seqs == sp["pad"]).any()
    assert not np.isin(seqs[:, 1:-1], [sp["cls"], sp["pad"], sp["mask"]]).any()
    body = seqs[:, 1:-1].reshape(-1)
    assert body[0] != sp["sep"]
    docs = doc_token_ids(vocab, corpus)
    stream = np.concatenate(docs)
    got = body[body != sp["sep"]]
    tail = s["dropped_tail_tokens"]
    boundary = json.loads((out / "meta.json").read_text())["splits"]["train"][
        "dropped_boundary_tokens"
    ]
    assert 0 <= tail < T - 2 and 0 <= boundary < len(stream) // (T - 2)
    assert len(got) + tail + boundary == len(stream)
    # every token at most once, in order; the only ones left out are the tail and, where a body
    # would have ended "[SEP][SEP]", the first token of that body (counted: dropped_boundary_tokens)
    it = iter(stream)
    assert all(any(x == y for y in it) for x in got)
    assert not ((seqs[:, 1:] == sp["sep"]) & (seqs[:, :-1] == sp["sep"])).any()
    # the separators sit exactly at document boundaries (or are implied by a sequence edge)
    n_sep = int((body == sp["sep"]).sum())
    ends = np.cumsum([len(d) for d in docs])[:-1]
    inside = ends[ends < len(got)]
    assert n_sep <= len(inside)
    # the same stream, read through the loader without shuffling (masks undone via the labels)
    loader = MLMLoader(pd, batch_size=4, shuffle=False, loop=False, num_workers=0)
    rows = []
    for b in loader:
        ids = b["input_ids"].clone()
        for i in range(ids.shape[0]):
            w = b["mlm_weights"][i] > 0
            ids[i, b["mlm_positions"][i][w]] = b["mlm_labels"][i][w]
            if w.any():
                rows.append(ids[i].numpy())
    assert np.array_equal(np.stack(rows), seqs)
    # token counts: the train documents' tokens
    counts = pd.token_counts()
    assert counts.dtype == np.int64 and counts.shape == (pd.vocab_size,)
    assert np.array_equal(counts, np.bincount(stream, minlength=pd.vocab_size))


def test_packing_separator_at_sequence_edge_is_not_repeated(tmp_path):
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    w = toy_vocab_tokens()[-10:]
    # doc 1 fills exactly one body of T-2=6 tokens; doc 2 starts the next sequence without a
    # separator
    (tmp_path / "c.txt").write_text(
        " ".join(w[:6]) + "\n\n" + " ".join(w[:3]) + "\n\n" + " ".join(w[3:9]) + "\n"
    )
    prepare(
        [tmp_path / "c.txt"],
        tmp_path / "o",
        8,
        vocab=vocab,
        eval_fraction=0,
        workers=1,
        progress=False,
    )
    pd = PreparedData.open(tmp_path / "o")
    tok = load_tokenizer(pd.tokenizer_path)
    rows = [
        tok.decode(r.tolist(), skip_special_tokens=False).split() for r in pd.sequences("train")
    ]
    assert rows[0] == ["[CLS]"] + w[:6] + ["[SEP]"]
    assert rows[1] == ["[CLS]"] + w[:3] + ["[SEP]"] + w[3:5] + ["[SEP]"]
    assert pd.meta["splits"]["train"]["dropped_tail_tokens"] == 4


def test_unpacked_split_and_truncate(tmp_path, toy):
    vocab, corpus = toy
    T = 32
    docs = doc_token_ids(vocab, corpus)
    long_docs = sum(len(d) > T - 2 for d in docs)
    assert long_docs > 5
    s = prepare(
        [corpus],
        tmp_path / "split",
        T,
        vocab=vocab,
        packed=False,
        eval_fraction=0,
        workers=1,
        progress=False,
    )
    pd = PreparedData.open(tmp_path / "split")
    assert not pd.packed
    sp = pd.special_ids
    seqs = np.asarray(pd.sequences("train")).astype(np.int64)
    assert s["split_documents"] == long_docs and s["truncated_tokens"] == 0
    assert len(seqs) == sum(-(-len(d) // (T - 2)) for d in docs)
    got = []
    for row in seqs:
        assert row[0] == sp["cls"]
        n_real = int((row != sp["pad"]).sum())
        # padding only at the end
        assert (row[n_real:] == sp["pad"]).all() and row[n_real - 1] == sp["sep"]
        assert not np.isin(row[1 : n_real - 1], [sp["cls"], sp["sep"], sp["pad"]]).any()
        got.append(row[1 : n_real - 1])
    assert np.array_equal(np.concatenate(got), np.concatenate(docs))  # nothing lost
    loader = MLMLoader(pd, batch_size=8, shuffle=False, loop=False, num_workers=0)
    b = next(iter(loader))
    assert np.array_equal(b["attention_mask"].numpy(), (seqs[:8] != sp["pad"]).astype(np.int64))
    # pads never masked/replaced
    assert (b["input_ids"][b["attention_mask"] == 0] == sp["pad"]).all()

    s2 = prepare(
        [corpus],
        tmp_path / "trunc",
        T,
        vocab=vocab,
        packed=False,
        overflow="truncate",
        eval_fraction=0,
        workers=1,
        progress=False,
    )
    pd2 = PreparedData.open(tmp_path / "trunc")
    assert pd2.num_sequences("train") == len(docs)
    assert s2["truncated_documents"] == long_docs
    assert s2["truncated_tokens"] == sum(max(0, len(d) - (T - 2)) for d in docs) > 0
    assert any("truncated" in w for w in s2["warnings"])  # reported, not silent
    assert pd2.meta["splits"]["train"]["truncated_tokens"] == s2["truncated_tokens"]


def test_eval_split_is_held_out_documents(tmp_path, toy):
    vocab, corpus = toy
    s = prepare(
        [corpus], tmp_path / "o", 24, vocab=vocab, eval_fraction=0.2, workers=1, progress=False
    )
    pd = PreparedData.open(tmp_path / "o")
    meta = pd.meta["splits"]
    total = meta["train"]["document_tokens"] + meta["eval"]["document_tokens"]
    assert 0.2 <= meta["eval"]["document_tokens"] / total < 0.35
    assert meta["train"]["documents"] + meta["eval"]["documents"] == 80
    assert pd.num_sequences("eval") == s["eval_sequences"] > 0
    # the eval documents' tokens are not counted in the (train) frequency counts
    assert pd.token_counts().sum() == meta["train"]["document_tokens"]
    # deterministic: same split again
    prepare(
        [corpus], tmp_path / "o2", 24, vocab=vocab, eval_fraction=0.2, workers=1, progress=False
    )
    assert np.array_equal(
        PreparedData.open(tmp_path / "o2").sequences("eval"), pd.sequences("eval")
    )


def test_trained_vocab_and_meta(tmp_path, toy):
    _, corpus = toy
    s = prepare(
        [corpus], tmp_path / "o", 32, vocab_size=200, workers=1, progress=False, min_frequency=1
    )
    pd = PreparedData.open(tmp_path / "o")
    meta = json.loads((tmp_path / "o" / "meta.json").read_text())
    assert meta == pd.meta
    assert pd.vocab_size == s["vocab_size"] <= 200
    assert pd.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert meta["tokenizer"]["type"] == "trained" and meta["lowercase"] is True
    for key in (
        "seq_len",
        "packed",
        "vocab_hash",
        "splits",
        "counts",
        "sources",
        "eval_fraction",
        "tokenizer",
    ):
        assert key in meta
    assert (
        meta["sources"][0]["path"] == os.path.abspath(corpus)
        and meta["sources"][0]["documents"] == 80
    )
    assert sorted(os.listdir(pd.tokenizer_path)) == sorted(
        [
            ".tokendrop.json",
            "meta.json",
            "train.bin",
            "eval.bin",
            "token_counts.npy",
            "tokenizer.json",
            "vocab.txt",
            "tokenizer_config.json",
        ]
    )
    assert pd.tokenizer().encode("hello").ids == load_tokenizer(tmp_path / "o").encode("hello").ids
    umask = os.umask(0)
    os.umask(umask)
    # an ordinary directory, not mkdtemp's 0700
    assert os.stat(tmp_path / "o").st_mode & 0o777 == 0o777 & ~umask


def test_large_vocab_uses_uint32(tmp_path):
    tokens = toy_vocab_tokens() + [f"w{i:05d}" for i in range(70000)]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n")
    (tmp_path / "c.txt").write_text(" ".join(f"w{i:05d}" for i in range(69000, 69100)) + "\n")
    prepare(
        [tmp_path / "c.txt"],
        tmp_path / "o",
        16,
        vocab=tmp_path / "vocab.txt",
        eval_fraction=0,
        workers=1,
        progress=False,
    )
    pd = PreparedData.open(tmp_path / "o")
    assert pd.dtype == np.uint32 and pd.sequences("train").max() >= 65536


def test_multiple_formats_in_one_corpus(tmp_path):
    import bz2

    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    docs = toy_documents(6)
    (tmp_path / "a.txt").write_text("\n\n".join(docs[:2]))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in docs[2:4]))
    page = "<page><title>T{i}</title><ns>0</ns><revision><text>{t}</text></revision></page>"
    xml = (
        "<mediawiki>"
        + "".join(page.format(i=i, t=d.replace("\n", "\n\n")) for i, d in enumerate(docs[4:]))
        + "</mediawiki>"
    )
    (tmp_path / "c.xml.bz2").write_bytes(bz2.compress(xml.encode()))
    for workers in (1, 2):
        out = tmp_path / f"o{workers}"
        s = prepare(
            [tmp_path / "a.txt", tmp_path / "b.jsonl", tmp_path / "c.xml.bz2"],
            out,
            16,
            vocab=vocab,
            eval_fraction=0,
            workers=workers,
            progress=False,
        )
        assert s["documents"] == 6
    assert np.array_equal(
        PreparedData.open(tmp_path / "o1").sequences("train"),
        PreparedData.open(tmp_path / "o2").sequences("train"),
    )


@pytest.mark.skipif(
    not (os.path.exists(SMALL) and os.path.exists(BERT_VOCAB)), reason="shared data not present"
)
def test_real_corpus_small(tmp_path):
    s = prepare([SMALL], tmp_path / "o", 128, vocab=BERT_VOCAB, progress=False)
    pd = PreparedData.open(tmp_path / "o")
    assert s["documents"] == 293 and pd.vocab_size == 30522 and pd.special_ids["mask"] == 103
    assert pd.num_sequences("train") > 3000 and pd.num_sequences("eval") > 0
    assert pd.meta["counts"]["unk_tokens"] < 0.001 * s["tokens"]


# ---------------------------------------------------------------------------------------------
# bad input: one clear DataError each, nothing written


def _bad(tmp_path, vocab, corpus_paths, match, **kw):
    out = tmp_path / "out"
    kw.setdefault("seq_len", 32)
    with pytest.raises(DataError, match=match):
        prepare(corpus_paths, out, vocab=vocab, workers=kw.pop("workers", 1), progress=False, **kw)
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_bad_inputs(tmp_path, toy):
    vocab, corpus = toy
    _bad(tmp_path, vocab, [tmp_path / "missing.txt"], r"missing\.txt: no such file or directory")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n   \n\n")
    _bad(
        tmp_path, vocab, [tmp_path / "empty.txt", tmp_path / "blank.txt"], r"corpus: no text found"
    )
    (tmp_path / "model.txt").write_bytes(bytes(range(256)) * 64)
    _bad(tmp_path, vocab, [corpus, tmp_path / "model.txt"], r"model\.txt: .*binary file")
    (tmp_path / "latin1.txt").write_bytes(
        ("word " * 20 + "\n").encode() * 5000 + "café\n".encode("latin-1")
    )
    # detected while tokenizing, after output was started: still nothing left
    for workers in (
        1,
        2,
    ):
        _bad(
            tmp_path,
            vocab,
            [corpus, tmp_path / "latin1.txt"],
            r"latin1\.txt: line 5001: invalid UTF-8",
            workers=workers,
        )
    (tmp_path / "nomask.txt").write_text("\n".join(t for t in toy_vocab_tokens() if t != "[MASK]"))
    _bad(
        tmp_path,
        tmp_path / "nomask.txt",
        [corpus],
        r"nomask\.txt: vocabulary lacks the special token\(s\) \[MASK\]",
    )
    _bad(
        tmp_path,
        vocab,
        [corpus],
        r"seq_len: T=1024 is larger than the model's max_position_embeddings=512",
        seq_len=1024,
    )
    _bad(
        tmp_path,
        vocab,
        [corpus],
        r"seq_len: T=600 is larger than .*=512",
        seq_len=600,
        max_position_embeddings=512,
    )
    _bad(tmp_path, None, [corpus], r"vocab/vocab_size: expected a vocab.txt")
    (tmp_path / "tiny.txt").write_text("a few words\n\nand another doc\n")
    _bad(
        tmp_path,
        vocab,
        [tmp_path / "tiny.txt"],
        r"too small for one training sequence",
        seq_len=512,
    )
    assert issubclass(DataError, ValueError)


def test_existing_output_needs_overwrite(tmp_path, toy):
    vocab, corpus = toy
    out = tmp_path / "o"
    prepare([corpus], out, 16, vocab=vocab, workers=1, progress=False)
    with pytest.raises(DataError, match="already exists"):
        prepare([corpus], out, 32, vocab=vocab, workers=1, progress=False)
    assert PreparedData.open(out).seq_len == 16
    prepare([corpus], out, 32, vocab=vocab, workers=1, progress=False, overwrite=True)
    assert PreparedData.open(out).seq_len == 32
    assert leftovers(tmp_path) == []


def test_interrupted_run_leaves_nothing_that_opens(tmp_path, toy, monkeypatch):
    vocab, corpus = toy

    def boom(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_mod.PackedWriter, "finish", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare([corpus], tmp_path / "o", 16, vocab=vocab, workers=1, progress=False)
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []
    monkeypatch.undo()
    # a run killed hard leaves only its .tmp- directory, without meta.json: rejected
    prepare([corpus], tmp_path / "o", 16, vocab=vocab, workers=1, progress=False)
    partial = tmp_path / "o.tmp-killed"
    partial.mkdir()
    for name in ("train.bin", "vocab.txt", "tokenizer.json"):
        (partial / name).write_bytes((tmp_path / "o" / name).read_bytes())
    with pytest.raises(DataError, match="no meta.json"):
        PreparedData.open(partial)


def test_open_rejects_corrupt_directories(tmp_path, toy):
    vocab, corpus = toy
    out = tmp_path / "o"
    prepare([corpus], out, 16, vocab=vocab, workers=1, progress=False)
    PreparedData.open(out, verify=True)
    with pytest.raises(DataError, match="no such prepared-data directory"):
        PreparedData.open(tmp_path / "nothing")
    train = out / "train.bin"
    good = train.read_bytes()
    train.write_bytes(good[:-2])
    with pytest.raises(DataError, match=r"train\.bin: .* bytes, expected"):
        PreparedData.open(out)
    train.write_bytes(good[:-2] + b"\xff\xff")
    PreparedData.open(out)  # sizes fine; only a full verify reads the content
    with pytest.raises(DataError, match=r"train\.bin: sha256 does not match"):
        PreparedData.open(out, verify=True)
    train.write_bytes(good)
    v = out / "vocab.txt"
    v.write_text(v.read_text() + "extra\n")
    with pytest.raises(DataError, match="does not match meta.json's vocab_hash"):
        PreparedData.open(out)
    (out / "meta.json").write_text("{ not json")
    with pytest.raises(DataError, match="invalid JSON"):
        PreparedData.open(out)


def test_cased_uncased_mismatch_is_reported(tmp_path, toy):
    vocab, corpus = toy
    s = prepare(
        [corpus], tmp_path / "o", 16, vocab=vocab, lowercase=False, workers=1, progress=False
    )
    assert any("looks uncased but lowercase=False" in w for w in s["warnings"])


def test_cli_bad_input_exit_code(tmp_path, toy, capsys):
    """`tokendrop prepare` turns each DataError into one line on stderr and exit code 2."""
    cli = pytest.importorskip("tokendrop.cli")
    vocab, corpus = toy
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 16)
    cases = [
        (
            ["--corpus", str(tmp_path / "missing.txt"), "--vocab", vocab],
            "no such file or directory",
        ),
        (["--corpus", str(tmp_path / "blob.txt"), "--vocab", vocab], "binary file"),
        (
            ["--corpus", corpus, "--vocab", vocab, "--seq-len", "1024"],
            "larger than the model's max_position_embeddings",
        ),
    ]
    for extra, msg in cases:
        args = ["prepare", "--out", str(tmp_path / "out"), "--quiet"] + extra
        if "--seq-len" not in extra:
            args += ["--seq-len", "32"]
        assert cli.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and msg in err and "\n" not in err
        assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    assert (
        cli.main(
            [
                "prepare",
                "--out",
                str(tmp_path / "out"),
                "--quiet",
                "--corpus",
                corpus,
                "--vocab",
                vocab,
                "--seq-len",
                "32",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    assert PreparedData.open(tmp_path / "out").seq_len == 32


def test_a_corpus_mostly_unk_under_its_vocabulary_is_warned(tmp_path, toy):
    """Text the vocabulary does not cover (another script) is prepared, and the summary warns that
    most of its tokens are [UNK], with the fix; text it covers gets no such warning."""
    vocab, corpus = toy
    s = prepare([corpus], tmp_path / "ok", 24, vocab=vocab, eval_fraction=0.0, progress=False)
    assert not [w for w in s["warnings"] if "[UNK]" in w]
    cjk = tmp_path / "cjk.txt"
    cjk.write_text("\n\n".join("東京 大阪 京都 " * 20 for _ in range(40)) + "\n", encoding="utf-8")
    s = prepare([cjk], tmp_path / "cjk", 24, vocab=vocab, eval_fraction=0.0, progress=False)
    (w,) = [w for w in s["warnings"] if "[UNK]" in w]
    assert "under this vocabulary: it does not cover the text" in w and "leave out --vocab" in w
