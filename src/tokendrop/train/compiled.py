"""What ``train.compile`` compiles of the training step, and how many shapes a run compiles.

Modes (``resolve_mode``; docs/design.md "Compiled step"):

* ``off``: eager;
* ``forward``: ``torch.compile`` of the model's forward; the loss and the backward's autograd graph
  stay eager;
* ``step``: the forward and the MLM loss of a micro-batch (logits, per-slot NLL, the weighted sum,
  the correct-prediction count) as one compiled graph; AOTAutograd compiles its backward with it,
  so ``loss.backward()`` runs the compiled backward.  The token selection and importance update
  (data-dependent, a few small kernels), the gradient norm and the fused AdamW run eagerly;
* ``graphs``: ``step`` compiled with ``mode="reduce-overhead"``: on CUDA inductor captures the
  forward and backward graphs as CUDA graphs (one launch each per micro-batch); elsewhere the same
  as ``step``.  The outputs live in the graphs' static memory, so they are cloned before the next
  micro-batch replays the graph.

Shapes are static (``dynamic=False``): a micro-batch's rows, its length L, the kept count M and the
prediction slots P are fixed for a run (P is sized for the largest masking rate, so a masking-rate
warm-up changes no shape; a batch warm-up accumulates more micro-batches of the same shape), so a
run compiles one graph per length its sequence-length warm-up trains at (a divisor of T at least
``data.seq_len_start``: ``SeqLenWarmup.lengths``) and per kind of step (dropping, dense;
random-LTD's ramp is bucketed to multiples of ``drop.ltd_step`` rows, one graph each), and never
recompiles after those: :func:`compiled_shapes` counts them, and the recompile limit is raised to
it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.config import Config

__all__ = ["MODES", "resolve_mode", "compiled_shapes", "LossFn", "loss_fn"]

MODES = ("off", "forward", "step", "graphs")  # what resolve_mode returns


def resolve_mode(value: bool | str, device: torch.device) -> str:
    """``train.compile`` -> one of :data:`MODES`: true = step, false = off, auto = step on CUDA and
    off elsewhere (compiling on CPU costs minutes for a small gain:
    benchmarks/results/compiled_step)."""
    if value is True:
        return "step"
    if value is False:
        return "off"
    if value == "auto":
        return "step" if device.type == "cuda" else "off"
    if value not in MODES:
        raise ValueError(
            f"train.compile: expected true, false, auto or one of {', '.join(MODES)}, got {value!r}"
        )
    return value


def compiled_shapes(cfg: Config, lengths: list[int]) -> int:
    """At most how many graphs a run of ``cfg`` compiles: per sequence length it trains at, one for
    its dropping steps (random-LTD: one per kept count its ramp takes, multiples of
    ``drop.ltd_step``) and one for its dense steps (stage 2; a run without dropping)."""
    drop, tc = cfg.drop, cfg.train
    dense = not drop.enabled or bool(tc.time_budget) or drop.stage2_fraction > 0 or drop.per_layer
    n = 0
    for t in lengths:
        kinds = int(dense)
        if drop.enabled:
            m0 = max(1, int(round(drop.ltd_start_fraction * t)))
            kinds += (t - m0) // max(drop.ltd_step, 1) + 1 if drop.per_layer else 1
        n += kinds
    return n


# (logits' inputs..., labels, weights) -> (weighted NLL sum, per-slot NLL (B, P), weighted correct
# count)
LossFn = Callable[..., tuple[Tensor, Tensor, Tensor]]


def loss_fn(
    model: nn.Module, run_model: nn.Module, mode: str, backend: Any = "inductor", shapes: int = 1
) -> LossFn:
    """The micro-batch forward + loss for ``mode``: eager (``off``), through a compiled forward
    (``forward``), or compiled whole (``step``, ``graphs``).  ``model`` provides ``mlm_nll``;
    ``run_model`` is what the forward runs through (the DDP/FSDP wrapper, or the model).
    ``shapes``: how many graphs the run compiles (:func:`compiled_shapes`), so the recompile limit
    admits them."""
    if mode != "off":
        _admit(shapes)
    forward = (
        torch.compile(run_model, dynamic=False, backend=backend) if mode == "forward" else run_model
    )

    def run(
        input_ids,
        mlm_positions,
        attention_mask,
        token_type_ids,
        keep_idx,
        drop_active,
        labels,
        weights,
    ):
        logits = forward(
            input_ids,
            mlm_positions,
            attention_mask,
            token_type_ids,
            keep_idx=keep_idx,
            drop_active=drop_active,
        )
        nll = model.mlm_nll(logits, labels)  # (B, P) fp32
        correct = ((logits.argmax(-1) == labels).to(nll.dtype) * weights).sum()
        return (nll * weights).sum(), nll, correct

    if mode in ("off", "forward"):
        return run
    compiled = torch.compile(
        run,
        dynamic=False,
        backend=backend,
        mode="reduce-overhead" if mode == "graphs" and backend == "inductor" else None,
    )
    if mode == "step":
        return compiled

    def replay(*args):
        # the previous replay's outputs were consumed or cloned
        torch.compiler.cudagraph_mark_step_begin()
        loss, nll, correct = compiled(*args)
        return loss, nll.detach().clone(), correct.clone()

    return replay


def _admit(shapes: int) -> None:
    """Room for ``shapes`` graphs per compiled function (both spellings of dynamo's limit)."""
    dc = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), shapes + 2))
