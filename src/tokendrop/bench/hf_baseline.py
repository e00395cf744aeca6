"""The Hugging Face baseline: ``transformers.BertForMaskedLM`` run the way its users train it.

Same config and initial weights as our model (the pooler aside: HF's MLM model has none), SDPA
attention, bf16 autocast when the bench is bf16, the standard full-sequence MLM loss (``labels``
= -100 at unmasked positions), gradient clipping and the same AdamW.  The batch is packed with no
padding, so like our step it passes no attention mask and SDPA may pick its fastest kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..flops import step_flops
from ..model import BertForMaskedLM
from .presets import BenchConfig
from .workload import Setting


def hf_labels(mb: dict[str, Tensor]) -> Tensor:
    """(B, T) labels for transformers: the original id at prediction slots, -100 elsewhere."""
    lab = torch.full_like(mb["input_ids"], -100)
    return lab.scatter(1, mb["mlm_positions"], mb["mlm_labels"])


@dataclass
class HFModel:
    model: nn.Module  # transformers.BertForMaskedLM
    run: nn.Module  # the model, or its compiled wrapper
    opt: torch.optim.Optimizer

    @property
    def attn_implementation(self) -> str | None:
        return getattr(self.model.config, "_attn_implementation", None)


def build_hf(model_cfg: ModelConfig, ours: BertForMaskedLM, cfg: BenchConfig, device: torch.device) -> HFModel:
    import transformers

    from ..hf import hf_config_dict, to_hf
    from .steps import compile_model, make_optimizer

    d = {k: v for k, v in hf_config_dict(model_cfg).items() if k != "architectures"}
    hcfg = transformers.BertConfig(**d)
    hcfg._attn_implementation = "sdpa"
    hf = transformers.BertForMaskedLM(hcfg)
    hf.load_state_dict(to_hf(ours.state_dict()), strict=False)  # same initial weights (pooler: HF has none)
    hf.tie_weights()
    hf.to(device).train()
    opt = make_optimizer(hf, cfg)
    run = compile_model(hf, cfg.compile_backend) if cfg.compile else hf
    return HFModel(hf, run, opt)


def hf_step_fn(hf: HFModel, mb: dict[str, Tensor], amp: torch.dtype | None, device: torch.device):
    """One HF training step on ``mb`` as a zero-argument callable."""
    labels = hf_labels(mb)
    params = [q for q in hf.model.parameters() if q.requires_grad]

    def fn() -> dict[str, Any]:
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = hf.run(input_ids=mb["input_ids"], token_type_ids=mb["token_type_ids"], labels=labels)
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        hf.opt.step()
        hf.opt.zero_grad(set_to_none=True)
        return {"loss": out.loss.detach(), "grad_norm": gnorm}

    return fn


def hf_flops(model_cfg: ModelConfig, s: Setting) -> int:
    """HF's head runs on all T positions: its FLOPs use P = T."""
    return step_flops(model_cfg, s.seq_len, s.batch_size, None, num_predictions=s.seq_len).total
