"""What a run says while it runs: on the console and in its own log file (``RUN/log.txt``).

* ``RunLog``: lines to stderr (unless quiet) and appended to the run's log file (rank 0), so a
  batch job's output and the run directory hold the same account;
* ``Progress``: a tqdm bar on a terminal; anywhere else (a Slurm log, a pipe, ``nohup``) one plain
  line per interval -- step, loss, eval loss when there is one, lr, tokens/s, elapsed, ETA -- never
  the frames of a bar; the lines always go to the log file;
* ``banner`` / ``summary``: the block printed before any work (what the run will do: model, source,
  whether tokens are dropped and the FLOP bound, data, length, warm-ups, batch, lr, device) and the
  block printed at the end (the wall time of each phase, the final losses beside the unigram
  entropy of the data, where the outputs are).

The trainer (``tokendrop.train``) and ``finetune`` fill them in; nothing here reads a config file.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tokendrop.data.masking import unigram_note
from tokendrop.dropping.flops import flop_ratio
from tokendrop.train.schedules import batch_warmup_line

LOG_FILE = "log.txt"


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (stderr) is an interactive terminal with a width (a progress bar is drawn
    only there; a pseudo-terminal that reports 0 columns, as some CI runners' do, gets the plain
    progress lines, which need no width)."""
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty()) and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):
        return False


def fmt_seconds(s: float) -> str:
    """0:07, 3:05, 1:02:03 (h:mm:ss)."""
    if not math.isfinite(s) or s < 0:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def fmt_count(n: float) -> str:
    """12,345 / 1.23M / 4.5B: a count for a person to read."""
    n = float(n)
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:,.0f}"


class RunLog:
    """Lines to stderr (``echo``) and appended to ``path`` (``None``: no file; a rank other than
    0)."""

    def __init__(self, path: str | os.PathLike | None, echo: bool = True):
        self.path = Path(path) if path is not None else None
        self.echo = echo

    def say(self, line: str = "", console: bool = True) -> None:
        if self.echo and console:
            print(line, file=sys.stderr, flush=True)
        self.write(line)

    def write(self, line: str) -> None:
        """Into the log file only."""
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def block(self, lines: Iterable[str], console: bool = True) -> None:
        for line in lines:
            self.say(line, console)


def interval_line(
    step: int,
    total: int | None,
    rec: dict[str, Any] | None,
    ev: dict[str, float] | None,
    elapsed: float,
    eta: float | None,
) -> str:
    """One plain progress line: ``step 20/40 | loss 4.775 | eval loss 4.69 | lr 1.0e-04 | 43,589
    tok/s | 0:02 elapsed, ETA 0:03``."""
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    if rec is not None:
        parts.append(f"loss {rec['loss']:.4f}")
    if ev:
        parts.append(f"eval loss {ev['eval_loss']:.4f}")
    if rec is not None:
        parts.append(f"lr {rec['lr']:.2e}")
        parts.append(f"{rec['tokens_per_s']:,.0f} tok/s")
    parts.append(
        f"{fmt_seconds(elapsed)} elapsed" + (f", ETA {fmt_seconds(eta)}" if eta is not None else "")
    )
    return " | ".join(parts)


class Progress:
    """A run's progress: a tqdm bar on a terminal (``bar``), else nothing on the console between
    ``line`` calls, which print one plain line (``console``) and always write it to the log file."""

    def __init__(
        self,
        log: RunLog,
        total: int | None,
        initial: int = 0,
        desc: str = "pretrain",
        bar: bool = False,
        console: bool = True,
    ):
        self.log, self.total, self.console = log, total, console and not bar
        self.t0 = time.perf_counter()
        self.pbar = None
        if bar:
            self.pbar = tqdm(
                total=total or None, initial=initial, desc=desc, unit="step", dynamic_ncols=True
            )

    def update(self, n: int = 1, **postfix: str) -> None:
        if self.pbar is not None:
            self.pbar.update(n)
            if postfix:
                self.pbar.set_postfix(**postfix)

    def line(self, text: str) -> None:
        self.log.write(text)  # the log file always; the console unless a bar shows the figures
        if self.pbar is None and self.console:
            print(text, file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def close(self) -> None:
        if self.pbar is not None:
            self.pbar.close()
            self.pbar = None


def eta(elapsed: float, p0: float, p: float) -> float | None:
    """Seconds left at progress ``p`` after ``elapsed`` seconds since progress ``p0``."""
    if p <= p0 or p >= 1.0:
        return 0.0 if p >= 1.0 else None
    return elapsed * (1.0 - p) / (p - p0)


def phases_line(phases: dict[str, float], total: float) -> str:
    """``set-up 2.1 s, head warm-up 3.9 s, ...`` in the order given, phases of 0 s left out, plus
    the time not in any of them."""
    shown = [(k, v) for k, v in phases.items() if v >= 0.05]
    other = total - sum(phases.values())
    if other >= 0.05:
        shown.append(("other", other))
    return ", ".join(f"{k} {v:.1f} s" for k, v in shown) or "-"


# ----------------------------------------------------------------------------------------------
# pretraining: the banner and the end summary


def dropping_line(d, model_cfg, seq_len: int) -> str:
    """Whether the run drops tokens and how (its ``[drop]`` section ``d``), with the analytic FLOP
    bound against the dense model of ``model_cfg`` (``tokendrop.dropping.flops``); a dense run says
    how to turn dropping on."""
    layers = model_cfg.num_layers
    if not d.enabled:
        return "OFF: a dense run (drop.method = none; token dropping: --set drop.method=cumulative)"
    start, end = d.span(layers)
    if d.per_layer:
        kept = (
            f"kept rows ramped from {d.ltd_start_fraction:g} of T to T over "
            f"{d.ltd_schedule_share:g} of the run"
        )
    elif d.pools:
        kept = "2:1 average pooling"
    else:
        kept = f"rate {d.rate:g} ({d.num_kept(seq_len)} of {seq_len} tokens kept)"
    r = flop_ratio(model_cfg, seq_len, d)
    stage2 = (
        f"; dense for the last {d.stage2_fraction:.0%} of the steps (stage 2)"
        if d.stage2_fraction
        else ""
    )
    if d.dense_start_share:
        stage2 += f"; dense for the first {d.dense_start_share:.0%} of the steps"
    if d.random_start_share:
        after = " after it" if d.dense_start_share else ""
        stage2 += f"; random selection for {d.random_start_share:.0%} of the steps{after}"
    if d.mask_rows != "pinned":
        stage2 += f"; [MASK] rows {d.mask_rows}"
    return (
        f"ON: {d.method}/{d.variant}, {kept} in layers [{start}, {end}) of {layers}{stage2}; FLOP "
        f"bound {1 / r:.2f}x vs dense ({r:.2f} of its FLOPs per "
        f"step{', at the ramp start' if d.per_layer else ''})"
    )


def length_line(tc, num_train: int, seq_len: int) -> str:
    """The run's length in steps, tokens and epochs (or its time budget), with how it was
    resolved."""
    if tc.time_budget:
        return (
            f"a time budget of {tc.time_budget} of training time (train.time_budget, clock "
            f"{tc.budget_clock}); steps as many as fit"
        )
    steps = tc.fixed_steps
    tokens = steps * tc.batch_size * seq_len
    epochs = steps * tc.batch_size / num_train if num_train else float("nan")
    how = next(
        (
            part.split(":")[0].strip()
            for part in tc.resolved_from.split(";")
            if part.strip().startswith(("train.tokens", "train.epochs"))
        ),
        "train.steps",
    )
    return (
        f"{steps:,} steps ({how}) = {fmt_count(tokens)} tokens, {epochs:.2f} epochs of "
        "the training split"
    )


def lr_line(tc) -> str:
    warm = (
        f"warm-up {tc.warmup_ratio:g} of the budget"
        if tc.warmup_ratio
        else f"warm-up {tc.warmup_steps} steps"
    )
    shape = (
        "linear decay to 0"
        if tc.lr_schedule == "linear"
        else f"stable, then {tc.decay_shape} decay over the last {tc.decay_share:g}"
    )
    return (
        f"peak {tc.lr:g}, {tc.lr_schedule}: {warm}, {shape}; AdamW (weight decay "
        f"{tc.weight_decay:g}, "
        f"grad clip {tc.grad_clip:g})"
    )


def pretrain_banner(
    cfg,
    *,
    run_dir,
    start_step: int,
    params: int,
    data,
    world: int,
    device: str,
    precision: str,
    micro_bs: int,
    accum: int,
    parallel: str,
    threads: int,
    head_warmup: str,
    importance: str,
    entropy: float | None,
    source: str = "",
) -> list[str]:
    """The block a pretraining run prints before any work: every line from the resolved config and
    the run's actual set-up (tests check it against ``RUN/config.toml``)."""
    m, tc = cfg.model, cfg.train
    T = data.seq_len
    n_train, n_eval = data.num_sequences("train"), data.num_sequences("eval")
    where = cfg.data.path or f"mixture of {len(cfg.data.paths)} ({', '.join(cfg.data.paths)})"
    state = f"resumed at step {start_step}" if start_step else "new run"
    ffn = f"FFN {m.intermediate_size}"
    lines = [
        f"tokendrop pretrain: {state} in {run_dir}",
        f"  model     {m.family}, {m.num_layers} layers x {m.hidden_size} ({m.num_heads} heads, "
        f"{ffn}), vocab {m.vocab_size}, T={T}: {fmt_count(params)} parameters",
        f"  source    {source or 'random initialisation (no model.init)'}",
        f"  dropping  {dropping_line(cfg.drop, m, T)}",
        f"  data      {where}: {n_train:,} training sequences ({fmt_count(n_train * T)} tokens), "
        f"{n_eval:,} held out"
        + (
            f"; unigram entropy {entropy:.3f} nats (an MLM loss below it beats word frequencies)"
            if entropy is not None
            else ""
        ),
        f"  length    {length_line(tc, n_train, T)}",
        f"  warm-ups  MLM-head: {head_warmup}; importance: {importance}",
        f"  batch     {tc.batch_size} sequences per step = {micro_bs} per micro-batch x "
        f"{accum} accumulated"
        + (f" x {world} ranks" if world > 1 else "")
        + batch_warmup_line(tc)
        + (
            f"; length warm-up from {cfg.data.seq_len_warmup_from} tokens over the first "
            f"{cfg.data.seq_len_warmup_share:g} of the run"
            if cfg.data.seq_len_warmup_from
            else ""
        ),
        f"  lr        {lr_line(tc)}",
        f"  device    {device}, {precision}, "
        + (f"{world} processes ({parallel})" if world > 1 else "1 process")
        + f", {threads} CPU thread(s)"
        + (f"; load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""),
        f"  logging   every {tc.log_every} steps; eval every {tc.eval_every} ({tc.eval_batches} "
        f"batches); checkpoints every {tc.ckpt_every} (keep {tc.keep_checkpoints}); metrics.jsonl"
        + "".join(f", {t}" for t in tc.report_to if t != "jsonl")
        + f"; this log: {LOG_FILE}",
    ]
    return lines


def pretrain_summary(
    *,
    run_dir,
    interrupted: bool,
    step: int,
    total: int | None,
    tokens: int,
    seconds: float,
    phases: dict[str, float],
    tokens_per_s: float,
    last: dict[str, Any] | None,
    ev: dict[str, float] | None,
    entropy: float | None,
) -> list[str]:
    """The block a pretraining run prints at its end."""
    state = "interrupted (checkpoint saved)" if interrupted else "finished"
    of = f" of {total:,}" if total else ""
    lines = [
        f"tokendrop pretrain: {state} at step {step:,}{of}, {fmt_count(tokens)} tokens trained in "
        f"this process, {seconds:.1f} s",
        f"  phases    {phases_line(phases, seconds)}",
        f"  training  {tokens_per_s:,.0f} tokens/s"
        + (f"; last train loss {last['loss']:.4f}" if last else ""),
    ]
    if ev:
        note = unigram_note(ev["eval_loss"], entropy)
        lines.append(
            f"  eval      loss {ev['eval_loss']:.4f}, acc {ev['eval_acc']:.4f}"
            + (f"; {note}" if note else "")
        )
    lines.append(
        f"  outputs   {run_dir}: checkpoints/, metrics.jsonl, {LOG_FILE}"
        + ("" if interrupted else ", report.md")
        + f"; export: tokendrop export {run_dir} OUT_DIR"
    )
    if interrupted:
        lines.append(f"  continue  tokendrop pretrain --resume {shlex.quote(str(run_dir))}")
    return lines


__all__ = [
    "pretrain_banner",
    "pretrain_summary",
    "dropping_line",
    "LOG_FILE",
    "RunLog",
    "Progress",
    "interval_line",
    "eta",
    "phases_line",
    "fmt_seconds",
    "fmt_count",
    "is_terminal",
]
