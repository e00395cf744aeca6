"""Models from any source into our classes, and back out as a Hugging Face directory.

* :func:`load_pretrained` builds one of our model classes (either family, any task) from a tokendrop
  run or checkpoint directory (verified) or a Hugging Face directory: ``finetune --model``,
  ``evaluate``, the study's fine-tuning;
* :func:`read_hf_dir` reads a ``transformers`` directory's config and tensors in our names;
* :func:`export_hf` is ``tokendrop export``: a run/checkpoint dir -> a ``transformers`` MLM dir.

Reading goes through :mod:`tokendrop.models.source` (one loader for these and ``pretrain --init``);
writing through :func:`tokendrop.models.hf.save_pretrained`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from tokendrop.train.checkpoint import latest_checkpoint
from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import has_tokenizer_files
from tokendrop.errors import InteropError
from tokendrop.models.families import build_model, spec_of, task_of
from tokendrop.models.hf import save_pretrained
from tokendrop.models.source import load_source_weights, read_source_tensors, resolve_init_source
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.runs.rundir import lock, prepare_output


def read_hf_dir(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A ``transformers`` BERT dir -> (config, the file's tensors in our names), read by
    ``tokendrop.models.source`` (any accepted layout; safetensors, sharded, or ``pytorch_model.bin``
    via weights_only).  Tensors we have no name for (NSP head, position_ids) are left out."""
    p = Path(path)
    if not p.is_dir():
        raise InteropError(f"{p}: no such model directory")
    if not (p / "config.json").is_file():
        raise InteropError(f"{p}: not a model directory (no config.json)")
    src = resolve_init_source(str(p))
    return src.model, spec_of(src.model).from_hf(read_source_tensors(src))  # the family's names -> ours


find_checkpoint = latest_checkpoint  # a checkpoint dir (verified) or a run dir's newest verified one


def load_pretrained(path: str | os.PathLike, cls: type, **head_kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """Build ``cls`` (one of our model classes) from a tokendrop run/checkpoint dir (its checkpoint
    verified) or a Hugging Face BERT dir.  Encoder weights must all be there; heads missing from the
    file are fresh.  -> (model, {"model_config", "tokenizer", "fresh", "source", "path", "hf_config"})."""
    p = Path(path)
    if not p.exists():
        raise InteropError(f"{p}: no such model directory")
    src = resolve_init_source(str(p))
    model = build_model(src.model, task=task_of(cls), **head_kwargs)  # the family's class for cls's task
    report = load_source_weights(src, model)
    tok = src.tokenizer_dir if src.tokenizer_dir is not None and has_tokenizer_files(src.tokenizer_dir) else None
    return model, {"model_config": src.model, "tokenizer": tok, "fresh": report.fresh, "source": src.kind,
                   "path": str(src.path), "hf_config": src.hf_config}


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """``tokendrop export``: a run/checkpoint dir (verified) -> a ``transformers`` BertForMaskedLM dir.

    A run continued from a published checkpoint (``RUN/source/``) keeps that checkpoint's config.json
    fields (ours set the shape, ``architectures = ["BertForMaskedLM"]``) and its tokenizer files.
    An existing non-empty ``out_dir`` is refused unless ``overwrite``, which replaces only an earlier
    export (``tokendrop.runs.rundir.prepare_output``) -- never a file, or a directory holding the input."""
    with lock(out_dir, InteropError):
        prepare_output(out_dir, "export", overwrite, inputs=[checkpoint], error=InteropError)
        return _export_hf(checkpoint, out_dir)


def _export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    model, info = load_pretrained(checkpoint, BertForMaskedLM)
    if any(k.startswith(("mlm.", "head.", "decoder.")) for k in info["fresh"]):
        raise InteropError(f"{checkpoint}: no MLM head weights to export")
    tok = info["tokenizer"]
    if info["source"] == "tokendrop":  # a continued run: the source's tokenizer files, kept in RUN/source/
        ck = Path(info["path"])
        source = (ck.parent.parent if ck.parent.name == "checkpoints" else ck) / "source"
        if has_tokenizer_files(source):
            tok = source
    base = info["hf_config"]  # the source's config.json (a continued run's RUN/source/config.json)
    return save_pretrained(model, out_dir, tok, base_config=base, kind="export")
