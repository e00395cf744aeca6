"""Step-time benchmark: our dense BERT vs token dropping vs ``transformers.BertForMaskedLM``.

``run_bench(preset, device=..., overrides=...)`` returns a JSON-ready dict; ``tokendrop bench``
(``cli_bench``) prints it and writes ``OUT.json`` + ``OUT.md``.  What one *step* is: the real
training step, ``tokendrop.train.MLMStep`` -- importance-based selection, forward (with dropping or
dense), per-slot weighted MLM NLL, backward, gradient clipping, AdamW, importance update -- on a
synthetic packed MLM batch of static shape (input_ids (B, T), mlm_positions/labels/weights (B, P),
P = round(0.15 T), no padding, so no attention mask).  The Hugging Face baseline is
``transformers.BertForMaskedLM`` with the same config and initial weights, SDPA attention, the same
dtype/autocast, the same batch, the standard full-sequence MLM loss (``labels`` = -100 at unmasked
positions), clipping and the same AdamW.

Method (DESIGN.md section 6 gives the bound the speedups are compared with):

* every setting is built first (one model + optimizer per variant, shared by its drop rates and
  sequence lengths; the dense baseline is the ``drop`` model's step with dropping off), then warmed
  up, then timed in *rounds*: each round runs every setting ``reps`` times, the order rotating
  from round to round, so slow drifts (other jobs on the machine, clocks) hit all settings alike;
* times are per step (CUDA: synchronised at the step boundary only); we report the median,
  quartiles, min/max, and speedups both as a ratio of medians and as the median of per-round
  *paired* ratios (dense and setting measured seconds apart), with their min/max as the noise;
* ``cpu_util`` = process CPU time / wall time during the timed steps: well below the thread
  count means the process was waiting for a core (a busy machine);
* memory is measured on one extra, untimed step per setting.  CUDA: ``max_memory_allocated``
  minus the memory allocated when the step starts.  CPU: the peak of the running sum of the
  tensor allocator's allocations and frees recorded by ``torch.profiler(profile_memory=True)``
  over the step (exact for tensors, blind to allocator caching), plus -- as a cross-check -- the
  peak RSS growth over the step read from ``/proc/self/status`` (VmHWM, reset through
  ``/proc/self/clear_refs``), which includes malloc's caching and so under-/over-states.  Peak
  training memory = persistent state (parameters + optimizer state + importance vector) + that
  step peak;
* the same extra step is profiled to record which ``scaled_dot_product_attention`` kernel ran
  (flash / memory-efficient / cuDNN / math / CPU flash), and on CUDA one more step runs under
  ``torch.cuda.set_sync_debug_mode("warn")`` to count host-device synchronisations in the step;
* FLOPs are analytic (``tokendrop.flops.step_flops``; the HF baseline's head runs on all T
  positions, so its FLOPs use P = T); MFU = FLOPs / step time / the device's dense bf16 peak
  (a small table by GPU name; none on CPU unless ``peak_tflops`` is set).

Nothing here asserts timings; the tests only check the shape of the results.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from .config import Config, ConfigError, DropConfig, ModelConfig, TrainConfig
from .flops import step_flops
from .importance import TokenSelector
from .model import BertForMaskedLM
from .train import MLMStep, param_groups

SCHEMA_VERSION = 1
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}

# dense bf16 tensor-core peak (FLOP/s) by GPU name; first match wins, so specific names come first
GPU_PEAK_BF16: list[tuple[str, float]] = [
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("A6000", 155e12),
]


def gpu_peak_flops(name: str) -> float | None:
    """Dense bf16 peak FLOP/s for a CUDA device name, or None when the name is not in the table."""
    for key, peak in GPU_PEAK_BF16:
        if key.lower() in name.lower():
            return peak
    return None


# ----------------------------------------------------------------------------------------------
# presets


@dataclass
class BenchPreset:
    """What to measure.  Every field can be overridden with ``--set field=value`` (TOML values)."""

    name: str = "custom"
    device: str = "cpu"
    model: str = "cpu-12x256"  # a MODEL_PRESETS name
    vocab_size: int = 30522  # BERT's WordPiece vocabulary
    seq_lens: list[int] = field(default_factory=lambda: [128, 512])
    tokens_per_step: int = 2048  # B = tokens_per_step // T (unless batch_sizes gives it)
    batch_sizes: list[int] = field(default_factory=list)  # per seq_len, overrides tokens_per_step
    rates: list[float] = field(default_factory=lambda: [0.5])
    variants: list[str] = field(default_factory=lambda: ["drop"])  # drop | pass | avg (avg: rate 0.5 only)
    method: str = "cumulative"  # importance method for drop/pass (the paper's)
    hf: bool = True  # time transformers.BertForMaskedLM side by side
    precision: str = "fp32"  # fp32 | bf16 (autocast, fp32 master weights, both models)
    compile: bool = False  # torch.compile(model, dynamic=False), ours and HF's
    fused_adamw: bool = True  # AdamW(fused=True), ours and HF's (CUDA and, since torch 2.4, CPU)
    threads: int = 0  # torch CPU threads, 0 = torch's default
    warmup: int = 2  # untimed steps per setting before the rounds (compile: more)
    rounds: int = 5
    reps: int = 1  # timed steps per setting per round
    memory: bool = True  # the extra untimed, profiled step per setting
    sync_check: bool = True  # CUDA: count host-device syncs in one step per setting
    peak_tflops: float = 0.0  # override the peak used for MFU (0 = the GPU table; none on CPU)
    seed: int = 0

    def validate(self) -> "BenchPreset":
        from .config import MODEL_PRESETS

        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"bench.device: expected cpu or cuda, got {self.device!r}")
        if self.model not in MODEL_PRESETS:
            raise ConfigError(f"bench.model: unknown model preset {self.model!r}; expected one of {', '.join(MODEL_PRESETS)}")
        if not self.seq_lens or any(t < 8 or t > 512 for t in self.seq_lens):
            raise ConfigError(f"bench.seq_lens: expected lengths in [8, 512], got {self.seq_lens}")
        if self.batch_sizes and len(self.batch_sizes) != len(self.seq_lens):
            raise ConfigError(f"bench.batch_sizes: one batch size per seq_len expected ({len(self.seq_lens)}), got {self.batch_sizes}")
        if any(b <= 0 for b in self.batch_sizes) or self.tokens_per_step <= 0:
            raise ConfigError("bench.batch_sizes/tokens_per_step: expected positive sizes")
        for v in self.variants:
            if v not in ("drop", "pass", "avg"):
                raise ConfigError(f"bench.variants: unknown variant {v!r}; expected drop, pass or avg")
        for r in self.rates:
            if not 0.0 < r < 1.0:
                raise ConfigError(f"bench.rates: expected drop rates in (0, 1), got {r}")
        if self.precision not in ("fp32", "bf16"):
            raise ConfigError(f"bench.precision: expected fp32 or bf16, got {self.precision!r}")
        if self.warmup < 0 or self.rounds < 1 or self.reps < 1:
            raise ConfigError("bench.warmup/rounds/reps: expected warmup >= 0, rounds >= 1, reps >= 1")
        return self

    def batch_size(self, seq_len: int) -> int:
        if self.batch_sizes:
            return self.batch_sizes[self.seq_lens.index(seq_len)]
        return max(1, self.tokens_per_step // seq_len)


_ALL_RATES = [0.25, 0.5, 0.625, 0.75]

PRESETS: dict[str, dict[str, Any]] = {
    # the test suite's: the smallest model and batch, a couple of seconds
    "smoke": dict(device="cpu", model="debug-4x64", vocab_size=512, seq_lens=[32], tokens_per_step=64,
                  rates=[0.5], variants=["drop"], warmup=1, rounds=2, threads=1),
    # issue 2's first benchmark: dense vs 50% drop, 12x256 at T=128/512 on CPU (+ HF)
    "cpu-quick": dict(device="cpu", model="cpu-12x256", seq_lens=[128, 512], tokens_per_step=2048,
                      rates=[0.5], variants=["drop"], warmup=2, rounds=7, threads=1),
    "cpu-full": dict(device="cpu", model="cpu-12x256", seq_lens=[128, 512], tokens_per_step=1024,
                     rates=_ALL_RATES, variants=["drop", "pass", "avg"], warmup=2, rounds=5, threads=1),
    "gpu-quick": dict(device="cuda", model="bert-base", seq_lens=[128, 512], batch_sizes=[128, 32],
                      rates=[0.5], variants=["drop"], precision="bf16", warmup=10, rounds=10, reps=5),
    "gpu-full": dict(device="cuda", model="bert-base", seq_lens=[128, 512], batch_sizes=[128, 32],
                     rates=_ALL_RATES, variants=["drop", "pass", "avg"], precision="bf16", warmup=10,
                     rounds=10, reps=5),
}


def make_preset(name: str = "", device: str = "cpu", overrides: list[str] | tuple[str, ...] = ()) -> BenchPreset:
    """A named preset (default: ``cpu-quick`` on CPU, ``gpu-full`` on CUDA) with ``key=value`` overrides."""
    name = name or ("gpu-full" if device == "cuda" else "cpu-quick")
    if name not in PRESETS:
        raise ConfigError(f"bench --preset: unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    fields = {f.name: f for f in dataclasses.fields(BenchPreset)}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"bench --set {item!r}: expected key=value")
        key, raw = (s.strip() for s in item.split("=", 1))
        if key not in fields:
            raise ConfigError(f"bench --set {key!r}: unknown field; expected one of {', '.join(fields)}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        default = getattr(BenchPreset(), key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"bench --set {key}: expected true or false, got {raw!r}")
        elif isinstance(default, float) and isinstance(value, int):
            value = float(value)
        elif isinstance(default, list):
            value = value if isinstance(value, list) else [value]
        elif not isinstance(value, type(default)):
            raise ConfigError(f"bench --set {key}: expected a {type(default).__name__}, got {raw!r}")
        values[key] = value
    return BenchPreset(name=name, **{k: v for k, v in values.items() if k != "name"}).validate()


# ----------------------------------------------------------------------------------------------
# settings and the synthetic batch


@dataclass
class Setting:
    impl: str  # tokendrop | hf
    variant: str  # dense | drop | pass | avg
    rate: float
    seq_len: int
    batch_size: int

    @property
    def name(self) -> str:
        if self.impl == "hf":
            return f"T{self.seq_len}/hf"
        if self.variant == "dense":
            return f"T{self.seq_len}/dense"
        return f"T{self.seq_len}/{self.variant}-{self.rate:g}"

    def drop_config(self, method: str) -> DropConfig | None:
        if self.variant == "dense" or self.impl == "hf":
            return None
        if self.variant == "avg":
            return DropConfig(method="none", variant="avg", rate=0.5)
        return DropConfig(method=method, variant=self.variant, rate=self.rate)


def build_settings(p: BenchPreset) -> list[Setting]:
    out = []
    for t in p.seq_lens:
        b = p.batch_size(t)
        out.append(Setting("tokendrop", "dense", 0.0, t, b))
        for v in p.variants:
            if v == "avg":
                out.append(Setting("tokendrop", "avg", 0.5, t, b))
                continue
            for r in p.rates:
                out.append(Setting("tokendrop", v, r, t, b))
        if p.hf:
            out.append(Setting("hf", "dense", 0.0, t, b))
    return out


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, device: torch.device, seed: int = 0) -> dict[str, Tensor]:
    """A packed MLM micro-batch of static shape, as ``tokendrop.data.MLMLoader`` yields it.

    [CLS] at 0, a [SEP] every 64 tokens and at the end, random ids elsewhere; P = round(0.15 T)
    prediction slots at distinct non-special positions, their inputs replaced by [MASK].
    """
    g = torch.Generator().manual_seed(seed + 1000 * seq_len + batch_size)
    ids = torch.randint(len(SPECIAL_IDS), vocab_size, (batch_size, seq_len), generator=g)
    ids[:, 0] = SPECIAL_IDS["cls"]
    ids[:, 63::64] = SPECIAL_IDS["sep"]
    ids[:, -1] = SPECIAL_IDS["sep"]
    p = max(1, round(0.15 * seq_len))
    special = (ids == SPECIAL_IDS["cls"]) | (ids == SPECIAL_IDS["sep"])
    noise = torch.rand(batch_size, seq_len, generator=g).masked_fill(special, 2.0)
    pos = noise.argsort(dim=1)[:, :p].sort(dim=1).values  # (B, P)
    labels = ids.gather(1, pos)
    ids = ids.scatter(1, pos, SPECIAL_IDS["mask"])
    mb = {
        "input_ids": ids,
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long),
        "mlm_positions": pos,
        "mlm_labels": labels,
        "mlm_weights": torch.ones(batch_size, p),
    }
    return {k: v.to(device) for k, v in mb.items()}


def hf_labels(mb: dict[str, Tensor]) -> Tensor:
    """(B, T) labels for transformers: the original id at prediction slots, -100 elsewhere."""
    lab = torch.full_like(mb["input_ids"], -100)
    return lab.scatter(1, mb["mlm_positions"], mb["mlm_labels"])


# ----------------------------------------------------------------------------------------------
# building the steps


def _optimizer(model: nn.Module, p: BenchPreset, device: torch.device) -> torch.optim.Optimizer:
    kw: dict[str, Any] = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-6}
    if p.fused_adamw:
        kw["fused"] = True
    return torch.optim.AdamW(param_groups(model, 0.01), **kw)


def _compile(model: nn.Module) -> nn.Module:
    import torch._dynamo

    cfg = torch._dynamo.config
    if hasattr(cfg, "recompile_limit"):
        cfg.recompile_limit = max(cfg.recompile_limit, 64)
    else:  # older torch
        cfg.cache_size_limit = max(cfg.cache_size_limit, 64)
    return torch.compile(model, dynamic=False)


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
    setting: Setting
    step: Callable[[], Any]
    state: tuple[Any, ...]  # objects whose tensors are the persistent training state
    flops: int
    kept: int  # rows kept inside the span (T when dense)
    samples: list[float] = field(default_factory=list)  # wall seconds per timed step
    cpu: list[float] = field(default_factory=list)  # process CPU seconds per timed step
    round_median: list[float] = field(default_factory=list)
    round_median_cpu: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def build_runners(p: BenchPreset, device: torch.device) -> tuple[list[Runner], dict[str, Any]]:
    model_cfg = ModelConfig(preset=p.model, vocab_size=p.vocab_size, max_position_embeddings=max(512, max(p.seq_lens)))
    amp = torch.bfloat16 if p.precision == "bf16" else None
    settings = build_settings(p)
    models: dict[str, tuple[BertForMaskedLM, nn.Module, torch.optim.Optimizer]] = {}
    init_sd: dict[str, Tensor] | None = None

    def our_model(variant: str):
        nonlocal init_sd
        key = "drop" if variant in ("dense", "drop") else variant
        if key not in models:
            torch.manual_seed(p.seed)
            drop = DropConfig(method="none", variant="avg", rate=0.5) if key == "avg" else DropConfig(method=p.method, variant=key)
            m = BertForMaskedLM(model_cfg, drop)
            if init_sd is None:
                init_sd = {k: v.clone() for k, v in m.state_dict().items()}
            else:
                m.load_state_dict(init_sd)
            m.bert.pooler.requires_grad_(False)  # as in pretraining (no NSP)
            m.to(device).train()
            run = _compile(m) if p.compile else m
            models[key] = (m, run, _optimizer(m, p, device))
        return models[key]

    hf_model = None
    batches: dict[int, dict[str, Tensor]] = {t: synthetic_batch(p.batch_size(t), t, p.vocab_size, device, p.seed) for t in p.seq_lens}
    runners = []
    for s in settings:
        mb = batches[s.seq_len]
        if s.impl == "hf":
            if hf_model is None:
                hf_model = _build_hf(model_cfg, our_model("dense")[0], p, device)
            runners.append(_hf_runner(s, hf_model, mb, p, device, amp, model_cfg))
            continue
        model, run, opt = our_model(s.variant)
        drop = s.drop_config(p.method)
        cfg = Config(model=model_cfg, drop=drop or DropConfig(), train=TrainConfig(grad_clip=1.0))
        selector = None
        if drop is not None and drop.variant != "avg":
            selector = TokenSelector(drop, p.vocab_size, SPECIAL_IDS, s.seq_len, seed=p.seed).to(device)
        step = MLMStep(model, selector, opt, cfg, amp, use_attention_mask=False)
        step.run_model = run
        dropping = drop is not None
        micro = [mb]

        def fn(step=step, micro=micro, dropping=dropping):
            return step(micro, 1e-4, dropping)

        kept = drop.num_kept(s.seq_len) if drop is not None else s.seq_len
        flops = step_flops(model_cfg, s.seq_len, s.batch_size, drop).total
        runners.append(Runner(s, fn, (model, opt, selector) if selector is not None else (model, opt), flops, kept))
    info = {
        "model": {"preset": p.model, **{k: getattr(model_cfg, k) for k in ("num_layers", "hidden_size", "num_heads",
                                                                            "intermediate_size", "vocab_size",
                                                                            "hidden_dropout", "attention_dropout")}},
        "num_parameters": sum(t.numel() for t in next(iter(models.values()))[0].parameters()),
        "hf_attn_implementation": getattr(hf_model.config, "_attn_implementation", None) if hf_model is not None else None,
    }
    return runners, info


def _build_hf(model_cfg: ModelConfig, ours: BertForMaskedLM, p: BenchPreset, device: torch.device):
    import transformers

    from .hf import hf_config_dict, to_hf

    d = {k: v for k, v in hf_config_dict(model_cfg).items() if k != "architectures"}
    cfg = transformers.BertConfig(**d)
    cfg._attn_implementation = "sdpa"
    hf = transformers.BertForMaskedLM(cfg)
    hf.load_state_dict(to_hf(ours.state_dict()), strict=False)  # same initial weights (pooler: HF has none)
    hf.tie_weights()
    hf.to(device).train()
    opt = _optimizer(hf, p, device)
    run = _compile(hf) if p.compile else hf
    return _HF(hf, run, opt)


@dataclass
class _HF:
    model: nn.Module
    run: nn.Module
    opt: torch.optim.Optimizer

    @property
    def config(self):
        return self.model.config


def _hf_runner(s: Setting, hf: _HF, mb: dict[str, Tensor], p: BenchPreset, device: torch.device,
               amp: torch.dtype | None, model_cfg: ModelConfig) -> Runner:
    labels = hf_labels(mb)
    params = [q for q in hf.model.parameters() if q.requires_grad]

    def fn():
        # packed batch, no padding: no attention_mask (as our step), so SDPA may pick its fastest kernel
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = hf.run(input_ids=mb["input_ids"], token_type_ids=mb["token_type_ids"], labels=labels)
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        hf.opt.step()
        hf.opt.zero_grad(set_to_none=True)
        return {"loss": out.loss.detach(), "grad_norm": gnorm}

    flops = step_flops(model_cfg, s.seq_len, s.batch_size, None, num_predictions=s.seq_len).total
    return Runner(s, fn, (hf.model, hf.opt), flops, s.seq_len)


# ----------------------------------------------------------------------------------------------
# measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(r: Runner, device: torch.device) -> None:
    _sync(device)
    c0, t0 = time.process_time(), time.perf_counter()
    r.step()
    _sync(device)
    t1, c1 = time.perf_counter(), time.process_time()
    r.samples.append(t1 - t0)
    r.cpu.append(c1 - c0)


_SDPA_KERNELS = [  # (substring of the aten op name, backend)
    ("_scaled_dot_product_flash_attention_for_cpu", "cpu-flash"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention_forward", "flash"),
    ("_scaled_dot_product_efficient_attention", "mem-efficient"),
    ("_efficient_attention_forward", "mem-efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_attention_math", "math"),
]


def sdpa_backends(names: set[str]) -> list[str]:
    """Which SDPA backends ran, from the op names of a profiled step (backward ops excluded)."""
    found = []
    for name in sorted(names):
        if "backward" in name:
            continue
        for key, backend in _SDPA_KERNELS:
            if key in name:
                if backend not in found:
                    found.append(backend)
                break
    return found


_CATEGORIES = [  # (category, op/kernel-name regex, case-insensitive), first match wins; on self time
    ("matmul", r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$|gemm|cublas|cutlass|nvjet|xmma|wgmma"),
    ("attention kernel", r"flash|efficient_attention|cudnn_attention|fmha|_scaled_dot_product"),
    ("loss", r"nll_loss|log_softmax|logsoftmax|cross_entropy"),
    ("softmax", r"softmax"),
    ("dropout / RNG", r"bernoulli|dropout|philox|rand"),
    ("layernorm", r"layer_norm|layernorm"),
    ("gelu", r"gelu"),
    ("gather / scatter / index", r"index|gather|scatter|embedding|take"),
    ("sort / top-k (selector)", r"sort|topk"),
    ("optimizer kernels", r"adam|_foreach|multi_tensor_apply|lerp|addcdiv|addcmul|sqrt"),
    ("copies / layout", r"copy|contiguous|clone|cat$|catarray|transpose|permute|view|reshape|expand|as_strided"),
    ("reductions / norms", r"sum|norm|mean|amax|argmax|all$|any$|reduce_kernel"),
    ("elementwise", r"aten::(add|mul|div|sub|where|fill|zero|neg|isneginf|clamp|pow|exp|tanh|masked_fill|ones|zeros|full)"
                    r"|elementwise_kernel"),
]


def _kineto_events(prof) -> list[Any]:
    """The raw profiler events (fast: ``key_averages()`` costs seconds of Python per step)."""
    try:
        return list(prof.profiler.kineto_results.events())
    except Exception:  # pragma: no cover - profiler internals moved
        return []


def _on(e: Any, kind: str) -> bool:
    return str(e.device_type()).upper().endswith(kind)


def self_times(events: list[Any], device_type: str) -> list[tuple[str, int]]:
    """(name, self ns) per event: CPU ops (duration minus direct children, per thread) or CUDA kernels."""
    if device_type == "cuda":
        return [(e.name(), e.duration_ns()) for e in events if _on(e, "CUDA") and e.name() != "[memory]"]
    by_thread: dict[int, list[Any]] = {}
    for e in events:
        if e.name() != "[memory]" and _on(e, "CPU"):
            by_thread.setdefault(e.start_thread_id(), []).append(e)
    out: list[tuple[str, int]] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_ns(), -e.end_ns()))
        selfs = [e.duration_ns() for e in evs]
        stack: list[tuple[int, int]] = []  # (end_ns, index) of the open ancestors
        for i, e in enumerate(evs):
            while stack and stack[-1][0] <= e.start_ns():
                stack.pop()
            if stack:
                selfs[stack[-1][1]] -= e.duration_ns()
            stack.append((e.end_ns(), i))
        out += [(e.name(), s) for e, s in zip(evs, selfs)]
    return out


def profile_breakdown(events: list[Any], device_type: str) -> dict[str, float]:
    """Self time (seconds) of a profiled step grouped into coarse categories (CUDA: GPU kernel time)."""
    out: dict[str, float] = {}
    for name, ns in self_times(events, device_type):
        if ns <= 0 or name.startswith(("Optimizer.", "autograd::", "ProfilerStep", "[")):
            continue
        cat = "other"
        for label, rx in _CATEGORIES:
            if re.search(rx, name, re.IGNORECASE):
                cat = label
                break
        out[cat] = out.get(cat, 0.0) + ns / 1e9
    total = sum(out.values())
    out = dict(sorted(out.items(), key=lambda kv: -kv[1]))
    out["total"] = total
    opt = [e.duration_ns() for e in events if e.name().startswith("Optimizer.step") and _on(e, "CPU")]
    if opt:
        out["optimizer step (inclusive, host)"] = sum(opt) / 1e9
    return out


def _cpu_peak_from_events(events: list[Any]) -> int | None:
    mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and _on(e, "CPU"))
    if not mem:
        return None
    live = peak = 0
    for _, nb in mem:
        live += nb
        peak = max(peak, live)
    return peak


def _read_status(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _rss_peak_delta(fn: Callable[[], Any]) -> int | None:
    """Peak RSS growth while ``fn`` runs (Linux: VmHWM reset via /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        fn()
        return None
    before = _read_status("VmRSS")
    fn()
    peak = _read_status("VmHWM")
    return None if before is None or peak is None else max(0, peak - before)


def measure_extra(r: Runner, device: torch.device, p: BenchPreset, profile_dir: Path | None) -> None:
    """The untimed steps: memory, SDPA backend, profile breakdown, host syncs (CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    st = state_bytes(*r.state)
    mem: dict[str, Any] = {"state_bytes": st}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        r.step()
        torch.cuda.synchronize(device)
        mem["peak_step_bytes"] = torch.cuda.max_memory_allocated(device) - base
        mem["method"] = "cuda max_memory_allocated - allocated at step start"
        with profile(activities=acts) as prof:
            r.step()
            torch.cuda.synchronize(device)
    else:
        holder: dict[str, Any] = {}

        def profiled():
            with profile(activities=acts, profile_memory=True) as prof_:
                r.step()
            holder["prof"] = prof_

        mem["rss_peak_delta_bytes"] = _rss_peak_delta(profiled)
        prof = holder["prof"]
        mem["method"] = "torch.profiler memory events (tensor allocator) peak over the step; rss: /proc VmHWM delta"
    events = _kineto_events(prof)
    if device.type == "cpu":
        mem["peak_step_bytes"] = _cpu_peak_from_events(events)
    if mem.get("peak_step_bytes") is not None:
        mem["peak_bytes"] = st + mem["peak_step_bytes"]
    r.extra["memory"] = mem
    names = {e.name() for e in events}
    r.extra["sdpa_ops"] = sorted(n for n in names if "scaled_dot_product" in n or "flash" in n.lower()
                                 or "efficient_attention" in n or "fmha" in n.lower())
    r.extra["sdpa_backend"] = sdpa_backends(names)
    r.extra["profile"] = profile_breakdown(events, device.type)
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        (profile_dir / (r.setting.name.replace("/", "_") + ".txt")).write_text(
            f"# {r.setting.name}: one profiled step (untimed; profiler overhead included)\n"
            + json.dumps(r.extra["profile"], indent=1) + "\n\n" + prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")
    if device.type == "cuda" and p.sync_check:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                r.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize(device)
        msgs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
        r.extra["host_syncs"] = {"count": len(msgs), "examples": sorted(set(msgs))[:5]}


def _stats(xs: list[float]) -> dict[str, Any]:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q25": q[0], "q75": q[2], "min": xs[0], "max": xs[-1], "n": len(xs)}


# ----------------------------------------------------------------------------------------------
# environment


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def machine_slug(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
    else:
        name = "cpu " + cpu_model()
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug + (f"-{os.cpu_count()}c" if device != "cuda" else "")


def environment(device: torch.device, p: BenchPreset) -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg_start": _loadavg(),
        "device": device.type,
        "machine": machine_slug(device.type),
    }
    if device.type == "cuda":
        env["gpu_name"] = torch.cuda.get_device_name(device)
        env["gpu_count"] = torch.cuda.device_count()
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        env["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    return env


# ----------------------------------------------------------------------------------------------
# the run


def run_bench(preset: BenchPreset | str = "", device: str | None = None, overrides: list[str] | tuple[str, ...] = (),
              profile_dir: str | os.PathLike | None = None, log: Callable[[str], None] | None = print,
              command: str | None = None) -> dict[str, Any]:
    """Run a benchmark preset and return the results (JSON-ready)."""
    if isinstance(preset, str):
        preset = make_preset(preset, device or "cpu", overrides)
    elif overrides:
        raise ValueError("overrides apply to a preset name, not a BenchPreset")
    p = preset
    if device is not None and device != p.device:
        p = dataclasses.replace(p, device=device).validate()
    if p.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("bench --device cuda: CUDA is not available on this machine")
    dev = torch.device("cuda", torch.cuda.current_device()) if p.device == "cuda" else torch.device("cpu")
    threads_before = torch.get_num_threads()
    tf32_before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    if p.threads:
        torch.set_num_threads(p.threads)
    try:
        return _run(p, dev, profile_dir, log, command)
    finally:  # leave the process as we found it (the test suite runs this in-process)
        torch.set_num_threads(threads_before)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32_before


def _run(p: BenchPreset, dev: torch.device, profile_dir, log, command) -> dict[str, Any]:
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    say = log or (lambda s: None)
    env = environment(dev, p)
    t_start = time.perf_counter()
    runners, info = build_runners(p, dev)
    say(f"bench {p.name}: {len(runners)} settings on {env.get('gpu_name') or env['cpu_model']} "
        f"({torch.get_num_threads()} threads), {p.model}, {p.precision}, warm-up {p.warmup}, "
        f"{p.rounds} rounds x {p.reps}")

    for r in runners:  # warm-up (and compilation)
        for _ in range(p.warmup):
            r.step()
        _sync(dev)
    for k in range(p.rounds):
        order = runners[k % len(runners):] + runners[: k % len(runners)]
        if k % 2:
            order = order[::-1]
        for r in order:
            before = len(r.samples)
            for _ in range(p.reps):
                _timed(r, dev)
            r.round_median.append(statistics.median(r.samples[before:]))
            r.round_median_cpu.append(statistics.median(r.cpu[before:]))
        say(f"  round {k + 1}/{p.rounds} done ({time.perf_counter() - t_start:.0f}s)")
    pdir = Path(profile_dir) if profile_dir else None
    if p.memory:
        gc.collect()  # once: with transformers imported a collection costs ~0.5 s
        for r in runners:
            measure_extra(r, dev, p, pdir)
    env["loadavg_end"] = _loadavg()
    res = summarise(p, runners, info, env, dev)
    res["wall_s"] = time.perf_counter() - t_start
    res["command"] = command or f"tokendrop bench --device {p.device} --preset {p.name}"
    return res


def _paired(num: list[float], den: list[float]) -> list[float]:
    return [a / b for a, b in zip(num, den) if b > 0]


def summarise(p: BenchPreset, runners: list[Runner], info: dict[str, Any], env: dict[str, Any],
              dev: torch.device) -> dict[str, Any]:
    peak = p.peak_tflops * 1e12 if p.peak_tflops else (gpu_peak_flops(env.get("gpu_name", "")) if dev.type == "cuda" else None)
    if dev.type == "cuda" and p.precision != "bf16" and not p.peak_tflops:
        peak = None  # the table is bf16
    cpu_clock = dev.type == "cpu"  # CPU time is meaningful only when the step runs on the host
    settings = []
    by_name = {r.setting.name: r for r in runners}
    for r in runners:
        s = r.setting
        t = _stats(r.samples)
        c = _stats(r.cpu)
        tok = s.batch_size * s.seq_len
        row: dict[str, Any] = {
            "name": s.name, "impl": s.impl, "variant": s.variant, "rate": s.rate, "seq_len": s.seq_len,
            "batch_size": s.batch_size, "kept": r.kept, "tokens_per_step": tok, "flops_per_step": r.flops,
            "time_s": t, "samples_s": r.samples, "round_median_s": r.round_median,
            "tokens_per_s": tok / t["median"], "achieved_tflops": r.flops / t["median"] / 1e12,
            "mfu": (r.flops / t["median"] / peak) if peak else None,
            "rel_iqr": (t["q75"] - t["q25"]) / t["median"],
            "cpu_util": statistics.median(_paired(r.cpu, r.samples)),
        }
        if cpu_clock and c["median"] > 0:
            row.update({"cpu_time_s": c, "cpu_samples_s": r.cpu, "round_median_cpu_s": r.round_median_cpu,
                        "tokens_per_cpu_s": tok / c["median"], "rel_iqr_cpu": (c["q75"] - c["q25"]) / c["median"]})
        row.update(r.extra)
        settings.append(row)
    rows = {row["name"]: row for row in settings}

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    ratios, vs_hf, memory = [], [], []
    for t in p.seq_lens:
        dense = by_name[f"T{t}/dense"]
        d_row = rows[f"T{t}/dense"]
        for r in runners:
            s = r.setting
            if s.seq_len != t or s.impl != "tokendrop" or s.variant == "dense":
                continue
            paired = _paired(dense.round_median, r.round_median)
            bound = d_row["flops_per_step"] / rows[s.name]["flops_per_step"]
            entry = {
                "seq_len": t, "setting": s.name, "variant": s.variant, "rate": s.rate,
                "speedup": med(paired), "speedup_paired_min": min(paired), "speedup_paired_max": max(paired),
                "speedup_of_medians": d_row["time_s"]["median"] / rows[s.name]["time_s"]["median"],
                "flop_bound": bound, "fraction_of_bound": med(paired) / bound,
            }
            if cpu_clock and "cpu_time_s" in d_row and "cpu_time_s" in rows[s.name]:
                pc = _paired(dense.round_median_cpu, r.round_median_cpu)
                entry.update({"speedup_cpu": med(pc), "speedup_cpu_paired_min": min(pc), "speedup_cpu_paired_max": max(pc),
                              "fraction_of_bound_cpu": med(pc) / bound})
            ratios.append(entry)
            dm, sm = d_row.get("memory", {}), rows[s.name].get("memory", {})
            if dm.get("peak_bytes") and sm.get("peak_bytes"):
                memory.append({"seq_len": t, "setting": s.name, "peak_ratio": sm["peak_bytes"] / dm["peak_bytes"],
                               "step_peak_ratio": sm["peak_step_bytes"] / max(1, dm["peak_step_bytes"])})
        if f"T{t}/hf" in by_name:
            hf = by_name[f"T{t}/hf"]
            paired = _paired(hf.round_median, dense.round_median)
            h_row = rows[f"T{t}/hf"]
            entry = {"seq_len": t, "dense_tokens_per_s": d_row["tokens_per_s"], "hf_tokens_per_s": h_row["tokens_per_s"],
                     "ratio": med(paired), "ratio_paired_min": min(paired), "ratio_paired_max": max(paired),
                     "ratio_of_medians": d_row["tokens_per_s"] / h_row["tokens_per_s"]}
            if cpu_clock and "cpu_time_s" in d_row and "cpu_time_s" in h_row:
                pc = _paired(hf.round_median_cpu, dense.round_median_cpu)
                entry.update({"ratio_cpu": med(pc), "ratio_cpu_paired_min": min(pc), "ratio_cpu_paired_max": max(pc)})
            hm = h_row.get("memory", {})
            if hm.get("peak_bytes") and d_row.get("memory", {}).get("peak_bytes"):
                entry["memory_ratio_dense_over_hf"] = d_row["memory"]["peak_bytes"] / hm["peak_bytes"]
            vs_hf.append(entry)

    headline: dict[str, Any] = {}
    for x in ratios:
        if x["variant"] == "drop" and x["rate"] == 0.5:
            k = f"T{x['seq_len']}_drop50"
            headline[f"{k}_speedup"] = x["speedup"]
            if "speedup_cpu" in x:
                headline[f"{k}_speedup_cpu_time"] = x["speedup_cpu"]
            headline[f"{k}_flop_bound"] = x["flop_bound"]
            headline[f"{k}_fraction_of_bound"] = x["fraction_of_bound"]
            if "fraction_of_bound_cpu" in x:
                headline[f"{k}_fraction_of_bound_cpu_time"] = x["fraction_of_bound_cpu"]
    for x in vs_hf:
        headline[f"T{x['seq_len']}_dense_over_hf_tokens_per_s"] = x["ratio"]
        if "ratio_cpu" in x:
            headline[f"T{x['seq_len']}_dense_over_hf_cpu_time"] = x["ratio_cpu"]
    for x in memory:
        if x["setting"].endswith("/drop-0.5"):
            headline[f"T{x['seq_len']}_drop50_memory_ratio"] = x["peak_ratio"]
    noise = {
        "median_rel_iqr": statistics.median(row["rel_iqr"] for row in settings),
        "max_rel_iqr": max(row["rel_iqr"] for row in settings),
        "median_rel_iqr_cpu": med([row["rel_iqr_cpu"] for row in settings if "rel_iqr_cpu" in row]),
        "median_cpu_util": statistics.median(row["cpu_util"] for row in settings),
        "loadavg_start": env.get("loadavg_start"), "loadavg_end": env.get("loadavg_end"),
    }
    return {
        "schema": SCHEMA_VERSION,
        "preset": p.name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "env": env,
        "config": dataclasses.asdict(p),
        "info": info,
        "peak_flops": peak,
        "settings": settings,
        "speedups": ratios,
        "vs_hf": vs_hf,
        "memory": memory,
        "headline": headline,
        "noise": noise,
    }


# ----------------------------------------------------------------------------------------------
# reporting


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _mib(x: Any) -> str:
    return "-" if x is None else f"{x / 2**20:.0f}"


def _ms(x: dict[str, Any] | None, key: str = "median") -> str:
    return "-" if not x else f"{x[key] * 1e3:.0f}"


def format_text(res: dict[str, Any]) -> str:
    env = res["env"]
    lines = [f"{res['preset']} on {env.get('gpu_name') or env['cpu_model']} ({env['torch_threads']} threads), "
             f"torch {env['torch']}, transformers {env['transformers']}, {res['config']['precision']}",
             f"{'setting':<16} {'B':>4} {'M':>4} {'wall ms':>9} {'IQR %':>6} {'cpu ms':>8} {'tok/s':>9} {'TFLOP/s':>8} "
             f"{'MFU':>6} {'util':>5} {'peak MiB':>9} {'sdpa':>10}"]
    for row in res["settings"]:
        mem = row.get("memory", {})
        lines.append(
            f"{row['name']:<16} {row['batch_size']:>4} {row['kept']:>4} {_ms(row['time_s']):>9} "
            f"{100 * row['rel_iqr']:>6.1f} {_ms(row.get('cpu_time_s')):>8} {row['tokens_per_s']:>9.0f} "
            f"{row['achieved_tflops']:>8.3f} {_pct(row['mfu']):>6} {row['cpu_util']:>5.2f} "
            f"{_mib(mem.get('peak_bytes')):>9} {','.join(row.get('sdpa_backend', [])) or '-':>10}")
    lines += ["", f"{'speedup over our dense':<22} {'wall':>7} {'(paired min-max)':>16} {'cpu-time':>9} "
                  f"{'FLOP bound':>11} {'achieved wall / cpu':>20}"]
    for x in res["speedups"]:
        cpu = f"{x['speedup_cpu']:.3f}x" if "speedup_cpu" in x else "-"
        fc = _pct(x.get("fraction_of_bound_cpu"))
        lines.append(f"{x['setting']:<22} {x['speedup']:>6.3f}x {x['speedup_paired_min']:>7.3f}-{x['speedup_paired_max']:<7.3f}"
                     f" {cpu:>9} {x['flop_bound']:>10.3f}x {_pct(x['fraction_of_bound']):>9} / {fc:<8}")
    if res["vs_hf"]:
        lines += ["", "our dense vs transformers.BertForMaskedLM: tokens/s ratio (wall, paired min-max; cpu-time), peak memory"]
        for x in res["vs_hf"]:
            memr = x.get("memory_ratio_dense_over_hf")
            lines.append(f"  T={x['seq_len']}: {x['dense_tokens_per_s']:.0f} vs {x['hf_tokens_per_s']:.0f} tok/s -> "
                         f"{x['ratio']:.2f}x ({x['ratio_paired_min']:.2f}-{x['ratio_paired_max']:.2f})"
                         + (f"; cpu-time {x['ratio_cpu']:.2f}x" if "ratio_cpu" in x else "")
                         + (f"; memory ours/HF {memr:.2f}" if memr else ""))
    if res["memory"]:
        lines += ["", "peak training memory, setting / dense: state + step peak (step peak only)"]
        for x in res["memory"]:
            lines.append(f"  {x['setting']:<20} {x['peak_ratio']:.3f}  ({x['step_peak_ratio']:.3f})")
    n = res["noise"]
    lines += ["", f"noise: wall IQR/median median {100 * n['median_rel_iqr']:.1f}% (max {100 * n['max_rel_iqr']:.1f}%)"
                  + (f", cpu-time IQR/median median {100 * n['median_rel_iqr_cpu']:.1f}%" if n.get("median_rel_iqr_cpu") is not None else "")
                  + f"; median cpu_util {n['median_cpu_util']:.2f}; load average {n['loadavg_start']} -> {n['loadavg_end']}"]
    return "\n".join(lines)


def format_markdown(res: dict[str, Any]) -> str:
    env, cfg, info, n = res["env"], res["config"], res["info"], res["noise"]
    m = info["model"]
    cpu_clock = any("cpu_time_s" in row for row in res["settings"])
    out = [f"# tokendrop bench: `{res['preset']}` on {env.get('gpu_name') or env['cpu_model']}", ""]
    out += [
        f"- command: `{res['command']}`",
        f"- date: {res['date']}; wall time {res.get('wall_s', 0):.0f} s",
        f"- machine: `{env['machine']}`; CPU: {env['cpu_model']} ({env['cpu_count']} cores), torch threads "
        f"{env['torch_threads']}, OMP_WAIT_POLICY={env.get('OMP_WAIT_POLICY')}"
        + (f"; GPU: {env['gpu_name']} (CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')})" if env.get("gpu_name") else ""),
        f"- torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}, {env['platform']}",
        f"- model: {m['preset']} ({m['num_layers']} layers, d={m['hidden_size']}, {m['num_heads']} heads, "
        f"V={m['vocab_size']}, dropout {m['hidden_dropout']}/{m['attention_dropout']}, {info['num_parameters'] / 1e6:.1f}M params); "
        f"{cfg['precision']}; compile={cfg['compile']}; AdamW fused={cfg['fused_adamw']}; drop method {cfg['method']}",
        f"- protocol: warm-up {cfg['warmup']} steps per setting, then {cfg['rounds']} interleaved rounds x {cfg['reps']} "
        f"step(s); speedups = median of per-round paired ratios (min-max over rounds in brackets)",
        f"- noise: load average {n['loadavg_start']} -> {n['loadavg_end']}; wall IQR/median: median "
        f"{100 * n['median_rel_iqr']:.1f}% (max {100 * n['max_rel_iqr']:.1f}%)"
        + (f"; CPU-time IQR/median: median {100 * n['median_rel_iqr_cpu']:.1f}%" if n.get("median_rel_iqr_cpu") is not None else "")
        + f"; median cpu_util (CPU s / wall s) {n['median_cpu_util']:.2f} with {env['torch_threads']} thread(s)",
    ]
    if cpu_clock:
        out.append("- `cpu-time` columns: process CPU seconds per step; with 1 thread on a shared machine this is the "
                   "step's compute time without the time spent waiting for a core (wall = cpu / cpu_util)")
    out += ["", "## Speedup over our dense step vs the FLOP bound", "",
            "| setting | wall speedup | paired min-max | of medians |" + (" CPU-time speedup | paired min-max |" if cpu_clock else "")
            + " FLOP bound | achieved (wall) |" + (" achieved (CPU time) |" if cpu_clock else ""),
            "|---|---:|---:|---:|" + ("---:|---:|" if cpu_clock else "") + "---:|---:|" + ("---:|" if cpu_clock else "")]
    for x in res["speedups"]:
        line = (f"| {x['setting']} | {x['speedup']:.3f}x | {x['speedup_paired_min']:.3f}-{x['speedup_paired_max']:.3f} | "
                f"{x['speedup_of_medians']:.3f}x |")
        if cpu_clock:
            line += (f" {x['speedup_cpu']:.3f}x | {x['speedup_cpu_paired_min']:.3f}-{x['speedup_cpu_paired_max']:.3f} |"
                     if "speedup_cpu" in x else " - | - |")
        line += f" {x['flop_bound']:.3f}x | {_pct(x['fraction_of_bound'])} |"
        if cpu_clock:
            line += f" {_pct(x.get('fraction_of_bound_cpu'))} |"
        out.append(line)
    if res["vs_hf"]:
        out += ["", "## Our dense step vs `transformers.BertForMaskedLM` (SDPA, same config, batch, dtype, AdamW)", "",
                "| T | ours tok/s | HF tok/s | ratio (wall) | paired min-max |" + (" ratio (CPU time) |" if cpu_clock else "")
                + " peak memory ours/HF |",
                "|---:|---:|---:|---:|---:|" + ("---:|" if cpu_clock else "") + "---:|"]
        for x in res["vs_hf"]:
            memr = x.get("memory_ratio_dense_over_hf")
            line = (f"| {x['seq_len']} | {x['dense_tokens_per_s']:.0f} | {x['hf_tokens_per_s']:.0f} | {x['ratio']:.2f}x | "
                    f"{x['ratio_paired_min']:.2f}-{x['ratio_paired_max']:.2f} |")
            if cpu_clock:
                line += f" {x['ratio_cpu']:.2f}x |" if "ratio_cpu" in x else " - |"
            out.append(line + f" {'-' if not memr else f'{memr:.2f}'} |")
    if res["memory"]:
        out += ["", "## Peak training memory, setting / dense", "",
                "| setting | peak (state + step) | step peak only |", "|---|---:|---:|"]
        for x in res["memory"]:
            out.append(f"| {x['setting']} | {x['peak_ratio']:.3f} | {x['step_peak_ratio']:.3f} |")
    out += ["", "## All settings", "",
            "| setting | B | M | wall ms median | q25-q75 | min-max | CPU ms median | tok/s | TFLOP/s | MFU | cpu_util "
            "| peak MiB | step peak MiB | RSS delta MiB | SDPA |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in res["settings"]:
        t = row["time_s"]
        mem = row.get("memory", {})
        out.append(
            f"| {row['name']} | {row['batch_size']} | {row['kept']} | {_ms(t)} | {_ms(t, 'q25')}-{_ms(t, 'q75')} | "
            f"{_ms(t, 'min')}-{_ms(t, 'max')} | {_ms(row.get('cpu_time_s'))} | {row['tokens_per_s']:.0f} | "
            f"{row['achieved_tflops']:.3f} | {_pct(row['mfu'])} | {row['cpu_util']:.2f} | {_mib(mem.get('peak_bytes'))} | "
            f"{_mib(mem.get('peak_step_bytes'))} | {_mib(mem.get('rss_peak_delta_bytes'))} | "
            f"{', '.join(row.get('sdpa_backend', [])) or '-'} |")
    syncs = [(row["name"], row["host_syncs"]) for row in res["settings"] if "host_syncs" in row]
    if syncs:
        out += ["", "## Host-device synchronisations inside one step (`torch.cuda.set_sync_debug_mode`)", ""]
        out += [f"- {name}: {h['count']}" + (f" ({'; '.join(h['examples'])})" if h["examples"] else "") for name, h in syncs]
    out += ["", "Memory: " + (res["settings"][0].get("memory", {}).get("method", "not measured")) + ".", ""]
    return "\n".join(out)


def write_results(res: dict[str, Any], path: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``path`` (.json) and the Markdown table beside it.  A directory -> <machine>-<preset>.json in it."""
    p = Path(path)
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        p = p / f"{res['env']['machine']}-{res['preset']}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(res, indent=1, default=_json_default) + "\n")
    md = p.with_suffix(".md")
    md.write_text(format_markdown(res))
    return p, md


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Tensor):
        return o.tolist()
    return str(o)


def _command_line(device: str, preset: str) -> str:
    import shlex

    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        return "tokendrop " + shlex.join(sys.argv[1:])
    return f"tokendrop bench --device {device} --preset {preset}"


def cli_bench(args) -> int:
    overrides = list(getattr(args, "overrides", []) or [])
    for flag, key in (("compile", "compile"),):
        if getattr(args, flag, False):
            overrides.append(f"{key}=true")
    for flag in ("threads", "rounds", "warmup"):
        v = getattr(args, flag, None)
        if v is not None:
            overrides.append(f"{flag}={v}")
    if getattr(args, "no_hf", False):
        overrides.append("hf=false")
    device = getattr(args, "device", "cpu") or "cpu"
    preset = make_preset(getattr(args, "preset", "") or "", device, overrides)
    quiet = getattr(args, "quiet", False)
    res = run_bench(preset, device=device, profile_dir=getattr(args, "profile", None),
                    log=None if quiet else (lambda s: print(s, file=sys.stderr, flush=True)),
                    command=_command_line(device, preset.name))
    print(format_text(res))
    if getattr(args, "json", None):
        j, md = write_results(res, args.json)
        print(f"wrote {j} and {md}")
    return 0


__all__ = ["BenchPreset", "PRESETS", "make_preset", "run_bench", "cli_bench", "format_text", "format_markdown",
           "write_results", "gpu_peak_flops", "synthetic_batch", "build_settings", "sdpa_backends"]
