"""A run's training state in its checkpoints: saving it (``save_training_state``: weights, AdamW
state, importance, every rank's RNG streams) and resuming it: which config changes a resume refuses,
the data it must find, and loading a checkpoint into a (wrapped) model, whatever wrote the
checkpoint (one process, DDP, FSDP at any world size)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tokendrop.config import (
    FROM_DATA,
    WARMUP_OFF,
    Config,
    DataConfig,
    load_config,
    recorded_config,
    to_dict,
)
from tokendrop.errors import ConfigError, TokendropError, TrainingError
from tokendrop.fields import FIXED, FREE, resume_rules
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.files import os_error_fix
from tokendrop.train import checkpoint_sharded as sharded_ckpt
from tokendrop.train.parallel import Parallel

_REQUIRED_KEY = object()
_MISSING = object()


def _get(d: dict, dotted: str, fallback: Any = _REQUIRED_KEY) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; ``fallback`` where a key is missing (a KeyError without
    one)."""
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            if fallback is _REQUIRED_KEY:
                raise KeyError(dotted)
            return fallback
        d = d[k]
    return d


def check_checkpoint(
    ck: Path,
    meta: dict[str, Any],
    state: Mapping[str, Tensor],
    run_config: dict[str, Any] | None,
    resuming: bool = False,
    run_id: str | None = None,
) -> None:
    """The checks a checkpoint must pass against itself and its run -- made by ``--resume`` and by
    ``tokendrop verify``, here only: the step in meta.json is the one in the directory's name
    (``step-NNNNNNNN``), the optimizer's step counters (``state``: its ``optim.*.step`` tensors,
    :func:`tokendrop.runs.checkpoint.step_counters`: a sharded checkpoint's from its shard files)
    and the data position (when every step takes the same number of loader batches: no batch-size
    warm-up, no mixture) count the same steps, and the config it recorded has the run's values for
    every field a resume must not change (declared ``fixed``, ``tokendrop.fields``: the model's
    shape, the seed, the method ...; ``run_config``: the run's config, the one resuming now with
    ``resuming``; None: not compared), and it was written by the run (``run_id``: the run's,
    ``tokendrop.runs.rundir.run_id``; a checkpoint recording another is named with the settings
    that differ, a foreign checkpoint of the same shape included; None, or a checkpoint recording
    none: not compared).  Raises :class:`TrainingError` (one line)."""
    mf = ck / "meta.json"
    step = int(meta["step"])
    fix = (
        "the file was edited, or the checkpoint copied from another run: restore it from a backup, "
        "or move it away to use the run's checkpoint before it"
    )
    theirs = meta.get("run_id")
    if run_id is not None and isinstance(theirs, str) and theirs and theirs != run_id:
        raise TrainingError(
            f"{mf}: written by another run (run id {theirs[:12]}, this run's {run_id[:12]})"
            + _differences(meta.get("config") or {}, _recorded_run_config(ck, run_config))
            + "; move it away, or restore this run's own"
        )
    name = re.fullmatch(r"step-(\d+)", ck.name)
    if name is not None and int(name.group(1)) != step:
        raise TrainingError(f"{mf}: records step {step} but its directory is {ck.name}; {fix}")
    counts = sorted(
        {int(float(t)) for k, t in state.items() if k.startswith("optim.") and k.endswith(".step")}
    )
    if counts and counts[-1] != step:
        where = ck / (ckpt_mod.SHARD_DIR if ckpt_mod.is_sharded(meta) else "state.safetensors")
        raise TrainingError(
            f"{where}: the optimizer made {counts[-1]} update(s) but meta.json records "
            f"step {step}; {fix}"
        )
    config = recorded_config(meta.get("config") or {})
    pos = meta.get("data_position")
    warm = _get(config, "train.batch_warmup_start", WARMUP_OFF) != WARMUP_OFF or _get(
        config, "data.paths", []
    )
    if isinstance(pos, dict) and not warm:
        try:
            per_epoch = int(pos["num_sequences"]) // int(pos["global_batch"])
            batches = int(pos["epoch"]) * per_epoch + int(pos["position"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            raise TrainingError(
                f"{mf}: data_position {pos!r} is not a loader position (epoch, position, "
                f"global_batch, num_sequences); {fix}"
            ) from None
        # a step takes train.batch_size sequences: one loader batch, or several of the loader's
        # unit (accumulation, or the unit a batch warm-up left behind)
        per_step = max(1, int(_get(config, "train.batch_size", 0)) // int(pos["global_batch"]))
        if batches != step * per_step:
            raise TrainingError(
                f"{mf}: data_position is {batches} batch(es) of {pos['global_batch']} into the "
                f"data but the checkpoint records step {step} ({step * per_step} of them); {fix}"
            )
    if run_config is None:
        return
    diff = config_difference(config, run_config)
    if diff is None:
        return
    key, a, b = diff
    if resuming:
        raise TrainingError(
            f"--resume: config field {key} changed from {a!r} to {b!r}; start a new run instead"
        )
    raise TrainingError(
        f"{mf}: its {key} is {a!r} but the run's config.toml has {b!r}: not a checkpoint of this "
        "run (copied from another?); move it away, or restore this run's own"
    )


def _recorded_run_config(ck: Path, run_config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The config a checkpoint's run recorded (``RUN/config.toml``, not a resume's changes to it),
    else ``run_config``."""
    if ck.parent.name == "checkpoints":
        try:
            return to_dict(load_run_config(ck.parent.parent))
        except (TokendropError, ValueError):
            pass
    return run_config


def _differences(theirs: dict[str, Any], ours: dict[str, Any] | None) -> str:
    """The settings a foreign checkpoint's config has other than the run's (the first three), as
    the tail of the message (": its ..."); empty when there is no run config to compare."""
    if ours is None:
        return ""
    diff = config_changes(theirs, ours, FIXED) + config_changes(theirs, ours, FREE)
    if not diff:
        return ": its settings are this run's"
    shown = [f"its {k} is {a!r} but the run's config.toml has {b!r}" for k, a, b in diff[:3]]
    more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
    return ": " + ", ".join(shown) + more


def check_resume_compatible(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse a resume whose config changes a field declared ``fixed``
    (:func:`config_difference`)."""
    diff = config_difference(old, new)
    if diff is not None:
        key, a, b = diff
        raise TrainingError(
            f"--resume: config field {key} changed from {a!r} to {b!r}; start a new run instead"
        )


def config_changes(
    old: dict[str, Any], new: dict[str, Any], rule: str
) -> list[tuple[str, Any, Any]]:
    """Every field declared ``rule`` (``tokendrop.fields``: ``fixed`` or ``free``) whose value
    ``new`` changes from ``old``: (dotted key, old value, new value), in the config's field order.
    A field the run's recorded config does not have (written by a version before the field
    existed) counts as its default -- what that version did -- so runs started by an older
    tokendrop resume; a field taken from the data (``config.FROM_DATA``) is not compared then.
    Both are read as recorded configs (``config.recorded_config``: an older run's 0 for a size now
    named is that name)."""
    old, new = recorded_config(old), recorded_config(new)
    defaults = to_dict(Config())
    out = []
    for key, r in resume_rules(Config).items():
        if r != rule:
            continue
        b = _get(new, key, _get(defaults, key, None))
        a = _get(old, key, _MISSING)
        if a is _MISSING:
            if key in FROM_DATA:
                continue
            a = _get(defaults, key, None)
        if a != b:
            out.append((key, a, b))
    return out


def config_difference(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first field declared ``fixed`` that ``new`` changes from ``old``
    (:func:`config_changes`), or None."""
    changes = config_changes(old, new, FIXED)
    return changes[0] if changes else None


def check_resume_data(meta: dict[str, Any], dc: DataConfig, data) -> None:
    """The data a run resumes on (``dc``: the run's ``[data]`` section, ``data``: its opened
    prepared data) must be the data it was trained on: equal fingerprints
    (``PreparedData.fingerprint``, recorded in every checkpoint), wherever it lies now.  A
    checkpoint without a fingerprint (older versions) needs the same directory."""
    old_path, new_path = str(_get(meta["config"], "data.path")), str(dc.path)
    if dc.paths:  # a mixture: its directories, in order
        old_path, new_path = (
            ", ".join(_get(meta["config"], "data.paths", [])),
            ", ".join(dc.paths),
        )
    fix = (
        "pass --set data.paths=[...] naming the run's prepared directories, in the same order"
        if dc.paths
        else "pass --set data.path=DIR naming the run's prepared data"
    )
    recorded = meta.get("data_fingerprint")
    if not isinstance(recorded, dict):
        if os.path.abspath(old_path) != os.path.abspath(new_path):
            raise TrainingError(
                f"--resume: data.path changed from {old_path!r} to {new_path!r} and the checkpoint "
                "records no data fingerprint to check the moved data against (written by an older "
                "version); resume with the original data.path"
            )
        return
    now = data.fingerprint()
    diff = [k for k in recorded if recorded[k] != now.get(k)]
    if diff:

        def show(v: Any) -> str:
            return f"{v[:12]}..." if isinstance(v, str) and len(v) > 16 else repr(v)

        raise TrainingError(
            f"--resume: {new_path} is not the data this run was trained on ({old_path}): "
            + ", ".join(
                f"{k} {show(now.get(k))} here but {show(recorded[k])} recorded" for k in diff
            )
            + f"; {fix}"
        )


def load_training_state(
    ckpt: Path,
    meta: dict[str, Any],
    state_sd: dict[str, Tensor],
    model: nn.Module,
    opt: torch.optim.Optimizer,
    par: Parallel,
) -> None:
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
    """The RNG states of ``rank`` in a checkpoint's tensors: ``rng.*.rankN`` (written under DDP),
    else the plain ``rng.*`` for rank 0 (a single process); None for a rank the checkpoint has none
    for."""
    mine = {
        k[: -len(f".rank{rank}")]: v
        for k, v in state.items()
        if k.startswith("rng.") and k.endswith(f".rank{rank}")
    }
    if mine:
        return mine
    return (
        {k: v for k, v in state.items() if k.startswith("rng.") and ".rank" not in k}
        if rank == 0
        else None
    )


def load_run_config(run_dir: str | os.PathLike) -> Config:
    """The config a run recorded (``RUN/config.toml``); a missing, unreadable or hand-broken file is
    a one-line error naming it and the fix (the newest checkpoint's meta.json holds the same
    config)."""
    p = Path(run_dir) / "config.toml"
    if not Path(run_dir).is_dir():
        what = "a file, not a run directory" if Path(run_dir).exists() else "no such run directory"
        raise TrainingError(f"--resume: {run_dir}: {what}; give the --out of an earlier pretrain")
    if not p.is_file():
        raise TrainingError(
            f"--resume: {run_dir}: not a run directory (no config.toml); give the --out of an "
            "earlier pretrain"
        )
    try:
        return load_config(p, recorded=True)  # the source may be gone: it is not resolved here
    except ConfigError as e:
        raise ConfigError(
            f"--resume: {e} (the run's config.toml was edited or damaged: repair it, or write the "
            "config recorded in its newest checkpoints/step-*/meta.json back into it)"
        ) from None


def save_training_state(
    run_dir: Path,
    step: int,
    model: nn.Module,
    opt,
    par: Parallel,
    dd,
    selector,
    meta: dict[str, Any],
    keep: int,
) -> Path | None:
    """Write the checkpoint of ``step`` (``meta``: the trainer's config, data position, clocks, ...;
    the optimizer's param groups are added): rank 0 writes it, or every rank its shards under FSDP.
    Every rank's RNG streams are gathered; non-finite weights are refused (the last good checkpoint
    named); a failed write (disk full) leaves nothing and names the intact last checkpoint."""
    rng = ckpt_mod.rng_tensors(selector.rng_state() if selector is not None else None)
    ranks = [rng]
    if dd.world > 1:  # every rank's own streams (dropout, random selection), saved by rank 0
        ranks = [None] * dd.world
        dist.all_gather_object(ranks, rng)
    # under FSDP: this rank's shards
    finite = (
        bool(
            torch.stack(
                [torch.isfinite(getattr(p, "_local_tensor", p)).all() for p in model.parameters()]
            ).all()
        )
        if par.sharded or dd.main
        else True
    )
    if par.sharded:
        finite = par.all_true(finite)  # each rank checked its own shards
    if not (dd.main or par.sharded):
        return None
    if not finite:
        raise TrainingError(
            f"non-finite weights at step {step}; not saved. Last good checkpoint: "
            f"{ckpt_mod.latest(run_dir) if dd.main else 'see rank 0'} (lower train.lr or "
            "check the data)"
        )
    tensors, groups = (
        ({}, opt.state_dict()["param_groups"])
        if par.sharded
        else ckpt_mod.optimizer_to_tensors(opt)
    )
    if selector is not None:
        tensors["importance"] = selector.scores.detach().cpu().contiguous()
    tensors.update(rng)
    if dd.world > 1:
        for r, t in enumerate(ranks):
            tensors.update({f"{k}.rank{r}": v for k, v in t.items()})
    meta = {**meta, "optimizer_param_groups": groups}
    try:
        if par.sharded:  # collective: every rank writes its shards
            return sharded_ckpt.save(run_dir, step, model, opt, tensors, meta, keep, dd)
        return ckpt_mod.save(run_dir, step, model.state_dict(), tensors, meta, keep)
    # disk full, quota, permissions: the temp dir is gone, the last checkpoint intact
    except OSError as e:
        last = ckpt_mod.latest(run_dir)
        fix = os_error_fix(e)
        then = (
            f"the last checkpoint ({last}) is intact: {fix}, then tokendrop pretrain --resume "
            f"{shlex.quote(str(run_dir))}"
            if last
            else f"there is no earlier checkpoint: {fix}, then run "
            "the same command again (a run without a checkpoint is started over)"
        )
        raise TrainingError(
            f"{e.filename or run_dir / 'checkpoints'}: {e.strerror or e} while writing the "
            f"checkpoint of step {step}; nothing of it was kept; {then}"
        ) from None
