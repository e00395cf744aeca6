"""What ``train.compile`` compiles of the training step, and how many shapes a run compiles.

Modes (``resolve_mode``; docs/design.md "Compiled step"):

* ``off``: eager;
* ``forward``: ``torch.compile`` of the model's forward; the loss and the backward's autograd graph
  stay eager;
* ``step``: the forward and the MLM loss of a micro-batch (logits, per-slot NLL, the weighted sum,
  the correct-prediction count) as one compiled graph; AOTAutograd compiles its backward with it,
  so ``loss.backward()`` runs the compiled backward; and AdamW's update as a second compiled graph
  (:class:`CompiledAdamW`: the learning rate a device tensor, so the LR schedule never recompiles;
  a non-finite gradient norm keeps every weight, moment and step count, decided on the device),
  except a fused AdamW on CPU, which stays ATen's fused kernel (it updates in about half the time
  of inductor's C++ for the same update; ``MLMStep``).
  The token selection and importance update (data-dependent, a few small kernels) and the gradient
  norm run eagerly;
* ``graphs``: ``step`` compiled with ``mode="reduce-overhead"``: on CUDA inductor captures the
  forward, backward and optimizer graphs as CUDA graphs (one launch each per micro-batch, one for
  the update); refused on another device (there is no graph to capture).  The outputs live in the
  graphs' static memory, so they are cloned before the next micro-batch replays the graph.

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
from torch.optim.adamw import adamw

from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import ConfigError

__all__ = [
    "MODES",
    "resolve_mode",
    "compiled_shapes",
    "LossFn",
    "loss_fn",
    "CompiledAdamW",
    "adamw_update",
]

MODES = ("off", "forward", "step", "graphs")  # what resolve_mode returns


def resolve_mode(value: bool | str, device: torch.device) -> str:
    """``train.compile`` -> one of :data:`MODES`: true = step, false = off, auto = step on CUDA and
    off elsewhere (on CPU the compiled step ties eager, dense and dropping, within the spread
    between processes, and compiling costs 10-40 s of CPU per graph:
    benchmarks/results/compiled_cpu.md)."""
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
    if value == "graphs" and device.type != "cuda":
        raise ConfigError(
            f"train.compile: 'graphs' captures CUDA graphs, which a {device.type} device does not "
            f"have; use 'step' (compiled) or 'off' on {device.type}"
        )
    return value


def compiled_shapes(plan: DropPlan, lengths: list[int]) -> int:
    """At most how many graphs a run compiles: per sequence length it trains at, the kinds of step
    its drop plan takes there (:meth:`~tokendrop.dropping.plan.DropPlan.step_kinds`)."""
    return sum(plan.step_kinds(t) for t in lengths)


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


class CompiledAdamW:
    """AdamW's update of ``opt``'s parameters as one compiled graph (PyTorch's compiled-optimizer
    recipe: the update traced by dynamo, the learning rate a tensor so a changing LR is an input,
    not a constant that recompiles).  ``opt`` keeps the state (moments and step counts, as its own
    ``step`` would lay them out, so checkpoints are unchanged) and the hyper-parameters of each
    group (read as constants); the update is ``torch.optim.adamw.adamw`` (the functional AdamW)
    inside the compiled function, not ``opt.step()``, because ``opt.step()`` breaks the graph on
    entry and exit.  ``finite`` (a bool tensor) selects per element between the updated and the
    old weights, moments and step counts, so a non-finite step changes nothing and nothing waits on
    the host.  ``mode``: ``step`` or ``graphs`` (``reduce-overhead``: a CUDA graph on CUDA)."""

    def __init__(
        self,
        opt: torch.optim.Optimizer,
        mode: str = "step",
        backend: Any = "inductor",
    ):
        for g in opt.param_groups:
            if g.get("amsgrad") or g.get("maximize"):
                raise ValueError("CompiledAdamW: amsgrad and maximize are not supported")
        self.opt = opt
        self.groups: list[tuple] = []  # per group: params, moments, step counts, hyper-parameters
        self.lr: Tensor | None = None  # the learning rate on the parameters' device
        self.ready = False
        self.update = torch.compile(
            self._update,
            dynamic=False,
            backend=backend,
            mode="reduce-overhead" if mode == "graphs" and backend == "inductor" else None,
        )

    def _prepare(self) -> None:
        """AdamW's state for every parameter that has none (zero moments, step 0) and every step
        count as a float32 tensor on its parameter's device (a resumed fused or unfused state
        alike), once: the compiled graph reads and writes them in place.  The groups'
        hyper-parameters are read here, as they are after a checkpoint's restore (the compiled
        function never reads ``param_groups``: dynamo would guard on every entry of it, the learning
        rate too)."""
        self.groups = []
        for g in self.opt.param_groups:
            ps = list(g["params"])
            for p in ps:
                st = self.opt.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                else:
                    st["step"] = st["step"].to(device=p.device, dtype=torch.float32)
            sts = [self.opt.state[p] for p in ps]
            hyper = (float(g["betas"][0]), float(g["betas"][1]), g["weight_decay"], g["eps"])
            self.groups.append(
                (
                    ps,
                    [st["exp_avg"] for st in sts],
                    [st["exp_avg_sq"] for st in sts],
                    [st["step"] for st in sts],
                    hyper,
                )
            )
        device = self.groups[0][0][0].device
        self.lr = torch.zeros((), dtype=torch.float32, device=device)
        self.ready = True

    def _update(self, lr: Tensor, finite: Tensor) -> None:
        for ps, avgs, sqs, steps, (beta1, beta2, wd, eps) in self.groups:
            # a parameter without a gradient (unused by this step) is left alone, as by AdamW
            live = [i for i, p in enumerate(ps) if p.grad is not None]
            if not live:
                continue
            group = [[x[i] for i in live] for x in (ps, avgs, sqs, steps)]
            state = [t for x in group for t in x]
            old = [t.clone() for t in state]
            adamw(
                group[0],
                [p.grad for p in group[0]],
                group[1],
                group[2],
                [],
                group[3],
                foreach=True,  # the multi-tensor update: a few ops to trace, fused by inductor
                capturable=True,
                amsgrad=False,
                beta1=beta1,
                beta2=beta2,
                lr=lr,
                weight_decay=wd,
                eps=eps,
                maximize=False,
            )
            for t, t0 in zip(state, old):
                t.copy_(torch.where(finite, t, t0))

    @torch.no_grad()
    def __call__(self, lr: float, finite: Tensor) -> None:
        """One update at learning rate ``lr`` unless ``finite`` is false."""
        if not self.ready:
            self._prepare()
        self.lr.fill_(lr)
        self.update(self.lr, finite)


def adamw_update(
    opt: torch.optim.Optimizer,
    compiled: Callable[[float, Tensor], None] | None,
    lr: float,
    finite: Tensor,
) -> None:
    """One AdamW update of ``opt`` at learning rate ``lr`` unless ``finite`` (a bool tensor) is
    false: through ``compiled`` (a :class:`CompiledAdamW` of ``opt``) when given; else ``opt``'s
    own step, a fused AdamW taking the skip as its ``found_inf`` flag on the device (as under a
    GradScaler); an unfused one needs the host to decide.  ``opt``'s groups hold ``lr`` after it
    (what a checkpoint records), whichever runs the update."""
    for g in opt.param_groups:
        g["lr"] = lr
    if compiled is not None:
        compiled(lr, finite)
    elif opt.defaults.get("fused"):
        opt.found_inf = (~finite).to(torch.float32)
        opt.step()
    elif bool(finite):
        opt.step()


def _admit(shapes: int) -> None:
    """Room for ``shapes`` graphs per compiled function (both spellings of dynamo's limit)."""
    dc = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), shapes + 2))
