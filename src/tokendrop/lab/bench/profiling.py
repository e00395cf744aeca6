"""Reading a profiled step: which SDPA kernel ran, where the time went, the CPU allocator's peak."""

from __future__ import annotations

import re
from typing import Any

_SDPA_KERNELS = [  # (substring of the aten op name, backend)
    ("_scaled_dot_product_flash_attention_for_cpu", "cpu-flash"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention_forward", "flash"),
    ("_scaled_dot_product_efficient_attention", "mem-efficient"),
    ("_efficient_attention_forward", "mem-efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_attention_math", "math"),
    (
        "flex_attention",
        "flex",
    ),  # FlexAttention (model.attention_backend; tokendrop.models.attention)
]
# the fused CUDA kernels (no T x T score matrix in memory); on an H100 with torch 2.11 and cuDNN
# 9.19, SDPA picks cuDNN's by itself for a bf16 training call with dropout
# (benchmarks/results/gpu-h100-2026-11-28)
FUSED_SDPA = frozenset({"flash", "mem-efficient", "cudnn"})


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


def sdpa_op_names(names: set[str]) -> list[str]:
    """The attention-related op/kernel names among a profile's event names."""
    return sorted(
        n
        for n in names
        if "scaled_dot_product" in n
        or "flash" in n.lower()
        or "efficient_attention" in n
        or "fmha" in n.lower()
        or "flex_attention" in n
    )


_CATEGORIES = [
    # (category, op/kernel-name regex, case-insensitive), first match wins; on self time
    (
        "matmul",
        r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$|gemm|cublas|cutlass|nvjet|xmma|wgmma",
    ),
    (
        "attention kernel",
        r"flash|efficient_attention|cudnn_attention|fmha|_scaled_dot_product|flex_attention",
    ),
    ("loss", r"nll_loss|log_softmax|logsoftmax|cross_entropy"),
    ("softmax", r"softmax"),
    ("dropout / RNG", r"bernoulli|dropout|philox|rand"),
    ("layernorm", r"layer_norm|layernorm"),
    ("gelu", r"gelu"),
    ("gather / scatter / index", r"index|gather|scatter|embedding|take"),
    ("sort / top-k (selector)", r"sort|topk"),
    ("optimizer kernels", r"adam|_foreach|multi_tensor_apply|lerp|addcdiv|addcmul|sqrt"),
    (
        "copies / layout",
        r"copy|contiguous|clone|cat$|catarray|transpose|permute|view|reshape|expand|as_strided",
    ),
    ("reductions / norms", r"sum|norm|mean|amax|argmax|all$|any$|reduce_kernel"),
    (
        "elementwise",
        r"aten::(add|mul|div|sub|where|fill|zero|neg|isneginf|clamp|pow|exp|tanh|masked_fill|ones|zeros|full)"
        r"|elementwise_kernel",
    ),
]


def kineto_events(prof) -> list[Any]:
    """The raw profiler events (fast: ``key_averages()`` costs seconds of Python per step)."""
    try:
        return list(prof.profiler.kineto_results.events())
    except Exception:  # pragma: no cover - profiler internals moved
        return []


def _on(e: Any, kind: str) -> bool:
    return str(e.device_type()).upper().endswith(kind)


def self_times(events: list[Any], device_type: str) -> list[tuple[str, int]]:
    """(name, self ns) per event: CPU ops (duration minus direct children, per thread) or CUDA
    kernels."""
    if device_type == "cuda":
        return [
            (e.name(), e.duration_ns()) for e in events if _on(e, "CUDA") and e.name() != "[memory]"
        ]
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
    """Self time (seconds) of a profiled step grouped into coarse categories (CUDA: GPU kernel
    time)."""
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
    opt = [
        e.duration_ns() for e in events if e.name().startswith("Optimizer.step") and _on(e, "CPU")
    ]
    if opt:
        out["optimizer step (inclusive, host)"] = sum(opt) / 1e9
    return out


def cpu_peak_from_events(events: list[Any]) -> int | None:
    """Peak of the running sum of the CPU tensor allocator's allocations/frees in a profile."""
    mem = sorted(
        (e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and _on(e, "CPU")
    )
    if not mem:
        return None
    live = peak = 0
    for _, nb in mem:
        live += nb
        peak = max(peak, live)
    return peak
