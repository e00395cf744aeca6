"""Typed records of a benchmark run and their JSON form (``BenchResult.to_dict()``, schema 1).

Fields declared with ``optional()`` are left out of the JSON when they are None (the schema has
them only where they apply: CPU-time columns on CPU, host-sync counts on CUDA, ...); every other
field is always written, None included (``mfu`` is null on CPU).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from tokendrop.lab.bench.environment import Environment
from tokendrop.lab.bench.fields import optional, record_dict
from tokendrop.lab.bench.presets import BenchConfig

SCHEMA_VERSION = 1


@dataclass
class TimeStats:
    """Per-step seconds: median, quartiles (inclusive method), extremes, sample count."""

    median: float
    q25: float
    q75: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, xs: list[float]) -> TimeStats:
        if not xs:
            raise ValueError("no samples")
        xs = sorted(xs)
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        return cls(statistics.median(xs), q[0], q[2], xs[0], xs[-1], len(xs))

    @property
    def rel_iqr(self) -> float:
        return (self.q75 - self.q25) / self.median


@dataclass
class MemoryStats:
    """Peak training memory of one untimed step (see the package docstring for the method)."""

    state_bytes: int  # parameters + buffers + optimizer state (+ importance vector)
    method: str
    peak_step_bytes: int | None = optional()
    peak_bytes: int | None = optional()  # state + step peak
    rss_peak_delta_bytes: int | None = optional()  # CPU: peak RSS growth over the step


@dataclass
class HostSyncs:
    count: int
    examples: list[str]
    # "dir/file.py:line" of the Python calls that synced
    locations: list[str] = field(default_factory=list)


@dataclass
class StepCensus:
    """One untimed step under ``tokendrop.train.census.Census`` (CUDA's sync rules, on any
    device)."""

    ops: int  # aten ops dispatched (forward, backward, optimizer, importance update)
    syncs: int  # ops that would make a CUDA host wait
    # "tokendrop/...py:line" of each distinct sync
    locations: list[str] = field(default_factory=list)


@dataclass
class StepExtras:
    """What the untimed, profiled step of a setting recorded."""

    memory: MemoryStats
    sdpa_ops: list[str]
    sdpa_backend: list[str]
    profile: dict[str, float]  # category -> self seconds, plus "total"
    host_syncs: HostSyncs | None = None


@dataclass
class SettingResult:
    name: str
    impl: str  # tokendrop | hf
    variant: str  # dense | drop | pass | avg
    rate: float
    seq_len: int
    batch_size: int
    kept: int
    tokens_per_step: int
    flops_per_step: int
    time_s: TimeStats
    samples_s: list[float]
    round_median_s: list[float]
    tokens_per_s: float
    achieved_tflops: float
    mfu: float | None
    rel_iqr: float
    cpu_util: float
    cpu_time_s: TimeStats | None = optional()
    cpu_samples_s: list[float] | None = optional()
    round_median_cpu_s: list[float] | None = optional()
    tokens_per_cpu_s: float | None = optional()
    rel_iqr_cpu: float | None = optional()
    memory: MemoryStats | None = optional()
    sdpa_ops: list[str] | None = optional()
    sdpa_backend: list[str] | None = optional()
    profile: dict[str, float] | None = optional()
    host_syncs: HostSyncs | None = optional()
    census: StepCensus | None = optional()


@dataclass
class Speedup:
    """One dropping setting over our dense step at the same T."""

    seq_len: int
    setting: str
    variant: str
    rate: float
    speedup: float  # median of per-round paired ratios
    speedup_paired_min: float
    speedup_paired_max: float
    speedup_of_medians: float
    flop_bound: float  # dense FLOPs / setting FLOPs
    fraction_of_bound: float
    speedup_cpu: float | None = optional()
    speedup_cpu_paired_min: float | None = optional()
    speedup_cpu_paired_max: float | None = optional()
    fraction_of_bound_cpu: float | None = optional()
    # ModernBERT: the bound with sliding-window layers counted as the masked dense attention an SDPA
    # kernel with a mask executes (tokendrop.dropping.flops, masked_dense_local=True)
    flop_bound_masked_dense: float | None = optional()


@dataclass
class VsHF:
    """Our dense step vs ``transformers.BertForMaskedLM`` at one T (tokens/s ratio ours / HF)."""

    seq_len: int
    dense_tokens_per_s: float
    hf_tokens_per_s: float
    ratio: float
    ratio_paired_min: float
    ratio_paired_max: float
    ratio_of_medians: float
    ratio_cpu: float | None = optional()
    ratio_cpu_paired_min: float | None = optional()
    ratio_cpu_paired_max: float | None = optional()
    memory_ratio_dense_over_hf: float | None = optional()


@dataclass
class HFPatched:
    """transformers' model patched by ``tokendrop.transformers`` at one setting, against the
    unpatched model (speedup = unpatched step time / patched step time) and against our model at the
    same setting (time ratio = patched / ours: 1.1 is 10% slower); medians of per-round paired
    ratios."""

    seq_len: int
    setting: str  # the patched setting, e.g. T512/hf-drop-0.5
    ours: str  # our setting at the same variant and rate, e.g. T512/drop-0.5
    variant: str
    rate: float
    speedup_over_hf: float
    speedup_over_hf_paired_min: float
    speedup_over_hf_paired_max: float
    speedup_over_hf_of_medians: float
    flop_bound: float  # the unpatched step's FLOPs / the patched step's
    time_over_ours: float
    time_over_ours_paired_min: float
    time_over_ours_paired_max: float
    speedup_over_hf_cpu: float | None = optional()
    time_over_ours_cpu: float | None = optional()


@dataclass
class MemoryRatio:
    seq_len: int
    setting: str
    peak_ratio: float  # (state + step peak) setting / dense
    step_peak_ratio: float


@dataclass
class Noise:
    median_rel_iqr: float
    max_rel_iqr: float
    median_rel_iqr_cpu: float | None
    median_cpu_util: float
    loadavg_start: list[float] | None
    loadavg_end: list[float] | None


@dataclass
class ModelInfo:
    model: dict[str, Any]  # preset name + shape fields
    num_parameters: int
    hf_attn_implementation: str | None
    # the baseline's class (ModernBertForMaskedLM for modern-*)
    hf_model: str = "transformers.BertForMaskedLM"


@dataclass
class ArmRatio:
    """One arm against another: ``base``'s step time / ``arm``'s (1.5 = the arm takes 2/3 of the
    time), medians of per-round paired ratios, next to the FLOP bound (``base``'s FLOPs /
    ``arm``'s)."""

    arm: str  # a setting name, e.g. T128/hf-drop-0.5
    base: str  # e.g. T128/hf-released
    speedup: float
    speedup_paired_min: float
    speedup_paired_max: float
    flop_bound: float
    speedup_cpu: float | None = optional()
    speedup_cpu_paired_min: float | None = optional()
    speedup_cpu_paired_max: float | None = optional()


@dataclass
class HFThree:
    """The integration's three numbers at one patched setting (``BenchConfig.hf_released``): the
    patched model over transformers' model as released, the sparse head alone (the unpatched model
    with its head on the masked positions over the released one) and dropping alone (the patched
    model over the sparse-head one).  The first is the product of the other two, per round."""

    seq_len: int
    setting: str  # the patched setting
    variant: str
    rate: float
    patched_vs_released: ArmRatio
    sparse_head_alone: ArmRatio
    dropping_alone: ArmRatio


@dataclass
class BenchResult:
    """Everything one ``run_bench`` measured; ``to_dict()`` is the JSON written by
    ``write_results``."""

    preset: str
    date: str
    env: Environment
    config: BenchConfig  # as run
    info: ModelInfo
    peak_flops: float | None
    settings: list[SettingResult]
    speedups: list[Speedup]
    vs_hf: list[VsHF]
    memory: list[MemoryRatio]
    headline: dict[str, float]
    noise: Noise
    wall_s: float = 0.0
    command: str = ""
    rounds_done: int = 0  # < config.rounds when the time budget stopped the rounds early
    hf_patched: list[HFPatched] = field(default_factory=list)  # config.hf_token_dropping
    hf_three: list[HFThree] = field(default_factory=list)  # config.hf_released
    schema: int = SCHEMA_VERSION

    def setting(self, name: str) -> SettingResult:
        for s in self.settings:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        schema = d.pop("schema")
        return {"schema": schema, **d}
