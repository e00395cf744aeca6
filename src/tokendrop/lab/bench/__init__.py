"""Step-time benchmark: our dense BERT vs token dropping vs ``transformers.BertForMaskedLM``.

    cfg = make_preset("cpu-quick", overrides=["rounds=3"])      # configs/bench-cpu-quick.toml
    res = run_bench(cfg)                                        # -> BenchResult (typed records)
    write_results(res, "benchmarks/results/")                   # <machine>-<preset>.json + .md

What one *step* is: the real training step, ``tokendrop.train.step.MLMStep`` -- importance-based
selection, forward (with dropping or dense), per-slot weighted MLM NLL, backward, gradient
clipping, AdamW, importance update -- on a synthetic packed MLM batch of static shape (input_ids
(B, T), mlm_positions/labels/weights (B, P), P = round(0.15 T), no padding, so no attention mask).
The Hugging Face baseline (``hf_baseline``) is ``transformers.BertForMaskedLM`` with the same
config and initial weights, SDPA attention, the same dtype/autocast, batch, clipping and AdamW and
the standard full-sequence MLM loss.  For the ModernBERT-architecture family (``model =
"modern-*"``, configs/bench-modern-*.toml) our model is ``tokendrop.models.modernbert.model`` and
the baseline ``transformers.ModernBertForMaskedLM`` with our export's config.json and our initial
weights (SDPA; ``hf_sparse_prediction`` switches its head to the masked positions only;
``hf_released`` also times the model as released beside that baseline and the patched one, for the
integration's three numbers: patched vs released, the sparse head alone, dropping alone);
``document_attention`` is off unless asked for, as transformers' ModernBERT without flash_attn
attends across documents.

Variants: ``drop``, ``pass``, ``avg`` (token dropping, §2.2) and ``random_ltd`` (§2.10: every
middle layer keeps its own random 1 - rate of the T rows; the step timed is the schedule's first,
``ltd_start_fraction = 1 - rate``).

Method (docs/design.md §2.6 gives the bound the speedups are compared with):

* every setting is built first (one model + optimizer per variant, shared by its drop rates and
  sequence lengths; the dense baseline is the ``drop`` model's step with dropping off), then warmed
  up, then timed in interleaved rounds (``timing``); we report the median, quartiles, min/max, and
  speedups both as a ratio of medians and as the median of per-round *paired* ratios, with their
  min/max as the noise (``summary``);
* ``cpu_util`` = process CPU time / wall time during the timed steps: well below the thread count
  means the process was waiting for a core (a busy machine);
* memory, the SDPA kernel that ran (flash / memory-efficient / cuDNN / math / CPU flash), a
  profile breakdown and (CUDA) host-device syncs come from extra untimed steps (``timing``,
  ``profiling``); one more untimed step per setting runs under the census
  (``tokendrop.train.census``): its aten ops and would-be host syncs, on any device;
* FLOPs are analytic (``tokendrop.dropping.flops.step_flops``; HF's head runs on all T positions, so
  its FLOPs use P = T; sliding-window layers count the keys inside the window, and each speedup also
  records the bound with them counted as the masked dense attention SDPA executes); MFU = FLOPs /
  step time / the device's dense bf16 peak (``tokendrop.dropping.flops.gpu_peak_flops``; none on CPU
  unless ``peak_tflops`` is set).

Modules: ``presets`` (BenchConfig, configs/bench-*.toml), ``workload`` (settings, synthetic
batch), ``steps`` (models, optimizers, runners), ``hf_baseline``, ``timing``, ``profiling``,
``environment``, ``summary``, ``records`` (the result dataclasses), ``report`` (text, JSON,
Markdown, plot), ``run`` (``run_bench``), ``max_batch`` (largest batch that fits), ``campaign``
(the GPU campaign's parts and their CPU dry run).  Nothing here asserts timings.
"""

from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.flops import gpu_peak_flops
from tokendrop.lab.bench.environment import Environment, machine_slug
from tokendrop.lab.bench.presets import PRESETS, BenchConfig, bench_config, make_preset
from tokendrop.lab.bench.profiling import (
    cpu_peak_from_events,
    kineto_events,
    profile_breakdown,
    sdpa_backends,
    self_times,
)
from tokendrop.lab.bench.records import SCHEMA_VERSION, BenchResult, SettingResult
from tokendrop.lab.bench.report import format_markdown, format_text, plot_speedup, write_results
from tokendrop.lab.bench.run import run_bench
from tokendrop.lab.bench.workload import Setting, build_settings, synthetic_batch
from tokendrop.lab.machine import cpu_model

__all__ = [
    "BenchConfig",
    "BenchResult",
    "SettingResult",
    "Environment",
    "PRESETS",
    "SCHEMA_VERSION",
    "SPECIAL_IDS",
    "Setting",
    "bench_config",
    "make_preset",
    "run_bench",
    "format_text",
    "format_markdown",
    "write_results",
    "plot_speedup",
    "gpu_peak_flops",
    "synthetic_batch",
    "build_settings",
    "sdpa_backends",
    "machine_slug",
    "cpu_model",
    "cpu_peak_from_events",
    "kineto_events",
    "profile_breakdown",
    "self_times",
]
