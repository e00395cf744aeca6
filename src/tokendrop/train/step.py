"""One optimizer step of MLM pretraining with token dropping (``MLMStep``), and the held-out
evaluation (``evaluate_mlm``).

Per step: the method's plan for the step (``tokendrop.dropping.plan.DropStep``: whether it drops,
the kept count, ScTD's cadence) comes in; per micro-batch the plan selects the kept positions, then
one function (``MLMStep.forward_backward``; its forward + loss compiled as ``train.compile`` says,
``tokendrop.train.compiled``) runs the forward with dropping (stage 1) or dense (stage 2), the
weighted MLM NLL normalised by the *global* number of real prediction slots (so one process and N
processes compute the same loss and gradients) and the backward (gradient accumulation over the
micro-batches, synchronised on the last); then clip, AdamW (compiled under ``train.compile`` =
step / graphs, but for a fused AdamW on CPU; a non-finite gradient norm skips the update), and the
plan's importance update from the step's per-slot losses (all-reduced across ranks).  Nothing in
the step waits on the host.  The loop around it is ``tokendrop.train.trainer``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.dropping.consistency import ClsTaps, consistency_term
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.errors import TrainingError
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.train.compiled import CompiledAdamW, adamw_update, loss_fn
from tokendrop.train.parallel import Parallel, grad_norm


class MLMStep:
    """One optimizer step over a list of micro-batches (already on the device)."""

    def __init__(
        self,
        model: BertForMaskedLM,
        plan: DropPlan,
        optimizer: torch.optim.Optimizer,
        grad_clip: float,
        amp_dtype: torch.dtype | None,
        par: Parallel | None = None,
        use_attention_mask: bool = True,
        compile: str = "off",
        run_model: nn.Module | None = None,
        compile_backend: Any = "inductor",
        shapes: int = 2,
    ):
        self.use_attention_mask = use_attention_mask  # packed data has no [PAD]: mask-free SDPA
        self.model = model
        # run_model: what the forward runs through (default: the DDP/FSDP-wrapped model, else
        # model), e.g. an already compiled model shared by several steps (the benchmark's settings)
        self.run_model = (
            run_model if run_model is not None else (par.run_model if par is not None else model)
        )
        # compile: a tokendrop.train.compiled mode (what is compiled: the forward, or forward +
        # loss); shapes: how many graphs the run compiles (compiled_shapes)
        self.loss = loss_fn(model, self.run_model, compile, compile_backend, shapes)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.plan = plan
        self.opt = optimizer
        # step / graphs: AdamW's update compiled too, except where the eager AdamW stays: FSDP's
        # sharded parameters, and a fused AdamW on CPU, whose ATen kernel updates in half the time
        # of inductor's C++ for the same update (benchmarks/results/compiled_cpu.md)
        sharded = par is not None and par.kind == "fsdp"
        device = next(model.parameters()).device
        cpu_fused = device.type == "cpu" and bool(optimizer.defaults.get("fused"))
        self.compiled_opt = (
            CompiledAdamW(optimizer, compile, compile_backend)
            if compile in ("step", "graphs") and not sharded and not cpu_fused
            else None
        )
        self.grad_clip = grad_clip  # train.grad_clip: 0 measures the norm without clipping
        self.amp_dtype = amp_dtype
        self.par = par if par is not None and par.kind != "none" else None
        # ScTD (tokendrop.dropping.consistency): [CLS] taps on the last two layers, only when its
        # weight is > 0
        self.taps = ClsTaps(model.encoder_layers) if plan.consistency else None
        if self.taps is not None:  # ScTD's taps are forward hooks: its steps run the eager forward
            self._eager_loss = loss_fn(model, self.run_model, "off")

    def __call__(
        self, micro: list[dict[str, Tensor]], lr: float, at: DropStep
    ) -> dict[str, Tensor]:
        device = micro[0]["input_ids"].device
        count = torch.stack([mb["mlm_weights"].sum() for mb in micro]).sum()
        if self.par is not None:
            self.par.all_reduce(count)
        norm = count.clamp(min=1.0)
        sums = torch.zeros(2, device=device)  # weighted nll, correct predictions
        all_nll = []
        kl_sum = torch.zeros((), device=device)
        for i, mb in enumerate(micro):
            keep = self.plan.keep_idx(mb["input_ids"], at, mb["mlm_positions"], mb["mlm_weights"])
            sync = i == len(micro) - 1
            with self.par.grad_sync(sync) if self.par is not None else contextlib.nullcontext():
                nll_sum, nll, correct, kl = self.forward_backward(mb, keep, at, norm)
            sums += torch.stack([nll_sum, correct])
            if kl is not None:
                kl_sum += kl
            all_nll.append(nll)
        # train.grad_clip = 0: no clipping (as in fine-tuning); the norm is still measured.  Over
        # all shards under FSDP (DTensor gradients), so the same value on every rank
        gnorm = grad_norm(self.params, self.grad_clip)
        # a non-finite gradient norm (the same on every rank: DDP/FSDP have reduced the gradients)
        # skips the step: no weight, moment or importance update.  Decided on the device: the
        # compiled update selects the old values, the fused AdamW kernel takes the flag (as under a
        # GradScaler); an unfused eager one needs the host (adamw_update).
        finite = torch.isfinite(gnorm)
        adamw_update(self.opt, self.compiled_opt, lr, finite)
        self.opt.zero_grad(set_to_none=True)
        if at.learns:  # a dropping step, or a dense start's (DropConfig.learns_at)
            self.plan.update(
                torch.cat([mb["mlm_labels"] for mb in micro]),
                torch.cat(all_nll),
                torch.cat([mb["mlm_weights"] for mb in micro]),
                valid=finite,
            )
        if self.par is not None:
            self.par.all_reduce(sums)
        out = {"loss": sums[0] / norm, "acc": sums[1] / norm, "grad_norm": gnorm, "finite": finite}
        if at.consistency:  # this rank's summed [CLS] KL over its micro-batches, per real slot
            out["consistency"] = kl_sum / norm
        return out

    def forward_backward(
        self, mb: dict[str, Tensor], keep: Tensor | None, at: DropStep, norm: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """One micro-batch: the forward + MLM loss at the step's dropping (kept positions ``keep``;
        ``self.loss``, compiled as ``train.compile`` says), ScTD's term on its steps, over the
        global slot count ``norm``, and the backward -> (weighted NLL sum, per-slot NLL (B, P) fp32,
        weighted correct predictions, the unweighted [CLS] KL or None), detached."""
        device = mb["input_ids"].device
        # DDP and FSDP average the gradients
        scale = float(self.par.world) if self.par is not None else 1.0
        sctd = at.consistency and self.taps is not None
        with (
            self.taps.record() if sctd else contextlib.nullcontext() as dropped,
            torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None),
        ):
            nll_sum, nll, correct = (self._eager_loss if sctd else self.loss)(
                mb["input_ids"],
                mb["mlm_positions"],
                mb["attention_mask"] if self.use_attention_mask else None,
                mb.get("token_type_ids"),
                keep,
                at.dropping,
                mb["mlm_labels"],
                mb["mlm_weights"],
            )
        loss, kl = nll_sum, None
        if sctd:
            kl = self._consistency(mb, dropped)
            loss = loss + self.plan.drop.consistency_weight * kl
        loss = loss / norm * scale
        loss.backward()
        return nll_sum.detach(), nll.detach(), correct.detach(), None if kl is None else kl.detach()

    def _consistency(self, mb: dict[str, Tensor], dropped: list[Tensor]) -> Tensor:
        """ScTD: the dense pass of the same micro-batch (no MLM head; through the unwrapped model,
        so under DDP the one backward still reduces each gradient once) -> the unweighted KL
        term."""
        device = mb["input_ids"].device
        with (
            self.taps.record() as dense,
            torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None),
        ):
            self.model.hidden(
                mb["input_ids"],
                None,
                mb["attention_mask"] if self.use_attention_mask else None,
                mb.get("token_type_ids"),
            )
        return consistency_term(dropped, dense)


@torch.no_grad()
def evaluate_mlm(
    model: BertForMaskedLM,
    batches,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    max_batches: int,
) -> dict[str, float]:
    """Full model (no dropping) on held-out batches: MLM loss and accuracy over real slots."""
    was_training = model.training
    model.eval()
    # summed on the device and read once at the end (no host synchronisation per batch)
    tot = torch.zeros(
        3, dtype=torch.float64 if device.type != "mps" else torch.float32, device=device
    )
    for i, mb in enumerate(batches):
        if max_batches and i >= max_batches:
            break
        mb = {
            k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v
            for k, v in mb.items()
        }
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(
                mb["input_ids"], mb["mlm_positions"], mb["attention_mask"], mb["token_type_ids"]
            )
        nll = model.mlm_nll(logits, mb["mlm_labels"])
        w = mb["mlm_weights"]
        tot += torch.stack(
            [(nll * w).sum(), ((logits.argmax(-1) == mb["mlm_labels"]).float() * w).sum(), w.sum()]
        ).to(tot.dtype)
    model.train(was_training)
    loss_sum, correct, n = tot.tolist()
    if n <= 0:  # never report a loss of 0.0 for an evaluation that saw nothing
        raise TrainingError(
            "evaluation: the held-out split gave no prediction slots (empty eval split?); "
            "prepare the data with a larger --eval-fraction or more text"
        )
    return {"eval_loss": loss_sum / n, "eval_acc": correct / n, "eval_slots": int(n)}
