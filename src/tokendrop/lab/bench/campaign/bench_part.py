"""Parts ``bench`` (eager, + the largest batch that fits) and ``bench-compile`` (torch.compile):
bert-base at each T, bf16 -- our dense step, 50% token drop over the paper's span, and
``transformers.BertForMaskedLM`` -- interleaved rounds, medians, tokens/s, MFU, peak memory,
speedup vs the FLOP bound.  Part ``bench-modern``: the same rows (eager) for the
ModernBERT-architecture family (the campaign's [modern] table: modern-base at T=512 and 1024 against
``transformers.ModernBertForMaskedLM``).  One ``run_bench`` per T, so a T the budget cannot fit is
left out whole."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, free_device_memory
from tokendrop.lab.bench.campaign.config import BenchPart, CampaignConfig
from tokendrop.lab.bench.max_batch import MaxBatch, largest_batch
from tokendrop.lab.bench.presets import BenchConfig, bench_config
from tokendrop.lab.bench.records import BenchResult
from tokendrop.lab.bench.report import write_results
from tokendrop.lab.bench.run import run_bench
from tokendrop.lab.bench.steps import StepBuilder
from tokendrop.lab.bench.workload import Setting
from tokendrop.lab.sizes import BATCH_MEMORY_DEVICE

MAX_BATCH_RESERVE_S = 90.0  # kept for the largest-batch search (bench, eager)
END_RESERVE_S = 15.0


def part_bench_config(
    cfg: CampaignConfig,
    seq_len: int,
    batch_size: int,
    compiled: bool,
    budget_s: float,
    part: BenchPart | None = None,
) -> BenchConfig:
    b = part or cfg.bench
    modern = b is cfg.modern
    kind = ("modern-" if modern else "") + ("compile" if compiled else "eager")
    return bench_config(
        {
            "name": f"campaign-{kind}-T{seq_len}",
            "device": cfg.device,
            "model": b.model,
            "vocab_size": b.vocab_size,
            "seq_lens": [seq_len],
            "batch_sizes": [batch_size],
            "rates": [b.rate],
            "variants": ["drop"],
            "hf": True,
            "precision": b.precision,
            "compile": compiled,
            "compile_backend": b.compile_backend,
            "warmup": b.warmup,
            "rounds": b.rounds,
            "reps": b.reps,
            "memory": b.memory,
            "threads": b.threads,
            "time_budget_s": max(1.0, budget_s),
            "document_attention": b.document_attention,
            "attention_backend": b.attention_backend,
        }
    )


def part_config(cfg: CampaignConfig, part: str) -> BenchPart:
    """The [bench] table for ``bench`` / ``bench-compile``, the [modern] table for
    ``bench-modern``."""
    return cfg.modern if part == "bench-modern" else cfg.bench


def _compiled_graphs() -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # pragma: no cover - dynamo internals moved
        return None


def _rows(res: BenchResult) -> list[list[object]]:
    sp = {x.setting: x for x in res.speedups}
    rows = []
    for s in res.settings:
        x = sp.get(s.name)
        peak = s.memory.peak_bytes if s.memory is not None else None
        rows.append(
            [
                s.name,
                s.batch_size,
                s.time_s.median * 1e3,
                s.tokens_per_s,
                s.achieved_tflops,
                None if s.mfu is None else 100 * s.mfu,
                None if peak is None else peak / 2**30,
                ", ".join(s.sdpa_backend or []) or None,
                x.speedup if x else None,
                x.flop_bound if x else None,
                None if x is None else 100 * x.fraction_of_bound,
            ]
        )
    return rows


HEADER = [
    "setting",
    "B",
    "ms/step (median)",
    "tokens/s",
    "TFLOP/s",
    "MFU %",
    "peak GiB",
    "SDPA",
    "speedup vs dense",
    "FLOP bound",
    "% of bound",
]


def run_bench_part(
    cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log
) -> None:
    compiled = r.part == "bench-compile"
    b = part_config(cfg, r.part)
    gpu = cfg.device == "cuda" and not cfg.dry_run
    reserve = END_RESERVE_S + (MAX_BATCH_RESERVE_S if b.max_batch and not compiled else 0.0)
    rows: list[list[object]] = []
    r.data["runs"] = {}
    last_took = 0.0
    for i, (t, bs) in enumerate(zip(b.seq_lens, b.batch_sizes)):
        share = (budget.left() - reserve) / (len(b.seq_lens) - i)
        if i > 0 and budget.left() - reserve < max(last_took, 10.0):
            r.skip(
                f"T={t} (the previous T took {last_took:.0f}s; rerun with --set "
                f"bench.seq_lens=[{t}] "
                f"--set bench.batch_sizes=[{bs}] --set "
                f"bench.max_batch_caps=[{b.max_batch_caps[i]}])",
                log,
            )
            continue
        bc = part_bench_config(cfg, t, bs, compiled, share, b)
        t0 = time.perf_counter()
        res = run_bench(bc, log=log, command=f"tokendrop bench --campaign {r.part} (T={t}, B={bs})")
        last_took = time.perf_counter() - t0
        j, md = write_results(res, out / f"{r.part}-T{t}.json")
        r.files += [j.name, md.name]
        rows += _rows(res)
        run = {
            "seconds": last_took,
            "rounds_done": res.rounds_done,
            "headline": res.headline,
            "mfu": {s.name: s.mfu for s in res.settings},
            "tokens_per_s": {s.name: s.tokens_per_s for s in res.settings},
        }
        if compiled:
            run["dynamo_unique_graphs_so_far"] = _compiled_graphs()
        r.data["runs"][f"T{t}"] = run
        drop = next(x for x in res.speedups if x.variant == "drop")
        hf = res.vs_hf[0] if res.vs_hf else None
        r.summary.append(
            f"T={t} B={bs}: dense {res.setting(f'T{t}/dense').tokens_per_s:.0f} tok/s"
            + (
                f" (MFU {100 * res.setting(f'T{t}/dense').mfu:.1f}%)"
                if res.setting(f"T{t}/dense").mfu
                else ""
            )
            + f", 50% drop {drop.speedup:.2f}x (FLOP bound {drop.flop_bound:.2f}x)"
            + (f", ours/HF {hf.ratio:.2f}x" if hf else "")
            + f" [{last_took:.0f}s]"
        )
        r.check(
            f"T={t}: 50% drop faster than dense",
            (drop.speedup > 1.0) if gpu else None,
            f"{drop.speedup:.3f}x",
        )
        if hf:
            r.check(
                f"T={t}: our dense step at least as fast as transformers'",
                (hf.ratio >= 1.0) if gpu else None,
                f"{hf.ratio:.3f}x",
            )
        r.check(
            f"T={t}: MFU measured against the bf16 peak",
            all(s.mfu is not None for s in res.settings) if gpu else None,
        )
        free_device_memory()
        r.tables = [
            (f"step time ({'torch.compile' if compiled else 'eager'}, {b.precision})", HEADER, rows)
        ]
        save()
    if compiled or not b.max_batch:
        return
    _max_batch(cfg, budget, r, save, log, b)


def _max_batch(
    cfg: CampaignConfig, budget: Budget, r: PartResult, save, log: Log, b: BenchPart
) -> None:
    """Per implementation (ours: dense and drop share a model; then HF's alone), per T."""
    bc = part_bench_config(cfg, b.seq_lens[0], b.batch_sizes[0], False, 1.0, b)
    bc.seq_lens, bc.batch_sizes = list(b.seq_lens), list(b.batch_sizes)
    dev = (
        torch.device("cuda", torch.cuda.current_device())
        if cfg.device == "cuda"
        else torch.device("cpu")
    )
    rows: list[list[object]] = []
    results: list[MaxBatch] = []
    device_memory = b.max_batch_memory_bytes == BATCH_MEMORY_DEVICE
    memory_limit = None if device_memory else int(b.max_batch_memory_bytes)
    for impl, kinds in (
        ("tokendrop", (("dense", 0.0), ("drop", b.rate))),
        ("hf", (("dense", 0.0),)),
    ):
        builder = StepBuilder(bc, dev)
        if impl == "hf":
            builder.hf()
        builder.keep_only(impl)
        for t, bs, cap in zip(b.seq_lens, b.batch_sizes, b.max_batch_caps):
            for variant, rate in kinds:
                s = Setting(impl, variant, rate, t, bs)
                if not budget.allows(END_RESERVE_S + 5):
                    r.skip(f"largest batch {s.name}", log)
                    continue
                log(f"  largest batch: {s.name} from B={bs} up to {cap}")
                mb = largest_batch(
                    builder,
                    s,
                    cap,
                    memory_limit,
                    deadline=budget.deadline - END_RESERVE_S,
                )
                results.append(mb)
                rows.append(
                    [
                        s.name,
                        mb.describe(),
                        len(mb.tries),
                        None if mb.peak_bytes is None else mb.peak_bytes / 2**30,
                    ]
                )
                r.data["max_batch"] = results
                r.tables = [t_ for t_ in r.tables if not t_[0].startswith("largest batch")]
                r.tables.append(
                    (
                        "largest batch that fits (eager; one training step per size tried)",
                        ["setting", "largest batch", "sizes tried", "peak GiB at it"],
                        rows,
                    )
                )
                save()
        del builder
        free_device_memory()
    fits = [m for m in results if m.largest_fit > 0]
    r.check(
        "largest batch found for every setting",
        len(results) > 0 and len(fits) == len(results),
        f"{len(fits)} of {len(results)}",
    )
    for t in b.seq_lens:
        d = next((m for m in results if m.setting == f"T{t}/dense"), None)
        x = next((m for m in results if m.seq_len == t and "/drop" in m.setting), None)
        if d and x and d.largest_fit and x.largest_fit:
            r.summary.append(f"T={t}: largest batch dense {d.describe()}, 50% drop {x.describe()}")
