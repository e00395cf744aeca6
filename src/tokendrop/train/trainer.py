"""Pretraining: ``pretrain(cfg, out_dir)`` runs (or resumes) a whole job and returns a
``PretrainResult``.

It works in one process or under ``torchrun`` (DDP or FSDP2: gloo on CPU, NCCL on GPU); the global
batch is ``train.batch_size`` whatever the number of ranks, split into per-rank micro-batches with
gradient accumulation.  The run goes through named phases (``_Trainer``): set up (device, data, the
resolved config), open the run directory (new, or the checkpoint to resume), build the model,
selector and optimizer, restore a checkpoint's state, the loop (``train_step`` -> ``host_sync`` ->
``log_step`` / ``evaluate`` / ``checkpoint``), finish.  One optimizer step is
``tokendrop.train.step``; what a resume refuses and loads is ``tokendrop.train.resume``.
SIGINT/SIGTERM stop after the current step with a checkpoint (every rank after the same step).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from tokendrop.config import EVAL_ALL, MICRO_BATCH_AUTO, THREADS_AUTO, Config, to_dict, to_toml
from tokendrop.config.checks import check_cpu_count
from tokendrop.data import MLMLoader
from tokendrop.data.masking import unigram_entropy, unigram_note
from tokendrop.data.mixture import realised
from tokendrop.dropping.flops import gpu_peak_flops
from tokendrop.dropping.importance import pinned_ids
from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import ConfigError, TrainingError, check_arg, check_path_arg
from tokendrop.fields import FREE
from tokendrop.host import host_side
from tokendrop.models.attention import check_training_device
from tokendrop.models.families import build_model, spec_of
from tokendrop.models.hf import copy_tokenizer
from tokendrop.models.masked_lm import num_parameters
from tokendrop.runs import checkpoint as ckpt_mod, rundir
from tokendrop.runs.files import DISK_ERRNOS, atomic_directory, atomic_write_text, os_error_fix
from tokendrop.runs.gate import gate
from tokendrop.runs.metrics import MetricsLog, read_metrics, truncate_metrics
from tokendrop.runs.trackers import check_installed
from tokendrop.train.budget import RunLength, budget_clock
from tokendrop.train.compiled import compiled_shapes, resolve_mode
from tokendrop.train.console import (
    LOG_FILE,
    Progress,
    RunLog,
    eta,
    interval_line,
    is_terminal,
    pretrain_banner,
    pretrain_summary,
)
from tokendrop.train.continued import describe_warm_ups, load_source, warm_start
from tokendrop.train.memory import check_memory
from tokendrop.train.parallel import Dist, autocast_for, close_distributed, init_distributed, wrap
from tokendrop.train.report import write_run_report
from tokendrop.train.resume import (
    check_checkpoint,
    check_resume_data,
    config_changes,
    load_training_state,
    rank_rng,
    save_training_state,
)
from tokendrop.train.run_config import open_run_data, resolve_init
from tokendrop.train.runtime import adamw, autocast_dtype, resolve_device
from tokendrop.train.schedules import lr_schedule, mask_schedule
from tokendrop.train.step import MLMStep, evaluate_mlm
from tokendrop.train.warmups import StepPlan, default_micro_batch

STEP_KEYS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "mlm_positions",
    "mlm_labels",
    "mlm_weights",
)


def _cat(ts: list[Tensor], pin: bool) -> Tensor:
    """Loader batches joined along the batch (into pinned memory when the loader pins)."""
    if not pin:
        return torch.cat(ts)
    out = torch.empty(
        (sum(t.shape[0] for t in ts), *ts[0].shape[1:]), dtype=ts[0].dtype, pin_memory=True
    )
    return torch.cat(ts, out=out)


def heldout_batches(data, batch_size: int, *, seed: int, mask_prob: float) -> MLMLoader:
    """The held-out batches a run is evaluated on: the eval split in order, masked at the run's
    final masking rate (``mask_prob``: ``data.mask_prob_end``) with its seed (``train.seed``); the
    first ``train.eval_batches x train.batch_size`` sequences per rank are what an evaluation
    reads."""
    return MLMLoader(
        data,
        split="eval",
        batch_size=batch_size,
        seed=seed,
        mask_prob=mask_prob,
        num_workers=0,
        shuffle=False,
        loop=False,
    )


@dataclass
class PretrainResult:
    run_dir: Path
    steps: int
    interrupted: bool
    wall_time: float  # seconds of training steps (excluding evaluation and checkpoints)
    tokens_per_s: float
    final_eval: dict[str, float]
    flops_per_step: dict[str, float]
    importance: Tensor | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    # the signal that interrupted the run (SIGINT 2, SIGTERM 15); 0: none or stop_at
    stop_signal: int = 0
    # resumed a run that had already reached train.steps: nothing was trained
    already_finished: bool = False

    def __repr__(self) -> str:
        """One line: where, how far, how fast, the last evaluation; the importance vector and the
        history by their sizes (``.importance``, ``.history`` hold them)."""
        state = (
            "interrupted"
            if self.interrupted
            else "already finished"
            if self.already_finished
            else "finished"
        )
        ev = ", ".join(f"{k}={v:.4f}" for k, v in self.final_eval.items() if isinstance(v, float))
        imp = "None" if self.importance is None else f"<{self.importance.numel()} scores>"
        return (
            f"PretrainResult({str(self.run_dir)!r}, {state} at step {self.steps}, "
            f"{self.wall_time:.1f} s, "
            f"{self.tokens_per_s:,.0f} tokens/s, final_eval: {{{ev}}}, importance={imp}, "
            f"history=<{len(self.history)} records>)"
        )


def pretrain(
    cfg: Config,
    out_dir: str | os.PathLike,
    resume: bool = False,
    progress: bool = True,
    stop_at: int | None = None,
    overwrite: bool = False,
    clock=None,
    banner: bool | None = None,
    command: str = "",
) -> PretrainResult:
    """Run (or resume) a pretraining job into ``out_dir``.

    ``stop_at``: pause after that step (a checkpoint is written; ``--resume`` continues), as a
    SIGINT/SIGTERM would; the schedule still runs to ``train.steps``.
    ``overwrite``: start over in an existing run directory (only one tokendrop marked as a run and
    that holds none of the run's inputs; ``tokendrop.runs.rundir.prepare_output``).  The run
    directory is locked (rank 0) for the whole call: a second writer fails at once with "... in use
    by pid N". ``clock``: the seconds clock training time is measured with (default
    ``train.budget_clock``'s: ``time.perf_counter`` or ``time.process_time``; tests pass a fake one
    to check ``train.time_budget`` without sleeping).
    ``progress``: a progress bar on a terminal, one line per log interval anywhere else (a batch
    job's log); ``banner`` (default: ``progress``): the start-up block (what the run will do) and
    the end summary (the time of each phase) on stderr.  Both always go to ``RUN/log.txt``.
    ``command``: the command line that started it (the run's start record and its export's model
    card keep it)."""
    check_arg(
        "pretrain",
        "cfg",
        cfg,
        Config,
        "a tokendrop.Config",
        "a preset by name: tokendrop.load_config('tiny', ['data.path=\"DIR\"'])",
    )
    check_path_arg("pretrain", "out_dir", out_dir)
    for name, v in (("resume", resume), ("progress", progress), ("overwrite", overwrite)):
        check_arg("pretrain", name, v, bool, "True or False")
    cfg.validate()
    check_cpu_count("train.threads", cfg.train.threads, "threads", 'set train.threads = "auto"')
    check_cpu_count("data.num_workers", cfg.data.num_workers, "worker processes", "set fewer")
    # a tracker asked for and not installed: before anything is written
    check_installed(cfg.train.report_to)
    src = resolve_init(cfg, resume)  # model.init: resolved once, here (tokendrop.train.run_config)
    run_dir = Path(out_dir)
    device_kind = (
        "cuda"
        if (
            cfg.train.device == "cuda" or (cfg.train.device == "auto" and torch.cuda.is_available())
        )
        else "cpu"
    )
    check_training_device(cfg.model.attention_backend, device_kind)
    dd = init_distributed(device_kind, cfg.train.parallel)
    threads = torch.get_num_threads()
    clean = False
    try:
        with rundir.lock(run_dir, TrainingError) if dd.main else contextlib.nullcontext():
            result = _pretrain(
                cfg,
                run_dir,
                resume,
                progress,
                dd,
                stop_at,
                overwrite,
                clock or budget_clock(cfg.train),
                src,
                progress if banner is None else banner,
                command,
            )
        clean = True
        return result
    finally:
        torch.set_num_threads(threads)  # train.threads applies to this run only
        close_distributed(dd, clean)


def _pretrain(
    cfg: Config,
    run_dir: Path,
    resume: bool,
    progress: bool,
    dd: Dist,
    stop_at: int | None,
    overwrite: bool = False,
    clock=time.perf_counter,
    src=None,
    banner: bool = True,
    command: str = "",
) -> PretrainResult:
    t = _Trainer(cfg, run_dir, resume, progress, dd, stop_at, overwrite, clock, src, banner)
    t.command = command
    t.set_up()
    t.check_memory()  # before anything is allocated or written
    t.check_eval()
    done = t.open_run()
    if done is not None:  # resumed a run that had already finished: nothing to do
        return done
    t.build()
    t.announce()
    t.warm_up()
    t.wrap()
    t.restore()
    t.make_step()
    t.start()
    return t.run()


class _Trainer:
    """One pretraining run as a sequence of phases, each a method:

        set_up     device, precision, the batch geometry, the prepared data and the resolved config
        open_run   the run directory: a new one (config.toml, tokenizer) or the checkpoint to resume
        build      model, selector, the source's weights (``model.init``)
        announce   the start-up banner (console and RUN/log.txt): what the run will do
        warm_up    a new run: the MLM-head warm-up and the importance warm start
                   (tokendrop.train.continued)
        wrap       DDP/FSDP wrapping, AdamW
        restore    (resume) weights, AdamW state, importance, every rank's RNG
        make_step  the step function and the loader (at the resumed position)
        start      the metrics log, the start row and the step-0 evaluation of a new run
        run        the loop: ``train_step`` -> ``host_sync`` -> ``log_step`` / ``evaluate`` /
                   ``checkpoint`` -> ``finish``

    The attributes are the run's state; nothing of the config is changed after ``set_up``.  Each
    phase's wall time is added to ``phases`` (the end summary's)."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        resume: bool,
        progress: bool,
        dd: Dist,
        stop_at: int | None,
        overwrite: bool,
        clock,
        src,
        banner: bool = True,
    ):
        self.cfg, self.run_dir, self.resume, self.progress, self.dd = (
            cfg,
            run_dir,
            resume,
            progress,
            dd,
        )
        self.stop_at, self.overwrite, self.clock, self.src, self.banner = (
            stop_at,
            overwrite,
            clock,
            src,
            banner,
        )
        self.meta_in: dict[str, Any] | None = None
        self.t_begin = self.t_phase = time.perf_counter()
        self.phases = {
            "set-up": 0.0,
            "MLM-head warm-up": 0.0,
            "importance pass": 0.0,
            "training": 0.0,
            "evaluation": 0.0,
            "checkpoints": 0.0,
        }
        self.console = RunLog(None, banner and dd.main)  # RUN/log.txt once the run directory exists
        self.run_id: str | None = None  # the run directory's (open_run), recorded in checkpoints

    def _phase(self, name: str) -> None:
        """Add the wall time since the last mark to phase ``name``."""
        now = time.perf_counter()
        self.phases[name] += now - self.t_phase
        self.t_phase = now

    # -- set up
    # --------------------------------------------------------------------------------------
    def set_up(self) -> None:
        cfg, tc, dd = self.cfg, self.cfg.train, self.dd
        self.masks = mask_schedule(cfg.data)  # tokendrop.train.schedules
        self.device = resolve_device(tc.device, dd.local_rank, "train.device", ConfigError)
        resolve_mode(tc.compile, self.device)  # a mode the device cannot run: refused now
        if tc.threads != THREADS_AUTO:
            torch.set_num_threads(tc.threads)
        if tc.deterministic:
            torch.use_deterministic_algorithms(True)
        self.amp = autocast_dtype(tc.precision, self.device)
        if tc.batch_size % dd.world:
            raise ConfigError(
                f"train.batch_size: {tc.batch_size} is not divisible by the {dd.world} ranks"
            )
        per_rank = self.per_rank = tc.batch_size // dd.world
        # micro_bs: the loader's batch.  With train.micro_batch_size "auto" a step runs one
        # micro-batch of all its loader batches (a batch warm-up's current batch), unless the
        # memory pre-flight says the whole batch does not fit (check_memory): then it accumulates
        # loader batches
        self.merge = tc.micro_batch_size == MICRO_BATCH_AUTO
        self.micro_bs = (
            default_micro_batch(tc, per_rank, dd.world) if self.merge else tc.micro_batch_size
        )
        if per_rank % self.micro_bs:
            raise ConfigError(
                f"train.micro_batch_size: {self.micro_bs} does not divide the per-rank "
                f"batch {per_rank}"
            )
        self.accum = per_rank // self.micro_bs
        # an evaluation reads train.eval_batches per-rank batches of train.batch_size sequences, in
        # micro-batches: the same held-out sequences whatever the micro-batch (a batch warm-up's
        # too)
        # (0: all of them, as evaluate_mlm reads it)
        self.eval_micro = 0 if tc.eval_batches == EVAL_ALL else tc.eval_batches * self.accum
        if self.resume and cfg.data.path and not os.path.isdir(cfg.data.path):
            where = (
                f"is relative and not found from {os.getcwd()}; resume from the directory the run "
                "was started in, or"
                if not os.path.isabs(cfg.data.path)
                else "is not there any more; if the data moved,"
            )
            raise TrainingError(
                f"--resume: data.path {cfg.data.path!r} {where} pass --set data.path=DIR (accepted "
                "when its fingerprint equals the one the run recorded)"
            )
        # the resolved config (train.tokens / epochs / warmup_ratio as steps): not changed from here
        # on
        self.cfg, self.data = open_run_data(cfg, self.src, new_run=not self.resume, world=dd.world)
        self.data_fp = self.data.fingerprint()
        self.T = self.data.seq_len
        self.tc = self.cfg.train
        self.length, self.lrs = RunLength.of(self.tc), lr_schedule(self.tc)
        if self.tc.fixed_steps:  # before anything is written: a phase the run cannot hold
            self.cfg.drop.check_steps(self.tc.fixed_steps)

    def check_memory(self) -> None:
        """Refuse a model and batch that cannot fit in the device's memory
        (tokendrop.train.memory)."""
        if not self.tc.memory_check:
            return
        cfg = self.cfg
        run = (cfg.model, cfg.drop, cfg.data.mask_prob_max, self.T)
        args = (self.device, self.dd.world, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        sharded = self.tc.parallel == "fsdp"
        if self.merge and self.per_rank > self.micro_bs:
            try:
                check_memory(*run, self.per_rank, *args, sharded=sharded)
                return
            # the whole batch does not fit in one pass: accumulate loader batches
            except ConfigError:
                self.merge = False
                self.console.say(
                    f"note: a batch of {self.per_rank} sequences per rank does not fit in one "
                    f"pass; accumulating micro-batches of {self.micro_bs}"
                )
        check_memory(*run, self.micro_bs, *args, sharded=sharded)

    def check_eval(self) -> None:
        """A held-out split that holds sequences but gives no prediction slot would be scored on n =
        0 (an eval loss of 0.0): refused before the run starts.  (An empty split: the run is not
        evaluated, and says so when it starts.)"""
        if self.data.num_sequences("eval") == 0:
            return
        for i, mb in enumerate(self.eval_batches()):
            if self.eval_micro and i >= self.eval_micro:
                break
            if float(mb["mlm_weights"].sum()) > 0:
                return
        raise TrainingError(
            f"{self.cfg.data.path or ', '.join(self.cfg.data.paths)}: the held-out split's "
            f"{self.data.num_sequences('eval')} sequences give no prediction slot (n = 0) in the "
            f"batches an evaluation reads (train.eval_batches = {self.tc.eval_batches}), so the "
            "run could not be evaluated; prepare the data with more text or a larger "
            "--eval-fraction"
        )

    # -- the run directory
    # ---------------------------------------------------------------------------
    def open_run(self) -> PretrainResult | None:
        cfg, dd, run_dir = self.cfg, self.dd, self.run_dir
        mode = "new"
        if self.resume:
            if not rundir.has_checkpoint_dir(run_dir):
                raise TrainingError(
                    f"--resume: {run_dir} has no checkpoint (the run stopped before its first "
                    "one): nothing to resume; start it over with the command that started it "
                    "(corrected, if it failed), or as it was recorded: tokendrop pretrain "
                    f"--config {shlex.quote(str(run_dir / 'config.toml'))} --out "
                    f"{shlex.quote(str(run_dir))}"
                )
            # the shared verifying loader; a bad checkpoint is skipped with a warning naming its
            # file
            try:
                # shards: in restore
                self.last, self.meta_in, self.model_sd, self.state_sd = ckpt_mod.load_verified(
                    run_dir, state=True, fallback=True, consolidate=False
                )
            except ckpt_mod.CheckpointError as e:
                raise TrainingError(
                    f"--resume: no valid checkpoint under {run_dir}/checkpoints ({e})"
                ) from None
            counters = ckpt_mod.step_counters(self.last, self.meta_in)  # shards' too
            check_checkpoint(
                self.last,
                self.meta_in,
                counters,
                to_dict(cfg),
                resuming=True,
                run_id=rundir.run_id(run_dir),
            )
            check_resume_data(self.meta_in, cfg.data, self.data)
            changed = config_changes(self.meta_in.get("config") or {}, to_dict(cfg), FREE)
            if changed and dd.main:  # accepted (fields declared free), said field by field
                print(
                    "note: --resume continues with settings changed from the checkpoint's: "
                    + "; ".join(f"{k} {a!r} -> {b!r}" for k, a, b in changed),
                    file=sys.stderr,
                )
            step, used = int(self.meta_in["step"]), float(self.meta_in.get("wall_time", 0.0))
            if self.length.finished(step, used):  # a requeued or repeated launch of a finished run
                return _finished(run_dir, step, self.length, dd, self.meta_in)
        elif dd.main:
            mode = rundir.prepare_output(
                run_dir,
                "run",
                self.overwrite,
                error=TrainingError,
                resumable=False,
                inputs=[cfg.data.path, *cfg.data.paths, cfg.model.init, cfg.drop.counts_path],
            )
        if dd.main:
            if mode == "restart":
                print(
                    f"note: {run_dir} holds a run that stopped before its first checkpoint "
                    "(nothing to resume); "
                    "starting it over",
                    file=sys.stderr,
                )
            if mode in ("replace", "restart"):
                rundir.discard(run_dir)
            rundir.create(run_dir, "run")
            atomic_write_text(run_dir / "config.toml", to_toml(cfg))
            tok_dst = run_dir / "tokenizer"
            if not tok_dst.exists():
                with atomic_directory(tok_dst) as tok_tmp:
                    copy_tokenizer(
                        self.data.tokenizer_path, tok_tmp, cfg.model.max_position_embeddings
                    )
            self.console.path = run_dir / LOG_FILE
        if dd.world > 1:
            dist.barrier()
        self.run_id = rundir.run_id(run_dir)
        return None

    # -- model, selector, optimizer; the step and the loader
    # ------------------------------------------
    def build(self) -> None:
        """The model (the family's MLM model), the selector, and a new run's source weights."""
        cfg, tc, dd, data, device = self.cfg, self.tc, self.dd, self.data, self.device
        torch.manual_seed(tc.seed)
        model = self.model = build_model(cfg.model, cfg.drop)  # the family's MLM model
        # BERT's pooler: no NSP, not trained in pretraining
        for name in spec_of(cfg.model).pretrain_frozen:
            model.get_submodule(name).requires_grad_(False)
        model.to(device)
        # same initial weights everywhere (above); from here each rank its own dropout stream
        if dd.world > 1:
            torch.manual_seed(tc.seed + dd.rank)
        counts = None
        if cfg.drop.selection.needs_counts:
            counts = np.load(cfg.drop.counts_path) if cfg.drop.counts_path else data.token_counts()
        pinned = pinned_ids(cfg.drop, data.vocab() if cfg.drop.pinned_tokens else [])
        # the method (tokendrop.dropping.plan): its rules, its selector (each rank its own random
        # draws)
        self.plan = DropPlan.for_model(
            cfg.drop,
            cfg.model,
            self.T,
            data.special_ids,
            pinned_ids=pinned,
            counts=counts,
            seed=tc.seed + dd.rank,
            total_steps=tc.fixed_steps,
            device=device,
        )
        self.selector = self.plan.selector
        self.init_events = (
            []
            if self.meta_in is not None
            else load_source(cfg.model, model, self.run_dir, dd, self.src)
        )
        self._phase("set-up")

    def announce(self) -> None:
        """The start-up banner (rank 0): on stderr and at the top of this process's part of
        RUN/log.txt."""
        self.entropy = unigram_entropy(self.data.token_counts(), self.data.special_ids)
        # eval records
        self.entropy_rec = {"unigram_entropy": self.entropy} if self.entropy is not None else {}
        if self.dd.main:
            cfg = self.cfg
            source, head, importance = describe_warm_ups(
                cfg.model,
                cfg.train,
                cfg.drop,
                self.model,
                self.selector,
                self.init_events,
                new=self.meta_in is None,
            )
            self.console.block(
                pretrain_banner(
                    self.cfg,
                    run_dir=self.run_dir,
                    start_step=int(self.meta_in["step"]) if self.meta_in else 0,
                    params=num_parameters(self.model),
                    data=self.data,
                    world=self.dd.world,
                    device=str(self.device),
                    precision=str(self.amp).replace("torch.", "")
                    if self.amp is not None
                    else "fp32",
                    micro_bs=self.per_rank if self.merge else self.micro_bs,
                    accum=1 if self.merge else self.accum,
                    parallel=self.tc.parallel,
                    threads=torch.get_num_threads(),
                    head_warmup=head,
                    importance=importance,
                    entropy=self.entropy,
                    source=source,
                )
            )

    def warm_up(self) -> None:
        """A new run: the MLM-head warm-up and the importance warm start
        (tokendrop.train.continued)."""
        self.t_phase = time.perf_counter()
        if self.meta_in is None:
            cfg = self.cfg
            self.init_events = warm_start(
                cfg.train,
                cfg.drop,
                cfg.data.mask_prob_start,
                bool(cfg.model.init),
                self.model,
                self.selector,
                self.data,
                self.init_events,
                self.dd,
                self.device,
                self.amp,
                self.micro_bs,
                self.console if self.dd.main else None,
                self.progress,
            )
        for ev in self.init_events:
            if ev.get("event") == "head_warmup":
                self.phases["MLM-head warm-up"] += ev["seconds"]
            elif ev.get("event") == "importance_init":
                self.phases["importance pass"] += ev["seconds"]
        self.t_phase = time.perf_counter()

    def wrap(self) -> None:
        """DDP/FSDP wrapping (a checkpoint's unsharded weights first) and AdamW."""
        model, tc, dd, device = self.model, self.tc, self.dd, self.device
        if self.meta_in is not None and not ckpt_mod.is_sharded(self.meta_in):
            # an unsharded checkpoint: before DDP's broadcast or FSDP's sharding
            model.load_state_dict(self.model_sd)
        # FSDP: before AdamW
        self.par = wrap(model, tc.parallel if dd.grouped else "ddp", dd, device, self.amp)
        self.amp = autocast_for(self.par, self.amp, device)
        # fused kernels on CUDA and CPU (torch >= 2.4)
        self.opt = adamw(
            model, tc.lr, tc.weight_decay, (tc.adam_beta1, tc.adam_beta2), tc.adam_eps, fused=True
        )

    def make_step(self) -> None:
        """The step function and the training batches (at the resumed position)."""
        cfg, tc, dd, data = self.cfg, self.tc, self.dd, self.data
        self.compile_mode = resolve_mode(tc.compile, self.device)
        # sequence-length / batch warm-ups; compiled, a batch warm-up whose steps run one
        # micro-batch of the current batch is bucketed (one graph per batch it trains at)
        self.shapes = StepPlan(
            tc,
            cfg.data,
            self.T,
            data.packed,
            self.micro_bs,
            dd.world,
            bucketed=self.compile_mode != "off" and self.merge,
        )
        # one compiled graph per length, kind of step (stage 2, or no dropping: dense) and batch
        bw = self.shapes.batch
        batches = len(bw.sizes()) if self.merge and bw.active else 1
        graphs = compiled_shapes(self.plan, self.shapes.seq.lengths()) * batches
        self.step_fn = MLMStep(
            self.model,
            self.plan,
            self.opt,
            cfg.train.grad_clip,
            self.amp,
            self.par,
            use_attention_mask=not data.packed,
            compile=self.compile_mode,
            shapes=graphs,
        )
        if self.compile_mode != "off" and dd.main:
            warm = f" x the warm-up's batches {bw.sizes()}, each step's batch rounded down to one"
            self.console.say(
                f"train.compile: {self.compile_mode}, at most {graphs} graph(s) of the step to "
                f"compile (sequence lengths {self.shapes.seq.lengths()} x kinds of step"
                + (warm if batches > 1 else "")
                + ")"
                + (", and 1 of AdamW's update" if self.step_fn.compiled_opt is not None else "")
            )
        # what the step reads: packed rows have no [PAD] (no attention mask) and one segment (token
        # type 0, which the model adds without ids); copied from pinned buffers on CUDA
        self.step_keys = set(STEP_KEYS) - (
            {"attention_mask", "token_type_ids"} if data.packed else set()
        )
        self.loader = MLMLoader(
            data,
            split="train",
            batch_size=self.micro_bs,
            seed=tc.seed,
            rank=dd.rank,
            world_size=dd.world,
            mask_prob=self.masks.largest,
            num_workers=cfg.data.num_workers,
            prefetch=cfg.data.prefetch,
            shuffle=True,
            loop=True,
            variable_rate=not self.masks.constant,
            pin_memory=self.device.type == "cuda",
        )
        if self.meta_in is not None:
            self.loader.load_state_dict(self.meta_in["data_position"])
        # the run's FLOPs so far
        self.flops_total = int(self.meta_in.get("flops", 0)) if self.meta_in else 0

    def eval_batches(self):
        return heldout_batches(
            self.data, self.micro_bs, seed=self.tc.seed, mask_prob=self.cfg.data.mask_prob_end
        )

    # -- resume
    # ----------------------------------------------------------------------------------------
    def restore(self) -> None:
        """Weights, AdamW state, importance and RNG streams of the checkpoint resumed (nothing for a
        new run)."""
        self.start_step, meta = 0, self.meta_in
        if meta is None:
            return
        tc, dd, state = self.tc, self.dd, self.state_sd
        load_training_state(self.last, meta, state, self.model, self.opt, self.par)
        if self.selector is not None and "importance" in state:
            self.selector.scores.copy_(state["importance"].to(self.device))
        self.start_step = int(meta["step"])
        rng = rank_rng(state, dd.rank)
        if rng is None:  # a checkpoint of fewer ranks: a fresh, reproducible stream for this rank
            torch.manual_seed(tc.seed + dd.rank + 7919 * self.start_step)
        else:
            if self.selector is not None and "rng.selector" in rng:
                self.selector.set_rng_state(rng["rng.selector"], self.device)
            ckpt_mod.restore_rng(rng)
        if dd.main:  # the rows a killed run wrote after this checkpoint would appear twice
            truncate_metrics(self.run_dir, self.start_step)

    # -- the metrics log and step 0
    # ----------------------------------------------------------------------
    def start(self) -> None:
        self._phase("set-up")
        cfg, tc, dd, data = self.cfg, self.tc, self.dd, self.data
        resumed = self.meta_in is not None
        ids = {}
        if resumed and dd.main:  # the W&B / MLflow runs this run started: continued, not new ones
            ids = next(
                (
                    r.get("tracker_ids", {})
                    for r in read_metrics(self.run_dir)
                    if r.get("event") == "start"
                ),
                {},
            )
        self.log = MetricsLog(
            self.run_dir,
            dd.main,
            tc.report_to,
            name=cfg.name and f"{cfg.name}-{self.run_dir.name}",
            resumed=resumed,
            purge_step=self.start_step + 1 if resumed else None,
            ids=ids,
            config=to_dict(cfg),
            config_toml=to_toml(cfg),
        )
        self.has_eval = data.num_sequences("eval") > 0
        if not self.has_eval and dd.main:
            print(
                f"warning: {cfg.data.path} has no held-out sequences (its eval split is empty); "
                "this run is not evaluated (prepare the data with more text or a larger "
                "--eval-fraction to evaluate it)",
                file=sys.stderr,
            )
        self.peak_flops = None
        if self.device.type == "cuda":
            # bf16 dense peak, per GPU
            self.peak_flops = gpu_peak_flops(torch.cuda.get_device_name(self.device))
        # FSDP's forward is collective: every rank evaluates
        self.evaluates = dd.main or self.par.sharded
        if dd.main and self.start_step == 0:
            self.log.write(
                {
                    "step": 0,
                    "event": "start",
                    "params": num_parameters(self.model),
                    "seq_len": self.T,
                    "world_size": dd.world,
                    "accum": 1 if self.merge else self.accum,
                    "stage2_start": None if self.length.timed else self.plan.stage2_start,
                    "device": str(self.device),
                    "parallel": self.par.kind,
                    **({"time_budget_s": self.length.budget_s} if self.length.timed else {}),
                    **({"mixture": data.describe()} if cfg.data.paths else {}),
                    "unigram_entropy": self.entropy,
                    "tracker_ids": self.log.tracker_ids,
                    **({"command": self.command} if self.command else {}),
                }
            )
            for ev in self.init_events:
                self.log.write({"step": 0, **ev})
        elif dd.main and self.command:  # a resume: the command that continued it (model cards)
            self.log.write({"step": self.start_step, "event": "resume", "command": self.command})
        if self.evaluates and self.start_step == 0 and self.has_eval:
            ev0 = evaluate_mlm(
                self.model, self.eval_batches(), self.device, self.amp, self.eval_micro
            )
            # MetricsLog: rank 0 only
            self.log.write({"step": 0, "wall_time": 0.0, **ev0, **self.entropy_rec})
            self.console.say(
                f"step 0 (before training): eval loss {ev0['eval_loss']:.4f}"
                + (f"; {unigram_note(ev0['eval_loss'], self.entropy)}" if self.entropy else "")
            )
            self._phase("evaluation")

    # -- the loop
    # ------------------------------------------------------------------------------------------
    def run(self) -> PretrainResult:
        self.wall = float(self.meta_in.get("wall_time", 0.0)) if self.meta_in else 0.0
        # process CPU s of the steps
        self.cpu = float(self.meta_in.get("cpu_time", 0.0)) if self.meta_in else 0.0
        self.used = self.wall  # training seconds so far (train.time_budget counts these)
        self.tokens_done = self.tokens_pending = self.pending = (
            0  # pending: steps since the host last waited
        )
        # the run's tokens before a resume
        self.tokens_before = int(self.meta_in.get("tokens", 0)) if self.meta_in else 0
        self.train_time = 0.0
        self.history: list[dict[str, Any]] = []
        # non-finite steps (skipped by MLMStep), counted on the device: the current streak, the
        # longest streak since the last check, and the total; read where the host waits anyway
        self.nf = torch.zeros(3, dtype=torch.long, device=self.device)
        self.streak = self.skipped = 0
        self.last_eval: dict[str, float] = {}
        self.last_rec: dict[str, Any] | None = None
        # a bar on a terminal, else a line per log interval (always into RUN/log.txt)
        self.pbar = (
            Progress(
                self.console,
                self.length.steps or None,
                self.start_step,
                "pretrain",
                bar=self.progress and is_terminal(),
                console=self.progress,
            )
            if self.dd.main
            else None
        )
        self.p0 = self.length.progress(self.start_step, self.used)
        self.it = iter(self.loader)
        self.step = self.start_step
        interrupted = False
        self.model.train()
        self.t_loop, self.before_loop = time.perf_counter(), dict(self.phases)
        self.mark()
        finished = self.length.finished(self.step, self.used)
        with rundir.StopFlag() as stop, rundir.close_on_error(self.pbar, self.loader, self.log):
            while not finished:
                out, record = self.train_step()
                finished = self.length.finished(self.step, self.used)
                is_log = self.step % self.tc.log_every == 0 or finished
                is_eval = self.step % self.tc.eval_every == 0 or finished
                stopping = self.stop_requested(stop, is_log or is_eval)
                is_ckpt = self.step % self.tc.ckpt_every == 0 or finished or stopping
                if is_log or is_eval or is_ckpt:
                    self.host_sync()
                if is_log:
                    self.log_step(out, record)
                    if self.dd.main:
                        gate("pretrain-step")  # a test-only pause point (tokendrop.runs.gate)
                evaluated = is_eval and self.evaluates and self.has_eval
                if evaluated:
                    self.evaluate()
                if is_log or evaluated:
                    self.say_progress(is_log, evaluated)
                if is_ckpt:
                    self.checkpoint()
                if self.pbar is not None:
                    self.pbar.update(1)
                if is_log or is_eval or is_ckpt:
                    self.mark()  # evaluation and checkpoints are not training time
                if stopping:
                    interrupted = True
                    break
        return self.finish(interrupted, stop.signum if interrupted else 0)

    def mark(self) -> None:
        """Training time is counted from here (the run's clock, and the process's CPU time)."""
        self.t_mark, self.cpu_mark = self.clock(), time.process_time()

    def train_step(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """One optimizer step at progress p: every schedule is a function of (step, p)."""
        T, loader = self.T, self.loader
        p = self.length.progress(self.step, self.used)
        if not self.masks.constant:
            loader.set_mask_rate(self.masks.at(p))
        shape = self.shapes.at(p, loader.sequences_consumed * T)
        if shape.seq_len != loader.piece_len:
            loader.set_seq_len(shape.seq_len)
        with host_side():  # the loader's batches are host tensors; the copies below are the step's
            batches = [
                {k: v for k, v in next(self.it).items() if k in self.step_keys}
                for _ in range(shape.micro)
            ]
            if self.merge and len(batches) > 1:  # one micro-batch of the step's batch
                batches = [
                    {k: _cat([b[k] for b in batches], self.loader.pin_memory) for k in batches[0]}
                ]
        micro = [{k: v.to(self.device, non_blocking=True) for k, v in mb.items()} for mb in batches]
        at = self.plan.at(self.step, shape.seq_len, p)  # stage 2, the kept count, ScTD's cadence
        lr = self.lrs.at(self.step, p)
        f_step = self.plan.flops(at, shape.batch * T // shape.seq_len)
        self.flops_total += f_step
        out = self.step_fn(micro, lr, at)
        bad = (~out["finite"]).long()
        nf = self.nf
        nf[0] = (nf[0] + 1) * bad
        nf[1] = torch.maximum(nf[1], nf[0])
        nf[2] += bad
        self.step += 1
        self.pending += 1
        self.tokens_done += shape.batch * T
        self.tokens_pending += shape.batch * T
        with host_side():  # DDP: rank 0's clock, a host value over a CPU group
            self.used = self.length.agree(self.wall + self.clock() - self.t_mark, self.dd.world)
        return out, {"lr": lr, "at": at, "shape": shape, "flops_per_step": f_step}

    def stop_requested(self, stop: rundir.StopFlag, host_waits: bool) -> bool:
        """Read once per step: a signal arriving after this point (while logging or evaluating) is
        acted on after the next step, never by stopping without the checkpoint.  Under a process
        group every rank must stop after the same step (the checkpoint is collective): the ranks
        agree at the steps where the host waits anyway (log, eval, checkpoint), so a signal that
        reached some ranks only, or at different steps, stops them all together."""
        signalled = stop.stop
        if self.dd.world > 1:
            at_sync = host_waits or self.step % self.tc.ckpt_every == 0
            signalled = at_sync and not self.par.all_true(not signalled)
        return signalled or (self.stop_at is not None and self.step >= self.stop_at)

    def host_sync(self) -> None:
        """The host waits for the device only here, not every step: the time and tokens since the
        last wait (step_time is their mean), and the non-finite-step counters."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = self.clock() - self.t_mark
        self.cpu += time.process_time() - self.cpu_mark
        self.dt = elapsed / self.pending
        self.tok_s = self.tokens_pending / elapsed if elapsed > 0 else 0.0
        self.tokens_pending = self.pending = 0
        self.train_time += elapsed
        self.wall += elapsed
        self.streak, worst, self.skipped = self.nf.tolist()
        self.nf[1] = self.nf[0]
        if worst >= self.tc.max_nonfinite_steps:
            raise TrainingError(
                f"non-finite loss or gradient norm in {worst} consecutive steps at or before step "
                f"{self.step} (train.max_nonfinite_steps={self.tc.max_nonfinite_steps}); stopped. "
                f"Last good checkpoint: {ckpt_mod.latest(self.run_dir) or 'none'} (lower train.lr "
                "or check the data)"
            )

    def log_step(self, out: dict[str, Tensor], r: dict[str, Any]) -> None:
        shape, at = r["shape"], r["at"]
        rec = {
            "step": self.step,
            "loss": out["loss"].item(),
            "acc": out["acc"].item(),
            "lr": r["lr"],
            "grad_norm": out["grad_norm"].item(),
            "kept_fraction": at.kept_fraction,
            "dropping": at.dropping,
            "step_time": self.dt,
            "tokens_per_s": self.tok_s,
            "wall_time": self.wall,
            "cpu_time": self.cpu,
            "tokens": self.tokens_before + self.tokens_done,  # the run's, so far
            "flops_per_step": r["flops_per_step"],
            "flops": self.flops_total,
            "skipped_steps": self.skipped,
        }
        if self.shapes.active:
            rec.update(seq_len=shape.seq_len, batch_size=shape.batch)
        if not self.masks.constant:
            rec["mask_prob"] = self.loader.mask_rate
        # a mixture's shares drawn so far: mix_0, mix_1, ...
        rec.update(realised(self.loader.state_dict()))
        if self.peak_flops:
            rec["mfu"] = rec["flops_per_step"] / self.dt / (self.peak_flops * self.dd.world)
        self.log.write(rec)
        self.history.append(rec)
        self.last_rec = rec

    def say_progress(self, logged: bool, evaluated: bool) -> None:
        """The bar's figures on a terminal; elsewhere one line (and always one in RUN/log.txt)."""
        if self.pbar is None:
            return
        rec, ev = (self.last_rec if logged else None), (self.last_eval if evaluated else None)
        post = {}
        if self.last_rec is not None:
            post.update(
                loss=f"{self.last_rec['loss']:.3f}", tok_s=f"{self.last_rec['tokens_per_s']:.0f}"
            )
        if self.last_eval:
            post["eval"] = f"{self.last_eval['eval_loss']:.3f}"
        self.pbar.update(0, **post)
        left = eta(self.pbar.elapsed(), self.p0, self.length.progress(self.step, self.used))
        self.pbar.line(
            interval_line(self.step, self.length.steps or None, rec, ev, self.pbar.elapsed(), left)
        )

    def evaluate(self) -> None:
        t0 = time.perf_counter()
        self.last_eval = evaluate_mlm(
            self.model, self.eval_batches(), self.device, self.amp, self.eval_micro
        )
        rec = {
            "step": self.step,
            "wall_time": self.wall,
            "flops": self.flops_total,
            **self.last_eval,
            **self.entropy_rec,
        }
        self.log.write(rec)
        self.history.append(rec)
        self.phases["evaluation"] += time.perf_counter() - t0

    def checkpoint(self) -> None:
        if self.streak:  # the weights are those before the streak; no checkpoint until it ends
            if self.dd.main:
                print(
                    f"warning: step {self.step}: the last {self.streak} step(s) had a non-finite "
                    "gradient norm and "
                    "were skipped; no checkpoint written here",
                    file=sys.stderr,
                )
            return
        t0 = time.perf_counter()
        self.save_checkpoint(self.step)
        if self.dd.world > 1:
            dist.barrier()
        self.phases["checkpoints"] += time.perf_counter() - t0

    def save_checkpoint(self, step: int) -> Path | None:
        meta = {
            "config": to_dict(self.cfg),
            "data_position": self.loader.state_dict(),
            "wall_time": self.wall,
            "cpu_time": self.cpu,
            "data_fingerprint": self.data_fp,  # data_fp: what --resume accepts as the same data
            "flops": self.flops_total,
            "tokens": self.tokens_before + self.tokens_done,
        }
        if self.run_id is not None:  # the run that wrote it (check_checkpoint compares)
            meta["run_id"] = self.run_id
        return save_training_state(
            self.run_dir,
            step,
            self.model,
            self.opt,
            self.par,
            self.dd,
            self.selector,
            meta,
            self.tc.keep_checkpoints,
        )

    # -- the end
    # ---------------------------------------------------------------------------------------------
    def finish(self, interrupted: bool, signum: int) -> PretrainResult:
        tc, dd, T = self.tc, self.dd, self.T
        if self.pbar is not None:
            self.pbar.close()
        self.loader.close()
        # the loop's wall time less its evaluations and checkpoints
        loop = time.perf_counter() - self.t_loop
        self.phases["training"] = loop - sum(
            self.phases[k] - self.before_loop[k] for k in ("evaluation", "checkpoints")
        )
        if dd.main:
            self.log.write(
                {
                    "step": self.step,
                    "event": "interrupted" if interrupted else "end",
                    "wall_time": self.wall,
                    "cpu_time": self.cpu,
                    "skipped_steps": int(self.nf[2]),
                    "flops": self.flops_total,
                    "tokens": self.loader.sequences_consumed * T,
                    "phases_s": {k: round(v, 3) for k, v in self.phases.items()},
                }
            )
        self.log.close()
        if dd.main and not interrupted:
            t0 = time.perf_counter()
            _write_report(self.run_dir)
            self.phases["report"] = time.perf_counter() - t0
        tokens_per_s = self.tokens_done / self.train_time if self.train_time else 0.0
        self.console.block(
            pretrain_summary(
                run_dir=self.run_dir,
                interrupted=interrupted,
                step=self.step,
                total=self.length.steps or None,
                tokens=self.tokens_done,
                seconds=time.perf_counter() - self.t_begin,
                phases=self.phases,
                tokens_per_s=tokens_per_s,
                last=self.last_rec,
                ev=self.last_eval,
                entropy=self.entropy,
            )
        )
        sel = self.selector
        return PretrainResult(
            run_dir=self.run_dir,
            steps=self.step,
            interrupted=interrupted,
            wall_time=self.wall,
            tokens_per_s=tokens_per_s,
            final_eval=self.last_eval,
            flops_per_step=self.plan.nominal_flops(T, tc.batch_size),
            importance=sel.scores.detach().cpu().clone() if sel is not None else None,
            history=self.history,
            stop_signal=signum,
        )


def _write_report(run_dir: Path) -> None:
    """``report.md`` (and ``curves.png``) of a finished run; a full disk (or quota, read-only file
    system) is one line naming the file, saying the run itself is intact and how to write the
    report once there is room: ``--resume`` of a finished run writes a missing report."""
    try:
        write_run_report(run_dir)
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        raise TrainingError(
            f"{run_dir / 'report.md'}: not written ({e.strerror or e}); the run itself finished "
            "(its checkpoints and metrics.jsonl are intact): "
            f"{os_error_fix(e)}, then write the report with: tokendrop pretrain --resume "
            f"{shlex.quote(str(run_dir))}"
        ) from None


def _finished(
    run_dir: Path, step: int, length: RunLength, dd: Dist, meta: dict[str, Any]
) -> PretrainResult:
    """The result of resuming a run whose last checkpoint is at its end (``train.steps`` reached or
    ``train.time_budget`` used): nothing to train (a requeued job, a restarted torchrun agent, a
    repeated command); said once on stderr.  A report the run could not write (a full disk) is
    written now."""
    if dd.main:
        wrote = not (run_dir / "report.md").is_file()
        if wrote:
            _write_report(run_dir)
        print(
            f"{run_dir}: already finished (its last checkpoint is step {step}, the end of "
            f"{length.describe()}); "
            + (f"wrote its missing report {run_dir / 'report.md'}" if wrote else "nothing to do"),
            file=sys.stderr,
        )
    return PretrainResult(
        run_dir=run_dir,
        steps=step,
        interrupted=False,
        wall_time=float(meta.get("wall_time", 0.0)),
        tokens_per_s=0.0,
        final_eval={},
        flops_per_step={},
        already_finished=True,
    )


__all__ = ["pretrain", "heldout_batches", "PretrainResult"]
