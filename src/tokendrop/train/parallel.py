"""Data parallelism: the process group, and the model wrapped for it (DDP or FSDP2).

``init_distributed`` joins (or starts, under ``torchrun``) the process group; ``wrap`` returns a
:class:`Parallel` that the training step uses for everything that depends on how the model is
spread over the ranks: the module the forward runs through, gradient synchronisation on the last
micro-batch only, the all-reduce of step statistics, the gradient norm, and the mixed-precision
policy.

``train.parallel``:

* ``"ddp"`` (default): every rank holds the whole model; ``DistributedDataParallel`` all-reduces
  the gradients (bucketed, overlapped with the backward).  In one process: the plain model.
* ``"fsdp"``: FSDP2 (``torch.distributed.fsdp.fully_shard``) on every encoder layer and on the
  root (embeddings, MLM head, the tied decoder weight, which stays one parameter); parameters,
  gradients and AdamW moments are sharded over the ranks (dim 0), each layer's parameters are
  all-gathered for its forward and backward and its gradients reduce-scattered.  On CUDA with
  ``train.precision`` bf16 (or auto) the parameters are gathered in bf16 and gradients reduced in
  fp32 (``MixedPrecisionPolicy``; autocast is then off); on CPU (gloo) everything stays fp32.
  FSDP needs a process group: under ``torchrun`` one is started even at world size 1; a plain
  process has none, which is a one-line :class:`ConfigError`.

Both average the gradients over the ranks, so the step divides the loss by the global number of
prediction slots times the world size (``MLMStep``); the losses of both agree to float rounding.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.constants import default_pg_timeout

from tokendrop.errors import ConfigError
from tokendrop.models.masked_lm import MaskedLM

PARALLEL_KINDS = ("ddp", "fsdp")


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def grouped(self) -> bool:
        """A process group exists (collectives are possible, even at world size 1)."""
        return dist.is_available() and dist.is_initialized()


def _launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"))


# how long a rank waits for the others to join the process group (seconds) unless
# TOKENDROP_RENDEZVOUS_TIMEOUT says otherwise: torchrun starts every rank of a run within seconds,
# so a rank still alone after this was started by hand or by a leftover environment
RENDEZVOUS_TIMEOUT = 300.0
_ONE_PROCESS = "unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR MASTER_PORT to train in one process"
_LAUNCH = "launch every rank with `torchrun --nproc-per-node N -m tokendrop pretrain ...`"


def check_distributed_env(env: dict[str, str] | None = None) -> None:
    """Refuse a torchrun environment that cannot form a process group, in one line naming the
    variable: WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_PORT integers (when set),
    RANK below WORLD_SIZE and LOCAL_RANK below LOCAL_WORLD_SIZE, and RANK, MASTER_ADDR and
    MASTER_PORT all set when WORLD_SIZE > 1.  ``env``: ``os.environ`` unless given."""
    env = os.environ if env is None else env
    n: dict[str, int] = {}
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        raw = env.get(var)
        if raw is None:
            continue
        if not raw.strip().isdigit():
            raise ConfigError(
                f"environment variable {var}={raw!r}: expected a non-negative integer (torchrun "
                f"sets it); {_ONE_PROCESS}, or {_LAUNCH}"
            )
        n[var] = int(raw)
    if n.get("WORLD_SIZE", 1) < 1 or n.get("LOCAL_WORLD_SIZE", 1) < 1:
        var = "WORLD_SIZE" if n.get("WORLD_SIZE", 1) < 1 else "LOCAL_WORLD_SIZE"
        raise ConfigError(f"environment variable {var}=0: expected at least 1; {_ONE_PROCESS}")
    world = n.get("WORLD_SIZE", 1)
    if world > 1:
        missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(v)]
        if missing:
            raise ConfigError(
                f"environment variable WORLD_SIZE={world} without {', '.join(missing)}: every "
                f"rank needs them (torchrun sets them); {_LAUNCH}, or {_ONE_PROCESS}"
            )
    for var, of in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if var in n and of in n and n[var] >= n[of]:
            raise ConfigError(
                f"environment variable {var}={n[var]}: expected below {of}={n[of]}; "
                f"{_ONE_PROCESS}, or {_LAUNCH}"
            )
    if "MASTER_PORT" in n and not 0 < n["MASTER_PORT"] < 65536:
        raise ConfigError(
            f"environment variable MASTER_PORT={n['MASTER_PORT']}: expected a port 1-65535"
        )


def rendezvous_timeout(env: dict[str, str] | None = None) -> float:
    """Seconds a rank waits for its peers: TOKENDROP_RENDEZVOUS_TIMEOUT, else RENDEZVOUS_TIMEOUT."""
    env = os.environ if env is None else env
    raw = env.get("TOKENDROP_RENDEZVOUS_TIMEOUT")
    if raw is None:
        return RENDEZVOUS_TIMEOUT
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not (math.isfinite(t) and t > 0):
        raise ConfigError(
            f"environment variable TOKENDROP_RENDEZVOUS_TIMEOUT={raw!r}: expected a positive "
            "number of seconds"
        )
    return t


def init_distributed(device_kind: str, parallel: str = "ddp") -> Dist:
    """Use an existing process group, or start one when launched by torchrun (world > 1, or any
    world size with ``parallel="fsdp"``, which shards over a device mesh).  ``"fsdp"`` in a process
    with no group and no torchrun environment is a :class:`ConfigError`."""
    if dist.is_available() and dist.is_initialized():
        return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    check_distributed_env()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 or (parallel == "fsdp" and _launched_by_torchrun()):
        _init_group("nccl" if device_kind == "cuda" else "gloo")
        return Dist(
            dist.get_rank(),
            dist.get_world_size(),
            int(os.environ.get("LOCAL_RANK", 0)),
            owns_group=True,
        )
    if parallel == "fsdp":
        raise ConfigError(
            "train.parallel: 'fsdp' shards the model over the ranks of a process group, but this "
            "process has none (not launched by torchrun); launch with `torchrun --nproc-per-node "
            'N -m tokendrop pretrain ...`, or set train.parallel = "ddp" to train in one process'
        )
    return Dist()


def close_distributed(dd: Dist, clean: bool) -> None:
    """End the process group this process started (``dd.owns_group``; a caller's own group is left
    alone).  First every Python object that may still hold collective work (DDP/FSDP state, whose
    hooks make reference cycles) is collected while the interpreter is fully alive: a gloo work
    object freed during interpreter shutdown takes the GIL and aborts the process ("terminate called
    without an active exception").  ``clean``: the run ended normally on every rank, so the ranks
    meet at a barrier before the group goes (after an error a peer may be gone: no barrier)."""
    if not dd.owns_group or not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    if clean:
        dist.barrier()
    dist.destroy_process_group()


def _init_group(backend: str) -> None:
    """``init_process_group`` from torchrun's environment, after a rendezvous that waits at most
    :func:`rendezvous_timeout` seconds for every rank (then a one-line :class:`ConfigError`), its
    keys in the store under this restart's own prefix: after ``--max-restarts`` restarts the
    workers, torchrun's store still holds the addresses the previous workers published, and a new
    rank reading one of them before its peer has overwritten it connects to a dead port (gloo:
    "connectFullMesh failed ... Connection refused")."""
    wait = rendezvous_timeout()
    try:
        store, rank, world = next(dist.rendezvous("env://", timeout=timedelta(seconds=wait)))
    except (RuntimeError, ValueError, OSError) as e:  # torch's DistStoreError is a RuntimeError
        env = os.environ
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(
            f"distributed: rank {env.get('RANK')} of WORLD_SIZE={env.get('WORLD_SIZE')} did not "
            f"meet its peers at {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')} within {wait:g} "
            f"s ({reason}); {_LAUNCH}, or {_ONE_PROCESS} (the wait: TOKENDROP_RENDEZVOUS_TIMEOUT)"
        ) from None
    store.set_timeout(default_pg_timeout)  # the group's own operations: torch's default
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    prefix = "default_pg" if restart is None else f"tokendrop/restart-{restart}"
    dist.init_process_group(
        backend=backend,
        store=dist.PrefixStore(prefix, store),
        rank=rank,
        world_size=world,
    )


class Parallel:
    """The model as the ranks share it (see the module docstring).  ``kind``: "none" (one process,
    no group), "ddp" or "fsdp"."""

    def __init__(self, model: nn.Module, kind: str, dd: Dist, run_model: nn.Module):
        self.model = model
        self.kind = kind
        self.dd = dd
        self.run_model = run_model

    @property
    def sharded(self) -> bool:
        return self.kind == "fsdp"

    @property
    def world(self) -> int:
        return self.dd.world if self.kind != "none" else 1

    @contextlib.contextmanager
    def grad_sync(self, sync: bool) -> Iterator[None]:
        """Reduce gradients in this forward/backward only when ``sync`` (the last micro-batch)."""
        if self.kind == "ddp" and not sync:
            with self.run_model.no_sync():
                yield
        elif self.kind == "fsdp":
            self.model.set_requires_gradient_sync(sync)
            yield
        else:
            yield

    def all_reduce(self, t: Tensor) -> None:
        if self.kind != "none":
            dist.all_reduce(t)

    def all_true(self, flag: bool) -> bool:
        """``flag`` on every rank (a collective under a group)."""
        if self.kind == "none":
            return flag
        t = torch.tensor([0 if flag else 1], dtype=torch.int32)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t)
        return int(t.item()) == 0


def _local(t: Tensor) -> Tensor:
    """A DTensor's full value (a replicated scalar such as a gradient norm), else ``t``."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def grad_norm(params: list[nn.Parameter], max_norm: float) -> Tensor:
    """The global gradient norm (clipped to ``max_norm`` when > 0), the same on every rank; works on
    sharded (DTensor) gradients, whose norm ``torch.nn.utils`` computes over all shards."""
    if max_norm > 0:
        return _local(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return _local(torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))


def wrap(
    model: MaskedLM, kind: str, dd: Dist, device: torch.device, amp: torch.dtype | None
) -> Parallel:
    """Wrap ``model`` (either family's MLM model, already on ``device``) for ``kind`` ("ddp" |
    "fsdp"). FSDP shards each of ``model.encoder_layers``, then the root, in place: build the
    optimizer after this call."""
    if kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import (
            MixedPrecisionPolicy,
            fully_shard,
            register_fsdp_forward_method,
        )

        if not dd.grouped:
            raise ConfigError("train.parallel: 'fsdp' needs a process group (launch with torchrun)")
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        kw = {"mesh": mesh}
        if amp is not None and device.type == "cuda":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32)
        # the logits are a view (of F.linear's 2-D product); the step never changes them in place,
        # so FSDP2's per-forward warning about in-place ops on a returned view does not apply
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        for layer in model.encoder_layers:
            fully_shard(layer, **kw)
        # the root: embeddings, head; the tied decoder weight is the embedding's
        fully_shard(model, **kw)
        # ScTD's dense pass calls model.hidden, not forward: FSDP gathers the root's parameters for
        # it too
        register_fsdp_forward_method(model, "hidden")
        return Parallel(model, "fsdp", dd, model)
    if dd.world > 1:
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        return Parallel(model, "ddp", dd, ddp)
    return Parallel(model, "none", dd, model)


def autocast_for(
    par: Parallel | None, amp: torch.dtype | None, device: torch.device
) -> torch.dtype | None:
    """The autocast dtype of the forward: none under FSDP's mixed-precision policy (CUDA), which
    already computes in ``amp``."""
    if par is not None and par.sharded and device.type == "cuda":
        return None
    return amp


__all__ = [
    "Dist",
    "Parallel",
    "PARALLEL_KINDS",
    "init_distributed",
    "close_distributed",
    "wrap",
    "grad_norm",
    "autocast_for",
]
