"""The pre-flight memory check of ``pretrain``: before anything is allocated or written, estimate
what a training step needs on its device and refuse a run that cannot fit, in one line with the
numbers (``train.memory_check = false`` turns it off).

The estimate is deliberately a floor, so that nothing that would fit is refused:

* parameters, gradients and AdamW's two moments: 16 bytes per trainable parameter (fp32 master
  weights under autocast too), 4 per frozen one; under FSDP divided over the ranks.  The count is
  exact and allocates nothing: the model is built on PyTorch's ``meta`` device with one and with two
  layers, and every further layer adds what the second did;
* one micro-batch's activations: per token and layer, (5 H + I) x 4 bytes -- fewer values than
  autograd actually keeps for a transformer layer (the inputs of the Q/K/V, output and FFN
  projections, the FFN's inner activation, the residual stream, the norms: about 10 H + 2 I
  values), counted in full rows outside the dropping span and in kept rows inside it -- plus the
  MLM logits of the micro-batch's prediction slots (slots x V x 4 bytes).

Available memory: CUDA, ``torch.cuda.mem_get_info`` (free on the device); CPU, ``MemAvailable`` +
``SwapFree`` of ``/proc/meminfo`` (``os.sysconf`` elsewhere), capped by the cgroup's limit less
its usage; processes of one run sharing a host's RAM (CPU ranks) share it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from tokendrop.config.model import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.errors import ConfigError
from tokendrop.models.families import build_model, spec_of

_GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class MemoryNeed:
    params: int  # parameters (trainable + frozen)
    state_bytes: int  # weights, gradients and AdamW moments
    activation_bytes: int  # one micro-batch's activations and logits (a floor)

    @property
    def total(self) -> int:
        return self.state_bytes + self.activation_bytes


def _count(model_cfg: ModelConfig, layers: int) -> tuple[int, int]:
    """(trainable, frozen) parameters of the MLM model of the ``[model]`` section ``model_cfg`` with
    ``layers`` layers, built on the meta device (nothing allocated)."""
    model_cfg = dataclasses.replace(
        model_cfg,
        num_layers=layers,  # an explicit per-layer list cut to match
        layer_types=list(model_cfg.layer_types[:layers]),
    )
    with torch.device("meta"):
        model = build_model(model_cfg)
    frozen_names = tuple(spec_of(model_cfg).pretrain_frozen)
    frozen = (
        sum(p.numel() for n, p in model.named_parameters() if n.startswith(frozen_names))
        if frozen_names
        else 0
    )
    return sum(p.numel() for p in model.parameters()) - frozen, frozen


def estimate(
    model_cfg: ModelConfig,
    drop: DropConfig,
    mask_prob: float,
    seq_len: int,
    micro_batch: int,
    world: int = 1,
    sharded: bool = False,
) -> MemoryNeed:
    """The floor of what one training step needs per process (see the module doc): the model of
    ``model_cfg`` dropping as ``drop`` says, ``mask_prob`` the run's largest masking rate
    (``data.mask_prob_max``)."""
    m = model_cfg
    (t1, f1), (t2, f2) = _count(m, 1), _count(m, 2)
    trainable = t1 + (m.num_layers - 1) * (t2 - t1)
    frozen = f1 + (m.num_layers - 1) * (f2 - f1)
    state = 16 * trainable + 4 * frozen
    if sharded and world > 1:
        state //= world
    half = (5 * m.hidden_size + m.intermediate_size) * 4 // 2  # bytes per token and half layer
    start, end = drop.span(m.num_layers) if drop.enabled else (0, 0)
    # random_ltd: its first (smallest) count
    kept = drop.kept_rows(seq_len) if drop.enabled else seq_len
    rows = sum(kept if start <= h < end else seq_len for h in range(2 * m.num_layers))
    slots = round(mask_prob * seq_len)
    acts = micro_batch * (rows * half + slots * m.vocab_size * 4)
    return MemoryNeed(trainable + frozen, state, acts)


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, _, v = line.partition(":")
            parts = v.split()
            if parts and parts[0].isdigit():
                out[k] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _cgroup_room() -> int | None:
    """Bytes this process's cgroup may still use (v2 ``memory.max - memory.current``, v1 likewise),
    or None."""
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            lim = Path(limit).read_text().strip()
            if lim == "max" or int(lim) >= 1 << 60:
                return None
            return max(0, int(lim) - int(Path(usage).read_text().strip()))
        except (OSError, ValueError):
            continue
    return None


def available(device: torch.device) -> tuple[int, str]:
    """(bytes free for the run, what they are) on ``device``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {device} ({torch.cuda.get_device_name(device)})"
    if device.type != "cpu":
        return 1 << 62, f"on {device} (not measured)"
    info = _meminfo()
    if "MemAvailable" in info:
        avail, what = (
            info["MemAvailable"] + info.get("SwapFree", 0),
            "RAM available (MemAvailable + SwapFree)",
        )
    else:
        avail, what = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "RAM free"
    room = _cgroup_room()
    if room is not None and room < avail:
        avail, what = room, "RAM left under the cgroup's memory limit"
    return avail, what


def check_memory(
    model_cfg: ModelConfig,
    drop: DropConfig,
    mask_prob: float,
    seq_len: int,
    micro_batch: int,
    device: torch.device,
    world: int = 1,
    local_world: int = 1,
    sharded: bool = False,
) -> MemoryNeed:
    """Refuse (``ConfigError``, one line with the numbers) a run whose floor estimate exceeds what
    its device has free (the arguments of :func:`estimate`); ``local_world`` processes of the run
    share a CPU host's RAM."""
    need = estimate(model_cfg, drop, mask_prob, seq_len, micro_batch, world, sharded)
    have, what = available(device)
    share = local_world if device.type == "cpu" else 1
    if need.total * share > have:
        per = f" per process x {share} processes" if share > 1 else ""
        raise ConfigError(
            f"model/batch too large for {device.type}: a training step needs at least "
            f"{need.total / _GIB:.1f} GiB{per} "
            f"({need.params / 1e6:,.{0 if need.params >= 1e8 else 1}f}M parameters: "
            f"{need.state_bytes / _GIB:.1f} GiB of weights, gradients and AdamW state; "
            f"{need.activation_bytes / _GIB:.1f} GiB of activations for a micro-batch of "
            f"{micro_batch} x {seq_len} tokens), {have / _GIB:.1f} GiB {what}; lower "
            "model.hidden_size / model.num_layers, or train.batch_size / train.micro_batch_size "
            "(set train.memory_check = false to start anyway)"
        )
    return need
