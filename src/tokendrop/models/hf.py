"""Hugging Face interop shared by the families: export (``save_pretrained``), config.json dispatch,
tokenizer files and ``RUN/source/``.

Export writes ``config.json`` + ``model.safetensors`` (+ the tokenizer files) in the names and
config of the model's family (``tokendrop.models.families.FAMILIES``: BERT's mapping is
:mod:`tokendrop.models.bert.hf`, ModernBERT's :mod:`tokendrop.models.modernbert.hf`), loadable by
the transformers class the export names with no missing MLM keys and nothing it does not expect:
BERT's ``cls.predictions.bias`` is written (the reference TF->HF converter forgets it), and an MLM
export leaves out what pretraining does not train and transformers' MLM class does not have (BERT's
pooler: ``FamilySpec.pretrain_frozen``), so ``AutoModelForMaskedLM`` and ``pipeline("fill-mask")``
load it with no report at all; a classifier built from it starts its pooler fresh, as transformers
says. A classification export (``save_pretrained(..., leave_out=...)`` of a classifier without its
untrained classifier) holds the encoder and the pooling layers the checkpoint has (BERT's pooler,
ModernBERT's ``head``), so ``AutoModelForSequenceClassification`` reports only the classifier it
starts. A run continued from a published checkpoint (``model.init``) keeps that
checkpoint's ``config.json`` fields and tokenizer files, saved in ``RUN/source/`` when the run
starts (:func:`save_source_files`).

Reading a model directory into our classes and ``tokendrop export`` are
:mod:`tokendrop.models.source` (through ``tokendrop.models.source``, one loader for ``finetune
--model`` and ``pretrain --init``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from torch import nn

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import read_tokenizer_spec, write_tokenizer_config
from tokendrop.errors import InteropError
from tokendrop.models.bert.hf import REQUIRED_FIELDS
from tokendrop.models.families import spec_for_hf_model_type, spec_of, task_of
from tokendrop.runs.files import atomic_directory, read_json, write_safetensors
from tokendrop.runs.rundir import write_marker

_NOT_BERT = {
    "roberta": "RoBERTa (no token types, positions offset by the padding index, a BPE tokenizer)",
    "xlm-roberta": "XLM-RoBERTa (RoBERTa's layout)",
    "camembert": "CamemBERT (RoBERTa's layout)",
    "distilbert": "DistilBERT (other weight names, no token types)",
    "albert": "ALBERT (factorised embeddings, shared layers)",
    "electra": "ELECTRA (separate embedding size, other weight names)",
    "deberta": "DeBERTa (disentangled relative attention)",
    "deberta-v2": "DeBERTa-v2 (disentangled relative attention)",
    "mpnet": "MPNet (relative position buckets)",
    "nomic_bert": "nomic-bert (rotary positions, SwiGLU)",
}


def _check_shape_fields(d: dict[str, Any], where: str) -> None:
    """The shape fields of a config.json (either family) that are there must be positive integers:
    ``ModelConfig`` reads 0 as "the preset's", so a 0 (or null) here would silently load a preset's
    shape instead of the checkpoint's (or be reported far from its cause)."""
    for key in REQUIRED_FIELDS:
        if key not in d:
            continue  # each family names its missing fields itself
        v = d[key]
        if (
            isinstance(v, bool)
            or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
            or v <= 0
        ):
            raise InteropError(
                f"{where}: {key} must be an integer > 0, got {json.dumps(v)}; fix {key} in "
                "config.json (it gives the model's shape; tokendrop never fills it from a preset)"
            )


def model_config_from_hf(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """A ``config.json`` -> our ModelConfig, read by the family its ``model_type`` names
    (``tokendrop.models.families``; none means BERT, as configs converted from Google's
    bert_config.json have none).  Whatever our model cannot reproduce exactly is a one-line
    InteropError naming the field (never silently ignored)."""
    mt = d.get("model_type", "bert")
    _check_shape_fields(d, where)
    spec = spec_for_hf_model_type(str(mt))
    if spec is None:
        what = _NOT_BERT.get(str(mt), f"model_type {mt!r}")
        raise InteropError(
            f"{where}: model_type {mt!r} is not BERT: {what} cannot be loaded into tokendrop's "
            "BERT; use a model_type 'bert' checkpoint"
        )
    return spec.config_from_hf(d, where)


# ----------------------------------------------------------------------------------------------
# files


TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def copy_tokenizer(src: str | os.PathLike | None, dst: Path, max_len: int = 512) -> bool:
    """Copy a tokenizer (a dir with vocab.txt and/or tokenizer.json, or a vocab.txt) and write HF's
    configs: a WordPiece vocab.txt without tokenizer_config.json gets a BertTokenizer one; a
    tokenizer.json without vocab.txt (e.g. ModernBERT's BPE) is copied as it is, with a
    tokenizer_config.json describing it when it has none (``tokenizer.write_tokenizer_config``), so
    ``AutoTokenizer`` loads the copy as the same tokenizer.  ``max_len``: the model's position
    limit (``max_position_embeddings``), written as the copy's ``model_max_length`` whatever the
    source declared (prepared data, a published checkpoint), so ``tok(text, truncation=True)``
    gives no more ids than the model takes.  -> whether a tokenizer was copied."""
    if src is None:
        return False
    src = Path(src)
    if src.is_file():
        shutil.copyfile(src, dst / "vocab.txt")
    else:
        if not (src / "vocab.txt").is_file():
            if not (src / "tokenizer.json").is_file():
                return False
            spec = read_tokenizer_spec(src)  # checked before anything is copied
            for name in TOKENIZER_FILES:
                if (src / name).is_file():
                    shutil.copyfile(src / name, dst / name)
            if (src / "tokenizer_config.json").is_file():
                _fit_model_max_length(src / "tokenizer_config.json", dst, max_len)
            else:
                write_tokenizer_config(replace(spec, model_max_length=max_len), dst)
            return True
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copyfile(src / name, dst / name)
        if (src / "tokenizer_config.json").is_file():
            _fit_model_max_length(src / "tokenizer_config.json", dst, max_len)
    lower = True
    info = src / "tokenizer_info.json" if src.is_dir() else None
    if info is not None and info.is_file():
        lower = bool(json.loads(info.read_text()).get("lowercase", True))
    tc = dst / "tokenizer_config.json"
    if not tc.is_file():
        tc.write_text(
            json.dumps(
                {
                    "tokenizer_class": "BertTokenizer",
                    "do_lower_case": lower,
                    "model_max_length": max_len,
                    "unk_token": "[UNK]",
                    "sep_token": "[SEP]",
                    "pad_token": "[PAD]",
                    "cls_token": "[CLS]",
                    "mask_token": "[MASK]",
                },
                indent=2,
            )
        )
    return True


def _fit_model_max_length(source: Path, dst: Path, max_len: int) -> None:
    """``dst/tokenizer_config.json`` (a copy of ``source``): rewritten with ``model_max_length`` set
    to ``max_len``, every other field as it was, unless ``source`` already declares that (the copy
    is then the source byte for byte)."""
    cfg = read_json(source, InteropError, dict, "fix or remove the tokenizer's config")
    if cfg.get("model_max_length") == max_len:
        return
    cfg["model_max_length"] = int(max_len)
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def transformers_version() -> str | None:
    """The installed transformers' version (what its own save_pretrained writes), or None."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _export_config(base: dict[str, Any] | None, ours: dict[str, Any]) -> dict[str, Any]:
    """Our config fields over the source's config.json (fields we do not set are kept as they were),
    less what names the source rather than this model: its ``_name_or_path``, and its
    ``transformers_version`` (the installed one is written, as transformers' own save_pretrained
    does)."""
    d = {
        k: v
        for k, v in (base or {}).items()
        if k not in ("architectures", "_name_or_path", "transformers_version")
    }
    d.update(ours)
    for k in ("torch_dtype", "dtype"):  # we write fp32 tensors
        if k in d:
            d[k] = "float32"
    version = transformers_version()
    if version:
        d["transformers_version"] = version
    return d


def save_pretrained(
    model: nn.Module,
    out_dir: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    base_config: dict[str, Any] | None = None,
    kind: str | None = None,
    card: str | None = None,
    leave_out: tuple[str, ...] = (),
) -> Path:
    """Write ``model`` as a Hugging Face directory of its family (atomically).  ``base_config``: a
    source's config.json whose fields we do not set are kept (``use_cache``, token ids, ...; not its
    ``_name_or_path``).  An MLM model is written without the modules pretraining leaves untrained
    (``FamilySpec.pretrain_frozen``: BERT's pooler), which transformers' MLM class does not have.
    ``kind``: mark the directory as that kind of tokendrop output
    (``tokendrop.runs.rundir``).  ``card``: the model card, written as README.md.  ``leave_out``:
    our parameter names not written (a classifier's untrained ``classifier.*``: transformers starts
    its own, and config.json then names no labels, so ``num_labels=`` at load time is all a user
    sets)."""
    cfg: ModelConfig = model.config
    spec = spec_of(cfg)
    task = task_of(model)
    arch = spec.hf_architectures[task]
    frozen = spec.pretrain_frozen if task == "mlm" else ()  # not in transformers' MLM class
    sd = spec.to_hf(
        {
            k: v.float().cpu()
            for k, v in model.state_dict().items()
            if not any(k.startswith(f + ".") for f in frozen) and k not in leave_out
        }
    )
    d = spec.hf_config(cfg, [arch])
    if arch.endswith("ForSequenceClassification") and "classifier.weight" not in leave_out:
        d["num_labels"] = model.num_labels
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    d = _export_config(base_config, d)
    for k, v in spec.hf_config_defaults.items():
        d.setdefault(k, v)
    with atomic_directory(out_dir) as tmp:
        write_safetensors(sd, tmp / "model.safetensors", metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(d, indent=2))
        copy_tokenizer(tokenizer, tmp, cfg.max_position_embeddings)
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")
        if kind:
            write_marker(tmp, kind)
    return Path(out_dir)


def save_source_files(src: Any, run_dir: str | os.PathLike) -> Path:
    """Write ``RUN/source/`` for a run continued from ``src`` (a
    ``tokendrop.models.weights.InitSource``): the source's config.json, its tokenizer files and
    ``init.json`` (source, layout, sha256), so that ``export_hf`` keeps the source's config fields
    and tokenizer and ``--resume`` never needs the source. Written atomically; a source that is
    itself a continued run passes its own ``source/`` on."""
    run_dir = Path(run_dir)
    tok_dirs: list[Path] = []
    if src.kind == "tokendrop":  # a continued run: its source/ holds the original tokenizer files
        ck = Path(src.path)
        run = ck.parent.parent if ck.parent.name == "checkpoints" else ck
        tok_dirs.append(run / "source")
    if src.tokenizer_dir is not None:
        tok_dirs.append(Path(src.tokenizer_dir))
    tok = next((t for t in tok_dirs if any((t / n).is_file() for n in TOKENIZER_FILES)), None)
    with atomic_directory(run_dir / "source") as tmp:
        if src.hf_config is not None:
            (tmp / "config.json").write_text(json.dumps(src.hf_config, indent=2))
        if tok is not None:
            for name in (*TOKENIZER_FILES, "tokenizer_info.json"):
                if (tok / name).is_file():
                    shutil.copyfile(tok / name, tmp / name)
        (tmp / "init.json").write_text(
            json.dumps(
                {
                    "source": src.source,
                    "kind": src.kind,
                    "layout": src.layout,
                    "path": str(src.path),
                    "weights_file": str(src.weights_file),
                    "weights_files": [str(f) for f in src.weights_files],
                    "sha256": src.sha256,
                },
                indent=2,
            )
        )
    return run_dir / "source"
