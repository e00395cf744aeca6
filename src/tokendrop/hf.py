"""Hugging Face interop: a state-dict adapter, export to and import from ``transformers`` BERT dirs.

Our parameter names are short (``bert.encoder.layers.3.attn.kv.weight``); ``to_hf``/``from_hf``
map them 1:1 onto ``transformers.BertForMaskedLM`` keys (``kv`` = ``key`` and ``value`` stacked).
Export writes ``config.json`` + ``model.safetensors`` (+ the tokenizer files), loadable by
``BertForMaskedLM``/``BertForSequenceClassification.from_pretrained`` with no missing MLM keys:
``cls.predictions.bias`` is written (the reference TF->HF converter forgets it), and the
pooler too, so a classifier starts from our pooler rather than a random one.

Only safetensors are read: ``pytorch_model.bin`` (a pickle) is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from .config import ModelConfig
from .fsutil import atomic_directory

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


class InteropError(ValueError):
    """A model directory that cannot be read or written as asked."""


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


def model_config_from_hf(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
    if d.get("model_type", "bert") != "bert":
        raise InteropError(f"{where}: model_type {d.get('model_type')!r} is not 'bert'")
    if d.get("hidden_act", "gelu") != "gelu":
        raise InteropError(f"{where}: hidden_act {d.get('hidden_act')!r} is not supported (expected 'gelu')")
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise InteropError(f"{where}: position_embedding_type must be 'absolute'")
    try:
        cfg = ModelConfig(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            num_layers=int(d["num_hidden_layers"]),
            num_heads=int(d["num_attention_heads"]),
            intermediate_size=int(d["intermediate_size"]),
            max_position_embeddings=int(d.get("max_position_embeddings", 512)),
            type_vocab_size=int(d.get("type_vocab_size", 2)),
            layer_norm_eps=float(d.get("layer_norm_eps", 1e-12)),
            hidden_dropout=float(d.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(d.get("attention_probs_dropout_prob", 0.1)),
            initializer_range=float(d.get("initializer_range", 0.02)),
            pad_token_id=int(d.get("pad_token_id", 0) or 0),
        )
    except KeyError as e:
        raise InteropError(f"{where}: missing field {e.args[0]!r}") from None
    cfg.validate()
    return cfg


# ----------------------------------------------------------------------------------------------
# files


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def copy_tokenizer(src: str | os.PathLike | None, dst: Path, max_len: int = 512) -> bool:
    """Copy a WordPiece tokenizer (a dir with vocab.txt, or a vocab.txt) and write HF's configs."""
    if src is None:
        return False
    src = Path(src)
    if src.is_file():
        shutil.copyfile(src, dst / "vocab.txt")
    else:
        if not (src / "vocab.txt").is_file():
            return False
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


def save_pretrained(model: nn.Module, out_dir: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Path:
    """Write ``model`` as a Hugging Face BERT directory (atomically)."""
    from .model import BertForMaskedLM, BertForQuestionAnswering, BertForSequenceClassification

    arch = {
        BertForMaskedLM: "BertForMaskedLM",
        BertForSequenceClassification: "BertForSequenceClassification",
        BertForQuestionAnswering: "BertForQuestionAnswering",
    }.get(type(model), "BertModel")
    cfg: ModelConfig = model.config
    sd = to_hf({k: v.float().cpu() for k, v in model.state_dict().items()})
    d = hf_config_dict(cfg, [arch])
    if arch == "BertForSequenceClassification":
        d["num_labels"] = model.num_labels
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    with atomic_directory(out_dir) as tmp:
        save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(d, indent=2))
        copy_tokenizer(tokenizer, tmp, cfg.max_position_embeddings)
    return Path(out_dir)


def read_hf_dir(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A ``transformers`` BERT dir -> (config, state dict in our names).  Safetensors only."""
    p = Path(path)
    cj = p / "config.json"
    if not cj.is_file():
        raise InteropError(f"{p}: not a model directory (no config.json)")
    try:
        cfg = model_config_from_hf(json.loads(cj.read_text()), str(cj))
    except json.JSONDecodeError as e:
        raise InteropError(f"{cj}: invalid JSON ({e})") from None
    files: list[Path]
    if (p / "model.safetensors").is_file():
        files = [p / "model.safetensors"]
    elif (p / "model.safetensors.index.json").is_file():
        idx = json.loads((p / "model.safetensors.index.json").read_text())
        files = sorted({p / f for f in idx["weight_map"].values()})
    elif (p / "pytorch_model.bin").is_file():
        raise InteropError(f"{p}: only pytorch_model.bin (a pickle) found; convert it to model.safetensors first")
    else:
        raise InteropError(f"{p}: no model.safetensors")
    sd: dict[str, Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    return cfg, from_hf(sd)


def load_weights(model: nn.Module, sd: dict[str, Tensor], where: str, required_prefixes: tuple[str, ...] = ("bert.",)) -> list[str]:
    """Load ``sd`` into ``model``: keys under ``required_prefixes`` must all be present and shaped
    right; other model keys missing from ``sd`` keep their fresh initialisation (returned)."""
    own = model.state_dict()
    # transformers' BertForMaskedLM has no pooler; like transformers, start it fresh then
    missing_required = [k for k in own if k.startswith(required_prefixes) and k not in sd
                        and not k.startswith("bert.pooler.")]
    if missing_required:
        raise InteropError(f"{where}: missing weights {missing_required[:4]}{' ...' if len(missing_required) > 4 else ''}")
    fresh: list[str] = []
    load: dict[str, Tensor] = {}
    for k, v in own.items():
        if k not in sd:
            fresh.append(k)
            continue
        if sd[k].shape != v.shape:
            if k.startswith(required_prefixes):
                raise InteropError(f"{where}: weight {k!r} has shape {tuple(sd[k].shape)}, expected {tuple(v.shape)}")
            fresh.append(k)  # e.g. a classifier with another number of labels
            continue
        load[k] = sd[k]
    model.load_state_dict(load, strict=False)
    return fresh


def find_checkpoint(path: Path) -> Path | None:
    """A tokendrop checkpoint dir (``meta.json`` + ``model.safetensors``), or a run dir's latest."""
    if (path / "meta.json").is_file() and (path / "model.safetensors").is_file():
        return path
    ck = path / "checkpoints"
    if ck.is_dir():
        cands = sorted(c for c in ck.iterdir() if c.name.startswith("step-") and (c / "meta.json").is_file())
        if cands:
            return cands[-1]
    return None


def load_pretrained(path: str | os.PathLike, cls: type, **head_kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """Build ``cls`` (one of our model classes) from a tokendrop run/checkpoint dir or a Hugging
    Face BERT dir.  Encoder weights must all be there; heads missing from the file are fresh.
    -> (model, {"model_config", "tokenizer", "fresh", "source"})."""
    p = Path(path)
    if not p.exists():
        raise InteropError(f"{p}: no such model directory")
    ckpt = find_checkpoint(p)
    if ckpt is not None:
        meta = json.loads((ckpt / "meta.json").read_text())
        from .config import from_dict

        cfg = from_dict(ModelConfig, meta["config"]["model"])
        sd = load_file(str(ckpt / "model.safetensors"))
        tok = None
        for cand in (ckpt / "tokenizer", ckpt.parent.parent / "tokenizer", p / "tokenizer"):
            if (cand / "vocab.txt").is_file():
                tok = cand
                break
        source = "tokendrop"
    else:
        cfg, sd = read_hf_dir(p)
        tok = p if (p / "vocab.txt").is_file() else None
        source = "huggingface"
        ckpt = p
    model = cls(cfg, **head_kwargs)
    fresh = load_weights(model, sd, str(ckpt))
    return model, {"model_config": cfg, "tokenizer": tok, "fresh": fresh, "source": source, "path": str(ckpt)}


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """``tokendrop export``: a run/checkpoint dir -> a ``transformers`` BertForMaskedLM dir."""
    from .model import BertForMaskedLM

    model, info = load_pretrained(checkpoint, BertForMaskedLM)
    if info["fresh"] and any(k.startswith("mlm.") for k in info["fresh"]):
        raise InteropError(f"{checkpoint}: no MLM head weights to export")
    return save_pretrained(model, out_dir, info["tokenizer"])
