"""Pretraining: the MLM step with token dropping, the training loop, checkpoints, DDP.

``pretrain(cfg, out_dir)`` runs a whole job and returns a ``PretrainResult``.  It works in one
process or under ``torchrun`` (DDP: gloo on CPU, NCCL on GPU); the global batch is
``train.batch_size`` whatever the number of ranks, split into per-rank micro-batches with gradient
accumulation.  The MLM loss is normalised by the *global* number of real prediction slots, so one
process and N processes compute the same loss and gradients.

Per step (``MLMStep``): select kept positions from the importance vector, forward with dropping
(stage 1) or dense (stage 2), weighted MLM NLL, backward, clip, AdamW (decoupled weight decay, none
on biases/LayerNorm), linear warm-up + linear decay to 0, then the importance update from the
step's per-slot losses (all-reduced across ranks).  Nothing in the step waits on the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from . import checkpoint as ckpt_mod
from . import checkpoint_sharded as sharded_ckpt
from . import rundir
from .budget import RunLength, budget_clock
from .config import FROM_DATA, Config, ConfigError, from_dict, to_dict, to_toml
from .errors import TokendropError
from .flops import RunFlops, step_flops
from .random_ltd import ltd_kept_at
from .run_config import resolve_init, resolve_run_config
from .consistency import ClsTaps, consistency_term
from .continued import warm_start
from .data.mixture import open_data, realised
from .importance import TokenSelector, build_selector
from .metrics import MetricsLog, read_metrics
from .attention import check_training_device
from .families import build_model
from .model import BertForMaskedLM, num_parameters
from .parallel import Dist, Parallel, autocast_for, grad_norm, init_distributed, wrap
from .runtime import adamw, autocast_dtype, resolve_device
from .schedules import lr_linear_steps, lr_schedule, mask_schedule
from .warmups import StepPlan, default_micro_batch


class TrainingError(TokendropError, RuntimeError):
    """A run that cannot go on (non-finite loss, incompatible resume, bad data)."""


# ----------------------------------------------------------------------------------------------
# set-up helpers


def lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total``
    (``train.lr_schedule = "linear"`` of a fixed-length run; tokendrop.schedules has them all)."""
    return lr_linear_steps(step, peak, warmup, total)


def stage2_start(cfg: Config) -> int:
    """First step trained without dropping (= steps when there is no stage 2; a fixed-length run)."""
    if not cfg.drop.enabled:
        return 0
    return cfg.train.steps - int(round(cfg.drop.stage2_fraction * cfg.train.steps))


def dropping_at(cfg: Config, length: RunLength, step: int, p: float) -> bool:
    """Whether step ``step`` (at progress ``p``) drops tokens: before ``stage2_start`` in a
    fixed-length run; while less than ``1 - drop.stage2_fraction`` of a time budget is used."""
    if not cfg.drop.enabled:
        return False
    return p < 1.0 - cfg.drop.stage2_fraction if length.timed else step < stage2_start(cfg)


# ----------------------------------------------------------------------------------------------
# the step


class MLMStep:
    """One optimizer step over a list of micro-batches (already on the device)."""

    def __init__(
        self,
        model: BertForMaskedLM,
        selector: TokenSelector | None,
        optimizer: torch.optim.Optimizer,
        cfg: Config,
        amp_dtype: torch.dtype | None,
        par: Parallel | None = None,
        use_attention_mask: bool = True,
        compile: bool = False,
        run_model: nn.Module | None = None,
    ):
        self.use_attention_mask = use_attention_mask  # packed data has no [PAD]: mask-free SDPA
        self.model = model
        # run_model: what the forward runs through (default: the DDP/FSDP-wrapped model, else model),
        # e.g. an already compiled model shared by several steps (the benchmark's settings)
        self.run_model = run_model if run_model is not None else (par.run_model if par is not None else model)
        if compile:
            self.run_model = torch.compile(self.run_model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.selector = selector
        self.opt = optimizer
        self.cfg = cfg
        self.amp_dtype = amp_dtype
        self.par = par if par is not None and par.kind != "none" else None
        self.select = cfg.drop.enabled and cfg.drop.variant != "avg"
        # ScTD (tokendrop.consistency): [CLS] taps on the last two layers, only when its weight is > 0
        self.taps = ClsTaps(model.encoder_layers) if cfg.drop.enabled and cfg.drop.consistency_weight > 0 else None

    def keep_idx(self, mb: dict[str, Tensor], step: int, progress: float = 0.0) -> Tensor | None:
        """The kept positions of one micro-batch: (B, M) from the selector, or (S, B, M) per half
        layer for random_ltd at its scheduled count (None once that count is T: a dense step)."""
        drop = self.cfg.drop
        if not drop.per_layer:
            return self.selector.select(mb["input_ids"], mb["mlm_positions"], mb["mlm_weights"])
        t = mb["input_ids"].shape[1]
        kept = ltd_kept_at(drop, t, step, self.cfg.train.steps, progress)
        if kept >= t:
            return None
        start, end = drop.span(self.cfg.model.num_layers)
        return self.selector.select_layers(mb["input_ids"], kept, end - start)

    def __call__(self, micro: list[dict[str, Tensor]], lr: float, dropping: bool, step: int = 0,
                 progress: float = 0.0) -> dict[str, Tensor]:
        for g in self.opt.param_groups:
            g["lr"] = lr
        device = micro[0]["input_ids"].device
        count = torch.stack([mb["mlm_weights"].sum() for mb in micro]).sum()
        if self.par is not None:
            self.par.all_reduce(count)
        norm = count.clamp(min=1.0)
        scale = float(self.par.world) if self.par is not None else 1.0  # DDP and FSDP average the gradients
        sums = torch.zeros(2, device=device)  # weighted nll, correct predictions
        all_nll = []
        sctd = dropping and self.taps is not None and step % self.cfg.drop.consistency_every == 0
        kl_sum = torch.zeros((), device=device)
        for i, mb in enumerate(micro):
            keep = None
            if dropping and self.select:
                keep = self.keep_idx(mb, step, progress)
            sync = i == len(micro) - 1
            with self.par.grad_sync(sync) if self.par is not None else contextlib.nullcontext():
                with self.taps.record() if sctd else contextlib.nullcontext() as dropped, \
                        torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                    logits = self.run_model(
                        mb["input_ids"], mb["mlm_positions"], mb["attention_mask"] if self.use_attention_mask else None,
                        mb["token_type_ids"], keep_idx=keep, drop_active=dropping,
                    )
                nll = self.model.mlm_nll(logits, mb["mlm_labels"])  # (B, P) fp32
                w = mb["mlm_weights"]
                loss = (nll * w).sum()
                if sctd:
                    kl = self._consistency(mb, dropped)
                    kl_sum += kl.detach()
                    loss = loss + self.cfg.drop.consistency_weight * kl
                loss = loss / norm * scale
                loss.backward()
            with torch.no_grad():
                correct = ((logits.argmax(-1) == mb["mlm_labels"]).float() * w).sum()
                sums += torch.stack([(nll.detach() * w).sum(), correct])
            all_nll.append(nll.detach())
        # train.grad_clip = 0: no clipping (as in fine-tuning); the norm is still measured.  Over all
        # shards under FSDP (DTensor gradients), so the same value on every rank
        gnorm = grad_norm(self.params, self.cfg.train.grad_clip)
        # a non-finite gradient norm (the same on every rank: DDP/FSDP have reduced the gradients)
        # skips the step: no weight, moment or importance update.  Decided on the device: the fused
        # AdamW kernel takes the flag (as under a GradScaler); an unfused one needs the host.
        finite = torch.isfinite(gnorm)
        if self.opt.defaults.get("fused"):
            self.opt.found_inf = (~finite).to(torch.float32)
            self.opt.step()
        elif bool(finite):
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if dropping and self.select and self.selector is not None:
            self.selector.update(
                torch.cat([mb["mlm_labels"] for mb in micro]), torch.cat(all_nll), torch.cat([mb["mlm_weights"] for mb in micro]),
                valid=finite,
            )
        if self.par is not None:
            self.par.all_reduce(sums)
        out = {"loss": sums[0] / norm, "acc": sums[1] / norm, "grad_norm": gnorm, "finite": finite}
        if sctd:  # this rank's summed [CLS] KL over its micro-batches, per real slot
            out["consistency"] = kl_sum / norm
        return out

    def _consistency(self, mb: dict[str, Tensor], dropped: list[Tensor]) -> Tensor:
        """ScTD: the dense pass of the same micro-batch (no MLM head; through the unwrapped model, so
        under DDP the one backward still reduces each gradient once) -> the unweighted KL term."""
        device = mb["input_ids"].device
        with self.taps.record() as dense, \
                torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            self.model.hidden(mb["input_ids"], None, mb["attention_mask"] if self.use_attention_mask else None,
                              mb["token_type_ids"])
        return consistency_term(dropped, dense)


@torch.no_grad()
def evaluate_mlm(model: BertForMaskedLM, batches, device: torch.device, amp_dtype: torch.dtype | None, max_batches: int) -> dict[str, float]:
    """Full model (no dropping) on held-out batches: MLM loss and accuracy over real slots."""
    was_training = model.training
    model.eval()
    tot = torch.zeros(3, dtype=torch.float64)
    for i, mb in enumerate(batches):
        if max_batches and i >= max_batches:
            break
        mb = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in mb.items()}
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(mb["input_ids"], mb["mlm_positions"], mb["attention_mask"], mb["token_type_ids"])
        nll = model.mlm_nll(logits, mb["mlm_labels"])
        w = mb["mlm_weights"]
        tot += torch.stack([(nll * w).sum(), ((logits.argmax(-1) == mb["mlm_labels"]).float() * w).sum(), w.sum()]).double().cpu()
    model.train(was_training)
    n = tot[2].item()
    if n <= 0:  # never report a loss of 0.0 for an evaluation that saw nothing
        raise TrainingError("evaluation: the held-out split gave no prediction slots (empty eval split?); "
                            "prepare the data with a larger --eval-fraction or more text")
    return {"eval_loss": tot[0].item() / n, "eval_acc": tot[1].item() / n, "eval_slots": int(n)}


# ----------------------------------------------------------------------------------------------
# logging


# ----------------------------------------------------------------------------------------------
# the loop


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
    stop_signal: int = 0  # the signal that interrupted the run (SIGINT 2, SIGTERM 15); 0: none or stop_at
    already_finished: bool = False  # resumed a run that had already reached train.steps: nothing was trained


# keys whose change makes a resume meaningless
_RESUME_FIXED = ("model", "drop.method", "drop.variant", "drop.rate", "drop.start", "drop.end", "drop.beta",
                 "drop.half_random_frac", "drop.keep_mlm_targets", "drop.pinned_tokens", "drop.ltd_start_fraction",
                 "drop.ltd_schedule_share", "drop.ltd_schedule", "drop.ltd_step", "drop.consistency_weight",
                 "drop.consistency_every", "data.mask_prob", "data.mask_schedule",
                 "train.batch_size", "train.seed", "data.seq_len_start", "data.seq_len_warmup_share",
                 "train.batch_warmup_start", "train.batch_warmup_tokens", "train.batch_warmup_share",
                 "train.budget_clock")  # data.path: check_resume_data (the data may move)
_RESUME_FREE = ("model.attention_backend",)  # inside a fixed section, but execution only: may change


_REQUIRED_KEY = object()


def _get(d: dict, dotted: str, fallback: Any = _REQUIRED_KEY) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; ``fallback`` where a key is missing (a KeyError without one)."""
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            if fallback is _REQUIRED_KEY:
                raise KeyError(dotted)
            return fallback
        d = d[k]
    return d


def check_resume_compatible(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse a resume whose config changes a field of ``_RESUME_FIXED``.  A field the run's recorded
    config does not have (written by a version before the field existed) counts as its default --
    what that version did -- so runs started by an older tokendrop resume; a field taken from the
    data (``config.FROM_DATA``) is not compared then."""
    defaults = to_dict(Config())
    for key in _RESUME_FIXED:
        b = _get(new, key, None)
        a = _get(old, key, _get(defaults, key, None))
        if isinstance(a, dict) and isinstance(b, dict):
            a = {**{k: _get(defaults, f"{key}.{k}", None) for k in b if k not in a}, **a}
            free = [f.split(".", 1)[1] for f in _RESUME_FREE if f.startswith(key + ".")]
            a, b = ({k: v for k, v in d.items() if k not in free} for d in (a, b))
            for k in (f.split(".", 1)[1] for f in FROM_DATA if f.startswith(key + ".")):
                if k not in _get(old, key, {}):
                    a[k] = b.get(k)
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                diff = [k for k in {**a, **b} if a.get(k) != b.get(k)]
                key, a, b = f"{key}.{diff[0]}", a.get(diff[0]), b.get(diff[0])
            raise TrainingError(f"--resume: config field {key} changed from {a!r} to {b!r}; start a new run instead")


def check_resume_data(meta: dict[str, Any], cfg: Config, data) -> None:
    """The data a run resumes on must be the data it was trained on: equal fingerprints
    (``PreparedData.fingerprint``, recorded in every checkpoint), wherever it lies now.  A checkpoint
    without a fingerprint (older versions) needs the same directory."""
    old_path, new_path = str(_get(meta["config"], "data.path")), str(cfg.data.path)
    recorded = meta.get("data_fingerprint")
    if not isinstance(recorded, dict):
        if os.path.abspath(old_path) != os.path.abspath(new_path):
            raise TrainingError(f"--resume: data.path changed from {old_path!r} to {new_path!r} and the checkpoint "
                                "records no data fingerprint to check the moved data against (written by an older "
                                "version); resume with the original data.path")
        return
    now = data.fingerprint()
    diff = [k for k in recorded if recorded[k] != now.get(k)]
    if diff:
        def show(v: Any) -> str:
            return f"{v[:12]}..." if isinstance(v, str) and len(v) > 16 else repr(v)

        raise TrainingError(f"--resume: {new_path} is not the data this run was trained on ({old_path}): "
                            + ", ".join(f"{k} {show(now.get(k))} here but {show(recorded[k])} recorded" for k in diff)
                            + "; pass --set data.path=DIR naming the run's prepared data")


def _open_data(cfg: Config, src, new_run: bool = True, world: int = 1):
    """-> (the run's resolved config, the prepared data: one directory or a weighted mixture);
    tokendrop.run_config builds the config."""
    if not (cfg.data.path or cfg.data.paths):
        raise ConfigError("data.path: no prepared data directory given (run `tokendrop prepare` first)")
    data = open_data(cfg.data.path, cfg.data.paths, cfg.data.weights)  # data.paths: a weighted mixture
    return resolve_run_config(cfg, data, src, new_run, world), data


def _pinned_ids(cfg: Config, data) -> list[int]:
    if not cfg.drop.pinned_tokens:
        return []
    index = {t: i for i, t in enumerate(data.vocab()) if t}
    out = []
    for tok in cfg.drop.pinned_tokens:
        if tok not in index:
            raise ConfigError(f"drop.pinned_tokens: {tok!r} is not in the vocabulary")
        out.append(index[tok])
    return out


class _StopFlag:
    """SIGINT/SIGTERM set a flag; the loop saves a checkpoint at the end of the step and exits.  A
    second signal raises ``rundir.Interrupted`` at once (a checkpoint being written is then removed
    whole by its atomic directory; the last complete one stays)."""

    def __init__(self) -> None:
        self.stop = False
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_StopFlag":
        if _in_main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum:  # second signal: give up at once
            raise rundir.Interrupted(signum)
        self.stop = True
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _close_on_error(*things):
    """Close the progress bar, the loader (its worker processes) and the log when the loop raises
    (a second Ctrl-C, a non-finite loss); on success the loop's own ending closes them."""
    try:
        yield
    except BaseException:
        for t in things:
            if t is not None:
                with contextlib.suppress(Exception):
                    t.close()
        raise


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def pretrain(
    cfg: Config, out_dir: str | os.PathLike, resume: bool = False, progress: bool = True, stop_at: int | None = None,
    overwrite: bool = False, clock=None,
) -> PretrainResult:
    """Run (or resume) a pretraining job into ``out_dir``.

    ``stop_at``: pause after that step (a checkpoint is written; ``--resume`` continues), as a
    SIGINT/SIGTERM would; the schedule still runs to ``train.steps``.
    ``overwrite``: start over in an existing run directory (only one tokendrop marked as a run and
    that holds none of the run's inputs; ``tokendrop.rundir.prepare_output``).  The run directory is
    locked (rank 0) for the whole call: a second writer fails at once with "... in use by pid N".
    ``clock``: the seconds clock training time is measured with (default ``train.budget_clock``'s:
    ``time.perf_counter`` or ``time.process_time``; tests pass a fake one to check
    ``train.time_budget`` without sleeping).
    """
    cfg.validate()
    src = resolve_init(cfg, resume)  # model.init: resolved once, here (tokendrop.run_config)
    run_dir = Path(out_dir)
    device_kind = "cuda" if (cfg.train.device == "cuda" or (cfg.train.device == "auto" and torch.cuda.is_available())) else "cpu"
    check_training_device(cfg.model.attention_backend, device_kind)
    dd = init_distributed(device_kind, cfg.train.parallel)
    threads = torch.get_num_threads()
    try:
        with rundir.lock(run_dir, TrainingError) if dd.main else contextlib.nullcontext():
            return _pretrain(cfg, run_dir, resume, progress, dd, stop_at, overwrite, clock or budget_clock(cfg.train), src)
    finally:
        torch.set_num_threads(threads)  # train.threads applies to this run only
        if dd.owns_group:
            dist.destroy_process_group()


def _pretrain(cfg: Config, run_dir: Path, resume: bool, progress: bool, dd: Dist, stop_at: int | None,
              overwrite: bool = False, clock=time.perf_counter, src=None) -> PretrainResult:
    from .data import MLMLoader

    tc = cfg.train
    masks = mask_schedule(cfg.data)  # tokendrop.schedules
    device = resolve_device(tc.device, dd.local_rank, "train.device", ConfigError)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    if tc.deterministic:
        torch.use_deterministic_algorithms(True)
    amp = autocast_dtype(tc.precision, device)
    if tc.batch_size % dd.world:
        raise ConfigError(f"train.batch_size: {tc.batch_size} is not divisible by the {dd.world} ranks")
    per_rank = tc.batch_size // dd.world
    micro_bs = tc.micro_batch_size or default_micro_batch(cfg, per_rank, dd.world)
    if per_rank % micro_bs:
        raise ConfigError(f"train.micro_batch_size: {micro_bs} does not divide the per-rank batch {per_rank}")
    accum = per_rank // micro_bs

    if resume and cfg.data.path and not os.path.isdir(cfg.data.path):
        where = (f"is relative and not found from {os.getcwd()}; resume from the directory the run was started in, or"
                 if not os.path.isabs(cfg.data.path) else "is not there any more; if the data moved,")
        raise TrainingError(f"--resume: data.path {cfg.data.path!r} {where} pass --set data.path=DIR (accepted when "
                            "its fingerprint equals the one the run recorded)")
    cfg, data = _open_data(cfg, src, new_run=not resume, world=dd.world)  # the resolved config: not changed from here on
    data_fp = data.fingerprint()
    T = data.seq_len
    tc = cfg.train  # train.tokens / epochs / warmup_ratio resolved to steps (tokendrop.run_config)
    length, lrs = RunLength.of(tc), lr_schedule(tc)

    # -- run directory / resume ---------------------------------------------------------------------
    meta_in: dict[str, Any] | None = None
    mode = "new"
    if resume:
        try:  # the shared verifying loader; a bad checkpoint is skipped with a warning naming its file
            last, meta_in, model_sd, state_sd = ckpt_mod.load_verified(run_dir, state=True, fallback=True,
                                                                       consolidate=False)  # shards: below
        except ckpt_mod.CheckpointError as e:
            raise TrainingError(f"--resume: no valid checkpoint under {run_dir}/checkpoints ({e})") from None
        check_resume_compatible(meta_in["config"], to_dict(cfg))
        check_resume_data(meta_in, cfg, data)
        if length.finished(int(meta_in["step"]), float(meta_in.get("wall_time", 0.0))):
            # a requeued or repeated launch of a finished run: nothing to do
            return _finished(run_dir, int(meta_in["step"]), length, dd, meta_in)
    elif dd.main:
        mode = rundir.prepare_output(run_dir, "run", overwrite, error=TrainingError, resumable=False,
                                     inputs=[cfg.data.path, *cfg.data.paths, cfg.model.init, cfg.drop.counts_path])
    if dd.main:
        if mode == "replace":
            rundir.discard(run_dir)
        rundir.create(run_dir, "run")
        rundir.atomic_write_text(run_dir / "config.toml", to_toml(cfg))
        tok_dst = run_dir / "tokenizer"
        if not tok_dst.exists():
            from .hf import copy_tokenizer

            with rundir.atomic_directory(tok_dst) as tok_tmp:
                copy_tokenizer(data.tokenizer_path, tok_tmp, cfg.model.max_position_embeddings)
    if dd.world > 1:
        dist.barrier()

    # -- model, selector, optimizer -----------------------------------------------------------------
    torch.manual_seed(tc.seed)
    model = build_model(cfg.model, cfg.drop)  # the family's MLM model (tokendrop.model / tokendrop.modern)
    if cfg.model.family == "bert":
        model.bert.pooler.requires_grad_(False)  # no NSP: the pooler is not trained in pretraining
    model.to(device)
    if dd.world > 1:  # same initial weights everywhere (above); from here each rank its own dropout stream
        torch.manual_seed(tc.seed + dd.rank)
    counts = None
    if cfg.drop.method == "frequency":
        counts = np.load(cfg.drop.counts_path) if cfg.drop.counts_path else data.token_counts()
    selector = None
    if cfg.drop.enabled:
        selector = build_selector(cfg.drop, cfg.model.vocab_size, data.special_ids, T, _pinned_ids(cfg, data), counts,
                                  seed=tc.seed + dd.rank, device=device)  # each rank its own random draws
    init_events = warm_start(cfg, model, selector, data, run_dir, dd, device, amp, micro_bs, progress and dd.main, src) if (
        meta_in is None) else []
    if meta_in is not None and not ckpt_mod.is_sharded(meta_in):
        model.load_state_dict(model_sd)  # an unsharded checkpoint: before DDP's broadcast or FSDP's sharding
    par = wrap(model, tc.parallel if dd.grouped else "ddp", dd, device, amp)  # FSDP shards in place: before AdamW
    amp = autocast_for(par, amp, device)
    opt = adamw(model, tc.lr, tc.weight_decay, (tc.adam_beta1, tc.adam_beta2), tc.adam_eps,
                fused=True)  # fused kernels on CUDA and CPU (torch >= 2.4)
    start_step = 0
    loader_state = None
    if meta_in is not None:
        _load_training_state(last, meta_in, state_sd, model, opt, par)
        if selector is not None and "importance" in state_sd:
            selector.scores.copy_(state_sd["importance"].to(device))
        start_step = int(meta_in["step"])
        rng = _rank_rng(state_sd, dd.rank)
        if rng is None:  # a checkpoint of fewer ranks: a fresh, reproducible stream for this rank
            torch.manual_seed(tc.seed + dd.rank + 7919 * start_step)
        else:
            if selector is not None and "rng.selector" in rng:
                selector.set_rng_state(rng["rng.selector"], device)
            ckpt_mod.restore_rng(rng)
        loader_state = meta_in["data_position"]
        if dd.main:  # the rows a killed run wrote after this checkpoint would appear twice
            rundir.truncate_metrics(run_dir, start_step)
    step_fn = MLMStep(model, selector, opt, cfg, amp, par, use_attention_mask=not data.packed, compile=tc.compile)

    loader = MLMLoader(data, split="train", batch_size=micro_bs, seed=tc.seed, rank=dd.rank, world_size=dd.world,
                       mask_prob=masks.largest, num_workers=cfg.data.num_workers, prefetch=cfg.data.prefetch,
                       shuffle=True, loop=True, variable_rate=not masks.constant)
    if loader_state is not None:
        loader.load_state_dict(loader_state)
    shapes = StepPlan(cfg, T, data.packed, micro_bs, dd.world)  # sequence-length / batch warm-ups (tokendrop.warmups)
    run_flops = RunFlops(cfg.model, cfg.drop, meta_in.get("flops", 0) if meta_in else 0)

    def eval_batches():
        return MLMLoader(data, split="eval", batch_size=micro_bs, seed=tc.seed, mask_prob=cfg.data.mask_prob_end,
                         num_workers=0, shuffle=False, loop=False)

    log = MetricsLog(run_dir, dd.main, purge_step=start_step + 1 if meta_in is not None else None)
    has_eval = data.num_sequences("eval") > 0
    if not has_eval and dd.main:
        print(f"warning: {cfg.data.path} has no held-out sequences (its eval split is empty); this run is not "
              "evaluated (prepare the data with more text or a larger --eval-fraction to evaluate it)", file=sys.stderr)
    peak_flops = None
    if device.type == "cuda":
        from .flops import gpu_peak_flops

        peak_flops = gpu_peak_flops(torch.cuda.get_device_name(device))  # bf16 dense peak, per GPU
    s2 = stage2_start(cfg)
    flops_drop = step_flops(cfg.model, T, tc.batch_size, cfg.drop if cfg.drop.enabled else None)
    flops_dense = step_flops(cfg.model, T, tc.batch_size, None)
    evaluates = dd.main or par.sharded  # FSDP's forward is collective: every rank evaluates, rank 0 logs
    if dd.main and start_step == 0:
        log.write({"step": 0, "event": "start", "params": num_parameters(model), "seq_len": T, "world_size": dd.world,
                   "accum": accum, "stage2_start": None if length.timed else s2, "device": str(device),
                   "parallel": par.kind, **({"time_budget_s": length.budget_s} if length.timed else {}),
                   **({"mixture": data.describe()} if cfg.data.paths else {})})
        for ev in init_events:
            log.write({"step": 0, **ev})
    if evaluates and start_step == 0 and has_eval:
        ev0 = evaluate_mlm(model, eval_batches(), device, amp, tc.eval_batches)
        log.write({"step": 0, "wall_time": 0.0, **ev0})  # MetricsLog writes on rank 0 only

    def save_ckpt(step: int) -> Path | None:
        rng = ckpt_mod.rng_tensors(selector.rng_state() if selector is not None else None)
        ranks = [rng]
        if dd.world > 1:  # every rank's own streams (dropout, random selection), saved by rank 0
            ranks = [None] * dd.world
            dist.all_gather_object(ranks, rng)
        finite = bool(torch.stack([torch.isfinite(getattr(p, "_local_tensor", p)).all() for p in model.parameters()]).all()
                      ) if par.sharded or dd.main else True  # under FSDP: this rank's shards
        if par.sharded:
            finite = par.all_true(finite)  # each rank checked its own shards
        if not (dd.main or par.sharded):
            return None
        if not finite:
            raise TrainingError(f"non-finite weights at step {step}; not saved. Last good checkpoint: "
                                f"{ckpt_mod.latest(run_dir) if dd.main else 'see rank 0'} (lower train.lr or check the data)")
        tensors, groups = ({}, opt.state_dict()["param_groups"]) if par.sharded else ckpt_mod.optimizer_to_tensors(opt)
        if selector is not None:
            tensors["importance"] = selector.scores.detach().cpu().contiguous()
        tensors.update(rng)
        if dd.world > 1:
            for r, t in enumerate(ranks):
                tensors.update({f"{k}.rank{r}": v for k, v in t.items()})
        meta = {"config": to_dict(cfg), "data_position": loader.state_dict(), "optimizer_param_groups": groups,
                "wall_time": wall, "data_fingerprint": data_fp, "flops": run_flops.total}  # data_fp: what --resume accepts as the same data
        try:
            if par.sharded:  # collective: every rank writes its shards
                return sharded_ckpt.save(run_dir, step, model, opt, tensors, meta, tc.keep_checkpoints, dd)
            return ckpt_mod.save(run_dir, step, model.state_dict(), tensors, meta, tc.keep_checkpoints)
        except OSError as e:  # disk full, quota, permissions: the temp dir is gone, the last checkpoint intact
            raise TrainingError(f"{e.filename or run_dir / 'checkpoints'}: {e.strerror or e} while writing the "
                                f"checkpoint of step {step}; nothing of it was kept, the last checkpoint "
                                f"({ckpt_mod.latest(run_dir) or 'none'}) is intact: free space, then --resume") from None

    wall = float(meta_in.get("wall_time", 0.0)) if meta_in else 0.0
    tokens_done = 0
    tokens_pending = 0  # tokens of the steps since the last host wait (tokens_per_s)
    train_time = 0.0
    history: list[dict[str, Any]] = []
    # non-finite steps (skipped by MLMStep), counted on the device: the current streak, the longest
    # streak since the last check, and the total; read where the host waits anyway
    nf = torch.zeros(3, dtype=torch.long, device=device)
    streak = 0
    skipped = 0
    last_eval: dict[str, float] = {}
    pbar = None
    if progress and dd.main:
        from tqdm import tqdm

        pbar = tqdm(total=length.steps or None, initial=start_step, desc="pretrain", unit="step", dynamic_ncols=True)
    it = iter(loader)
    step = start_step
    interrupted = False
    model.train()
    pending = 0
    t_mark = clock()
    used = wall  # training seconds so far (train.time_budget counts these)
    finished = length.finished(step, used)
    with _StopFlag() as stop, _close_on_error(pbar, loader, log):
        while not finished:
            p = length.progress(step, used)  # every schedule is a function of (step, p)
            if not masks.constant:
                loader.set_mask_rate(masks.at(p))
            shape = shapes.at(p, loader.sequences_consumed * T)
            if shape.seq_len != loader.piece_len:
                loader.set_seq_len(shape.seq_len)
            micro = []
            for _ in range(shape.micro):
                mb = next(it)
                micro.append({k: v.to(device, non_blocking=True) for k, v in mb.items()})
            dropping = dropping_at(cfg, length, step, p)
            lr = lrs.at(step, p)
            kept = _kept(cfg, shape.seq_len, step, p)  # rows kept in the drop span (random_ltd: its schedule)
            f_step = run_flops.add(shape.seq_len, shape.batch * T // shape.seq_len, dropping, kept,
                                   dropping and cfg.drop.consistency_weight > 0 and step % cfg.drop.consistency_every == 0)
            out = step_fn(micro, lr, dropping, step, p)
            bad = (~out["finite"]).long()
            nf[0] = (nf[0] + 1) * bad
            nf[1] = torch.maximum(nf[1], nf[0])
            nf[2] += bad
            step += 1
            pending += 1
            tokens_done += shape.batch * T
            tokens_pending += shape.batch * T
            used = length.agree(wall + clock() - t_mark, dd.world)  # DDP: rank 0's clock decides
            finished = length.finished(step, used)
            is_log = step % tc.log_every == 0 or finished
            is_eval = step % tc.eval_every == 0 or finished
            # read once per step: a signal arriving after this point (while logging or evaluating)
            # is acted on after the next step, never by stopping without the checkpoint. Under a
            # process group every rank must stop after the same step (the checkpoint is collective):
            # the ranks agree at the steps where the host waits anyway (log, eval, checkpoint), so a
            # signal that reached some ranks only, or at different steps, stops them all together
            signalled = stop.stop
            if dd.world > 1:
                at_sync = is_log or is_eval or step % tc.ckpt_every == 0
                signalled = at_sync and not par.all_true(not signalled)
            stopping = signalled or (stop_at is not None and step >= stop_at)
            is_ckpt = step % tc.ckpt_every == 0 or finished or stopping
            if is_log or is_eval or is_ckpt:
                # the host waits for the device only here, not every step; step_time is the mean
                # over the steps since the last such point
                if device.type == "cuda":
                    torch.cuda.synchronize()
                elapsed = clock() - t_mark
                dt = elapsed / pending
                tok_s = tokens_pending / elapsed if elapsed > 0 else 0.0
                tokens_pending = 0
                train_time += elapsed
                wall += elapsed
                pending = 0
                streak, worst, skipped = nf.tolist()
                nf[1] = nf[0]
                if worst >= tc.max_nonfinite_steps:
                    last = ckpt_mod.latest(run_dir)
                    raise TrainingError(
                        f"non-finite loss or gradient norm in {worst} consecutive steps at or before step {step} "
                        f"(train.max_nonfinite_steps={tc.max_nonfinite_steps}); stopped. Last good checkpoint: "
                        f"{last or 'none'} (lower train.lr or check the data)"
                    )
            if is_log:
                rec = {"step": step, "loss": out["loss"].item(), "acc": out["acc"].item(),
                       "lr": lr, "grad_norm": out["grad_norm"].item(),
                       "kept_fraction": kept / shape.seq_len if dropping else 1.0, "dropping": dropping,
                       "step_time": dt, "tokens_per_s": tok_s, "wall_time": wall,
                       "flops_per_step": f_step, "flops": run_flops.total, "skipped_steps": skipped}
                if shapes.active:
                    rec.update(seq_len=shape.seq_len, batch_size=shape.batch)
                if not masks.constant:
                    rec["mask_prob"] = loader.mask_rate
                rec.update(realised(loader.state_dict()))  # a mixture's shares drawn so far: mix_0, mix_1, ...
                if peak_flops:
                    rec["mfu"] = rec["flops_per_step"] / dt / (peak_flops * dd.world)
                log.write(rec)
                history.append(rec)
                if pbar is not None:
                    pbar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")
            if is_eval and evaluates and has_eval:
                last_eval = evaluate_mlm(model, eval_batches(), device, amp, tc.eval_batches)
                rec = {"step": step, "wall_time": wall, "flops": run_flops.total, **last_eval}
                log.write(rec)
                history.append(rec)
            if is_ckpt and streak:  # the weights are those before the streak; no checkpoint until it ends
                if dd.main:
                    print(f"warning: step {step}: the last {streak} step(s) had a non-finite gradient norm and were "
                          "skipped; no checkpoint written here", file=sys.stderr)
            elif is_ckpt:
                save_ckpt(step)
                if dd.world > 1:
                    dist.barrier()
            if pbar is not None:
                pbar.update(1)
            if is_log or is_eval or is_ckpt:
                t_mark = clock()  # evaluation and checkpoints are not training time
            if stopping:
                interrupted = True
                break
    if pbar is not None:
        pbar.close()
    loader.close()
    if dd.main:
        log.write({"step": step, "event": "interrupted" if interrupted else "end", "wall_time": wall,
                   "skipped_steps": int(nf[2]), "flops": run_flops.total,
                   "tokens": loader.sequences_consumed * T})
    log.close()
    if dd.main and not interrupted:
        from .report import write_run_report

        write_run_report(run_dir)
    return PretrainResult(
        run_dir=run_dir, steps=step, interrupted=interrupted, wall_time=wall,
        tokens_per_s=tokens_done / train_time if train_time else 0.0, final_eval=last_eval,
        flops_per_step={"dropping": flops_drop.total, "dense": flops_dense.total},
        importance=selector.scores.detach().cpu().clone() if selector is not None else None, history=history,
        stop_signal=stop.signum if interrupted else 0,
    )


def _kept(cfg: Config, seq_len: int, step: int, progress: float) -> int:
    """Rows kept in the drop span at optimizer step ``step`` (0-based), ``progress`` of the run done
    (random_ltd: its schedule, over the steps or over the time budget)."""
    if not cfg.drop.per_layer:
        return cfg.drop.num_kept(seq_len)
    return ltd_kept_at(cfg.drop, seq_len, step, cfg.train.steps, progress)


def _load_training_state(ckpt: Path, meta: dict[str, Any], state_sd: dict[str, Tensor],
                         model: nn.Module, opt: torch.optim.Optimizer, par: Parallel) -> None:
    """Weights and AdamW state of checkpoint ``ckpt`` into the (wrapped) model and its optimizer,
    whatever wrote it and however the ranks share the model now: a sharded checkpoint (FSDP, any
    world size) is resharded by DCP, collectively under FSDP, else read whole by each process; an
    unsharded one's AdamW state is loaded as it is, or split into this rank's shards under FSDP (its
    weights were loaded before the model was wrapped)."""
    groups = meta["optimizer_param_groups"]
    if ckpt_mod.is_sharded(meta):
        sharded_ckpt.load_into(ckpt, model, opt, groups, distributed=par.sharded)
    elif par.sharded:
        sharded_ckpt.load_full_into(opt, state_sd, groups)
    else:
        ckpt_mod.optimizer_from_tensors(opt, state_sd, groups)


def _finished(run_dir: Path, step: int, length: RunLength, dd: Dist, meta: dict[str, Any]) -> PretrainResult:
    """The result of resuming a run whose last checkpoint is at its end (``train.steps`` reached or
    ``train.time_budget`` used): nothing to train (a requeued job, a restarted torchrun agent, a
    repeated command); said once on stderr."""
    if dd.main:
        print(f"{run_dir}: already finished (its last checkpoint is step {step}, the end of {length.describe()}); "
              "nothing to do", file=sys.stderr)
    return PretrainResult(run_dir=run_dir, steps=step, interrupted=False, wall_time=float(meta.get("wall_time", 0.0)),
                          tokens_per_s=0.0, final_eval={}, flops_per_step={}, already_finished=True)


def _rank_rng(state: dict[str, Tensor], rank: int) -> dict[str, Tensor] | None:
    """The RNG states of ``rank`` in a checkpoint's tensors: ``rng.*.rankN`` (written under DDP), else
    the plain ``rng.*`` for rank 0 (a single process); None for a rank the checkpoint has none for."""
    mine = {k[: -len(f".rank{rank}")]: v for k, v in state.items() if k.startswith("rng.") and k.endswith(f".rank{rank}")}
    if mine:
        return mine
    return {k: v for k, v in state.items() if k.startswith("rng.") and ".rank" not in k} if rank == 0 else None


def load_run_config(run_dir: str | os.PathLike) -> Config:
    import tomllib

    p = Path(run_dir) / "config.toml"
    if not p.is_file():
        raise TrainingError(f"{run_dir}: not a run directory (no config.toml)")
    return from_dict(Config, tomllib.loads(p.read_text()))  # the source may be gone


__all__ = ["pretrain", "PretrainResult", "MLMStep", "TrainingError", "lr_at", "stage2_start", "evaluate_mlm", "read_metrics"]
