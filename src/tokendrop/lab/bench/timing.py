"""Timing (warm-up, interleaved rounds) and the untimed measurement step (memory, kernels, syncs).

* Every setting is warmed up (and compiled), then timed in *rounds*: each round runs every setting
  ``reps`` times, the order rotating (and reversing every other round), so slow drifts hit all
  settings alike.  Times are per step; CUDA is synchronised at the step boundary only.
* Memory is measured on one extra, untimed step per setting.  CUDA: ``max_memory_allocated`` minus
  what is allocated when the step starts.  CPU: the peak of the running sum of the tensor
  allocator's events from ``torch.profiler(profile_memory=True)`` (exact for tensors, blind to
  allocator caching), plus the peak RSS growth (``/proc`` VmHWM, reset via ``clear_refs``) as a
  cross-check.  Peak training memory = persistent state + that step peak.
* The same step is profiled for the SDPA kernel that ran and a time breakdown; on CUDA one more
  step runs under ``torch.cuda.set_sync_debug_mode("warn")`` to count host-device syncs.
* One more untimed step per setting runs under the census (``tokendrop.train.census``, any device):
  the aten ops it dispatches and the ops that would make a CUDA host wait (``step_census``).
"""

from __future__ import annotations

import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tokendrop.lab.bench.presets import BenchConfig
from tokendrop.lab.bench.profiling import (
    cpu_peak_from_events,
    kineto_events,
    profile_breakdown,
    sdpa_backends,
    sdpa_op_names,
)
from tokendrop.lab.bench.records import HostSyncs, MemoryStats, StepCensus, StepExtras
from tokendrop.lab.bench.steps import Runner, state_bytes
from tokendrop.runs.gate import gate
from tokendrop.train.census import Census


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_step(r: Runner, device: torch.device) -> None:
    sync(device)
    c0, t0 = time.process_time(), time.perf_counter()
    r.step()
    sync(device)
    t1, c1 = time.perf_counter(), time.process_time()
    r.samples.append(t1 - t0)
    r.cpu.append(c1 - c0)


def warm_up(runners: list[Runner], cfg: BenchConfig, device: torch.device) -> None:
    for r in runners:
        for _ in range(cfg.warmup):
            r.step()
        sync(device)


def run_rounds(
    runners: list[Runner],
    cfg: BenchConfig,
    device: torch.device,
    say: Callable[[str], None],
    t_start: float,
    deadline: float | None = None,
) -> int:
    """The interleaved timed rounds; returns how many ran (fewer than ``cfg.rounds`` only when the
    next round would end after ``deadline``, a ``time.perf_counter()`` value; the first
    ``cfg.min_rounds`` always run)."""
    done = 0
    last = 0.0
    for k in range(cfg.rounds):
        if deadline is not None and k >= cfg.min_rounds and time.perf_counter() + last > deadline:
            say(f"  time budget: stopping after {k} of {cfg.rounds} rounds")
            break
        t0 = time.perf_counter()
        n = len(runners)
        order = runners[k % n :] + runners[: k % n]
        if k % 2:
            order = order[::-1]
        for r in order:
            before = len(r.samples)
            for _ in range(cfg.reps):
                timed_step(r, device)
            r.round_median.append(statistics.median(r.samples[before:]))
            r.round_median_cpu.append(statistics.median(r.cpu[before:]))
        last = time.perf_counter() - t0
        done += 1
        say(f"  round {k + 1}/{cfg.rounds} done ({time.perf_counter() - t_start:.0f}s)")
        gate("bench-round")  # a test-only pause point (tokendrop.runs.gate)
    return done


def _read_status(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_peak_delta(fn: Callable[[], Any]) -> int | None:
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


def peak_step_memory(step: Callable[[], Any], device: torch.device) -> tuple[int | None, Any]:
    """(peak bytes above the step's starting allocation, the profiler of the step or None).

    CUDA: from the caching allocator's statistics (no profiler).  CPU: from a memory profile of
    the step, which is returned so its events can be read again.
    """
    from torch.profiler import ProfilerActivity, profile

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base, None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    return cpu_peak_from_events(kineto_events(prof)), prof


def measure_extras(
    r: Runner, device: torch.device, cfg: BenchConfig, profile_dir: Path | None
) -> StepExtras:
    """The untimed steps of one setting: memory, SDPA backend, profile breakdown, host syncs
    (CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    st = state_bytes(*r.state)
    if device.type == "cuda":
        peak, _ = peak_step_memory(r.step, device)
        mem = MemoryStats(
            state_bytes=st,
            method="cuda max_memory_allocated - allocated at step start",
            peak_step_bytes=peak,
        )
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            r.step()
            torch.cuda.synchronize(device)
    else:
        holder: dict[str, Any] = {}

        def profiled() -> None:
            holder["peak"], holder["prof"] = peak_step_memory(r.step, device)

        rss = rss_peak_delta(profiled)
        prof = holder["prof"]
        mem = MemoryStats(
            state_bytes=st,
            peak_step_bytes=holder["peak"],
            rss_peak_delta_bytes=rss,
            method="torch.profiler memory events (tensor allocator) peak over the step; rss: "
            "/proc VmHWM delta",
        )
    if mem.peak_step_bytes is not None:
        mem.peak_bytes = st + mem.peak_step_bytes
    events = kineto_events(prof)
    names = {e.name() for e in events}
    extras = StepExtras(
        memory=mem,
        sdpa_ops=sdpa_op_names(names),
        sdpa_backend=sdpa_backends(names),
        profile=profile_breakdown(events, device.type),
    )
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        (profile_dir / (r.setting.name.replace("/", "_") + ".txt")).write_text(
            f"# {r.setting.name}: one profiled step (untimed; profiler overhead included)\n"
            + json.dumps(extras.profile, indent=1)
            + "\n\n"
            + prof.key_averages().table(sort_by=sort, row_limit=40)
            + "\n"
        )
    if device.type == "cuda" and cfg.sync_check:
        extras.host_syncs = count_host_syncs(r.step, device)
    return extras


def step_census(step: Callable[[], Any], device: torch.device) -> StepCensus:
    """Aten ops and would-be host syncs of one untimed call of ``step``
    (``tokendrop.train.census``)."""
    with Census() as c:
        step()
    sync(device)
    return StepCensus(ops=c.ops, syncs=len(c.syncs), locations=sorted({s.where for s in c.syncs}))


def count_host_syncs(step: Callable[[], Any], device: torch.device) -> HostSyncs:
    """Host-device synchronisations inside one call of ``step`` (CUDA's sync debug mode)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize(device)
    hits = [w for w in caught if "synchroniz" in str(w.message).lower()]
    # where each sync was called from: the Python line that triggered the warning (file:line)
    where = [f"{'/'.join(Path(w.filename).parts[-2:])}:{w.lineno}" for w in hits]
    return HostSyncs(
        count=len(hits),
        examples=sorted({str(w.message).splitlines()[0] for w in hits})[:5],
        locations=sorted(set(where))[:10],
    )
