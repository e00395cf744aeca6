"""Resuming a run: which config changes a resume refuses, the data it must find, and loading a
checkpoint's weights, AdamW state and every rank's RNG streams into a (wrapped) model, whatever
wrote the checkpoint (one process, DDP, FSDP at any world size)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.train import checkpoint_sharded as sharded_ckpt
from tokendrop.config import FROM_DATA, Config, ConfigError, load_config, to_dict
from tokendrop.errors import TrainingError
from tokendrop.train.parallel import Parallel


# keys whose change makes a resume meaningless
_RESUME_FIXED = ("model", "drop.method", "drop.variant", "drop.rate", "drop.start", "drop.end", "drop.beta",
                 "drop.half_random_frac", "drop.keep_mlm_targets", "drop.pinned_tokens", "drop.ltd_start_fraction",
                 "drop.ltd_schedule_share", "drop.ltd_schedule", "drop.ltd_step", "drop.consistency_weight",
                 "drop.consistency_every", "data.mask_prob", "data.mask_schedule",
                 "train.batch_size", "train.seed", "data.seq_len_start", "data.seq_len_warmup_share",
                 "train.batch_warmup_start", "train.batch_warmup_tokens", "train.batch_warmup_share",
                 "train.budget_clock")  # data.path: check_resume_data (the data may move)
_RESUME_FREE = ("model.attention_backend",)  # inside a fixed section, but execution only: may change


_REQUIRED_KEY = object()


def _get(d: dict, dotted: str, fallback: Any = _REQUIRED_KEY) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; ``fallback`` where a key is missing (a KeyError without one)."""
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            if fallback is _REQUIRED_KEY:
                raise KeyError(dotted)
            return fallback
        d = d[k]
    return d


def check_resume_compatible(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse a resume whose config changes a field of ``_RESUME_FIXED``.  A field the run's recorded
    config does not have (written by a version before the field existed) counts as its default --
    what that version did -- so runs started by an older tokendrop resume; a field taken from the
    data (``config.FROM_DATA``) is not compared then."""
    defaults = to_dict(Config())
    for key in _RESUME_FIXED:
        b = _get(new, key, None)
        a = _get(old, key, _get(defaults, key, None))
        if isinstance(a, dict) and isinstance(b, dict):
            a = {**{k: _get(defaults, f"{key}.{k}", None) for k in b if k not in a}, **a}
            free = [f.split(".", 1)[1] for f in _RESUME_FREE if f.startswith(key + ".")]
            a, b = ({k: v for k, v in d.items() if k not in free} for d in (a, b))
            for k in (f.split(".", 1)[1] for f in FROM_DATA if f.startswith(key + ".")):
                if k not in _get(old, key, {}):
                    a[k] = b.get(k)
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                diff = [k for k in {**a, **b} if a.get(k) != b.get(k)]
                key, a, b = f"{key}.{diff[0]}", a.get(diff[0]), b.get(diff[0])
            raise TrainingError(f"--resume: config field {key} changed from {a!r} to {b!r}; start a new run instead")


def check_resume_data(meta: dict[str, Any], cfg: Config, data) -> None:
    """The data a run resumes on must be the data it was trained on: equal fingerprints
    (``PreparedData.fingerprint``, recorded in every checkpoint), wherever it lies now.  A checkpoint
    without a fingerprint (older versions) needs the same directory."""
    old_path, new_path = str(_get(meta["config"], "data.path")), str(cfg.data.path)
    if cfg.data.paths:  # a mixture: its directories, in order
        old_path, new_path = ", ".join(_get(meta["config"], "data.paths", [])), ", ".join(cfg.data.paths)
    fix = ("pass --set data.paths=[...] naming the run's prepared directories, in the same order" if cfg.data.paths
           else "pass --set data.path=DIR naming the run's prepared data")
    recorded = meta.get("data_fingerprint")
    if not isinstance(recorded, dict):
        if os.path.abspath(old_path) != os.path.abspath(new_path):
            raise TrainingError(f"--resume: data.path changed from {old_path!r} to {new_path!r} and the checkpoint "
                                "records no data fingerprint to check the moved data against (written by an older "
                                "version); resume with the original data.path")
        return
    now = data.fingerprint()
    diff = [k for k in recorded if recorded[k] != now.get(k)]
    if diff:
        def show(v: Any) -> str:
            return f"{v[:12]}..." if isinstance(v, str) and len(v) > 16 else repr(v)

        raise TrainingError(f"--resume: {new_path} is not the data this run was trained on ({old_path}): "
                            + ", ".join(f"{k} {show(now.get(k))} here but {show(recorded[k])} recorded" for k in diff)
                            + f"; {fix}")


def load_training_state(ckpt: Path, meta: dict[str, Any], state_sd: dict[str, Tensor],
                         model: nn.Module, opt: torch.optim.Optimizer, par: Parallel) -> None:
    """Weights and AdamW state of checkpoint ``ckpt`` into the (wrapped) model and its optimizer,
    whatever wrote it and however the ranks share the model now: a sharded checkpoint (FSDP, any
    world size) is resharded by DCP, collectively under FSDP, else read whole by each process; an
    unsharded one's AdamW state is loaded as it is, or split into this rank's shards under FSDP (its
    weights were loaded before the model was wrapped)."""
    groups = meta["optimizer_param_groups"]
    if ckpt_mod.is_sharded(meta):
        sharded_ckpt.load_into(ckpt, model, opt, groups, distributed=par.sharded)
    elif par.sharded:
        sharded_ckpt.load_full_into(opt, state_sd, groups)
    else:
        ckpt_mod.optimizer_from_tensors(opt, state_sd, groups)


def rank_rng(state: dict[str, Tensor], rank: int) -> dict[str, Tensor] | None:
    """The RNG states of ``rank`` in a checkpoint's tensors: ``rng.*.rankN`` (written under DDP), else
    the plain ``rng.*`` for rank 0 (a single process); None for a rank the checkpoint has none for."""
    mine = {k[: -len(f".rank{rank}")]: v for k, v in state.items() if k.startswith("rng.") and k.endswith(f".rank{rank}")}
    if mine:
        return mine
    return {k: v for k, v in state.items() if k.startswith("rng.") and ".rank" not in k} if rank == 0 else None


def load_run_config(run_dir: str | os.PathLike) -> Config:
    """The config a run recorded (``RUN/config.toml``); a missing, unreadable or hand-broken file is a
    one-line error naming it and the fix (the newest checkpoint's meta.json holds the same config)."""
    p = Path(run_dir) / "config.toml"
    if not Path(run_dir).is_dir():
        what = "a file, not a run directory" if Path(run_dir).exists() else "no such run directory"
        raise TrainingError(f"--resume: {run_dir}: {what}; give the --out of an earlier pretrain")
    if not p.is_file():
        raise TrainingError(f"--resume: {run_dir}: not a run directory (no config.toml); give the --out of an earlier "
                            "pretrain")
    try:
        return load_config(p)  # the source may be gone: it is not resolved here
    except ConfigError as e:
        raise ConfigError(f"--resume: {e} (the run's config.toml was edited or damaged: repair it, or write the "
                          "config recorded in its newest checkpoints/step-*/meta.json back into it)") from None
