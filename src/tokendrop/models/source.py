"""A model source, one module: what ``--init`` / ``finetune --model`` / ``export`` / ``prepare
--tokenizer`` name (a tokendrop run or checkpoint, a transformers directory in any layout people
have, or a hub name when ``huggingface_hub`` is installed and online), resolved to a directory, its
``[model]`` section and its weights (sha256 of the bytes parsed), loaded into our classes, exported
back, and its tokenizer (docs/design.md §5.2).

Sections: resolving a source and its [model] section (its weight files are read by
models/weights.py, which the families' loaders share); loading and exporting; a source's tokenizer
for ``prepare``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from tokendrop.config import ModelConfig, from_dict
from tokendrop.config.model import MODEL_PRESETS, VOCAB_FROM_DATA
from tokendrop.data import DataError
from tokendrop.data.masking import unigram_note
from tokendrop.data.tokenizer import has_tokenizer_files
from tokendrop.dropping.config import DropConfig
from tokendrop.errors import ConfigError, InitError, InteropError, check_arg, check_path_arg
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.families import TASKS, build_model, spec_of, task_of
from tokendrop.models.hf import (
    TOKENIZER_FILES,
    model_config_from_hf,
    save_pretrained,
    save_source_files,
)
from tokendrop.models.weights import (
    InitReport,
    InitSource,
    first_line,
    read_source_tensors,
    scan_tensors,
    weight_files,
)
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.checkpoint import latest_checkpoint
from tokendrop.runs.files import read_json
from tokendrop.runs.metrics import read_metrics
from tokendrop.runs.rundir import lock, prepare_output
from tokendrop.version import __version__

# ----------------------------------------------------------------------------------------------
# resolving a source and its [model] section


__all__ = [
    "InitError",
    "InitSource",
    "InitReport",
    "resolve_init_source",
    "model_section_from_init",
    "resolve_model_init",
    "load_init_weights",
    "load_source_weights",
    "load_pretrained",
    "resolve_model",
    "save_source_files",
    "read_source_tensors",
]


# ----------------------------------------------------------------------------------------------
# resolution

_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_HUB_PATTERNS = [
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*.safetensors",
    *TOKENIZER_FILES,
]
_HUB_BIN_PATTERNS = [
    "config.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "pytorch_model-*.bin",
    *TOKENIZER_FILES,
]


def _looks_like_hub_name(source: str) -> bool:
    return bool(_HUB_NAME.match(source)) and not source.startswith((".", "~"))


def _download(name: str) -> Path:
    """A Hub name -> a local snapshot dir (only when huggingface_hub is installed and can reach
    it)."""
    try:
        import huggingface_hub
    except ImportError:
        raise InitError(
            f"{name}: no such local directory, and huggingface_hub is not installed to fetch it "
            "from the Hugging Face Hub; pass a local directory (a saved BERT model or "
            "a tokendrop run)"
        ) from None
    try:
        path = Path(huggingface_hub.snapshot_download(repo_id=name, allow_patterns=_HUB_PATTERNS))
        if not any(path.glob("*.safetensors")):
            path = Path(
                huggingface_hub.snapshot_download(repo_id=name, allow_patterns=_HUB_BIN_PATTERNS)
            )
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, gated repo, network errors
        raise InitError(
            f"{name}: no such local directory, and it could not be fetched from the Hugging Face "
            f"Hub ({type(e).__name__}: {first_line(e)}); pass a local directory (a saved BERT "
            "model or a tokendrop run)"
        ) from None
    return path


def _resolve_hf(source: str, p: Path) -> InitSource:
    cj = p / "config.json"
    if not cj.is_file():
        raise InitError(
            f"{p}: not a model directory (no config.json) and not a tokendrop run (no "
            "checkpoints/); "
            "expected a Hugging Face BERT directory or a `tokendrop pretrain` output"
        )
    d = read_json(cj, InitError)
    cfg = model_config_from_hf(d, str(cj))
    hashed, files, fmt, sharded = weight_files(p)
    sha, shapes = scan_tensors(files, fmt, sharded)
    # the family's layouts (tokendrop.models.families)
    layout = spec_of(cfg).check_hf_tensors(hashed, shapes, cfg)
    tok = p if has_tokenizer_files(p) else None
    return InitSource(
        source=source,
        path=p,
        kind="huggingface",
        layout=layout,
        model=cfg,
        weights_file=hashed,
        sha256=sha,
        tokenizer_dir=tok,
        hf_config=d,
        weights_files=files,
        weights_format=fmt,
    )


def _resolve_tokendrop(source: str, p: Path) -> InitSource:
    try:
        # the shared verifying loader (tokendrop.runs.checkpoint): a run's newest checkpoint
        ck = ckpt_mod.find(p)
    except ckpt_mod.CheckpointError as e:
        raise InitError(str(e)) from None
    run = p if ck != p else (p.parent.parent if p.parent.name == "checkpoints" else p)
    try:
        meta = ckpt_mod.read_meta(ck)
        # model.safetensors, or an FSDP run's shards
        meta = ckpt_mod.verify(ck, files=ckpt_mod.model_files(meta))
        model_d = meta["config"]["model"]
        cfg = from_dict(ModelConfig, {k: v for k, v in model_d.items() if k != "preset"})
        sha = ckpt_mod.weights_sha256_of(meta)
    except ckpt_mod.CheckpointError as e:
        raise InitError(str(e)) from None
    except (KeyError, TypeError) as e:
        raise InitError(
            f"{ck / 'meta.json'}: no {e.args[0] if e.args else 'config'!r} entry"
        ) from None
    except ConfigError as e:
        raise InitError(f"{ck / 'meta.json'}: {e}") from None
    if not isinstance(cfg.vocab_size, int):
        raise InitError(
            f"{ck / 'meta.json'}: model.vocab_size is {cfg.vocab_size!r}, expected "
            "the resolved size"
        )
    # 0 would mean "the preset's"
    for key in (
        "hidden_size",
        "num_layers",
        "num_heads",
        "intermediate_size",
    ):
        if key in model_d and model_d[key] != getattr(cfg, key):
            raise InitError(
                f"{ck / 'meta.json'}: model.{key} is {model_d.get(key)!r}, expected the resolved "
                "size (a checkpoint records its shape; the file was edited: restore it or use "
                "another checkpoint)"
            )
    tok = next(
        (
            c
            for c in (ck / "tokenizer", run / "tokenizer", p / "tokenizer", run / "source")
            if has_tokenizer_files(c)
        ),
        None,
    )
    hf_cfg = (
        read_json(run / "source" / "config.json", InitError)
        if (run / "source" / "config.json").is_file()
        else None
    )
    return InitSource(
        source=source,
        path=ck,
        kind="tokendrop",
        layout="tokendrop",
        model=cfg,
        weights_file=ck / "model.safetensors",
        sha256=sha,
        tokenizer_dir=tok,
        hf_config=hf_cfg,
        weights_files=[ck / "model.safetensors"],
        weights_format="safetensors",
    )


def resolve_init_source(source: str) -> InitSource:
    """``model.init`` -> an :class:`InitSource` (directory, layout, shape, weights hash, tokenizer).

    Reads config.json and the tensor headers (a ``.bin`` is read whole, with weights_only) and
    checks that every encoder tensor is there with the shape config.json implies; raises
    :class:`InitError`."""
    s = str(source).strip()
    if not s:
        raise InitError(
            "model.init: empty; expected a Hugging Face BERT directory, a tokendrop run or "
            "checkpoint directory, or a Hub name"
        )
    p = Path(s).expanduser()
    if not p.exists():
        if not _looks_like_hub_name(s):
            raise InitError(
                f"{s}: no such directory; expected a Hugging Face BERT directory, a tokendrop run "
                "or checkpoint directory, or a Hub name (org/name)"
            )
        p = _download(s)
    if not p.is_dir():
        raise InitError(
            f"{p}: expected a directory (a Hugging Face BERT directory holding config.json, or a "
            "tokendrop run/checkpoint directory), not a file"
        )
    if (p / "checkpoints").is_dir() or (
        (p / "meta.json").is_file()
        and ((p / "model.safetensors").is_file() or (p / "shards").is_dir())
        and not (p / "config.json").is_file()
    ):
        return _resolve_tokendrop(s, p)
    if (
        p.parent.name == "checkpoints"
        and re.fullmatch(r"step-\d+", p.name)
        and not (p / "config.json").is_file()
    ):
        try:  # a run's checkpoint without its meta.json: said so, with an older one that verifies
            ckpt_mod.read_meta(p)
        except ckpt_mod.CheckpointError as e:
            raise InitError(str(e)) from None
    return _resolve_hf(s, p)


# ----------------------------------------------------------------------------------------------
# the [model] section

_ARCH_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "pad_token_id",
    "family",
    "global_rope_theta",
    "local_rope_theta",
    "local_attention",
    "layer_types",
    "norm_bias",
)
_TRAINING_FIELDS = ("hidden_dropout", "attention_dropout", "initializer_range")
# a family whose positions extend (``FamilySpec.extends_positions``: rotary, no weights) takes these
# from the config when they differ from the source's: a position extension (docs/design.md §2.8)
POSITION_FIELDS = ("max_position_embeddings", "global_rope_theta", "local_rope_theta")


def positions_error(where: str, t: int, cfg: ModelConfig, origin: str = "") -> str:
    """The one line for a T longer than ``cfg.max_position_embeddings``: how to extend the positions
    (rotary) or why they cannot be (learned), naming ``where`` (the field that asked for T)."""
    n = cfg.max_position_embeddings
    src = f" ({origin})" if origin else ""
    if spec_of(cfg).extends_positions and cfg.init:
        return (
            f"{where}: T={t} exceeds model.max_position_embeddings={n}{src}; to extend the rotary "
            f"positions set model.max_position_embeddings = {t} (and a larger "
            "model.global_rope_theta, e.g. 160000 as ModernBERT's long-context phase)"
        )
    if cfg.init:
        return (
            f"{where}: T={t} exceeds the {n} learned position embeddings of the BERT init "
            f"source{src}; tokendrop does not extend learned positions: use data prepared with T "
            f"<= {n}, or continue a ModernBERT (rotary positions extend)"
        )
    return (
        f"{where}: T={t} exceeds model.max_position_embeddings={n}; set "
        f"model.max_position_embeddings = {t}"
    )


# our parameter names of an MLM head (BERT's ``mlm.``, ModernBERT's ``head.`` and ``decoder.``)
MLM_HEAD_PREFIXES = ("mlm.", "head.", "decoder.")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def model_section_from_init(model: dict, src: InitSource, where: str = "model") -> dict:
    """The explicitly given ``[model]`` keys (with ``init``) and the resolved source ``src`` -> the
    full ``[model]`` table: the source's shape, ``init`` and ``init_sha256`` filled.  Architecture
    fields that contradict the source are a ConfigError naming the field and both values
    (``vocab_size = "data"``, "from the data", is allowed); dropout and ``initializer_range``
    (used for freshly initialised tensors) may be overridden, and for a family whose positions
    extend (ModernBERT's rotary positions) the :data:`POSITION_FIELDS` too: a position extension.
    More positions than a BERT source learned is refused in one line.  Pure: ``src`` was resolved by
    the caller."""
    init = model.get("init", "")
    if not isinstance(init, str) or not init.strip():
        raise ConfigError(
            f"{where}.init: expected a Hugging Face BERT directory, a tokendrop run/checkpoint "
            f"directory or a Hub name, got {init!r}"
        )
    shape = {
        k: v
        for k, v in dataclasses.asdict(src.model).items()
        if k not in ("preset", "init", "init_sha256")
    }
    origin = (
        f"the init source {init} "
        f"({src.weights_file.name if src.kind == 'huggingface' else src.path})"
    )
    extends = spec_of(src.model).extends_positions
    out = dict(shape)
    for key, val in model.items():
        if key in ("init",):
            continue
        if key == "init_sha256":
            if val and val != src.sha256:
                raise ConfigError(
                    f"{where}.init_sha256: {val!r} was given but {src.weights_file} now has sha256 "
                    f"{src.sha256!r}; the source changed (remove {where}.init_sha256 to accept it)"
                )
            continue
        if key == "preset":
            if val in MODEL_PRESETS:
                want = dict(MODEL_PRESETS[val])
                if "intermediate_size" not in model:
                    want["intermediate_size"] = 4 * want["hidden_size"]
                if any(want[k] != shape[k] for k in want):
                    mine = ", ".join(f"{k}={want[k]}" for k in want)
                    theirs = ", ".join(f"{k}={shape[k]}" for k in want)
                    raise ConfigError(
                        f"{where}.preset: {val!r} means {mine} but {origin} has {theirs}; remove "
                        f"{where}.preset (the shape comes from the init source)"
                    )
                continue
            out[key] = val  # not a preset name: ModelConfig reports it
            continue
        if key in _ARCH_FIELDS:
            if key == "vocab_size" and val == VOCAB_FROM_DATA:
                continue
            if isinstance(shape[key], (str, list, bool)):  # family, layer_types, norm_bias
                if val != shape[key]:
                    raise ConfigError(
                        f"{where}.{key}: {val!r} contradicts {origin}, which has {key} = "
                        f"{shape[key]!r}; "
                        f"remove {where}.{key} (the architecture comes from the init source)"
                    )
                continue
            a, b = _num(val), _num(shape[key])
            if a is None or (extends and key in POSITION_FIELDS):
                out[key] = val  # wrong type: the config loader reports it; or a position extension
                continue
            if key == "max_position_embeddings" and a > b:
                raise ConfigError(
                    f"{where}.max_position_embeddings: {val!r}, but {origin} is a "
                    f"{src.model.family} with "
                    f"{shape[key]} learned position embeddings; tokendrop does not extend learned "
                    f"positions: remove {where}.max_position_embeddings and use T <= {shape[key]}"
                )
            if a != b:
                raise ConfigError(
                    f"{where}.{key}: {val!r} contradicts {origin}, which has {key} = "
                    f"{shape[key]!r}; "
                    f"remove {where}.{key} (the shape comes from the init source)"
                )
            continue
        out[key] = (
            # training settings (dropout, initializer_range) and unknown keys (the loader reports
            # them)
            val
        )
    out["init"] = init
    out["init_sha256"] = src.sha256
    return out


def resolve_model_init(model: ModelConfig, src: InitSource) -> ModelConfig:
    """A parsed ``[model]`` section with ``init`` (its shape pending, or already resolved) and the
    source resolved from it -> the resolved section (a new object; ``model`` is not changed).

    The given keys are the fields the section was given (``ModelConfig.given``: the rule it applies
    to presets; a value equal to the field's default counts), plus ``init``;
    :func:`model_section_from_init` checks them against the source."""
    return from_dict(
        ModelConfig, model_section_from_init({**model.given(), "init": model.init}, src)
    )


# ----------------------------------------------------------------------------------------------
# loading


def load_source_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Load ``src``'s weights into any of our model classes, by the model's family
    (``tokendrop.models.families``: ``hf_bert.load_bert_weights``,
    ``hf_modern.load_modern_weights``). Encoder tensors must all be there with the right shape; the
    pooler and heads missing from the file are initialised as the family does and listed in
    ``fresh``."""
    return spec_of(model.config).load_weights(src, model)


def load_init_weights(src: InitSource, model: nn.Module) -> InitReport:
    """Continued pretraining: load ``src`` into our ``BertForMaskedLM`` (see
    :func:`load_source_weights`).

    Verifies the weights' sha256 again (on the bytes parsed), requires every encoder tensor, starts
    a missing MLM head as BERT does (decoder tied to the word embeddings) and reports what was
    fresh, unexpected and ignored."""
    if getattr(type(model), "task", None) != "mlm":
        raise TypeError(
            "load_init_weights: expected an MLM model (tokendrop.models.families.build_model), "
            f"got {type(model).__name__}"
        )
    want = dataclasses.asdict(src.model)
    have = dataclasses.asdict(model.config)
    extends = spec_of(src.model).extends_positions
    for k in _ARCH_FIELDS:
        if want[k] != have[k] and not (extends and k in POSITION_FIELDS):
            raise InitError(
                f"{src.weights_file}: the model was built with {k} = {have[k]!r} but the source "
                f"has {want[k]!r}; build it from the [model] section "
                "model_section_from_init returns"
            )
    return load_source_weights(src, model)


# ----------------------------------------------------------------------------------------------
# loading into our classes (load_pretrained / read_hf_dir) and exporting (export_hf)


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
    # the family's names -> ours
    return src.model, spec_of(src.model).from_hf(read_source_tensors(src))


# a checkpoint dir (verified) or a run dir's newest verified one
find_checkpoint = latest_checkpoint


def load_pretrained(
    path: str | os.PathLike,
    task: str | type = "mlm",
    drop: DropConfig | None = None,
    **head_kwargs: Any,
) -> tuple[nn.Module, dict[str, Any]]:
    """A model shaped and loaded from a source: a tokendrop run or checkpoint dir (its checkpoint
    verified) or a Hugging Face BERT / ModernBERT dir (a published checkpoint such as MiniLM).

    ``task``: "mlm" (``drop``: its token dropping, on in training mode), "classification"
    (``num_labels=``) or "qa", or one of our model classes.  Encoder weights must all be there;
    heads missing from the file are fresh (``info["fresh"]``; an MLM head among them needs the
    warm-up ``pretrain`` gives it, ``info["head_fresh"]``).  -> (model, {"model_config",
    "tokenizer", "fresh", "head_fresh", "source", "path", "hf_config", "notes"})."""
    check_path_arg("load_pretrained", "path", path)
    check_arg(
        "load_pretrained", "task", task, (str, type), f"one of {', '.join(TASKS)} or a model class"
    )
    p = Path(path)
    if not p.exists():
        raise InteropError(f"{p}: no such model directory")
    if isinstance(task, str) and task not in TASKS:
        raise InteropError(f"load_pretrained: task {task!r} is not one of {', '.join(TASKS)}")
    task = task if isinstance(task, str) else task_of(task)
    if drop is not None and task != "mlm":
        raise InteropError(f"load_pretrained: drop= applies to task 'mlm' only, not {task!r}")
    try:
        # a run that is training: its checkpoint is not rotated away meanwhile
        with ckpt_mod.reading(p) as ck:
            src = resolve_init_source(str(ck) if ck != p else str(path))
            model = build_model(src.model, drop, task=task, **head_kwargs)  # the family's class
            report = load_source_weights(src, model)
    except ckpt_mod.CheckpointError as e:
        raise InitError(str(e)) from None
    tok = (
        src.tokenizer_dir
        if src.tokenizer_dir is not None and has_tokenizer_files(src.tokenizer_dir)
        else None
    )
    head = {id(q) for q in model.head_parameters()} if task == "mlm" else set()
    head_fresh = any(id(q) in head for n, q in model.named_parameters() if n in set(report.fresh))
    return model, {
        "model_config": src.model,
        "tokenizer": tok,
        "fresh": report.fresh,
        "head_fresh": head_fresh,
        "source": src.kind,
        "path": str(src.path),
        "hf_config": src.hf_config,
        "notes": report.notes,
    }


def resolve_model(cfg: ModelConfig) -> ModelConfig:
    """A ``[model]`` section whose shape comes from ``model.init`` -> the section with the source's
    shape filled in (the source is read: config.json and a hash of its weights), ready for
    ``build_model``; fields given that contradict the source are a ConfigError naming them.  A
    section without ``init`` is returned as it is.  (``pretrain`` does this itself; the weights are
    loaded by ``load_pretrained``.)"""
    check_arg(
        "resolve_model",
        "cfg",
        cfg,
        ModelConfig,
        "a tokendrop.ModelConfig",
        "cfg.model of load_config",
    )
    if not cfg.init or cfg.resolved:
        return cfg
    return resolve_model_init(cfg, resolve_init_source(cfg.init))


# what ``export_hf`` writes a directory for: the MLM model, or a classifier's starting point
EXPORT_TASKS = ("mlm", "classification")


def export_hf(
    checkpoint: str | os.PathLike,
    out_dir: str | os.PathLike,
    overwrite: bool = False,
    command: str = "",
    task: str = "mlm",
) -> Path:
    """``tokendrop export``: a run/checkpoint dir (verified) -> a ``transformers`` directory of its
    family: ``task="mlm"`` the MLM model (BertForMaskedLM / ModernBertForMaskedLM, without BERT's
    pooler), which ``AutoModelForMaskedLM`` and ``pipeline("fill-mask")`` load with no report;
    ``task="classification"`` a starting point for ``AutoModelForSequenceClassification``: the
    encoder and the pooling layers the checkpoint holds (BERT's pooler, which pretraining leaves as
    the source's or as initialised; ModernBERT's ``head``, trained by MLM), no MLM decoder and no
    classifier, so transformers reports only the classifier it starts.

    A run continued from a published checkpoint (``RUN/source/``) keeps that checkpoint's
    config.json fields (ours set the shape, ``architectures = ["BertForMaskedLM"]``) and its
    tokenizer files. An existing non-empty ``out_dir`` is refused unless ``overwrite``, which
    replaces only an earlier export (``tokendrop.runs.rundir.prepare_output``) -- never a file, or a
    directory holding the input. The export holds a model card (README.md, ``model_card``;
    ``command``: the export's own command line)."""
    check_path_arg("export", "checkpoint", checkpoint)
    check_path_arg("export", "out_dir", out_dir)
    check_arg("export", "overwrite", overwrite, bool, "True or False")
    if task not in EXPORT_TASKS:
        raise InteropError(
            f"export: task {task!r} is not one of {', '.join(EXPORT_TASKS)} (mlm: for "
            "AutoModelForMaskedLM and fill-mask; classification: a starting point for "
            "AutoModelForSequenceClassification)"
        )
    with lock(out_dir, InteropError):
        prepare_output(out_dir, "export", overwrite, inputs=[checkpoint], error=InteropError)
        if not Path(checkpoint).exists():
            raise InteropError(f"{checkpoint}: no such model directory")
        try:
            # held while it is read: rotation by a training run waits
            with ckpt_mod.reading(checkpoint) as ck:
                return _export_hf(ck, out_dir, command, checkpoint, task)
        except ckpt_mod.CheckpointError as e:
            raise InitError(str(e)) from None


def _export_hf(
    ck: Path, out_dir: str | os.PathLike, command: str, checkpoint: str | os.PathLike, task: str
) -> Path:
    """Export the checkpoint (or Hugging Face directory) ``ck`` that the user named as
    ``checkpoint``, for ``task`` (``export_hf``)."""
    model, info = load_pretrained(ck, BertForMaskedLM if task == "mlm" else task)
    if task == "mlm" and any(k.startswith(MLM_HEAD_PREFIXES) for k in info["fresh"]):
        raise InteropError(f"{checkpoint}: no MLM head weights to export")
    tok = info["tokenizer"]
    # a continued run: the source's tokenizer files, kept in RUN/source/
    if info["source"] == "tokendrop":
        ck = Path(info["path"])
        source = (ck.parent.parent if ck.parent.name == "checkpoints" else ck) / "source"
        if has_tokenizer_files(source):
            tok = source
    base = info["hf_config"]  # the source's config.json (a continued run's RUN/source/config.json)
    facts = _run_facts(Path(info["path"])) if info["source"] == "tokendrop" else None
    card = model_card(model.config, info, Path(out_dir).name, command, facts, task)
    # a classifier: only what the checkpoint holds (its fresh classifier is transformers' to start)
    out = save_pretrained(
        model,
        out_dir,
        tok,
        base_config=base,
        kind="export",
        card=card,
        leave_out=tuple(info["fresh"]) if task != "mlm" else (),
    )
    ev, h = (facts or {}).get("eval"), (facts or {}).get("entropy")
    # said once the export is written (a failed one: its error only)
    if ev and h is not None and ev["eval_loss"] >= h:
        print(
            f"warning: {checkpoint}: its last eval MLM loss {ev['eval_loss']:.3f} is not below the "
            f"unigram entropy of its data ({h:.3f} nats): the model predicts masked tokens no "
            "better than their frequencies"
            + (
                " (fill-mask answers frequent tokens); train longer before using the MLM head"
                if task == "mlm"
                else (
                    f"; its MLM head started fresh in this run ({source_name(facts['init'])} "
                    "has none), so the loss is the new head's: "
                    "the continued encoder is what this export keeps"
                )
                if facts.get("fresh_head")
                else "; its encoder has learnt little yet: train longer before fine-tuning it"
            ),
            file=sys.stderr,
        )
    return out


def _run_facts(ck: Path) -> dict[str, Any]:
    """What the model card says about the run a checkpoint belongs to: its meta.json (config, step)
    and its metrics (final losses, the unigram entropy, the pretrain command)."""
    meta = json.loads((ck / "meta.json").read_text(encoding="utf-8"))
    run = ck.parent.parent if ck.parent.name == "checkpoints" else ck
    step = int(meta.get("step", 0))
    recs = [
        r
        for r in read_metrics(run)
        if not isinstance(r.get("step"), (int, float)) or r["step"] <= step
    ]
    starts = [r for r in recs if r.get("event") == "start"]
    start = starts[0] if starts else {}
    train = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "eval_loss" in r]
    init = next((r for r in recs if r.get("event") == "init"), {})
    entropy = start.get("unigram_entropy") or next(
        (r["unigram_entropy"] for r in evals if "unigram_entropy" in r), None
    )
    return {
        "config": meta.get("config", {}),
        "step": step,
        "train": train[-1] if train else None,
        "eval": evals[-1] if evals else None,
        "entropy": entropy,
        "command": start.get("command", ""),
        # every invocation up to the checkpoint, the first and each resume, in order
        "commands": [
            r["command"] for r in recs if r.get("event") in ("start", "resume") and r.get("command")
        ],
        "seq_len": start.get("seq_len"),
        "data_fingerprint": meta.get("data_fingerprint") or {},
        # continued pretraining: the source, and whether its MLM head was new in the run
        "init": init.get("source", ""),
        "fresh_head": any(k.startswith(MLM_HEAD_PREFIXES) for k in init.get("fresh", [])),
    }


# an absolute path's directories (/home/me/corpora/wiki -> .../wiki): a card says which file, not
# where it lies on its author's machine
_LOCAL_DIRS = re.compile(r"(?<![\w.~])/(?:[^\s\"'=/]+/)+(?=[^\s\"'=/])")


def _no_local_dirs(command: str) -> str:
    """``command`` with the directories of each absolute path left out (``.../NAME``)."""
    return _LOCAL_DIRS.sub(".../", command)


def _data_name(data: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    """The model card's data row: each prepared directory by its own name (an absolute local path
    means nothing where the export goes, and says where the author's files are), with the data's
    fingerprint (sha256 of its training split, its token count) that identifies it."""
    paths = [data["path"]] if data.get("path") else list(data.get("paths", []))
    names = ", ".join(f"`{Path(p).name or p}`" for p in paths) or "`(unknown)`"
    sha, tokens = fingerprint.get("train_sha256", ""), fingerprint.get("tokens")
    ident = [f"train split sha256 {sha[:12]}"] if sha else []
    ident += [f"{tokens:,} tokens"] if isinstance(tokens, int) else []
    return names + (f" ({', '.join(ident)})" if ident else "")


def source_name(init: str) -> str:
    """How a model card names a ``model.init``: a Hub name as it is, a local directory by its own
    name (a relative or cache path means nothing where the export goes; the sha256 beside it
    identifies it)."""
    p = Path(init)
    if not p.exists() and _looks_like_hub_name(init):
        return init
    p = p.resolve() if p.exists() else p
    return p.parent.parent.name if p.parent.name == "checkpoints" else p.name or init


def model_card(
    cfg: ModelConfig,
    info: dict[str, Any],
    name: str,
    command: str = "",
    facts: dict[str, Any] | None = None,
    task: str = "mlm",
) -> str:
    """README.md of an export for ``task`` (``export_hf``): the architecture and how to load it; for
    a tokendrop checkpoint its source, data, length, dropping method, final losses beside the data's
    unigram entropy, and the commands that made it (``facts``: ``_run_facts`` of the checkpoint)."""
    spec = spec_of(cfg)
    arch = spec.hf_architectures[task]
    auto = "AutoModelForMaskedLM" if task == "mlm" else "AutoModelForSequenceClassification"
    rows = [
        (
            "architecture",
            f"{arch} ({cfg.family}: {cfg.num_layers} layers x {cfg.hidden_size}, {cfg.num_heads} "
            f"heads, FFN {cfg.intermediate_size}, vocab {cfg.vocab_size}); load with `{auto}`",
        )
    ]
    if task != "mlm":
        rows.append(
            (
                "written",
                "the encoder and the checkpoint's pooling layers (BERT's `bert.pooler`: the "
                "source's, or its initialisation in a run from scratch, since MLM pretraining "
                "does not train it; ModernBERT's `head`, trained with the MLM head); not the MLM "
                "decoder and no classifier: transformers starts `classifier.*` (the only keys it "
                "reports MISSING), to be trained on the task",
            )
        )
    if facts is not None:
        f = facts
        c, tc, d = f["config"], f["config"].get("train", {}), f["config"].get("drop", {})
        data = c.get("data", {})
        T = f["seq_len"]
        dense = not DropConfig(
            method=d.get("method", "none"), variant=d.get("variant", "drop")
        ).enabled
        rows += [
            (
                "source",
                f"continued from `{source_name(c['model']['init'])}` (weights sha256 "
                f"{c['model'].get('init_sha256', '')[:12]})"
                if c.get("model", {}).get("init")
                else "random initialisation (pretrained from scratch)",
            ),
            ("data", _data_name(data, f.get("data_fingerprint") or {})),
            (
                "length",
                f"step {f['step']} of {tc.get('steps') or tc.get('time_budget')}, "
                f"{tc.get('batch_size')} sequences per step" + (f" of {T} tokens" if T else ""),
            ),
            (
                "method",
                "dense MLM (no token dropping)"
                if dense
                else f"token dropping: {d.get('method')}/{d.get('variant')}, rate {d.get('rate')}",
            ),
        ]
        if f["train"]:
            rows.append(
                ("final train MLM loss", f"{f['train']['loss']:.4f} (step {f['train']['step']})")
            )
        if f["eval"]:
            note = unigram_note(f["eval"]["eval_loss"], f["entropy"])
            rows.append(
                (
                    "final eval MLM loss",
                    f"{f['eval']['eval_loss']:.4f}, accuracy {f['eval']['eval_acc']:.4f} "
                    f"(step {f['eval']['step']})" + (f"; {note}" if note else ""),
                )
            )
        commands = f.get("commands") or ([f["command"]] if f["command"] else [])
        rows.append(
            (
                "trained with",
                "; then ".join(f"`{_no_local_dirs(cmd)}`" for cmd in commands)
                if commands
                else "`tokendrop.pretrain` from Python (its settings: the run's `config.toml`"
                + (f", preset `{c['name']}`" if c.get("name") else "")
                + ")",
            )
        )
    else:
        rows.append(("source", f"`{info['path']}` ({info['source']})"))
    if command:
        rows.append(("exported with", f"`{_no_local_dirs(command)}`"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    if task != "mlm":
        return f"""---
library_name: transformers
pipeline_tag: text-classification
tags:
- tokendrop
- {cfg.family}
---

# {name}

A {cfg.family} encoder exported by tokendrop {__version__} as a starting point for sequence
classification (its classifier is not trained yet).

| | |
|---|---|
{table}

## Use

```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer

model = AutoModelForSequenceClassification.from_pretrained("{name}", num_labels=2)
tokenizer = AutoTokenizer.from_pretrained("{name}")
# then fine-tune it on your task (transformers.Trainer, or `tokendrop finetune --model {name}`)
```
"""
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


# ----------------------------------------------------------------------------------------------
# prepare --tokenizer SOURCE: a local tokenizer path


def resolve_tokenizer_source(source: str) -> str:
    """A ``--tokenizer`` / ``--init`` source -> the local path of its tokenizer (file or directory).

    A local file, or a directory with tokenizer files (at its top or in ``tokenizer/``), is returned
    as it is; a missing absolute path too (prepare then names it).  Anything else goes through the
    ``--init`` resolver (checkpoint directories, Hub names; its InitError otherwise); a source
    without a tokenizer is a DataError."""
    p = Path(source).expanduser()
    if p.is_file() or (
        p.is_dir() and (has_tokenizer_files(p) or has_tokenizer_files(p / "tokenizer"))
    ):
        return str(p)
    if p.is_absolute() and not p.exists():
        return str(p)
    src = resolve_init_source(source)
    if src.tokenizer_dir is None:
        raise DataError(
            f"{source}: {src.path} has no tokenizer (tokenizer.json or vocab.txt, nor in its run's "
            "tokenizer/); pass the tokenizer's directory or file to --tokenizer"
        )
    return str(src.tokenizer_dir)
