"""Hugging Face interop: a state-dict adapter, export to and import from ``transformers`` BERT dirs.

Our parameter names are short (``bert.encoder.layers.3.attn.kv.weight``); ``to_hf``/``from_hf``
map them 1:1 onto ``transformers.BertForMaskedLM`` keys (``kv`` = ``key`` and ``value`` stacked).
Export writes ``config.json`` + ``model.safetensors`` (+ the tokenizer files), loadable by
``BertForMaskedLM``/``BertForSequenceClassification.from_pretrained`` with no missing MLM keys:
``cls.predictions.bias`` is written (the reference TF->HF converter forgets it), and the
pooler too, so a classifier starts from our pooler rather than a random one.  A run continued from a
published checkpoint (``model.init``) keeps that checkpoint's ``config.json`` fields and tokenizer
files, saved in ``RUN/source/`` when the run starts (:func:`save_source_files`).

Reading a model directory into our classes and ``tokendrop export`` are :mod:`tokendrop.pretrained`
(through ``tokendrop.init_source``, one loader for ``finetune --model`` and ``pretrain --init``);
this module is the mapping both directions use, and ``save_pretrained``.  ModernBERT's mapping is
:mod:`tokendrop.hf_modern`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .config import ModelConfig
from .errors import InteropError
from .families import task_of
from .fsutil import atomic_directory, write_safetensors
from .hf_modern import ARCHITECTURES, modern_config_from_hf, modern_hf_config_dict, to_hf_modern
from .model import BertForMaskedLM, BertForQuestionAnswering, BertForSequenceClassification
from .rundir import write_marker

_LAYER_MAP = [  # (ours, hf) inside bert.encoder.layer(s).{i}.
    ("attn.q", "attention.self.query"),
    ("attn.o", "attention.output.dense"),
    ("attn.norm", "attention.output.LayerNorm"),
    ("ffn.up", "intermediate.dense"),
    ("ffn.down", "output.dense"),
    ("ffn.norm", "output.LayerNorm"),
]
_TOP_MAP = [
    ("bert.embeddings.norm.", "bert.embeddings.LayerNorm."),
    ("bert.embeddings.", "bert.embeddings."),
    ("bert.pooler.dense.", "bert.pooler.dense."),
    ("mlm.dense.", "cls.predictions.transform.dense."),
    ("mlm.norm.", "cls.predictions.transform.LayerNorm."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
]


def to_hf(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict -> ``transformers`` BERT key names (tied decoder weight omitted)."""
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        m = re.match(r"bert\.encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            i, mod, kind = m.groups()
            pre = f"bert.encoder.layer.{i}."
            if mod == "attn.kv":
                k, v = value.chunk(2, dim=0)
                out[f"{pre}attention.self.key.{kind}"] = k.contiguous()
                out[f"{pre}attention.self.value.{kind}"] = v.contiguous()
                continue
            hf = dict(_LAYER_MAP).get(mod)
            if hf is None:
                raise InteropError(f"state dict: no Hugging Face name for {key!r}")
            out[f"{pre}{hf}.{kind}"] = value
            continue
        if key == "mlm.bias":
            out["cls.predictions.bias"] = value
            continue
        for ours, hf in _TOP_MAP:
            if key.startswith(ours):
                out[hf + key[len(ours):]] = value
                break
        else:
            raise InteropError(f"state dict: no Hugging Face name for {key!r}")
    return {k: v.detach().contiguous() for k, v in out.items()}


def from_hf(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """``transformers`` BERT keys (BertForMaskedLM/-SequenceClassification/-QuestionAnswering or a
    bare BertModel) -> our names.  Unknown keys (NSP head, position_ids) are ignored."""
    sd = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
          for k, v in sd.items()}
    if not any(k.startswith("bert.") for k in sd):  # a bare BertModel
        sd = {("bert." + k if k.split(".")[0] in ("embeddings", "encoder", "pooler") else k): v for k, v in sd.items()}
    out: dict[str, Tensor] = {}
    rev_layer = {hf: ours for ours, hf in _LAYER_MAP}
    pending: dict[tuple[str, str], dict[str, Tensor]] = {}
    for key, value in sd.items():
        m = re.match(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            i, mod, kind = m.groups()
            pre = f"bert.encoder.layers.{i}."
            if mod in ("attention.self.key", "attention.self.value"):
                pending.setdefault((pre, kind), {})[mod.rsplit(".", 1)[1]] = value
            elif mod in rev_layer:
                out[f"{pre}{rev_layer[mod]}.{kind}"] = value
            continue
        if key == "cls.predictions.bias":
            out["mlm.bias"] = value
            continue
        if key.endswith("position_ids") or key.startswith("cls.predictions.decoder") or key.startswith("cls.seq_relationship"):
            continue
        for ours, hf in _TOP_MAP:
            if key.startswith(hf):
                out[ours + key[len(hf):]] = value
                break
    for (pre, kind), kv in pending.items():
        if set(kv) != {"key", "value"}:
            raise InteropError(f"state dict: {pre}: key and value projections must both be present")
        out[f"{pre}attn.kv.{kind}"] = torch.cat([kv["key"], kv["value"]], dim=0)
    if "mlm.bias" not in out and "cls.predictions.decoder.bias" in sd:
        out["mlm.bias"] = sd["cls.predictions.decoder.bias"]
    return out


def hf_config_dict(cfg: ModelConfig, architectures: list[str] | None = None) -> dict[str, Any]:
    return {
        "architectures": architectures or ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


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
_REQUIRED_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def _check_shape_fields(d: dict[str, Any], where: str) -> None:
    """The shape fields of a config.json (either family) that are there must be positive integers:
    ``ModelConfig`` reads 0 as "the preset's", so a 0 (or null) here would silently load a preset's
    shape instead of the checkpoint's (or be reported far from its cause)."""
    for key in _REQUIRED_FIELDS:
        if key not in d:
            continue  # each family names its missing fields itself
        v = d[key]
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())) or v <= 0:
            raise InteropError(f"{where}: {key} must be an integer > 0, got {json.dumps(v)}; fix {key} in "
                               "config.json (it gives the model's shape; tokendrop never fills it from a preset)")


def model_config_from_hf(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """A BERT ``config.json`` -> our ModelConfig.  Whatever our model cannot reproduce exactly is a
    one-line InteropError naming the field (never silently ignored)."""
    mt = d.get("model_type", "bert")  # configs converted from Google's bert_config.json have none
    _check_shape_fields(d, where)
    if mt == "modernbert":  # the second family (tokendrop.modern)
        return modern_config_from_hf(d, where)
    if mt != "bert":
        what = _NOT_BERT.get(str(mt), f"model_type {mt!r}")
        raise InteropError(f"{where}: model_type {mt!r} is not BERT: {what} cannot be loaded into tokendrop's "
                           "BERT; use a model_type 'bert' checkpoint")
    if d.get("hidden_act", "gelu") != "gelu":
        raise InteropError(f"{where}: hidden_act {d.get('hidden_act')!r} is not supported: tokendrop's BERT uses the "
                           "exact erf-GELU (hidden_act 'gelu')")
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise InteropError(f"{where}: position_embedding_type {d.get('position_embedding_type')!r} is not supported: "
                           "tokendrop's BERT has learned absolute positions ('absolute')")
    for flag in ("is_decoder", "add_cross_attention"):
        if d.get(flag, False):
            raise InteropError(f"{where}: {flag} is true: a decoder / cross-attention BERT cannot be loaded "
                               "(tokendrop's BERT is a bidirectional encoder)")
    if d.get("tie_word_embeddings", True) is False:
        raise InteropError(f"{where}: tie_word_embeddings is false: tokendrop's MLM decoder is tied to the word "
                           "embeddings, so an untied decoder cannot be loaded")
    missing = [k for k in _REQUIRED_FIELDS if k not in d]
    if missing:
        raise InteropError(f"{where}: missing field {missing[0]!r} (a BERT config.json needs {', '.join(_REQUIRED_FIELDS)})")

    def num(key: str, default: Any, tp: type) -> Any:
        v = d.get(key, default)
        if v is None and key == "pad_token_id":
            v = 0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (tp is int and float(v) != int(v)):
            raise InteropError(f"{where}: {key} must be {'an integer' if tp is int else 'a number'}, got {v!r}")
        return tp(v)

    cfg = ModelConfig(
        vocab_size=num("vocab_size", None, int),
        hidden_size=num("hidden_size", None, int),
        num_layers=num("num_hidden_layers", None, int),
        num_heads=num("num_attention_heads", None, int),
        intermediate_size=num("intermediate_size", None, int),
        max_position_embeddings=num("max_position_embeddings", 512, int),
        type_vocab_size=num("type_vocab_size", 2, int),
        layer_norm_eps=num("layer_norm_eps", 1e-12, float),
        hidden_dropout=num("hidden_dropout_prob", 0.1, float),
        attention_dropout=num("attention_probs_dropout_prob", 0.1, float),
        initializer_range=num("initializer_range", 0.02, float),
        pad_token_id=num("pad_token_id", 0, int),
    )
    if cfg.vocab_size <= 0:
        raise InteropError(f"{where}: vocab_size must be a positive integer, got {cfg.vocab_size}")
    try:
        cfg.validate()
    except ValueError as e:
        raise InteropError(f"{where}: {e}") from None
    return cfg


# ----------------------------------------------------------------------------------------------
# files


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def copy_tokenizer(src: str | os.PathLike | None, dst: Path, max_len: int = 512) -> bool:
    """Copy a tokenizer (a dir with vocab.txt and/or tokenizer.json, or a vocab.txt) and write HF's
    configs: a WordPiece vocab.txt without tokenizer_config.json gets a BertTokenizer one; a
    tokenizer.json without vocab.txt (e.g. ModernBERT's BPE) is copied as it is, with a
    tokenizer_config.json describing it when it has none (``tokenizer.write_tokenizer_config``), so
    ``AutoTokenizer`` loads the copy as the same tokenizer.  -> whether a tokenizer was copied."""
    if src is None:
        return False
    src = Path(src)
    if src.is_file():
        shutil.copyfile(src, dst / "vocab.txt")
    else:
        if not (src / "vocab.txt").is_file():
            if not (src / "tokenizer.json").is_file():
                return False
            from dataclasses import replace

            from .data.tokenizer import read_tokenizer_spec, write_tokenizer_config

            spec = read_tokenizer_spec(src)  # checked before anything is copied
            for name in TOKENIZER_FILES:
                if (src / name).is_file():
                    shutil.copyfile(src / name, dst / name)
            if not (dst / "tokenizer_config.json").is_file():
                write_tokenizer_config(replace(spec, model_max_length=spec.model_max_length or max_len), dst)
            return True
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copyfile(src / name, dst / name)
    lower = True
    info = src / "tokenizer_info.json" if src.is_dir() else None
    if info is not None and info.is_file():
        lower = bool(json.loads(info.read_text()).get("lowercase", True))
    tc = dst / "tokenizer_config.json"
    if not tc.is_file():
        tc.write_text(json.dumps({
            "tokenizer_class": "BertTokenizer", "do_lower_case": lower, "model_max_length": max_len,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
            "mask_token": "[MASK]",
        }, indent=2))
    return True


def _export_config(base: dict[str, Any] | None, ours: dict[str, Any]) -> dict[str, Any]:
    """Our config fields over the source's config.json (fields we do not set are kept as they were)."""
    if not base:
        return ours
    d = {k: v for k, v in base.items() if k not in ("architectures",)}
    d.update(ours)
    for k in ("torch_dtype", "dtype"):  # we write fp32 tensors
        if k in d:
            d[k] = "float32"
    return d


def save_pretrained(model: nn.Module, out_dir: str | os.PathLike, tokenizer: str | os.PathLike | None = None,
                    base_config: dict[str, Any] | None = None, kind: str | None = None) -> Path:
    """Write ``model`` as a Hugging Face BERT directory (atomically).  ``base_config``: a source's
    config.json whose fields we do not set are kept (``_name_or_path``, ``use_cache``, ...).
    ``kind``: mark the directory as that kind of tokendrop output (``tokendrop.rundir``)."""
    cfg: ModelConfig = model.config
    if cfg.family == "modernbert":
        arch = ARCHITECTURES[task_of(model)]
        sd = to_hf_modern({k: v.float().cpu() for k, v in model.state_dict().items()})
        d = modern_hf_config_dict(cfg, [arch])
    else:
        arch = {
            BertForMaskedLM: "BertForMaskedLM",
            BertForSequenceClassification: "BertForSequenceClassification",
            BertForQuestionAnswering: "BertForQuestionAnswering",
        }.get(type(model), "BertModel")
        sd = to_hf({k: v.float().cpu() for k, v in model.state_dict().items()})
        d = hf_config_dict(cfg, [arch])
    if arch.endswith("ForSequenceClassification"):
        d["num_labels"] = model.num_labels
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    d = _export_config(base_config, d)
    if cfg.family == "modernbert":  # else transformers' defaults (50281) name ids outside a smaller vocabulary
        for k in ("bos_token_id", "cls_token_id"):
            d.setdefault(k, None)
    with atomic_directory(out_dir) as tmp:
        write_safetensors(sd, tmp / "model.safetensors", metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(d, indent=2))
        copy_tokenizer(tokenizer, tmp, cfg.max_position_embeddings)
        if kind:
            write_marker(tmp, kind)
    return Path(out_dir)


def save_source_files(src: Any, run_dir: str | os.PathLike) -> Path:
    """Write ``RUN/source/`` for a run continued from ``src`` (a ``tokendrop.init_source.InitSource``):
    the source's config.json, its tokenizer files and ``init.json`` (source, layout, sha256), so that
    ``export_hf`` keeps the source's config fields and tokenizer and ``--resume`` never needs the source.
    Written atomically; a source that is itself a continued run passes its own ``source/`` on."""
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
        (tmp / "init.json").write_text(json.dumps({
            "source": src.source, "kind": src.kind, "layout": src.layout, "path": str(src.path),
            "weights_file": str(src.weights_file), "weights_files": [str(f) for f in src.weights_files],
            "sha256": src.sha256,
        }, indent=2))
    return run_dir / "source"
