"""Building the timed steps: one model + optimizer per variant, one ``Runner`` per setting.

Our step is the real training step (``tokendrop.train.step.MLMStep``): importance-based
selection, forward with or without dropping, weighted MLM NLL, backward, clipping, AdamW, importance
update. The dense baseline is the ``drop`` model's step with dropping off, so dense and drop share
weights."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from tokendrop.config import Config, ModelConfig, TrainConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import layer_types
from tokendrop.dropping.plan import DropPlan
from tokendrop.lab.bench.hf_baseline import (
    HFModel,
    build_hf,
    build_hf_patched,
    hf_class_name,
    hf_flops,
    hf_step_fn,
)
from tokendrop.lab.bench.optim import compile_model, make_optimizer
from tokendrop.lab.bench.presets import BENCH_VARIANTS, BenchConfig
from tokendrop.lab.bench.records import ModelInfo, StepCensus, StepExtras
from tokendrop.lab.bench.workload import Setting, build_settings, synthetic_batch
from tokendrop.lab.sizes import SHAPE_FIELDS, SHAPE_PRESET
from tokendrop.models.families import build_model
from tokendrop.train.runtime import autocast_dtype
from tokendrop.train.step import MLMStep


def state_bytes(*objs: Any) -> int:
    """Bytes of the distinct storages held by modules (parameters + buffers) and optimizers."""
    seen: set[int] = set()
    total = 0

    def add(t: Tensor) -> None:
        nonlocal total
        if not isinstance(t, Tensor) or t.device.type == "meta":
            return
        st = t.untyped_storage()
        key = st.data_ptr()
        if key in seen or st.nbytes() == 0:
            return
        seen.add(key)
        total += st.nbytes()

    for o in objs:
        if isinstance(o, nn.Module):
            for t in list(o.parameters()) + list(o.buffers()):
                add(t)
        elif isinstance(o, torch.optim.Optimizer):
            for s in o.state.values():
                for t in s.values():
                    add(t)
    return total


@dataclass
class Runner:
    """One setting's step and what was measured on it."""

    setting: Setting
    step: Callable[[], Any]
    state: tuple[Any, ...]  # objects whose tensors are the persistent training state
    flops: int
    kept: int  # rows kept inside the span (T when dense)
    samples: list[float] = field(default_factory=list)  # wall seconds per timed step
    cpu: list[float] = field(default_factory=list)  # process CPU seconds per timed step
    round_median: list[float] = field(default_factory=list)
    round_median_cpu: list[float] = field(default_factory=list)
    extras: StepExtras | None = None
    census: StepCensus | None = None


def build_ours(model_cfg: ModelConfig, drop: DropConfig | None = None) -> nn.Module:
    """Our MLM model of either family (``tokendrop.models.families.build_model``)."""
    return build_model(model_cfg, drop)


@dataclass
class _Ours:
    model: nn.Module  # model.BertForMaskedLM or the ModernBERT-architecture model (same forward)
    run: nn.Module  # the model, or its compiled wrapper (shared by the variant's settings)
    opt: torch.optim.Optimizer


class StepBuilder:
    """Models, optimizers and batches for a BenchConfig; ``runner(setting)`` makes a setting's step.

    Models are built once per variant (dense shares the ``drop`` model) and reused for any batch
    size, which is what the largest-batch search needs.
    """

    def __init__(self, cfg: BenchConfig, device: torch.device):
        self.cfg = cfg
        self.device = device
        self.model_cfg: ModelConfig = cfg.model_config()
        self.amp = autocast_dtype(cfg.precision, device)  # fp32 | bf16
        self._ours: dict[str, _Ours] = {}
        self._init_sd: dict[str, Tensor] | None = None
        self._hf: HFModel | None = None
        self._hf_released: HFModel | None = None
        self._hf_patched: dict[tuple[str, float], HFModel] = {}
        self._batches: dict[tuple[int, int], dict[str, Tensor]] = {}

    def ours(self, variant: str) -> _Ours:
        key = "drop" if variant in ("dense", "drop") else variant
        if key not in self._ours:
            torch.manual_seed(self.cfg.seed)
            # builds the model; each step brings its rate
            drop = BENCH_VARIANTS[key].drop_config(self.cfg.method)
            m = build_ours(self.model_cfg, drop)
            if self._init_sd is None:
                self._init_sd = {k: v.clone() for k, v in m.state_dict().items()}
            else:
                m.load_state_dict(self._init_sd)
            pooler = getattr(getattr(m, "bert", None), "pooler", None)
            if pooler is not None:
                pooler.requires_grad_(False)  # as in pretraining (no NSP)
            m.to(self.device).train()
            run = compile_model(m, self.cfg.compile_backend) if self.cfg.compile else m
            self._ours[key] = _Ours(m, run, make_optimizer(m, self.cfg))
        return self._ours[key]

    def hf(self) -> HFModel:
        if self._hf is None:
            self._hf = build_hf(self.model_cfg, self.ours("dense").model, self.cfg, self.device)
        return self._hf

    def hf_released(self) -> HFModel:
        """transformers' MLM class as released: the same initial weights, its head on all T
        positions."""
        if self._hf_released is None:
            cfg = dataclasses.replace(self.cfg, hf_sparse_prediction=False)
            self._hf_released = build_hf(self.model_cfg, self.ours("dense").model, cfg, self.device)
        return self._hf_released

    def keep_only(self, impl: str) -> None:
        """Free the models of the other implementation (``tokendrop`` or ``hf``): the largest-batch
        search measures one implementation with the device to itself."""
        if impl == "hf":
            self._ours.clear()
        else:
            self._hf = None
        self._hf_released = None
        self._hf_patched.clear()

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def batch(self, batch_size: int, seq_len: int) -> dict[str, Tensor]:
        key = (batch_size, seq_len)
        if key not in self._batches:
            self._batches[key] = synthetic_batch(
                batch_size,
                seq_len,
                self.cfg.vocab_size,
                self.device,
                self.cfg.seed,
                self.cfg.document_tokens,
            )
        return self._batches[key]

    def forget_batch(self, batch_size: int, seq_len: int) -> None:
        self._batches.pop((batch_size, seq_len), None)

    def hf_patched(self, s: Setting) -> HFModel:
        """transformers' model patched for the setting's variant and rate (one per pair, shared by
        its Ts)."""
        key = (s.variant, s.rate)
        if key not in self._hf_patched:
            self._hf_patched[key] = build_hf_patched(
                self.model_cfg,
                self.ours("dense").model,
                self.cfg,
                self.device,
                s.drop_config(self.cfg.method),
            )
        return self._hf_patched[key]

    def runner(self, s: Setting) -> Runner:
        mb = self.batch(s.batch_size, s.seq_len)
        if s.impl == "hf_td":
            from tokendrop.transformers import token_dropping_state

            hf, drop = self.hf_patched(s), s.drop_config(self.cfg.method)
            st = token_dropping_state(hf.model)
            selector = st.selector
            kept = st.plan.kept(s.seq_len)  # the first step's count
            return Runner(
                s,
                hf_step_fn(hf, mb, self.amp, self.device),
                (hf.model, hf.opt) if selector is None else (hf.model, hf.opt, selector),
                hf_flops(self.model_cfg, s, self.cfg.hf_sparse_prediction, drop),
                kept,
            )
        if s.impl == "hf_released":
            hf = self.hf_released()
            return Runner(
                s,
                hf_step_fn(hf, mb, self.amp, self.device),
                (hf.model, hf.opt),
                hf_flops(self.model_cfg, s),
                s.seq_len,
            )
        if s.impl == "hf":
            hf = self.hf()
            return Runner(
                s,
                hf_step_fn(hf, mb, self.amp, self.device),
                (hf.model, hf.opt),
                hf_flops(self.model_cfg, s, self.cfg.hf_sparse_prediction),
                s.seq_len,
            )
        ours = self.ours(s.variant)
        drop = s.drop_config(self.cfg.method)
        cfg = Config(
            model=self.model_cfg, drop=drop or DropConfig(), train=TrainConfig(grad_clip=1.0)
        )
        # every timed step is the run's first: random_ltd's first count, no stage 2
        plan = DropPlan.for_model(
            cfg.drop,
            self.model_cfg,
            s.seq_len,
            SPECIAL_IDS,
            seed=self.cfg.seed,
            total_steps=1,
            device=self.device,
        )
        step = MLMStep(
            ours.model,
            plan,
            ours.opt,
            cfg.train.grad_clip,
            self.amp,
            use_attention_mask=False,
            run_model=ours.run,
        )
        at = plan.at(0, s.seq_len)
        micro = [mb]

        def fn() -> dict[str, Tensor]:
            return step(micro, 1e-4, at)

        flops = plan.nominal_flops(s.seq_len, s.batch_size)["dropping"]
        selector = plan.selector
        state = (ours.model, ours.opt, selector) if selector is not None else (ours.model, ours.opt)
        return Runner(s, fn, state, flops, at.kept)

    def info(self) -> ModelInfo:
        mc = self.model_cfg
        shape = {
            k: getattr(mc, k)
            for k in (
                "num_layers",
                "hidden_size",
                "num_heads",
                "intermediate_size",
                "vocab_size",
                "hidden_dropout",
                "attention_dropout",
            )
        }
        if mc.schema.sliding_windows:
            types = layer_types(mc)
            shape.update(
                family=mc.family,
                local_attention=mc.local_attention,
                global_layers=[i for i, x in enumerate(types) if x == "full_attention"],
                document_attention=mc.document_attention,
            )
        first = next(iter(self._ours.values())).model if self._ours else build_ours(mc)
        custom = any(getattr(self.cfg, k) != SHAPE_PRESET for k in SHAPE_FIELDS)
        name = (
            f"{self.cfg.model} scaled to {mc.num_layers}x{mc.hidden_size}"
            if custom and mc.schema.sliding_windows
            else f"{mc.num_layers}x{mc.hidden_size}"
            if custom
            else self.cfg.model
        )
        return ModelInfo(
            model={"preset": name, **shape},
            num_parameters=sum(t.numel() for t in first.parameters()),
            hf_attn_implementation=self._hf.attn_implementation if self._hf is not None else None,
            hf_model=hf_class_name(mc, self.cfg.hf_sparse_prediction),
        )


def build_runners(cfg: BenchConfig, device: torch.device) -> tuple[list[Runner], ModelInfo]:
    """Every setting of ``cfg`` built (models, optimizers, batches) before anything is timed."""
    b = StepBuilder(cfg, device)
    runners = [b.runner(s) for s in build_settings(cfg)]
    return runners, b.info()
