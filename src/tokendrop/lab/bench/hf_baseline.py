"""The Hugging Face baseline, run the way its users train it.

BERT family: ``transformers.BertForMaskedLM`` with the same config and initial weights as our model
(the pooler aside: HF's MLM model has none), SDPA attention, the standard full-sequence MLM loss
(``labels`` = -100 at unmasked positions; its head runs on all T positions).  With
``BenchConfig.hf_sparse_prediction=true`` the same modules run like for like with ours:
``BertForMaskedLM.bert`` on the whole sequence, then its own head ``BertForMaskedLM.cls`` on the
prediction slots only (gathered as ModernBERT's ``sparse_prediction`` does; transformers has no such
switch for BERT), cross-entropy over those slots.

ModernBERT family: ``transformers.ModernBertForMaskedLM`` with the config.json our export writes
(same shape, GeGLU width, layer pattern, window, RoPE bases, norm eps, no biases) and our initial
weights, SDPA attention -- without the ``flash_attn`` package (not installed on CPU) transformers
runs ModernBERT padded, the sliding window as a mask on dense scores, as our model does.  Its head
runs on all T positions by default (``sparse_prediction=False``: ModernBertConfig's default and the
released checkpoints' config.json); ``BenchConfig.hf_sparse_prediction=true`` turns on
``sparse_prediction`` (ModernBERT's own pretraining setting: the head on the masked positions only,
as ours).

Both: bf16 autocast when the bench is bf16, gradient clipping and the same AdamW.  The batch is
packed with no padding, so like our step it passes no attention mask.

The token-dropping arm (``BenchConfig.hf_token_dropping``, :func:`build_hf_patched`): the same
transformers model, its own copy of the initial weights and its own AdamW, patched in place by
``tokendrop.transformers.apply_token_dropping`` with the setting's method, variant and rate -- its
training forward selects, drops, computes the loss and updates the importance vector itself -- and
its head on the masked positions only exactly when ``hf_sparse_prediction`` is on.

The released arm (``BenchConfig.hf_released``, beside a sparse-head baseline and the patched
model): :func:`build_hf` with ``hf_sparse_prediction`` off -- transformers' MLM class exactly as
released, its head on all T positions, labels -100 elsewhere -- so one run splits the patched
model's gain over it into the sparse head's and dropping's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import step_flops
from tokendrop.lab.bench.optim import compile_model, make_optimizer
from tokendrop.lab.bench.presets import BenchConfig
from tokendrop.lab.bench.workload import Setting
from tokendrop.models.families import spec_of


def hf_labels(mb: dict[str, Tensor]) -> Tensor:
    """(B, T) labels for transformers: the original id at prediction slots, -100 elsewhere."""
    lab = torch.full_like(mb["input_ids"], -100)
    return lab.scatter(1, mb["mlm_positions"], mb["mlm_labels"])


def hf_class_name(model_cfg: ModelConfig, sparse_prediction: bool = False) -> str:
    spec = spec_of(model_cfg)
    how = " (sparse_prediction)" if spec.hf_sparse_prediction else " (head on the masked slots)"
    return f"transformers.{spec.hf_architectures['mlm']}" + (how if sparse_prediction else "")


class BertSparseMLM(nn.Module):
    """``BertForMaskedLM``'s own modules with its head on the prediction slots only (like ours)."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor, positions: Tensor, labels: Tensor
    ) -> Tensor:
        # (B, T, H)
        h = self.hf.bert(input_ids=input_ids, token_type_ids=token_type_ids).last_hidden_state
        h = h.gather(1, positions.unsqueeze(-1).expand(-1, -1, h.shape[-1]))  # (B, P, H)
        logits = self.hf.cls(h)  # (B, P, V)
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100
        )


@dataclass
class HFModel:
    model: nn.Module  # transformers.BertForMaskedLM / ModernBertForMaskedLM
    run: nn.Module  # the model (BERT, sparse: BertSparseMLM of it), or its compiled wrapper
    opt: torch.optim.Optimizer
    token_types: bool = True  # the model reads token_type_ids (BERT)
    sparse_bert: bool = False  # run(input_ids, token_type_ids, positions, labels) -> loss

    @property
    def attn_implementation(self) -> str | None:
        return getattr(self.model.config, "_attn_implementation", None)


def hf_baseline_config(model_cfg: ModelConfig, sparse_prediction: bool = False) -> Any:
    """The transformers config of ``model_cfg``: the export's config.json (the family's
    ``hf_config``, ``tokendrop.models.families``), with ``sparse_prediction`` where the family's
    class has it."""
    import transformers

    spec = spec_of(model_cfg)
    d = {k: v for k, v in spec.hf_config(model_cfg, None).items() if k != "architectures"}
    model_type = d.pop("model_type")
    if not spec.hf_sparse_prediction:
        return transformers.AutoConfig.for_model(model_type, **d)
    # special ids: the export's when it names them, else none (ModernBertConfig's defaults are
    # ModernBERT's tokenizer's, outside a small benchmark vocabulary)
    ids = {
        k: d.pop(k, None) for k in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")
    }
    return transformers.AutoConfig.for_model(
        model_type, **d, **ids, sparse_prediction=sparse_prediction
    )


def build_hf(
    model_cfg: ModelConfig, ours: nn.Module, cfg: BenchConfig, device: torch.device
) -> HFModel:
    """transformers' MLM class of ``model_cfg``'s family with our initial weights (its decoder tied;
    BERT's pooler: transformers' MLM class has none); BERT's sparse head runs as
    :class:`BertSparseMLM`."""
    import transformers

    spec = spec_of(model_cfg)
    hcfg = hf_baseline_config(model_cfg, cfg.hf_sparse_prediction)
    hcfg._attn_implementation = "sdpa"
    hf = getattr(transformers, spec.hf_architectures["mlm"])(hcfg)
    hf.load_state_dict(spec.to_hf(ours.state_dict()), strict=False)  # same initial weights
    hf.tie_weights()
    hf.to(device).train()
    opt = make_optimizer(hf, cfg)
    sparse_bert = not spec.hf_sparse_prediction and cfg.hf_sparse_prediction
    run = BertSparseMLM(hf) if sparse_bert else hf
    run = compile_model(run, cfg.compile_backend) if cfg.compile else run
    return HFModel(hf, run, opt, spec.token_types, sparse_bert)


def build_hf_patched(
    model_cfg: ModelConfig,
    ours: nn.Module,
    cfg: BenchConfig,
    device: torch.device,
    drop: DropConfig,
) -> HFModel:
    """transformers' MLM model as :func:`build_hf` builds it, patched by ``apply_token_dropping``
    with ``drop`` (random-LTD: its schedule's first step, as ours)."""
    from tokendrop.transformers import apply_token_dropping

    hf = build_hf(
        model_cfg, ours, dataclasses.replace(cfg, compile=False, hf_sparse_prediction=False), device
    )
    opts = {k: getattr(drop, k) for k in ("method", "variant", "rate", "ltd_start_fraction")}
    if drop.per_layer:
        opts["total_steps"] = 1 << 30  # the step timed is the ramp's first, every time
    apply_token_dropping(
        hf.model, special_ids=SPECIAL_IDS, sparse_prediction=cfg.hf_sparse_prediction, **opts
    )
    run = compile_model(hf.model, cfg.compile_backend) if cfg.compile else hf.model
    return HFModel(hf.model, run, hf.opt, hf.token_types, sparse_bert=False)


def hf_step_fn(hf: HFModel, mb: dict[str, Tensor], amp: torch.dtype | None, device: torch.device):
    """One HF training step on ``mb`` as a zero-argument callable."""
    labels = hf_labels(mb)
    params = [q for q in hf.model.parameters() if q.requires_grad]
    inputs = (
        {"input_ids": mb["input_ids"], "token_type_ids": mb["token_type_ids"]}
        if hf.token_types
        else {"input_ids": mb["input_ids"]}
    )

    def fn() -> dict[str, Any]:
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            if hf.sparse_bert:
                loss = hf.run(
                    mb["input_ids"], mb["token_type_ids"], mb["mlm_positions"], mb["mlm_labels"]
                )
            else:
                loss = hf.run(**inputs, labels=labels).loss
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        hf.opt.step()
        hf.opt.zero_grad(set_to_none=True)
        return {"loss": loss.detach(), "grad_norm": gnorm}

    return fn


def hf_flops(
    model_cfg: ModelConfig,
    s: Setting,
    sparse_prediction: bool = False,
    drop: DropConfig | None = None,
) -> int:
    """HF's head runs on all T positions, so its FLOPs use P = T; with ``sparse_prediction``
    (ModernBERT's own switch, BERT's like-for-like head): on the prediction slots, as ours.
    ``drop``: the patched model's dropping."""
    p = None if sparse_prediction else s.seq_len
    return step_flops(model_cfg, s.seq_len, s.batch_size, drop, num_predictions=p).total
