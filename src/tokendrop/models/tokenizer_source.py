"""``prepare --tokenizer SOURCE``: the same sources as ``pretrain --init``, resolved to a local path.

SOURCE is a tokenizer file (``vocab.txt``, ``tokenizer.json``), a directory holding a tokenizer
(a Hugging Face model or tokenizer directory, a prepared-data directory, a tokendrop run with its
``tokenizer/``), or anything :func:`tokendrop.models.source.resolve_init_source` resolves: a
tokendrop checkpoint directory (its run's tokenizer) or a Hub name (fetched with
``huggingface_hub`` when installed and online, else a one-line :class:`~tokendrop.models.source.InitError`).
The tokenizer at the returned path is then read by :func:`tokendrop.data.tokenizer.read_tokenizer_spec`.
"""

from __future__ import annotations

from pathlib import Path

from tokendrop.data import DataError
from tokendrop.data.tokenizer import has_tokenizer_files
from tokendrop.models.source import resolve_init_source


def resolve_tokenizer_source(source: str) -> str:
    """A ``--tokenizer`` / ``--init`` source -> the local path of its tokenizer (file or directory).

    A local file, or a directory with tokenizer files (at its top or in ``tokenizer/``), is returned
    as it is; a missing absolute path too (prepare then names it).  Anything else goes through the
    ``--init`` resolver (checkpoint directories, Hub names; its InitError otherwise); a source
    without a tokenizer is a DataError."""
    p = Path(source).expanduser()
    if p.is_file() or (p.is_dir() and (has_tokenizer_files(p) or has_tokenizer_files(p / "tokenizer"))):
        return str(p)
    if p.is_absolute() and not p.exists():
        return str(p)
    src = resolve_init_source(source)
    if src.tokenizer_dir is None:
        raise DataError(f"{source}: {src.path} has no tokenizer (tokenizer.json or vocab.txt, nor in its run's "
                        "tokenizer/); pass the tokenizer's directory or file to --tokenizer")
    return str(src.tokenizer_dir)
