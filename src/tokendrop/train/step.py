"""One optimizer step of MLM pretraining with token dropping (``MLMStep``), and the held-out
evaluation (``evaluate_mlm``); which steps drop tokens (``dropping_at``).

Per step: select kept positions from the importance vector, forward with dropping (stage 1) or dense
(stage 2), weighted MLM NLL normalised by the *global* number of real prediction slots (so one
process and N processes compute the same loss and gradients), backward (gradient accumulation over
the micro-batches, synchronised on the last), clip, AdamW (a non-finite gradient norm skips the
update), then the importance update from the step's per-slot losses (all-reduced across ranks).
Nothing in the step waits on the host.  The loop around it is ``tokendrop.train.trainer``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.train.budget import RunLength
from tokendrop.train.compiled import loss_fn
from tokendrop.config import Config
from tokendrop.dropping.consistency import ClsTaps, consistency_term
from tokendrop.errors import TrainingError
from tokendrop.dropping.importance import TokenSelector
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.train.parallel import Parallel, grad_norm
from tokendrop.dropping.random_ltd import kept_rows


def stage2_start(cfg: Config) -> int:
    """First step trained without dropping (= steps when there is no stage 2; a fixed-length run)."""
    if not cfg.drop.enabled:
        return 0
    return cfg.train.steps - int(round(cfg.drop.stage2_fraction * cfg.train.steps))


def dropping_at(cfg: Config, length: RunLength, step: int, p: float) -> bool:
    """Whether step ``step`` (at progress ``p``) drops tokens: before ``stage2_start`` in a
    fixed-length run; while less than ``1 - drop.stage2_fraction`` of a time budget is used."""
    if not cfg.drop.enabled:
        return False
    return p < 1.0 - cfg.drop.stage2_fraction if length.timed else step < stage2_start(cfg)


# ----------------------------------------------------------------------------------------------
# the step


class MLMStep:
    """One optimizer step over a list of micro-batches (already on the device)."""

    def __init__(
        self,
        model: BertForMaskedLM,
        selector: TokenSelector | None,
        optimizer: torch.optim.Optimizer,
        cfg: Config,
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
        # run_model: what the forward runs through (default: the DDP/FSDP-wrapped model, else model),
        # e.g. an already compiled model shared by several steps (the benchmark's settings)
        self.run_model = run_model if run_model is not None else (par.run_model if par is not None else model)
        # compile: a tokendrop.train.compiled mode (what is compiled: the forward, or forward + loss);
        # shapes: how many graphs the run compiles (compiled_shapes)
        self.loss = loss_fn(model, self.run_model, compile, compile_backend, shapes)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.selector = selector
        self.opt = optimizer
        self.cfg = cfg
        self.amp_dtype = amp_dtype
        self.par = par if par is not None and par.kind != "none" else None
        self.select = cfg.drop.enabled and cfg.drop.variant != "avg"
        # ScTD (tokendrop.dropping.consistency): [CLS] taps on the last two layers, only when its weight is > 0
        self.taps = ClsTaps(model.encoder_layers) if cfg.drop.enabled and cfg.drop.consistency_weight > 0 else None
        if self.taps is not None:
            self._eager_loss = loss_fn(model, self.run_model, "off")

    def keep_idx(self, mb: dict[str, Tensor], step: int, progress: float = 0.0) -> Tensor | None:
        """The kept positions of one micro-batch: (B, M) from the selector, or (S, B, M) per half
        layer for random_ltd at its scheduled count (None once that count is T: a dense step)."""
        drop = self.cfg.drop
        if not drop.per_layer:
            return self.selector.select(mb["input_ids"], mb["mlm_positions"], mb["mlm_weights"])
        t = mb["input_ids"].shape[1]
        kept = kept_rows(drop, t, step, self.cfg.train.steps, progress)
        if kept >= t:
            return None
        start, end = drop.span(self.cfg.model.num_layers)
        return self.selector.select_layers(mb["input_ids"], kept, end - start)

    def __call__(self, micro: list[dict[str, Tensor]], lr: float, dropping: bool, step: int = 0,
                 progress: float = 0.0) -> dict[str, Tensor]:
        for g in self.opt.param_groups:
            g["lr"] = lr
        device = micro[0]["input_ids"].device
        count = torch.stack([mb["mlm_weights"].sum() for mb in micro]).sum()
        if self.par is not None:
            self.par.all_reduce(count)
        norm = count.clamp(min=1.0)
        scale = float(self.par.world) if self.par is not None else 1.0  # DDP and FSDP average the gradients
        sums = torch.zeros(2, device=device)  # weighted nll, correct predictions
        all_nll = []
        sctd = dropping and self.taps is not None and step % self.cfg.drop.consistency_every == 0
        kl_sum = torch.zeros((), device=device)
        for i, mb in enumerate(micro):
            keep = None
            if dropping and self.select:
                keep = self.keep_idx(mb, step, progress)
            sync = i == len(micro) - 1
            w = mb["mlm_weights"]
            with self.par.grad_sync(sync) if self.par is not None else contextlib.nullcontext():
                with self.taps.record() if sctd else contextlib.nullcontext() as dropped, \
                        torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                    # ScTD's taps are forward hooks: its steps run the eager forward
                    nll_sum, nll, correct = (self._eager_loss if sctd else self.loss)(
                        mb["input_ids"], mb["mlm_positions"], mb["attention_mask"] if self.use_attention_mask else None,
                        mb["token_type_ids"], keep, dropping, mb["mlm_labels"], w,
                    )  # weighted NLL sum, per-slot NLL (B, P) fp32, weighted correct predictions
                loss = nll_sum
                if sctd:
                    kl = self._consistency(mb, dropped)
                    kl_sum += kl.detach()
                    loss = loss + self.cfg.drop.consistency_weight * kl
                loss = loss / norm * scale
                loss.backward()
            sums += torch.stack([nll_sum.detach(), correct.detach()])
            all_nll.append(nll.detach())
        # train.grad_clip = 0: no clipping (as in fine-tuning); the norm is still measured.  Over all
        # shards under FSDP (DTensor gradients), so the same value on every rank
        gnorm = grad_norm(self.params, self.cfg.train.grad_clip)
        # a non-finite gradient norm (the same on every rank: DDP/FSDP have reduced the gradients)
        # skips the step: no weight, moment or importance update.  Decided on the device: the fused
        # AdamW kernel takes the flag (as under a GradScaler); an unfused one needs the host.
        finite = torch.isfinite(gnorm)
        if self.opt.defaults.get("fused"):
            self.opt.found_inf = (~finite).to(torch.float32)
            self.opt.step()
        elif bool(finite):
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if dropping and self.select and self.selector is not None:
            self.selector.update(
                torch.cat([mb["mlm_labels"] for mb in micro]), torch.cat(all_nll), torch.cat([mb["mlm_weights"] for mb in micro]),
                valid=finite,
            )
        if self.par is not None:
            self.par.all_reduce(sums)
        out = {"loss": sums[0] / norm, "acc": sums[1] / norm, "grad_norm": gnorm, "finite": finite}
        if sctd:  # this rank's summed [CLS] KL over its micro-batches, per real slot
            out["consistency"] = kl_sum / norm
        return out

    def _consistency(self, mb: dict[str, Tensor], dropped: list[Tensor]) -> Tensor:
        """ScTD: the dense pass of the same micro-batch (no MLM head; through the unwrapped model, so
        under DDP the one backward still reduces each gradient once) -> the unweighted KL term."""
        device = mb["input_ids"].device
        with self.taps.record() as dense, \
                torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            self.model.hidden(mb["input_ids"], None, mb["attention_mask"] if self.use_attention_mask else None,
                              mb["token_type_ids"])
        return consistency_term(dropped, dense)


@torch.no_grad()
def evaluate_mlm(model: BertForMaskedLM, batches, device: torch.device, amp_dtype: torch.dtype | None, max_batches: int) -> dict[str, float]:
    """Full model (no dropping) on held-out batches: MLM loss and accuracy over real slots."""
    was_training = model.training
    model.eval()
    tot = torch.zeros(3, dtype=torch.float64)
    for i, mb in enumerate(batches):
        if max_batches and i >= max_batches:
            break
        mb = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in mb.items()}
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(mb["input_ids"], mb["mlm_positions"], mb["attention_mask"], mb["token_type_ids"])
        nll = model.mlm_nll(logits, mb["mlm_labels"])
        w = mb["mlm_weights"]
        tot += torch.stack([(nll * w).sum(), ((logits.argmax(-1) == mb["mlm_labels"]).float() * w).sum(), w.sum()]).double().cpu()
    model.train(was_training)
    n = tot[2].item()
    if n <= 0:  # never report a loss of 0.0 for an evaluation that saw nothing
        raise TrainingError("evaluation: the held-out split gave no prediction slots (empty eval split?); "
                            "prepare the data with a larger --eval-fraction or more text")
    return {"eval_loss": tot[0].item() / n, "eval_acc": tot[1].item() / n, "eval_slots": int(n)}

