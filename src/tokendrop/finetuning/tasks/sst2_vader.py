"""An SST-2-format sentiment task from the Rotten Tomatoes snippets in the ``vaderSentiment`` sdist.

The ``vaderSentiment==3.3.2`` source distribution on PyPI ships
``additional_resources/hutto_ICWSM_2014.tar.gz``, whose ``movieReviewSnippets_GroundTruth.txt``
holds 10,605 sentence-level movie-review snippets (Pang & Lee's Rotten Tomatoes data) with the mean
rating of >= 20 human raters on -4..+4, one ``id<TAB>score<TAB>text`` line each.  We label by the
sign of the score (1 = positive, 0 = negative), drop the snippets rated exactly 0, and split 90/10
per label with a fixed seed (stratified, deterministic), writing GLUE SST-2's layout: ``train.tsv``
and ``dev.tsv`` with header ``sentence<TAB>label``.  This is *not* SST-2 (SST-2's sentences come
from the same Rotten Tomatoes reviews, but its labels are phrase-tree annotations); it is an
obtainable sentiment task for machines that can reach PyPI only.

It defines no task of its own: its output is task ``sst2`` (``tasks/sst2.py`` reads it as it is).

The download is ``pip download --no-deps --no-binary :all: vaderSentiment==3.3.2`` into a cache dir;
nothing is installed.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.tasks.base import finite_float
from tokendrop.runs.files import atomic_directory, atomic_write_text

VADER_SPEC = "vaderSentiment==3.3.2"
INNER_TAR = "additional_resources/hutto_ICWSM_2014.tar.gz"
SNIPPETS = "movieReviewSnippets_GroundTruth.txt"
# the other ground-truth files of the same tarball: unlabelled in-domain text for continued
# pretraining
OTHER_SNIPPETS = (
    "amazonReviewSnippets_GroundTruth.txt",
    "nytEditorialSnippets_GroundTruth.txt",
    "tweets_GroundTruth.txt",
)
DEFAULT_SEED = 12345


def fetch_vader_sdist(cache_dir: str | os.PathLike, spec: str = VADER_SPEC) -> Path:
    """The sdist archive in ``cache_dir/pkgs`` (downloaded with pip on first use)."""
    dest = Path(cache_dir) / "pkgs"
    dest.mkdir(parents=True, exist_ok=True)
    stem = spec.replace("==", "-").lower()

    def find() -> Path | None:
        for p in sorted(dest.iterdir()):
            n = p.name.lower()
            if n.startswith(stem) and (n.endswith(".tar.gz") or n.endswith(".zip")):
                return p
        return None

    found = find()
    if found:
        return found
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        spec,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise FinetuneError(f"pip download {spec} failed: {last}")
    found = find()
    if not found:
        raise FinetuneError(f"pip download {spec}: no sdist appeared in {dest}")
    return found


def _read_member(archive: Path, suffix: str) -> bytes:
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if n.endswith(suffix):
                    return z.read(n)
    else:
        with tarfile.open(archive, "r:*") as t:
            for m in t.getmembers():
                if m.isfile() and m.name.endswith(suffix):
                    return t.extractfile(m).read()
    raise FinetuneError(f"{archive}: no member ending in {suffix}")


def extract_snippets(sdist: str | os.PathLike, name: str = SNIPPETS) -> str:
    """``name`` (default ``movieReviewSnippets_GroundTruth.txt``) from the sdist's nested tarball,
    as text."""
    sdist = Path(sdist)
    try:
        inner = _read_member(sdist, INNER_TAR)
        with tarfile.open(fileobj=io.BytesIO(inner), mode="r:gz") as t:
            for m in t.getmembers():
                if m.isfile() and m.name.endswith(name):
                    data = t.extractfile(m).read()
                    break
            else:
                raise FinetuneError(f"{sdist}!{INNER_TAR}: no {name}")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as e:
        raise FinetuneError(f"{sdist}: cannot read the archive ({e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def parse_snippets(text: str, where: str = SNIPPETS) -> list[tuple[str, float, str]]:
    """``(id, score, sentence)`` per line of ``id<TAB>score<TAB>text``; malformed lines are
    errors."""
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise FinetuneError(
                f"{where}:{i}: expected id<TAB>score<TAB>text, got {len(parts)} field(s)"
            )
        sid, score, sent = parts[0].strip(), parts[1].strip(), "\t".join(parts[2:])
        val = finite_float(score, f"{where}:{i}: score {score!r}")
        sent = " ".join(sent.split())  # tabs / newlines / runs of spaces -> one space (TSV-safe)
        if not sent:
            raise FinetuneError(f"{where}:{i}: empty text")
        rows.append((sid, val, sent))
    if not rows:
        raise FinetuneError(f"{where}: no snippets")
    return rows


def label_and_split(
    rows: list[tuple[str, float, str]], dev_fraction: float = 0.1, seed: int = DEFAULT_SEED
) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """Label by score sign (zeros dropped), stratified split -> (train, dev, n_dropped).  Each split
    keeps the file order; which rows go to dev depends only on ``seed`` and the data."""
    if not 0.0 < dev_fraction < 1.0:
        raise FinetuneError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    labelled = [(i, s, int(v > 0)) for i, (_, v, s) in enumerate(rows) if v != 0]
    dropped = len(rows) - len(labelled)
    dev_idx: set[int] = set()
    for y in (0, 1):
        idx = [i for i, _, lab in labelled if lab == y]
        n_dev = int(round(len(idx) * dev_fraction))
        rng = random.Random(f"{seed}-{y}")
        dev_idx.update(rng.sample(idx, n_dev))
    train = [(s, y) for i, s, y in labelled if i not in dev_idx]
    dev = [(s, y) for i, s, y in labelled if i in dev_idx]
    return train, dev, dropped


def write_sst2(
    out_dir: str | os.PathLike,
    train: list[tuple[str, int]],
    dev: list[tuple[str, int]],
    meta: dict | None = None,
) -> Path:
    """``train.tsv`` / ``dev.tsv`` (header ``sentence<TAB>label``), written into a temp dir and
    renamed."""
    with atomic_directory(out_dir) as tmp:
        for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
            with open(tmp / name, "w", encoding="utf-8", newline="\n") as f:
                f.write("sentence\tlabel\n")
                for s, y in rows:
                    f.write(f"{s}\t{y}\n")
        (tmp / "meta.json").write_text(json.dumps(meta or {}, indent=2) + "\n")
    return Path(out_dir)


def convert_snippets(
    text: str,
    out_dir: str | os.PathLike,
    dev_fraction: float = 0.1,
    seed: int = DEFAULT_SEED,
    source: str = SNIPPETS,
) -> Path:
    """Snippet file text -> SST-2-format task dir (the network-free part of the pipeline)."""
    rows = parse_snippets(text, source)
    train, dev, dropped = label_and_split(rows, dev_fraction, seed)
    meta = {
        "source": source,
        "snippets": len(rows),
        "dropped_zero": dropped,
        "train": len(train),
        "dev": len(dev),
        "train_pos": sum(y for _, y in train),
        "dev_pos": sum(y for _, y in dev),
        "seed": seed,
        "dev_fraction": dev_fraction,
        "note": "Rotten Tomatoes snippets from the vaderSentiment sdist, labelled by the sign of "
        "the mean rating; not the real SST-2",
    }
    return write_sst2(out_dir, train, dev, meta)


def build_sst2_from_vader(
    cache_dir: str | os.PathLike = ".cache",
    out_dir: str | os.PathLike | None = None,
    sdist: str | os.PathLike | None = None,
    dev_fraction: float = 0.1,
    seed: int = DEFAULT_SEED,
) -> Path:
    """Fetch (cached) and convert; -> the task dir (default ``cache_dir/sst2-vader``).  Reused if
    complete."""
    out = Path(out_dir) if out_dir else Path(cache_dir) / "sst2-vader"
    meta_p = out / "meta.json"
    if meta_p.is_file() and (out / "train.tsv").is_file() and (out / "dev.tsv").is_file():
        try:
            meta = json.loads(meta_p.read_text())
            if meta.get("seed") == seed and meta.get("dev_fraction") == dev_fraction:
                return out
        except json.JSONDecodeError:
            pass
    archive = Path(sdist) if sdist else fetch_vader_sdist(cache_dir)
    text = extract_snippets(archive)
    return convert_snippets(
        text, out, dev_fraction, seed, source=f"{archive.name}!{INNER_TAR}!{SNIPPETS}"
    )


def normalize_sentence(s: str) -> str:
    """The form in which corpus and dev sentences are compared: lower-case, single spaces."""
    return " ".join(s.lower().split())


def read_sst2_sentences(path: str | os.PathLike) -> list[str]:
    """The ``sentence`` column of an SST-2-format TSV."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[1:] if line.strip()]


def build_review_corpus(
    cache_dir: str | os.PathLike,
    task_dir: str | os.PathLike,
    out: str | os.PathLike | None = None,
    sdist: str | os.PathLike | None = None,
) -> Path:
    """In-domain text for continued pretraining before the sentiment task, BERT format (one snippet
    per document): the task's *train* sentences plus the Amazon-review, NYT-editorial and tweet
    snippets of the same tarball.  Any snippet equal (case/space-insensitively) to a sentence of the
    task's dev split is left out, so the evaluation sentences are never pretrained on.  -> the file
    (default ``cache_dir/review-corpus.txt``; reused when present)."""
    out = Path(out) if out else Path(cache_dir) / "review-corpus.txt"
    if out.is_file():
        return out
    task_dir = Path(task_dir)
    dev = {normalize_sentence(s) for s in read_sst2_sentences(task_dir / "dev.tsv")}
    texts = list(read_sst2_sentences(task_dir / "train.tsv"))
    archive = Path(sdist) if sdist else fetch_vader_sdist(cache_dir)
    for name in OTHER_SNIPPETS:
        texts += [s for _, _, s in parse_snippets(extract_snippets(archive, name), name)]
    kept = [t for t in texts if normalize_sentence(t) not in dev]
    atomic_write_text(out, "\n\n".join(kept) + "\n")
    return out
