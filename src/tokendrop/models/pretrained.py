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

from tokendrop.runs.checkpoint import latest_checkpoint
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


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, overwrite: bool = False,
              command: str = "") -> Path:
    """``tokendrop export``: a run/checkpoint dir (verified) -> a ``transformers`` BertForMaskedLM dir.

    A run continued from a published checkpoint (``RUN/source/``) keeps that checkpoint's config.json
    fields (ours set the shape, ``architectures = ["BertForMaskedLM"]``) and its tokenizer files.
    An existing non-empty ``out_dir`` is refused unless ``overwrite``, which replaces only an earlier
    export (``tokendrop.runs.rundir.prepare_output``) -- never a file, or a directory holding the input.
    The export holds a model card (README.md, ``model_card``; ``command``: the export's own command line)."""
    with lock(out_dir, InteropError):
        prepare_output(out_dir, "export", overwrite, inputs=[checkpoint], error=InteropError)
        return _export_hf(checkpoint, out_dir, command)


def _export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, command: str = "") -> Path:
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
    facts = _run_facts(Path(info["path"])) if info["source"] == "tokendrop" else None
    card = model_card(model.config, info, Path(out_dir).name, command, facts)
    out = save_pretrained(model, out_dir, tok, base_config=base, kind="export", card=card)
    ev, h = (facts or {}).get("eval"), (facts or {}).get("entropy")
    if ev and h is not None and ev["eval_loss"] >= h:  # said once the export is written (a failed one: its error only)
        import sys

        print(f"warning: {checkpoint}: its last eval MLM loss {ev['eval_loss']:.3f} is not below the unigram entropy of "
              f"its data ({h:.3f} nats): the model predicts masked tokens no better than their frequencies (fill-mask "
              "answers frequent tokens); train longer before using the MLM head", file=sys.stderr)
    return out


def _run_facts(ck: Path) -> dict[str, Any]:
    """What the model card says about the run a checkpoint belongs to: its meta.json (config, step)
    and its metrics (final losses, the unigram entropy, the pretrain command)."""
    import json

    from tokendrop.runs.metrics import read_metrics

    meta = json.loads((ck / "meta.json").read_text(encoding="utf-8"))
    run = ck.parent.parent if ck.parent.name == "checkpoints" else ck
    step = int(meta.get("step", 0))
    recs = [r for r in read_metrics(run) if not isinstance(r.get("step"), (int, float)) or r["step"] <= step]
    start = next((r for r in recs if r.get("event") == "start"), {})
    train = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "eval_loss" in r]
    entropy = start.get("unigram_entropy") or next((r["unigram_entropy"] for r in evals if "unigram_entropy" in r), None)
    return {"config": meta.get("config", {}), "step": step, "train": train[-1] if train else None,
            "eval": evals[-1] if evals else None, "entropy": entropy, "command": start.get("command", ""),
            "seq_len": start.get("seq_len")}


def model_card(cfg: ModelConfig, info: dict[str, Any], name: str, command: str = "",
               facts: dict[str, Any] | None = None) -> str:
    """README.md of an export: the architecture and how to load it; for a tokendrop checkpoint its
    source, data, length, dropping method, final losses beside the data's unigram entropy, and the
    commands that made it (``facts``: ``_run_facts`` of the checkpoint)."""
    from tokendrop.version import __version__
    from tokendrop.data.masking import unigram_note

    spec = spec_of(cfg)
    arch = spec.hf_architectures["mlm"]
    rows = [("architecture", f"{arch} ({cfg.family}: {cfg.num_layers} layers x {cfg.hidden_size}, {cfg.num_heads} "
                             f"heads, FFN {cfg.intermediate_size}, vocab {cfg.vocab_size}); load with "
                             "`AutoModelForMaskedLM`")]
    if facts is not None:
        f = facts
        c, tc, d = f["config"], f["config"].get("train", {}), f["config"].get("drop", {})
        data = c.get("data", {})
        T = f["seq_len"]
        rows += [("source", f"continued from `{c['model']['init']}` (sha256 {c['model'].get('init_sha256', '')[:12]})"
                  if c.get("model", {}).get("init") else "random initialisation (pretrained from scratch)"),
                 ("data", f"`{data.get('path') or ', '.join(data.get('paths', []))}`"),
                 ("length", f"step {f['step']} of {tc.get('steps') or tc.get('time_budget')}, "
                            f"{tc.get('batch_size')} sequences per step" + (f" of {T} tokens" if T else "")),
                 ("method", "dense MLM (no token dropping)" if d.get("method", "none") == "none" and d.get("variant") != "avg"
                  else f"token dropping: {d.get('method')}/{d.get('variant')}, rate {d.get('rate')}")]
        if f["train"]:
            rows.append(("final train MLM loss", f"{f['train']['loss']:.4f} (step {f['train']['step']})"))
        if f["eval"]:
            note = unigram_note(f["eval"]["eval_loss"], f["entropy"])
            rows.append(("final eval MLM loss", f"{f['eval']['eval_loss']:.4f}, accuracy {f['eval']['eval_acc']:.4f} "
                                                f"(step {f['eval']['step']})" + (f"; {note}" if note else "")))
        if f["command"]:
            rows.append(("trained with", f"`{f['command']}`"))
    else:
        rows.append(("source", f"`{info['path']}` ({info['source']})"))
    if command:
        rows.append(("exported with", f"`{command}`"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"""---
library_name: transformers
pipeline_tag: fill-mask
tags:
- tokendrop
- fill-mask
- {cfg.family}
---

# {name}

A {cfg.family} masked language model exported by tokendrop {__version__}.

| | |
|---|---|
{table}

## Use

```python
from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

model = AutoModelForMaskedLM.from_pretrained("{name}")
tokenizer = AutoTokenizer.from_pretrained("{name}")
fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
print(fill(f"Paris is the {{tokenizer.mask_token}} of France."))
```
"""
