"""Long context: dense vs token dropping for both families at T = 512 ... 8,192, side by side in one
run.

    tokendrop bench --preset longctx-cpu --json benchmarks/results/longctx-cpu.json

A :class:`LongContextConfig` (``configs/bench-longctx-NAME.toml``) names the protocol once and one
shape per family (the ``[bert]`` and ``[modern]`` tables).  For every family and T, one
``run_bench`` times our dense step and the step with ``rate`` dropping over the paper's span in
interleaved rounds (so each T's paired ratios come from steps measured seconds apart), on a packed
batch with per-document attention (``document_attention``; ``document_tokens = "row"``: one
document per row, the attention over all T positions that the FLOP model counts).  Per row: the
medians (wall and, on CPU, process time) and the range of the timed steps, the paired speed-up
(median and range over the rounds: at least ``min_rounds`` of them, whatever the time budget), the
FLOP bound and the fraction of it reached, the attention products' share of the FLOPs (dense and
dropping), the peak training memory, and how far it fits:

* measured: a T whose step runs out of memory is recorded as not fitting at its batch (CUDA);
* estimated: the largest batch within ``memory_limit_gib`` ("machine": the machine's memory, or the
  GPU's),
  linear in the batch from the one measured (the step's gradients counted per sequence, so an
  underestimate), and the first doubling of T beyond the measured ones at which one sequence would
  no longer fit, from a quadratic fit of the per-sequence step peak in T (an extrapolation: said
  so).

With ``time_budget_s`` the run stays within it by leaving rows out, not rounds: each row's bench
gets its share of what is left (the rounds after the first ``min_rounds`` stop at it), and a row
starts only when what is left covers ``ROW_GROWTH`` times the wall time of the last measured row
(of its family, else of any); a row left out is recorded as skipped.

Nothing here asserts a timing.  The goal it reports (docs/results.md): dropping at >= 0.95 of its
FLOP bound at every T.
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import os
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokendrop.config import THREADS_AUTO, ModelConfig, config_dir, from_dict, load_config
from tokendrop.dropping.flops import describe_model, step_flops
from tokendrop.errors import ConfigError
from tokendrop.lab.bench.environment import Environment, environment
from tokendrop.lab.bench.fields import optional, record_dict
from tokendrop.lab.bench.presets import (
    LONGCTX_PREFIX as PREFIX,  # configs/bench-longctx-*.toml: LongContextConfig
    BenchConfig,
    bench_config,
)
from tokendrop.lab.bench.records import BenchResult
from tokendrop.lab.bench.report import write_json_and_markdown
from tokendrop.lab.bench.run import bench_device, run_bench
from tokendrop.lab.bench.workload import Setting
from tokendrop.lab.machine import loadavg
from tokendrop.lab.sizes import (
    BUDGET_NONE,
    DOCUMENT_ROW,
    MEMORY_MACHINE,
    SHAPE_FIELDS,
    SHAPE_PRESET,
    check_lab_size,
)

GOAL_FRACTION = 0.95  # the goal: dropping at >= this fraction of its FLOP bound at every T
# a row at the next T costs at most this many times the last row's wall time (the same tokens per
# step: on the H100 bert-base's step grew 1.46x from T=2,048 to 8,192, with start-up on top)
ROW_GROWTH = 1.5
SCHEMA_VERSION = 1


@dataclass
class FamilyShape:
    """One family's model in the long-context run: a model preset and the shape overrides
    (``BenchConfig``'s fields of the same names; "preset": the preset's)."""

    model: str = "cpu-6x256"
    num_layers: int | str = SHAPE_PRESET
    hidden_size: int | str = SHAPE_PRESET
    num_heads: int | str = SHAPE_PRESET
    intermediate_size: int | str = SHAPE_PRESET
    vocab_size: int = 30522
    enabled: bool = True

    @property
    def family(self) -> str:
        return ModelConfig(preset=self.model).family


def _bert() -> FamilyShape:
    return FamilyShape(
        model="cpu-6x256", num_layers=6, hidden_size=128, num_heads=2, intermediate_size=512
    )


def _modern() -> FamilyShape:
    return FamilyShape(
        model="modern-base",
        num_layers=6,
        hidden_size=128,
        num_heads=2,
        intermediate_size=192,
        vocab_size=50368,
    )


@dataclass
class LongContextConfig:
    name: str = "longctx"
    device: str = "cpu"
    seq_lens: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192])
    tokens_per_step: int = 8192  # B = max(1, tokens_per_step // T), unless batch_sizes gives it
    batch_sizes: list[int] = field(default_factory=list)  # per seq_len
    rate: float = 0.5
    method: str = "cumulative"
    document_attention: str = "on"
    # a [SEP] every document_tokens tokens, or "row": one document per row
    # (BenchConfig.document_tokens)
    document_tokens: int | str = DOCUMENT_ROW
    # both families without attention dropout (ModernBERT has none; BERT's 0.1 would put CPU
    # attention on SDPA's math path, T x T scores materialised: > 10 GB at T = 8192):
    # BenchConfig.attention_dropout
    attention_dropout: float = 0.0
    attention_backend: str = "auto"
    precision: str = "fp32"
    compile: bool = False
    threads: int | str = THREADS_AUTO  # torch CPU threads, or "auto": torch's default
    warmup: int = 1
    rounds: int = 3
    reps: int = 1
    # rounds every measured row runs whatever time_budget_s says (BenchConfig.min_rounds): a spread
    # of at least this many paired ratios per T
    min_rounds: int = 1
    # where a setting stops fitting is judged against this many GiB, or "machine"
    # (MEMORY_MACHINE): this machine's memory (CPU) or the GPU's
    memory_limit_gib: float | str = MEMORY_MACHINE
    # the whole run stops starting new rows past this many seconds, or "none" (BUDGET_NONE)
    time_budget_s: float | str = BUDGET_NONE
    seed: int = 0
    bert: FamilyShape = field(default_factory=_bert)
    modern: FamilyShape = field(default_factory=_modern)

    def shapes(self) -> list[FamilyShape]:
        """The enabled tables, [bert] then [modern]."""
        return [s for s in (self.bert, self.modern) if s.enabled]

    def bench_config(
        self, shape: FamilyShape, seq_len: int, budget_s: float | str = BUDGET_NONE
    ) -> BenchConfig:
        """The ``BenchConfig`` of one row: ``shape`` at ``seq_len``, dense and dropping only."""
        b = (
            self.batch_sizes[self.seq_lens.index(seq_len)]
            if self.batch_sizes
            else max(1, self.tokens_per_step // seq_len)
        )
        return bench_config(
            {
                "name": f"{self.name}-{shape.family}-T{seq_len}",
                "device": self.device,
                "model": shape.model,
                "num_layers": shape.num_layers,
                "hidden_size": shape.hidden_size,
                "num_heads": shape.num_heads,
                "intermediate_size": shape.intermediate_size,
                "vocab_size": shape.vocab_size,
                "document_attention": self.document_attention,
                "document_tokens": self.document_tokens,
                "attention_dropout": self.attention_dropout,
                "attention_backend": self.attention_backend,
                "seq_lens": [seq_len],
                "batch_sizes": [b],
                "rates": [self.rate],
                "variants": ["drop"],
                "method": self.method,
                "hf": False,
                "precision": self.precision,
                "compile": self.compile,
                "threads": self.threads,
                "warmup": self.warmup,
                "rounds": self.rounds,
                "min_rounds": self.min_rounds,
                "reps": self.reps,
                "memory": True,
                "time_budget_s": budget_s,
                "seed": self.seed,
            }
        )

    def validate(self) -> LongContextConfig:
        if not self.shapes():
            raise ConfigError(
                "longctx: both tables disabled (bert.enabled and modern.enabled are false)"
            )
        if self.batch_sizes and len(self.batch_sizes) != len(self.seq_lens):
            raise ConfigError(
                f"longctx.batch_sizes: one per seq_len ({len(self.seq_lens)}), got "
                f"{self.batch_sizes}"
            )
        if not 1 <= self.min_rounds <= self.rounds:
            raise ConfigError(
                f"longctx.min_rounds: expected 1 ... rounds ({self.rounds}), got {self.min_rounds}"
            )
        check_lab_size("longctx.threads", self.threads)
        check_lab_size("longctx.memory_limit_gib", self.memory_limit_gib)
        check_lab_size("longctx.time_budget_s", self.time_budget_s)
        check_lab_size("longctx.document_tokens", self.document_tokens)
        for fam in ("bert", "modern"):
            for k in SHAPE_FIELDS:
                check_lab_size(f"longctx.{fam}.{k}", getattr(getattr(self, fam), k))
        # every row's BenchConfig is valid (shapes, T, rate, backend, ...)
        for shape in self.shapes():
            for t in self.seq_lens:
                self.bench_config(shape, t).validate()
        return self


def is_longctx_preset(name: str) -> bool:
    """``name`` is a long-context preset: ``longctx-*`` (configs/bench-longctx-*.toml), or a .toml
    file named so or holding a ``[bert]`` or ``[modern]`` table (a BenchConfig has no tables)."""
    if Path(name).stem.startswith(("longctx", PREFIX)):
        return True
    if not name.endswith(".toml") or not Path(name).is_file():
        return False
    try:
        d = tomllib.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the BenchConfig loader reports it
    return isinstance(d.get("bert"), dict) or isinstance(d.get("modern"), dict)


def longctx_config(
    name: str, overrides: list[str] | tuple[str, ...] = (), device: str | None = None
) -> LongContextConfig:
    """``configs/bench-longctx-NAME.toml`` (``name`` = ``longctx-NAME``) or a .toml path, with
    overrides."""
    is_path = name.endswith(".toml") or os.sep in name
    path = Path(name) if is_path else config_dir() / f"bench-{name}.toml"
    if not path.is_file():
        have = sorted(p.stem[len("bench-") :] for p in config_dir().glob(f"{PREFIX}*.toml"))
        raise ConfigError(
            f"bench --preset: no long-context preset {name!r} ({path}); expected one of "
            f"{', '.join(have) or '(none)'} or a .toml file"
        )
    extra = [f'device="{device}"'] if device else []
    return load_config(path, list(overrides) + extra, cls=LongContextConfig).validate()


def longctx_from_dict(
    values: dict, overrides: list[str] | tuple[str, ...] = ()
) -> LongContextConfig:
    return from_dict(LongContextConfig, values, overrides).validate()


# ----------------------------------------------------------------------------------------------
# results


@dataclass
class Fit:
    """How far one setting fits in ``limit_bytes`` (module docstring: measured peak, estimates)."""

    state_bytes: int
    peak_bytes: int  # state + the step's peak, at the measured batch
    per_sequence_bytes: float  # the step's peak / the batch
    largest_batch: int  # estimated: (limit - state) / per sequence


@dataclass
class Row:
    family: str
    seq_len: int
    batch_size: int
    status: str  # measured | out of memory | skipped (time budget)
    kept: int | None = None
    dense_ms: float | None = None  # median per step, wall clock
    drop_ms: float | None = None
    # the range of the timed steps (every round's), wall clock
    dense_ms_min: float | None = optional()
    dense_ms_max: float | None = optional()
    drop_ms_min: float | None = optional()
    drop_ms_max: float | None = optional()
    dense_cpu_ms: float | None = optional()  # CPU: process time per step
    drop_cpu_ms: float | None = optional()
    speedup: float | None = None  # median of per-round paired ratios, wall clock
    speedup_min: float | None = None
    speedup_max: float | None = None
    speedup_cpu: float | None = optional()
    flop_bound: float | None = None
    fraction_of_bound: float | None = None
    fraction_of_bound_cpu: float | None = optional()
    # modernbert: sliding windows as masked dense attention
    flop_bound_masked_dense: float | None = optional()
    attention_share_dense: float | None = None
    attention_share_drop: float | None = None
    dense_tflops: float | None = None
    drop_tflops: float | None = None
    cpu_util: float | None = optional()
    rounds_done: int | None = None
    dense_fit: Fit | None = None
    drop_fit: Fit | None = None
    note: str = ""
    wall_s: float | None = optional()  # the row's bench, start-up and memory steps included


@dataclass
class FamilyFit:
    """Where a family stops fitting (module docstring): the first T beyond the measured ones,
    doubling, at which one sequence's step would exceed the limit -- extrapolated."""

    family: str
    setting: str  # dense | drop
    limit_bytes: int
    first_t_not_fitting: int | None  # None: not within 2^20 tokens, or too few measured points
    method: str


@dataclass
class LongContextResult:
    preset: str
    date: str
    env: Environment
    config: LongContextConfig
    rows: list[Row]
    fits: list[FamilyFit]
    memory_limit_bytes: int
    goal: dict[str, Any]
    runs: dict[str, Any]  # family/T -> that row's BenchResult (to_dict)
    wall_s: float = 0.0
    command: str = ""
    schema: int = SCHEMA_VERSION

    def row(self, family: str, seq_len: int) -> Row:
        return next(r for r in self.rows if (r.family, r.seq_len) == (family, seq_len))

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        schema = d.pop("schema")
        return {"schema": schema, "kind": "longctx", **d}


def machine_memory_bytes(device: torch.device) -> int:
    """The memory a step may use: the GPU's, or this machine's (MemTotal)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _fit(s, limit: int) -> Fit | None:
    m = s.memory
    if m is None or m.peak_step_bytes is None:
        return None
    per = m.peak_step_bytes / max(1, s.batch_size)
    largest = int((limit - m.state_bytes) // per) if per > 0 else 0
    return Fit(
        state_bytes=m.state_bytes,
        peak_bytes=m.state_bytes + m.peak_step_bytes,
        per_sequence_bytes=per,
        largest_batch=max(0, largest),
    )


def _row(
    family: str, t: int, res: BenchResult, cfg: LongContextConfig, bc: BenchConfig, limit: int
) -> Row:
    dense, drop = res.setting(f"T{t}/dense"), res.setting(f"T{t}/drop-{cfg.rate:g}")
    x = next(s for s in res.speedups if s.setting == drop.name)
    mc = bc.model_config()
    fd = step_flops(mc, t, dense.batch_size, None)
    fx = step_flops(mc, t, dense.batch_size, drop_cfg := _drop(bc, cfg))
    assert fd.total == dense.flops_per_step and fx.total == drop.flops_per_step, (
        "the FLOP model the bench used"
    )
    del drop_cfg
    r = Row(
        family=family,
        seq_len=t,
        batch_size=dense.batch_size,
        status="measured",
        kept=drop.kept,
        dense_ms=1e3 * dense.time_s.median,
        drop_ms=1e3 * drop.time_s.median,
        dense_ms_min=1e3 * dense.time_s.min,
        dense_ms_max=1e3 * dense.time_s.max,
        drop_ms_min=1e3 * drop.time_s.min,
        drop_ms_max=1e3 * drop.time_s.max,
        speedup=x.speedup,
        speedup_min=x.speedup_paired_min,
        speedup_max=x.speedup_paired_max,
        flop_bound=x.flop_bound,
        fraction_of_bound=x.fraction_of_bound,
        flop_bound_masked_dense=x.flop_bound_masked_dense,
        attention_share_dense=fd.attention_share,
        attention_share_drop=fx.attention_share,
        dense_tflops=dense.achieved_tflops,
        drop_tflops=drop.achieved_tflops,
        rounds_done=res.rounds_done,
        dense_fit=_fit(dense, limit),
        drop_fit=_fit(drop, limit),
    )
    if dense.cpu_time_s is not None and drop.cpu_time_s is not None:
        r.dense_cpu_ms, r.drop_cpu_ms = 1e3 * dense.cpu_time_s.median, 1e3 * drop.cpu_time_s.median
        r.speedup_cpu, r.fraction_of_bound_cpu = x.speedup_cpu, x.fraction_of_bound_cpu
        r.cpu_util = min(dense.cpu_util, drop.cpu_util)
    return r


def _drop(bc: BenchConfig, cfg: LongContextConfig):
    return Setting("tokendrop", "drop", cfg.rate, bc.seq_lens[0], 1).drop_config(cfg.method)


def by_family(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r.family, []).append(r)
    return out


def family_fit(family: str, setting: str, rows: list[Row], limit: int) -> FamilyFit:
    """The first T (doubling beyond the longest measured) at which state + one sequence's step peak,
    from a quadratic fit of the per-sequence peak in T, exceeds ``limit``; ``rows``: the
    family's."""
    pts = [
        (r.seq_len, getattr(r, f"{setting}_fit"))
        for r in rows
        if r.status == "measured" and getattr(r, f"{setting}_fit") is not None
    ]
    oom = [r.seq_len for r in rows if r.status == "out of memory"]
    if oom:
        return FamilyFit(
            family,
            setting,
            limit,
            min(oom),
            f"measured: T={min(oom)} ran out of memory at its batch",
        )
    if len(pts) < 3:
        return FamilyFit(family, setting, limit, None, "too few measured T for the extrapolation")
    ts = np.array([t for t, _ in pts], dtype=np.float64)
    ys = np.array([f.per_sequence_bytes for _, f in pts], dtype=np.float64)
    coef = np.polyfit(ts, ys, 2)
    state = pts[-1][1].state_bytes
    t = int(ts.max())
    while t < 2**20:
        t *= 2
        if state + float(np.polyval(coef, t)) > limit:
            return FamilyFit(
                family,
                setting,
                limit,
                t,
                "extrapolated: quadratic fit of the per-sequence step peak in T "
                f"over T={', '.join(str(int(x)) for x in ts)}; one sequence per step",
            )
    return FamilyFit(family, setting, limit, None, "extrapolated: fits beyond 2^20 tokens")


def goal(rows: list[Row]) -> dict[str, Any]:
    """The benchmark goal (not a test): dropping at >= GOAL_FRACTION of its FLOP bound at every T,
    and the speed-up at the longest T next to the shortest's, per family."""
    out: dict[str, Any] = {"fraction_of_bound_goal": GOAL_FRACTION}
    for fam, mine in by_family(rows).items():
        ok = [r for r in mine if r.status == "measured"]
        if not ok:
            continue
        lo, hi = min(ok, key=lambda r: r.seq_len), max(ok, key=lambda r: r.seq_len)
        g = {
            "rows": len(ok),
            "met_wall": sum(r.fraction_of_bound >= GOAL_FRACTION for r in ok),
            f"speedup_T{lo.seq_len}": lo.speedup,
            f"speedup_T{hi.seq_len}": hi.speedup,
            f"flop_bound_T{lo.seq_len}": lo.flop_bound,
            f"flop_bound_T{hi.seq_len}": hi.flop_bound,
        }
        if all(r.fraction_of_bound_cpu is not None for r in ok):
            g["met_cpu_time"] = sum(r.fraction_of_bound_cpu >= GOAL_FRACTION for r in ok)
            g[f"speedup_cpu_T{lo.seq_len}"], g[f"speedup_cpu_T{hi.seq_len}"] = (
                lo.speedup_cpu,
                hi.speedup_cpu,
            )
        out[fam] = g
    return out


def run_longctx(
    cfg: LongContextConfig,
    *,
    log: Callable[[str], None] | None = None,
    command: str = "",
    on_row: Callable[[LongContextResult], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> LongContextResult:
    """Every family x T of ``cfg`` (module docstring).  ``on_row``: called with the result so far
    after every row (the campaign saves it); ``clock``: the time the budget is spent on, in
    seconds."""
    cfg.validate()
    say = log or (lambda s: None)
    t_start = clock()
    dev = bench_device(cfg.bench_config(cfg.shapes()[0], cfg.seq_lens[0]))
    limit = (
        machine_memory_bytes(dev)
        if cfg.memory_limit_gib == MEMORY_MACHINE
        else int(cfg.memory_limit_gib * 2**30)
    )
    env = environment(dev)
    # every row runs with these (run_bench sets them for its run), not the process's default
    if cfg.threads != THREADS_AUTO:
        env.torch_threads = cfg.threads
    res = LongContextResult(
        preset=cfg.name,
        date=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        env=env,
        config=cfg,
        rows=[],
        fits=[],
        memory_limit_bytes=limit,
        goal={},
        runs={},
        command=command or f"tokendrop bench --preset {cfg.name}",
    )
    deadline = None if cfg.time_budget_s == BUDGET_NONE else t_start + float(cfg.time_budget_s)
    todo = [(shape, t) for shape in cfg.shapes() for t in cfg.seq_lens]
    walls: dict[str, float] = {}  # family (and "" for any) -> its last measured row's wall time
    for i, (shape, t) in enumerate(todo):
        fam = shape.family
        left = None if deadline is None else deadline - clock()
        share = BUDGET_NONE if left is None else max(1.0, left / (len(todo) - i))
        bc = cfg.bench_config(shape, t, share)
        b = bc.batch_size(t)
        need = ROW_GROWTH * walls.get(fam, walls.get("", 0.0))
        if left is not None and (left <= 0 or left < need):
            res.rows.append(Row(fam, t, b, "skipped (time budget)"))
            say(
                f"longctx {fam} T={t}: skipped (time budget: {max(0.0, left):.0f} s left, the row "
                f"needs ~{need:.0f} s)"
            )
            continue
        say(f"longctx {fam} T={t} B={b}")
        t_row = clock()
        try:
            r = run_bench(bc, log=say, command=res.command)
        except torch.OutOfMemoryError as e:
            res.rows.append(Row(fam, t, b, "out of memory", note=" ".join(str(e).split())[:200]))
            say(f"longctx {fam} T={t}: out of memory at B={b}")
            _free(dev)
            continue
        res.runs[f"{fam}/T{t}"] = r.to_dict()
        row = _row(fam, t, r, cfg, bc, limit)
        row.wall_s = walls[fam] = walls[""] = clock() - t_row
        res.rows.append(row)
        say(
            f"  {fam} T={t}: dense {row.dense_ms:.0f} ms, drop {row.drop_ms:.0f} ms, "
            f"{row.speedup:.2f}x "
            f"(bound {row.flop_bound:.2f}x, {100 * row.fraction_of_bound:.0f}%"
            + (
                f"; CPU time {row.speedup_cpu:.2f}x, {100 * row.fraction_of_bound_cpu:.0f}%"
                if row.speedup_cpu
                else ""
            )
            + f"), attention {100 * row.attention_share_dense:.0f}% of the FLOPs"
        )
        _free(dev)
        _finish(res, limit, clock() - t_start)
        if on_row is not None:
            on_row(res)
    _finish(res, limit, clock() - t_start)
    return res


def _finish(res: LongContextResult, limit: int, wall_s: float) -> None:
    res.env.loadavg_end = loadavg()
    res.fits = [
        family_fit(fam, s, mine, limit)
        for fam, mine in by_family(res.rows).items()
        for s in ("dense", "drop")
    ]
    res.goal = goal(res.rows)
    res.wall_s = wall_s


def _free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
# report


def _f(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "--" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x * scale, fmt)


def _ms_range(median: float | None, lo: float | None, hi: float | None) -> str:
    """'169 [165-172]': a median and the range of the timed steps, in ms."""
    rng = "" if lo is None or hi is None else f" [{lo:.0f}-{hi:.0f}]"
    return _f(median, ".0f") + rng


def _load(env: Environment) -> str:
    a, b = env.loadavg_start, env.loadavg_end
    if not a:
        return "load average unknown"
    return f"load average {' '.join(f'{v:.2f}' for v in a)} at the start" + (
        f", {' '.join(f'{v:.2f}' for v in b)} at the end" if b else ""
    )


def host_line(res: LongContextResult) -> str:
    e = res.env
    where = e.gpu_name or f"{e.cpu_model} ({e.cpu_count} cores)"
    return (
        f"{where}, torch {e.torch}, {e.torch_threads} thread(s), {res.config.precision}; "
        f"{_load(e)}; memory limit {res.memory_limit_bytes / 2**30:.1f} GiB"
    )


def format_markdown(res: LongContextResult) -> str:
    cfg = res.config
    cpu = any(r.speedup_cpu is not None for r in res.rows)
    lines = [
        f"# Long context: dense vs {cfg.rate:.0%} token dropping, both families ({res.preset})",
        "",
        f"Command: `{res.command}`",
        "",
        f"Host: {host_line(res)}",
        "",
        f"Date {res.date}; {res.wall_s:.0f} s wall; {cfg.warmup} warm-up step(s), {cfg.rounds} "
        "interleaved rounds x "
        f"{cfg.reps} per setting; per-document attention {cfg.document_attention}, "
        + (
            "one document per row"
            if cfg.document_tokens == DOCUMENT_ROW
            else f"documents of {cfg.document_tokens} tokens"
        )
        + f"; {cfg.tokens_per_step} tokens per step (B = tokens / T)"
        if not cfg.batch_sizes
        else "",
        "",
    ]
    for shape in cfg.shapes():
        mc = cfg.bench_config(shape, cfg.seq_lens[0]).model_config()
        lines.append(f"* {describe_model(mc)}, {mc.num_heads} heads, vocab {mc.vocab_size}")
    lines += [
        "",
        "Speed-up = the median over rounds of dense step time / dropping step time, measured "
        "seconds apart (paired); [min-max] over the rounds (at least "
        f"{cfg.min_rounds} per row, whatever the time budget; `rounds`: how many ran); step "
        "times: the median [min-max] of the timed steps.  FLOP bound = dense FLOPs / dropping "
        "FLOPs (`tokendrop.dropping.flops`)."
        + (
            " CPU time = process time, robust to waiting for a core on a loaded machine."
            if cpu
            else ""
        ),
        "",
    ]
    head = [
        "family",
        "T",
        "B",
        "dense ms [min-max]",
        "drop ms [min-max]",
        "speed-up (wall)",
        "rounds",
    ]
    if cpu:
        head += ["speed-up (CPU time)"]
    head += [
        "FLOP bound",
        "% of bound (wall" + (" / CPU)" if cpu else ")"),
        "attention share of FLOPs dense / drop",
        "peak MiB dense / drop",
        "largest B in the limit dense / drop (est.)",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res.rows:
        if r.status != "measured":
            lines.append(
                f"| {r.family} | {r.seq_len} | {r.batch_size} | {r.status} |"
                + " |" * (len(head) - 4)
            )
            continue
        cells = [
            r.family,
            str(r.seq_len),
            str(r.batch_size),
            _ms_range(r.dense_ms, r.dense_ms_min, r.dense_ms_max),
            _ms_range(r.drop_ms, r.drop_ms_min, r.drop_ms_max),
            f"{r.speedup:.2f}x [{r.speedup_min:.2f}-{r.speedup_max:.2f}]",
            str(r.rounds_done),
        ]
        if cpu:
            cells.append(_f(r.speedup_cpu, ".2f") + "x")
        bound = f"{r.flop_bound:.2f}x" + (
            f" ({r.flop_bound_masked_dense:.2f}x masked)" if r.flop_bound_masked_dense else ""
        )
        frac = (
            _f(r.fraction_of_bound, ".0f", 100)
            + "%"
            + ("" if not cpu else " / " + _f(r.fraction_of_bound_cpu, ".0f", 100) + "%")
        )
        mem = (
            _f(r.dense_fit.peak_bytes if r.dense_fit else None, ".0f", 2**-20)
            + " / "
            + _f(r.drop_fit.peak_bytes if r.drop_fit else None, ".0f", 2**-20)
        )
        fits = (
            str(r.dense_fit.largest_batch if r.dense_fit else "--")
            + " / "
            + str(r.drop_fit.largest_batch if r.drop_fit else "--")
        )
        cells += [
            bound,
            frac,
            f"{100 * r.attention_share_dense:.0f}% / {100 * r.attention_share_drop:.0f}%",
            mem,
            fits,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where it stops fitting (limit " + f"{res.memory_limit_bytes / 2**30:.1f} GiB):",
        "",
    ]
    for f in res.fits:
        lines.append(
            f"* {f.family} {f.setting}: "
            + (f"T = {f.first_t_not_fitting}" if f.first_t_not_fitting else "not found")
            + f" ({f.method})"
        )
    lines += [
        "",
        f"Goal (a benchmark, not a test): dropping at >= {GOAL_FRACTION:.2f} of its FLOP "
        "bound at every T.",
        "",
    ]
    for fam, g in res.goal.items():
        if not isinstance(g, dict):
            continue
        ts = sorted(int(k.split("_T")[1]) for k in g if k.startswith("speedup_T"))
        lo, hi = ts[0], ts[-1]
        line = (
            f"* {fam}: met at {g['met_wall']} of {g['rows']} T by wall clock"
            + (f", {g['met_cpu_time']} of {g['rows']} by CPU time" if "met_cpu_time" in g else "")
            + f"; speed-up {g[f'speedup_T{hi}']:.2f}x at T={hi} (bound "
            f"{g[f'flop_bound_T{hi}']:.2f}x) vs "
            f"{g[f'speedup_T{lo}']:.2f}x at T={lo} (bound {g[f'flop_bound_T{lo}']:.2f}x)"
        )
        if "met_cpu_time" in g:
            line += f"; CPU time {g[f'speedup_cpu_T{hi}']:.2f}x vs {g[f'speedup_cpu_T{lo}']:.2f}x"
        lines.append(line)
    return "\n".join(lines) + "\n"


def format_text(res: LongContextResult) -> str:
    return format_markdown(res)


def write_longctx(res: LongContextResult, path: str | os.PathLike) -> tuple[Path, Path]:
    """``path`` (.json) and the Markdown beside it (a directory: ``<machine>-<preset>.json`` in
    it)."""
    return write_json_and_markdown(
        path, res.env.machine, res.preset, res.to_dict(), format_markdown(res)
    )
