"""Sharded checkpoints of FSDP runs, through ``torch.distributed.checkpoint`` (DCP).

Layout of ``RUN_DIR/checkpoints/step-00001234/`` for a run with ``train.parallel = "fsdp"``:
    shards/shard-0000R-model-00001-of-00001.safetensors
                        each rank's shards of the model weights (``model.<name>``) and AdamW state
                        (``optim.state.<name>.<exp_avg|exp_avg_sq|step>``), written by that rank in
                        parallel; each file's safetensors header records where its pieces lie in the
                        full tensors (DCP's ``HuggingFaceStorageWriter``, ``save_distributed``)
    state.safetensors   importance vector, every rank's RNG states (rank 0)
    meta.json           as for an unsharded checkpoint, plus
                        ``"sharded": {"format", "world_size"}``; ``files`` records the size and
                        sha256 of every shard file and state.safetensors

No pickle anywhere: DCP's default ``FileSystemWriter`` pickles its ``.metadata`` file; the
safetensors writer used here has none (the layout is read back from the safetensors headers), so
the "never unpickle from disk" rule holds for sharded checkpoints too.  The optimizer's
hyper-parameters are JSON in meta.json (``optimizer_param_groups``), as for unsharded ones.

Loading reshards: the pieces a rank needs are read from whichever files hold them, so a checkpoint
written by N ranks resumes on M ranks under FSDP, or in one process without a process group (DCP
with ``no_dist``), or is consolidated into a full state dict (``export``, ``verify``,
``finetune --model RUN``).  Every file is hashed against meta.json before it is read
(:func:`tokendrop.runs.checkpoint.verify`).

The shared directory contract holds: the checkpoint is built in a hidden temp dir (created by rank
0, all ranks write into it; the file system must be shared by all nodes) and renamed when meta.json
is in place, so a killed writer leaves nothing that looks complete.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.train.parallel import Dist

SHARD_DIR = ckpt_mod.SHARD_DIR
FORMAT = "dcp-safetensors"


def _options(**kw: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True, **kw)


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model state, flattened optimizer state) as DCP sees them (DTensors under FSDP); the
    optimizer's state is created (zeros) when it has none yet."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(model, opt, options=_options())


def save(
    run_dir: Path,
    step: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state_tensors: dict[str, Tensor],
    meta: dict[str, Any],
    keep: int,
    dd: Dist,
) -> Path | None:
    """Collective: every rank writes its shards of checkpoint ``step``; rank 0 writes
    state.safetensors and meta.json last, then renames the temp dir.  -> the checkpoint dir on rank
    0, else None."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    model_sd, optim_sd = _state(model, opt)
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(ckpt_mod.writing(run_dir, step)) if dd.main else None
        where = [str(tmp) if tmp is not None else None]
        # the temp dir's name (over the wire, not from disk)
        dist.broadcast_object_list(where, src=0)
        out = Path(where[0])
        tensors = {
            "model": model_sd,
            "optim": {k: v for k, v in optim_sd.items() if isinstance(v, Tensor)},
        }
        dcp.save(
            tensors,
            storage_writer=HuggingFaceStorageWriter(str(out / SHARD_DIR), save_distributed=True),
        )
        if dd.main:
            shards = sorted(
                f"{SHARD_DIR}/{f.name}" for f in (out / SHARD_DIR).glob("*.safetensors")
            )
            meta = dict(meta, sharded={"format": FORMAT, "world_size": dd.world})
            ckpt_mod.finish(out, step, state_tensors, meta, shards)
    dist.barrier()  # every rank returns after the rename
    if not dd.main:
        return None
    final = run_dir / "checkpoints" / f"step-{step:08d}"
    ckpt_mod.prune(run_dir / "checkpoints", keep)
    return final


def _restore_groups(opt: torch.optim.Optimizer, groups: list[dict[str, Any]]) -> None:
    """The recorded hyper-parameters (the learning rate is set every step anyway)."""
    for g, rec in zip(opt.param_groups, groups):
        g.update(
            {k: (tuple(v) if isinstance(v, list) else v) for k, v in rec.items() if k != "params"}
        )


def load_into(
    ckpt: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    groups: list[dict[str, Any]],
    distributed: bool,
) -> None:
    """Load a sharded checkpoint's weights and optimizer state into ``model``/``opt``: FSDP-sharded
    ones (``distributed``: collective, each rank reads its pieces) or a plain model in one process
    (or each DDP rank alone).  The files were verified by the caller."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import set_state_dict

    model_sd, optim_sd = _state(model, opt)
    tensors = {
        "model": model_sd,
        "optim": {k: v for k, v in optim_sd.items() if isinstance(v, Tensor)},
    }
    # no_dist: "assuming the intent is to load in a single process": it is
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(
            tensors,
            storage_reader=HuggingFaceStorageReader(str(Path(ckpt) / SHARD_DIR)),
            no_dist=not distributed,
        )
    optim_sd.update(tensors["optim"])
    set_state_dict(
        model, opt, model_state_dict=tensors["model"], optim_state_dict=optim_sd, options=_options()
    )
    _restore_groups(opt, groups)


def load_full_into(
    opt: torch.optim.Optimizer, state_tensors: dict[str, Tensor], groups: list[dict[str, Any]]
) -> None:
    """An unsharded checkpoint's AdamW state (full tensors, ``optim.<index>.<name>``) into the
    optimizer of an FSDP-sharded model: each rank keeps the rows of its own shards (no
    communication).  The weights were loaded into the model before it was sharded."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    params = [p for g in opt.param_groups for p in g["params"]]
    state: dict[int, dict[str, Tensor]] = {}
    for key, val in state_tensors.items():
        if key.startswith("optim."):
            _, idx, what = key.split(".", 2)
            state.setdefault(int(idx), {})[what] = val
    for idx, st in state.items():
        p = params[idx]
        out = {}
        for what, full in st.items():
            if isinstance(p, DTensor) and full.shape == p.shape:
                shape, offset = compute_local_shape_and_global_offset(
                    p.shape, p.device_mesh, p.placements
                )
                local = (
                    full[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
                    .to(p.device, p.dtype)
                    .contiguous()
                )
                out[what] = DTensor.from_local(
                    local, p.device_mesh, p.placements, shape=p.shape, stride=p.stride()
                )
            else:  # the step count (a scalar)
                out[what] = full.to(p.device)
        opt.state[p] = out
    _restore_groups(opt, groups)


__all__ = ["save", "load_into", "load_full_into", "SHARD_DIR", "FORMAT"]
