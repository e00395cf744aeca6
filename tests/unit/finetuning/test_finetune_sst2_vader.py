"""The vaderSentiment -> SST-2 conversion, on a small crafted sdist (no network)."""

import tarfile

import pytest
from toydata import write_vader_sdist

from tokendrop.finetuning import FinetuneError
from tokendrop.finetuning.tasks import get_task
from tokendrop.finetuning.tasks.sst2_vader import (
    build_sst2_from_vader,
    convert_snippets,
    extract_snippets,
    fetch_vader_sdist,
    label_and_split,
    parse_snippets,
)


def _snippets(n_pos=20, n_neg=10, n_zero=3) -> str:
    lines, i = [], 1
    for k in range(n_pos):
        lines.append(f"{i}\t{1.5 + k / 10:.11g}\tA lovely, moving film number {k} with ''quotes''")
        i += 1
    for k in range(n_neg):
        lines.append(f"{i}\t-{0.6 + k / 7:.11g}\tA dull mess number {k}")
        i += 1
    for k in range(n_zero):
        lines.append(f"{i}\t0\tNeither here nor there {k}")
        i += 1
    return "\r\n".join(lines)  # the original file has CRLF line ends and no final newline


def _sdist(path, text: str):
    return write_vader_sdist(path, {"movieReviewSnippets_GroundTruth.txt": text})


def test_parse_label_split():
    rows = parse_snippets(_snippets())
    assert len(rows) == 33 and rows[0][2] == "A lovely, moving film number 0 with ''quotes''"
    train, dev, dropped = label_and_split(rows, 0.1, seed=1)
    assert dropped == 3
    assert len(dev) == 3 and sum(y for _, y in dev) == 2  # stratified: 10% of 20 pos, 10% of 10 neg
    assert len(train) == 27 and sum(y for _, y in train) == 18
    assert all(("lovely" in s) == (y == 1) for s, y in train + dev)  # label = sign of the score
    assert label_and_split(rows, 0.1, seed=1) == (train, dev, dropped)  # deterministic
    assert {s for s, _ in label_and_split(rows, 0.1, seed=2)[1]} != {s for s, _ in dev}


@pytest.mark.parametrize(
    "text, msg",
    [
        ("1\t2.0\tgood\n2\tgood movie\n", ":2: expected id<TAB>score<TAB>text"),
        ("1\tabc\tgood\n", ":1: score 'abc' is not a number"),
        ("1\tnan\tgood\n", ":1: score 'nan' is not finite"),
        ("1\t1.0\t   \n", ":1: empty text"),
        ("\n\n", "no snippets"),
    ],
)
def test_malformed_snippets(text, msg):
    with pytest.raises(FinetuneError, match=msg):
        parse_snippets(text, "snip.txt")


def test_build_from_crafted_sdist_without_network(tmp_path):
    cache = tmp_path / "cache"
    (cache / "pkgs").mkdir(parents=True)
    sdist = _sdist(cache / "pkgs" / "vaderSentiment-3.3.2.tar.gz", _snippets())
    assert fetch_vader_sdist(cache) == sdist  # already cached: pip is not called
    assert "number 3" in extract_snippets(sdist)
    out = build_sst2_from_vader(cache)
    assert out == cache / "sst2-vader"
    train = (out / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert train[0] == "sentence\tlabel" and len(train) == 1 + 27
    data = get_task("sst2").load(out)  # the SST-2 reader takes it as is
    assert len(data.train) == 27 and len(data.dev["dev"]) == 3
    mtime = (out / "train.tsv").stat().st_mtime_ns
    # reused
    assert build_sst2_from_vader(cache) == out and (out / "train.tsv").stat().st_mtime_ns == mtime
    other = convert_snippets(_snippets(), tmp_path / "other")
    assert (other / "dev.tsv").read_text() == (out / "dev.tsv").read_text()


def test_bad_archive(tmp_path):
    p = tmp_path / "vaderSentiment-3.3.2.tar.gz"
    p.write_bytes(b"not a tarball")
    with pytest.raises(FinetuneError, match="cannot read the archive"):
        extract_snippets(p)
    with tarfile.open(p, "w:gz"):
        pass
    with pytest.raises(
        FinetuneError, match="no member ending in additional_resources/hutto_ICWSM_2014.tar.gz"
    ):
        extract_snippets(p)
