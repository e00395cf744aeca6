"""Typed configuration: flat dataclasses per section, loaded from TOML presets with dotted
overrides.

A pretraining config is a ``Config`` with sections ``model`` (:mod:`tokendrop.config.model`),
``drop`` (:class:`tokendrop.dropping.config.DropConfig`, beside the registries of selection methods
and variants it is validated against; imported from there), ``data`` and ``train`` (here); a
fine-tuning config is a ``FinetuneConfig``.  TOML files may start with ``extends = "other.toml"``
(path relative to the file, or the name of a preset in ``configs/``) to inherit and override.

    cfg = load_config("configs/tiny.toml", ["drop.rate=0.25", "train.steps=40"])

Every key is checked against the dataclass fields: unknown keys get a "did you mean" hint, values
are converted/checked against the annotated type, and ``validate()`` checks the cross-field rules.
Errors are ``ConfigError`` with a one-line message naming the field.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import sys
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokendrop.config.checks import check_at_most, check_positive, check_size, positive_int
from tokendrop.config.layers import (  # noqa: F401 -- a preset's layers
    ONE_CHOICE,
    STEPS_UNSET,
    deep_merge,
    merge_layer,
)
from tokendrop.config.model import VOCAB_FROM_DATA, ModelConfig
from tokendrop.config.quantities import parse_duration, parse_tokens
from tokendrop.dropping.config import SPAN_AUTO, DropConfig  # [drop] lives with the method
from tokendrop.errors import ConfigError, check_arg, check_path_arg
from tokendrop.fields import fixed, free
from tokendrop.value_schedule import DECAYS

# fields whose default means "take it from the prepared data" (pretrain fills them in when it opens
# the data; the run's config.toml records the value used): dotted name -> that default
FROM_DATA = {"model.vocab_size": VOCAB_FROM_DATA, "model.sep_token_id": -1}
# train.steps of a run that names neither steps, tokens, epochs nor a time budget
DEFAULT_STEPS = 1000
SEQ_LEN_FROM_DATA = "data"  # data.seq_len: whatever T the prepared data was built with
# train.micro_batch_size: the per-rank batch (a batch warm-up's: tokendrop.train.warmups)
MICRO_BATCH_AUTO = "auto"
THREADS_AUTO = "auto"  # train.threads: torch's default number of CPU threads
# the most a setting's integer holds (TOML's 64-bit integers); a float is read as an integer only
# up to 2**53, where floats stop being exact integers
MAX_INT = 2**63 - 1
# train.threads / finetune.threads and data.num_workers: at most this many on any machine (and
# at most CPU_OVERSUBSCRIBE per CPU of the machine that runs it: check_cpu_count)
MAX_THREADS = 1024
MAX_WORKERS = 256
EVAL_ALL = "all"  # train.eval_batches: the whole held-out split
# finetune.max_train_examples / max_eval_examples: every example of the task's split
EXAMPLES_ALL = "all"
# train.tokens / train.epochs (train.batch_warmup_tokens / batch_warmup_share) while the run's
# (the batch warm-up's) length is not given in that unit
LENGTH_UNSET = STEPS_UNSET
# train.warmup_steps: from train.warmup_ratio, else DEFAULT_WARMUP_STEPS at most the run's steps
WARMUP_AUTO = "auto"
# data.seq_len_start / train.batch_warmup_start: no sequence-length / batch warm-up;
# train.head_warmup_share: the head warm-up not scaled to the run
WARMUP_OFF = "off"
# every size whose source is named instead of given: dotted field -> that name (0 or a negative
# size is refused, naming it; train.warmup_steps takes 0: no warm-up)
NAMED_SIZES = {
    "model.vocab_size": VOCAB_FROM_DATA,
    "data.seq_len": SEQ_LEN_FROM_DATA,
    "train.micro_batch_size": MICRO_BATCH_AUTO,
    "train.threads": THREADS_AUTO,
    "train.eval_batches": EVAL_ALL,
    "train.steps": STEPS_UNSET,
    "finetune.max_train_examples": EXAMPLES_ALL,
    "finetune.max_eval_examples": EXAMPLES_ALL,
    "finetune.threads": THREADS_AUTO,
    "train.tokens": LENGTH_UNSET,
    "train.epochs": LENGTH_UNSET,
    "train.warmup_steps": WARMUP_AUTO,
    "data.seq_len_start": WARMUP_OFF,
    "train.batch_warmup_start": WARMUP_OFF,
    "train.batch_warmup_tokens": LENGTH_UNSET,
    "train.batch_warmup_share": LENGTH_UNSET,
    "train.head_warmup_share": WARMUP_OFF,
}
# what a named size takes besides its name, where that is not "a positive integer"
# (config.checks.check_size's ``takes``)
SIZE_TAKES = {
    "train.tokens": 'a positive token count ("2B", "500M", 1500000)',
    "train.epochs": "a positive number of passes over the training split",
    "train.warmup_steps": "a number of steps >= 0 (0: no warm-up)",
    "train.batch_warmup_start": ("a number of sequences or a share of train.batch_size in (0, 1)"),
    "train.head_warmup_share": "a share of the run's steps in (0, 1]",
    "train.batch_warmup_tokens": "a positive number of tokens",
    "train.batch_warmup_share": "a share of the run in (0, 1)",
}
# the sizes an older tokendrop recorded as 0 (train.warmup_steps, drop.start / drop.end: -1) in a
# run's config.toml or a checkpoint's meta.json before they were named: dotted field -> (that
# number, the name); read back as the name (recorded_config), so those runs still resume, verify
# and inspect (a recorded vocab_size was always resolved); the finetune.* ones also in a suite's
# [glue] / [squad] sections and a fine-tuning run's flat config (recorded_finetune)
_RECORDED_SENTINEL = {
    k: (-1 if k == "train.warmup_steps" else 0, v)
    for k, v in NAMED_SIZES.items()
    if k != "model.vocab_size"
} | {"drop.start": (-1, SPAN_AUTO), "drop.end": (-1, SPAN_AUTO)}
_FINETUNE_SECTIONS = ("finetune", "glue", "squad")
# how a length field of a run says it is not the one given (in _validate_length's message)
_LENGTH_UNSET = {
    "train.steps": f'"{STEPS_UNSET}"',
    "train.tokens": f'"{LENGTH_UNSET}"',
    "train.epochs": f'"{LENGTH_UNSET}"',
    "train.time_budget": '""',
}
# train.warmup_steps "auto" without train.warmup_ratio: this many steps, at most the run's
DEFAULT_WARMUP_STEPS = 100
# train.report_to: where metrics go (tokendrop.runs.trackers); metrics.jsonl ("jsonl") is always
# written
REPORT_TO = ("jsonl", "tensorboard", "wandb", "mlflow")
LR_SCHEDULES = ("linear", "wsd")  # train.lr_schedule (tokendrop.train.schedules.LRSchedule)
WSD_DECAYS = ("1-sqrt", "linear")  # train.decay_shape


# ----------------------------------------------------------------------------------------------
# data


_SIMPLE_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def check_field_types(section_cfg: Any, section: str) -> None:
    """Refuse a field of a config dataclass built in Python (``from_dict`` checks TOML's) whose
    value is not of its declared simple type (str, int, float, bool; a bool is no number):
    :class:`ConfigError` naming ``section.field``, what it holds and what it takes."""
    for f in dataclasses.fields(section_cfg):
        want = _SIMPLE_TYPES.get(f.type) if isinstance(f.type, str) else None
        v = getattr(section_cfg, f.name)
        if want is None or (isinstance(v, want) and (f.type == "bool" or not isinstance(v, bool))):
            continue
        raise ConfigError(
            f"{section}.{f.name}: holds {type(v).__name__} {v!r:.40}; expected {f.type}"
        )


@dataclass
class DataConfig:
    """Prepared (pre-tokenized) pretraining data and the MLM batches made from it."""

    path: str = free("")  # a directory written by ``tokendrop prepare``
    # a mixture instead of one path (tokendrop.data.mixture): prepared directories sharing the
    # tokenizer and T, each sequence drawn from directory i with probability weights[i] /
    # sum(weights) (weights [] = equal); e.g. a domain corpus and a general replay corpus, [0.7,
    # 0.3]
    paths: list[str] = free(factory=list)
    weights: list[float] = free(factory=list)
    # the T the prepared data must have, or "data" (SEQ_LEN_FROM_DATA): whatever it was prepared
    # with
    seq_len: int | str = free(SEQ_LEN_FROM_DATA)
    # the MLM masking rate: a fraction, or a schedule [start, end] over the run
    # (tokendrop.train.schedules; e.g. [0.3, 0.15], Ankner et al. 2024), decaying as mask_schedule
    # says (linear | cosine)
    mask_prob: float | list[float] = fixed(0.15)
    mask_schedule: str = fixed("linear")
    num_workers: int = free(1)  # background batch-building processes
    prefetch: int = free(4)  # batches buffered per worker
    # sequence-length warm-up (tokendrop.train.schedules, docs/design.md "Schedules"): train at
    # lengths from seq_len_start (a divisor of T, or "off" (WARMUP_OFF): no warm-up) up to T over
    # the first seq_len_warmup_share of the run; each packed sequence is cut into T/L framed pieces
    # of length L (packed data only)
    seq_len_start: int | str = fixed(WARMUP_OFF)
    seq_len_warmup_share: float = fixed(0.1)

    @property
    def seq_len_warmup_from(self) -> int:
        """The length the sequence-length warm-up starts at; 0 while ``seq_len_start`` is
        "off"."""
        v = self.seq_len_start
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    @property
    def mask_prob_start(self) -> float:
        return (
            float(self.mask_prob[0]) if isinstance(self.mask_prob, list) else float(self.mask_prob)
        )

    @property
    def mask_prob_end(self) -> float:
        """The rate at the end of the run (held-out evaluation masks at this rate)."""
        return (
            float(self.mask_prob[-1]) if isinstance(self.mask_prob, list) else float(self.mask_prob)
        )

    @property
    def mask_prob_max(self) -> float:
        """The largest rate of the run (the number of prediction slots is sized for it)."""
        return max(self.mask_prob_start, self.mask_prob_end)

    @property
    def mask_scheduled(self) -> bool:
        return self.mask_prob_start != self.mask_prob_end

    def validate(self) -> None:
        if isinstance(self.mask_prob, list):
            if len(self.mask_prob) != 2:
                raise ConfigError(
                    "data.mask_prob: expected a fraction or a [start, end] pair such as [0.3, "
                    f"0.15], got {self.mask_prob}"
                )
            for name, v in zip(("start", "end"), self.mask_prob):
                if not 0.0 < v < 1.0:
                    raise ConfigError(
                        f"data.mask_prob: the schedule's {name} {v} lies outside (0, 1); expected "
                        "fractions such as [0.3, 0.15]"
                    )
        elif not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(
                f"data.mask_prob: expected a fraction in (0, 1), got {self.mask_prob}"
            )
        if self.mask_schedule not in DECAYS:
            raise ConfigError(
                f"data.mask_schedule: expected one of {', '.join(DECAYS)}, got "
                f"{self.mask_schedule!r}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"data.num_workers: expected >= 0, got {self.num_workers}")
        check_at_most("data.num_workers", self.num_workers, MAX_WORKERS, "worker processes")
        check_size(
            "data.seq_len",
            self.seq_len,
            SEQ_LEN_FROM_DATA,
            "the T the data was prepared with",
            "take it from the data",
        )
        check_size(
            "data.seq_len_start",
            self.seq_len_start,
            WARMUP_OFF,
            "no sequence-length warm-up",
            "train at data.seq_len from the start",
        )
        start = self.seq_len_warmup_from
        if self.seq_len != SEQ_LEN_FROM_DATA and start > self.seq_len:
            raise ConfigError(
                f"data.seq_len_start: expected a length in (0, data.seq_len = {self.seq_len}] "
                f'or "{WARMUP_OFF}", got {start}'
            )
        if start and not 0.0 < self.seq_len_warmup_share < 1.0:
            raise ConfigError(
                "data.seq_len_warmup_share: the warm-up's share of the run "
                f"{self.seq_len_warmup_share} "
                "lies outside (0, 1); expected e.g. 0.1"
            )
        self._validate_mixture()

    def _validate_mixture(self) -> None:
        if self.path and self.paths:
            raise ConfigError(
                f"data.path and data.paths: both set ({self.path!r}, {len(self.paths)} paths); a "
                "run reads one directory (data.path) or a mixture (data.paths): remove one"
            )
        if self.weights and not self.paths:
            raise ConfigError(
                "data.weights: set without data.paths; weights go with a mixture of data.paths"
            )
        if self.weights and len(self.weights) != len(self.paths):
            raise ConfigError(
                f"data.weights: {len(self.weights)} weights for {len(self.paths)} data.paths; "
                "expected one per path (or [] for equal weights)"
            )
        for i, w in enumerate(self.weights):
            check_positive(f"data.weights[{i}]", w, "a positive weight")
        if len(set(self.paths)) != len(self.paths):
            raise ConfigError(
                f"data.paths: a directory is listed twice ({self.paths}); give it a "
                "larger weight instead"
            )


# ----------------------------------------------------------------------------------------------
# training

# what train.* and finetune.* say of a bad learning rate / gradient clip
# (config.checks.check_positive)
# train.compile (tokendrop.train.compiled)
COMPILE_MODES = (
    "auto",
    "off",
    "forward",
    "step",
    "graphs",
)
LR_EXPECTED = "a positive, finite learning rate"
GRAD_CLIP_EXPECTED = "a finite max gradient norm >= 0 (0 = no clipping)"


@dataclass
class TrainConfig:
    """Optimisation and run-time settings (docs/design.md §2.5)."""

    # how long the run lasts: steps (optimizer steps; "unset" (STEPS_UNSET): from tokens, epochs
    # or the time budget, 1000 without any) or time_budget ("20m", "6h", "1h30m": seconds of
    # training time, tokendrop.train.budget) -- one of them
    steps: int | str = free(STEPS_UNSET)
    time_budget: str = free("")
    # or in tokens ("2B", "500M", "1.5e9", an integer: sequence slots, T per sequence) or in epochs
    # (passes over the prepared training sequences), each "unset" (LENGTH_UNSET) when the length
    # is given another way; resolved to train.steps when the run starts
    # (tokendrop.train.budget.resolve_length; the run's config.toml records the steps and
    # resolved_from)
    tokens: int | str = free(LENGTH_UNSET)
    epochs: float | str = free(LENGTH_UNSET)
    # written by the run: how train.steps / warmup_steps were resolved
    resolved_from: str = free("")
    # global sequences per optimizer step (whatever the number of ranks)
    batch_size: int = fixed(32)
    # per rank and forward pass, or "auto" (MICRO_BATCH_AUTO): batch_size // world_size
    micro_batch_size: int | str = free(MICRO_BATCH_AUTO)
    lr: float = free(1e-4)
    # the learning-rate warm-up in steps (0: none), or "auto" (WARMUP_AUTO): from warmup_ratio
    # when that is set, else 100 steps at most the run's (DEFAULT_WARMUP_STEPS; a run counted in
    # tokens or epochs: at most the steps they resolve to)
    warmup_steps: int | str = free(WARMUP_AUTO)
    warmup_ratio: float = free(0.0)  # warm-up as a share of the run's steps (or of its time budget)
    # linear (warm-up, linear decay to 0) | wsd (warm-up, stable, then decay over the last
    # decay_share of the run, shape decay_shape: 1-sqrt | linear); tokendrop.train.schedules
    lr_schedule: str = free("linear")
    decay_share: float = free(0.2)
    decay_shape: str = free("1-sqrt")
    weight_decay: float = free(0.01)
    adam_beta1: float = free(0.9)
    adam_beta2: float = free(0.999)
    adam_eps: float = free(1e-6)
    grad_clip: float = free(1.0)
    precision: str = free("auto")  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    # torch.compile of the training step (tokendrop.train.compiled): off | forward (the model's
    # forward) | step (forward + MLM loss as one graph, its backward compiled with it) | graphs
    # (step, captured as CUDA graphs: mode="reduce-overhead") | auto (step on CUDA, off elsewhere);
    # true = step, false = off
    compile: bool | str = free("auto")
    device: str = free("auto")  # auto | cpu | cuda
    seed: int = fixed(0)
    deterministic: bool = free(False)
    log_every: int = free(10)
    eval_every: int = free(200)
    # batches of batch_size held-out sequences (per rank) an evaluation reads, or "all"
    # (EVAL_ALL): the whole held-out split
    eval_batches: int | str = free(20)
    ckpt_every: int = free(500)
    keep_checkpoints: int = free(2)
    threads: int | str = free(THREADS_AUTO)  # torch CPU threads, or "auto": torch's default
    # data parallelism under torchrun: "ddp" (replicated model) | "fsdp" (FSDP2: parameters,
    # gradients and AdamW state sharded over the ranks; sharded checkpoints).
    # tokendrop.train.parallel
    parallel: str = free("ddp")
    # continued pretraining (model.init) from a source without an MLM head: train the freshly
    # initialised head alone (encoder frozen) before the schedule starts, for head_warmup_steps
    # steps but at most head_warmup_share of the run's train.steps ("off" (WARMUP_OFF): not scaled;
    # a time-budgeted run is not scaled); head_warmup_steps = 0: no warm-up
    # (tokendrop.train.continued.head_warmup_plan)
    head_warmup_steps: int = free(100)
    head_warmup_share: float | str = free(0.5)
    head_warmup_lr: float = free(1e-3)
    # a step whose gradient norm is not finite is skipped (no update; counted and logged); this many
    # in a row stop the run with an error (its weights are never saved as a checkpoint)
    max_nonfinite_steps: int = free(3)
    # global batch warm-up (ModernBERT's; tokendrop.train.schedules): from batch_warmup_start
    # sequences ("off" (WARMUP_OFF): no warm-up; a number in (0, 1) is a share of batch_size: 0.5 =
    # half, whatever the batch) up to batch_size over batch_warmup_tokens tokens or the
    # batch_warmup_share of the run (the other "unset", LENGTH_UNSET), by the number of
    # micro-batches accumulated per step
    batch_warmup_start: int | float | str = fixed(WARMUP_OFF)
    batch_warmup_tokens: int | str = fixed(LENGTH_UNSET)
    batch_warmup_share: float | str = fixed(LENGTH_UNSET)
    # the clock train.time_budget is measured with: "wall" (elapsed seconds) | "process" (CPU
    # seconds of the training process: fair between runs on a machine whose load changes)
    budget_clock: str = fixed("wall")
    # where metrics go besides metrics.jsonl (always written: resume, reports and verify read it;
    # "jsonl" names it): "tensorboard" (RUN/tensorboard), "wandb", "mlflow" -- each tracker's own
    # client, configured by its environment variables (tokendrop.runs.trackers)
    report_to: list[str] = free(factory=lambda: ["tensorboard"])
    # refuse, before anything is allocated or written, a model and batch whose parameters, AdamW
    # state and one micro-batch's activations cannot fit in the device's free memory
    # (tokendrop.train.memory: a floor estimate); false starts the run anyway
    memory_check: bool = free(True)

    def __post_init__(self) -> None:
        counted = self.tokens != LENGTH_UNSET or self.epochs != LENGTH_UNSET
        if self.steps == STEPS_UNSET and not (self.time_budget or counted):
            self.steps = DEFAULT_STEPS
        # "auto" without a ratio: at most the run (one counted in tokens or epochs: when they are
        # resolved to steps, tokendrop.train.budget.resolve_length)
        if self.warmup_steps == WARMUP_AUTO and not self.warmup_ratio:
            if self.fixed_steps > 0:
                self.warmup_steps = min(DEFAULT_WARMUP_STEPS, self.fixed_steps)
            elif not counted:
                self.warmup_steps = DEFAULT_WARMUP_STEPS

    @property
    def fixed_steps(self) -> int:
        """The run's optimizer steps when its length is a number of steps, 0 while train.steps is
        "unset" (a time budget; tokens or epochs before the run resolves them)."""
        s = self.steps
        return s if isinstance(s, int) and not isinstance(s, bool) and s > 0 else 0

    @property
    def fixed_batch_warmup_tokens(self) -> int:
        """The batch warm-up's length in tokens; 0 while train.batch_warmup_tokens is "unset"."""
        v = self.batch_warmup_tokens
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    @property
    def fixed_batch_warmup_share(self) -> float:
        """The batch warm-up's share of the run; 0.0 while train.batch_warmup_share is "unset"."""
        v = self.batch_warmup_share
        return float(v) if _positive_number(v) else 0.0

    @property
    def fixed_warmup_steps(self) -> int:
        """The learning-rate warm-up in steps; 0 while train.warmup_steps is "auto" (a share of a
        time budget; a run counted in tokens or epochs before they are resolved)."""
        w = self.warmup_steps
        return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else 0

    def _validate_length(self) -> None:
        """At most one of steps/tokens/epochs/time_budget; the ratio or the steps of the warm-up."""
        if isinstance(self.tokens, str) and self.tokens != LENGTH_UNSET:
            try:
                parse_tokens(self.tokens)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        for name, ok in (
            ("tokens", lambda v: isinstance(v, str) or positive_int(v)),
            ("epochs", _positive_number),
        ):
            check_size(
                f"train.{name}",
                getattr(self, name),
                LENGTH_UNSET,
                "the run's length is given in another unit",
                "give the run's length another way",
                SIZE_TAKES[f"train.{name}"],
                ok,
            )
        given = [
            n
            for n, v in (
                ("train.steps", self.fixed_steps),
                ("train.tokens", self.tokens != LENGTH_UNSET),
                ("train.epochs", self.epochs != LENGTH_UNSET),
                ("train.time_budget", self.time_budget),
            )
            if v
        ]
        # that pair: its own message below
        if len(given) > 1 and not given == [
            "train.steps",
            "train.time_budget",
        ]:
            raise ConfigError(
                f"{given[0]} and {given[1]}: both set; a run's length is one of train.steps, "
                f"train.tokens, train.epochs or train.time_budget (set {given[0]}="
                f"{_LENGTH_UNSET[given[0]]} or remove it)"
            )
        if not (math.isfinite(self.warmup_ratio) and 0.0 <= self.warmup_ratio < 1.0):
            raise ConfigError(
                "train.warmup_ratio: expected a share of the run in [0, 1), got "
                f"{self.warmup_ratio}"
            )
        check_size(
            "train.warmup_steps",
            self.warmup_steps,
            WARMUP_AUTO,
            f"from train.warmup_ratio, else {DEFAULT_WARMUP_STEPS} steps at most the run's",
            "use that rule",
            SIZE_TAKES["train.warmup_steps"],
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        )
        if self.warmup_ratio and self.warmup_steps != WARMUP_AUTO:
            raise ConfigError(
                f"train.warmup_steps and train.warmup_ratio: both set ({self.warmup_steps}, "
                f'{self.warmup_ratio}); set train.warmup_steps="{WARMUP_AUTO}" to use the ratio, '
                "or remove train.warmup_ratio"
            )

    def validate(self) -> None:
        self._validate_length()
        check_size(
            "train.steps",
            self.steps,
            STEPS_UNSET,
            "the length comes from train.tokens, train.epochs or train.time_budget",
            "take the run's length from them",
        )
        if self.time_budget:
            if self.fixed_steps:
                raise ConfigError(
                    f"train.steps and train.time_budget: both set ({self.steps} steps, "
                    f"{self.time_budget!r}); a run lasts one or the other: set "
                    f'train.steps="{STEPS_UNSET}" to use the time budget, or remove '
                    "train.time_budget"
                )
            try:
                parse_duration(self.time_budget)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"train.lr_schedule: expected one of {', '.join(LR_SCHEDULES)}, got "
                f"{self.lr_schedule!r}"
            )
        if not 0.0 < self.decay_share < 1.0:
            raise ConfigError(
                f"train.decay_share: the decay's share of the run {self.decay_share} lies outside "
                "(0, 1); expected a fraction such as 0.2"
            )
        if self.decay_shape not in WSD_DECAYS:
            raise ConfigError(
                f"train.decay_shape: expected one of {', '.join(WSD_DECAYS)}, got "
                f"{self.decay_shape!r}"
            )
        for name in ("batch_size", "log_every", "eval_every", "ckpt_every", "keep_checkpoints"):
            check_positive(f"train.{name}", getattr(self, name), "a positive integer")
        for name, word, means, fix in (
            (
                "micro_batch_size",
                MICRO_BATCH_AUTO,
                "the per-rank batch, no gradient accumulation",
                "size it from train.batch_size",
            ),
            ("eval_batches", EVAL_ALL, "the whole held-out split", "evaluate on all of it"),
            ("threads", THREADS_AUTO, "torch's default", "let torch choose"),
        ):
            check_size(f"train.{name}", getattr(self, name), word, means, fix)
        check_at_most("train.threads", self.threads, MAX_THREADS, "threads")
        if self.head_warmup_steps < 0:
            raise ConfigError(
                f"train.head_warmup_steps: expected >= 0, got {self.head_warmup_steps}"
            )
        check_size(
            "train.head_warmup_share",
            self.head_warmup_share,
            WARMUP_OFF,
            "not scaled: train.head_warmup_steps as they are",
            "take train.head_warmup_steps as they are",
            SIZE_TAKES["train.head_warmup_share"],
            lambda v: _positive_number(v) and v <= 1,
        )
        check_positive("train.head_warmup_lr", self.head_warmup_lr, "a positive learning rate")
        check_positive("train.lr", self.lr, LR_EXPECTED)
        check_positive("train.grad_clip", self.grad_clip, GRAD_CLIP_EXPECTED, zero=True)
        check_positive("train.weight_decay", self.weight_decay, "a finite value >= 0", zero=True)
        if not (0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0):
            raise ConfigError(
                f"train.adam_beta1/adam_beta2: expected values in [0, 1), got {self.adam_beta1}, "
                f"{self.adam_beta2}"
            )
        check_positive("train.adam_eps", self.adam_eps, "a positive, finite value")
        if self.max_nonfinite_steps < 1:
            raise ConfigError(
                "train.max_nonfinite_steps: expected a positive integer, got "
                f"{self.max_nonfinite_steps}"
            )
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ConfigError(
                f"train.precision: expected auto, fp32 or bf16, got {self.precision!r}"
            )
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"train.device: expected auto, cpu or cuda, got {self.device!r}")
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_MODES:
            raise ConfigError(
                f"train.compile: expected true, false or one of {', '.join(COMPILE_MODES)}, "
                f"got {self.compile!r}"
            )
        if self.parallel not in ("ddp", "fsdp"):
            raise ConfigError(f"train.parallel: expected ddp or fsdp, got {self.parallel!r}")
        bad = [t for t in self.report_to if t not in REPORT_TO]
        if bad or len(set(self.report_to)) != len(self.report_to):
            raise ConfigError(
                f"train.report_to: expected a list of distinct names among {', '.join(REPORT_TO)}, "
                f"got {self.report_to}" + (f" ({bad[0]!r} is none of them)" if bad else "")
            )
        check_size(
            "train.batch_warmup_start",
            self.batch_warmup_start,
            WARMUP_OFF,
            "no batch warm-up",
            "train at train.batch_size from the start",
            SIZE_TAKES["train.batch_warmup_start"],
            lambda v: positive_int(v) or isinstance(v, float) and 0.0 < v < 1.0,
        )
        if err := _recipe_error(self):  # batch warm-up and budget clock
            raise ConfigError(err)


BUDGET_CLOCKS = ("wall", "process")


def _positive_number(value: object) -> bool:
    """``value`` is a finite number > 0 (a bool is no number)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value > 0


def _recipe_error(tc) -> str:
    """The one-line error of a ``TrainConfig``'s batch warm-up / budget clock fields ("" if
    valid)."""
    if tc.budget_clock not in BUDGET_CLOCKS:
        return (
            f"train.budget_clock: expected one of {', '.join(BUDGET_CLOCKS)}, got "
            f"{tc.budget_clock!r}"
        )
    for name, ok in (
        ("batch_warmup_tokens", positive_int),
        ("batch_warmup_share", lambda v: _positive_number(v) and v < 1),
    ):
        try:
            check_size(
                f"train.{name}",
                getattr(tc, name),
                LENGTH_UNSET,
                "the batch warm-up's length is given in the other unit, or there is none",
                "leave the warm-up's length to the other unit",
                SIZE_TAKES[f"train.{name}"],
                ok,
            )
        except ConfigError as e:
            return str(e)
    v = tc.batch_warmup_start
    if v != WARMUP_OFF and v > tc.batch_size:
        return (
            f"train.batch_warmup_start: {v} sequences is more than the batch itself "
            f"(train.batch_size = {tc.batch_size}); set train.batch_warmup_start <= "
            f"{tc.batch_size}, or a share of the batch such as 0.5"
        )
    tokens, share = (tc.batch_warmup_tokens != LENGTH_UNSET, tc.batch_warmup_share != LENGTH_UNSET)
    if v != WARMUP_OFF and tokens == share:
        return (
            "train.batch_warmup_tokens / train.batch_warmup_share: a batch warm-up lasts either a "
            "number of tokens or a share of the run; set exactly one"
        )
    return ""


@dataclass
class Config:
    """A pretraining run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    drop: DropConfig = field(default_factory=DropConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    name: str = free("")

    def validate(self) -> Config:
        for section, cls in (
            ("model", ModelConfig),
            ("drop", DropConfig),
            ("data", DataConfig),
            ("train", TrainConfig),
        ):
            check_arg("Config", section, getattr(self, section), cls, f"a {cls.__name__}")
            check_field_types(getattr(self, section), section)
        self.model.validate()
        # else when the command resolves model.init (the layer count)
        if not self.model.shape_pending:
            self.drop.validate(self.model.num_layers)
        self.data.validate()
        self.train.validate()
        return self


# ----------------------------------------------------------------------------------------------
# fine-tuning


@dataclass
class FinetuneConfig:
    """One fine-tuning run on one task (GLUE-style classification or SQuAD-style span QA)."""

    # a task of tokendrop.finetuning.tasks.TASKS: cola sst2 mrpc stsb qqp mnli qnli rte wnli squad1
    # squad2 custom
    task: str = ""
    data: str = ""  # directory holding the task's files
    epochs: float = 3.0
    lr: float = 2e-5
    batch_size: int = 32
    max_seq_len: int = 128  # classification; SQuAD uses max_seq_len_qa
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    # at most this many train / dev examples (a fixed subset), or "all" (EXAMPLES_ALL)
    max_train_examples: int | str = EXAMPLES_ALL
    max_eval_examples: int | str = EXAMPLES_ALL
    eval_batch_size: int = 64
    # SQuAD preprocessing / post-processing (the standard BERT settings)
    max_seq_len_qa: int = 384
    doc_stride: int = 128
    max_query_len: int = 64
    n_best: int = 20
    max_answer_len: int = 30
    # JSONL/CSV custom tasks
    text_a: str = "sentence"
    text_b: str = ""
    label: str = "label"
    # label names in index order ([] = sorted names seen)
    labels: list[str] = field(default_factory=list)
    threads: int | str = THREADS_AUTO  # torch CPU threads, or "auto": torch's default
    # MNLI: also score GLUE's diagnostic set (AX, Matthews corr.) with the MNLI model.
    # "auto" = <glue>/AX/diagnostic-full.tsv beside the MNLI dir if present; "" = off; else a path
    ax_data: str = "auto"
    save_model: bool = False  # write the fine-tuned model (HF layout) to <out>/model
    # GLUE TSV rows of the wrong width / unknown label, SQuAD training answers covering no word
    # piece: left out and counted, not errors
    skip_malformed: bool = False
    log_every: int = 50  # optimizer steps between progress lines (0 = silent)

    def validate(self) -> FinetuneConfig:
        check_field_types(self, "finetune")
        check_positive("finetune.epochs", self.epochs, "a finite number > 0")
        check_positive("finetune.lr", self.lr, LR_EXPECTED)
        check_positive("finetune.grad_clip", self.grad_clip, GRAD_CLIP_EXPECTED, zero=True)
        check_positive("finetune.batch_size", self.batch_size, "> 0")
        check_positive("finetune.eval_batch_size", self.eval_batch_size, "> 0")
        for name, word, means, fix in (
            ("max_train_examples", EXAMPLES_ALL, "every train example", "train on all of them"),
            ("max_eval_examples", EXAMPLES_ALL, "every dev example", "evaluate on all of them"),
            ("threads", THREADS_AUTO, "torch's default", "let torch choose"),
        ):
            check_size(f"finetune.{name}", getattr(self, name), word, means, fix)
        check_at_most("finetune.threads", self.threads, MAX_THREADS, "threads")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(
                f"finetune.warmup_ratio: expected a fraction in [0, 1), got {self.warmup_ratio}"
            )
        if self.max_seq_len < 8:
            raise ConfigError(f"finetune.max_seq_len: expected >= 8, got {self.max_seq_len}")
        if self.max_seq_len_qa < self.max_query_len + 4:
            raise ConfigError(
                f"finetune.max_seq_len_qa: {self.max_seq_len_qa} leaves no room for context "
                f"after finetune.max_query_len={self.max_query_len}"
            )
        if self.doc_stride <= 0 or self.n_best <= 0 or self.max_answer_len <= 0:
            raise ConfigError("finetune.doc_stride, n_best and max_answer_len must be positive")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ConfigError(
                f"finetune.precision: expected auto, fp32 or bf16, got {self.precision!r}"
            )
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"finetune.device: expected auto, cpu or cuda, got {self.device!r}")
        return self


# ----------------------------------------------------------------------------------------------
# loading

CONFIG_DIR_ENV = "TOKENDROP_CONFIG_DIR"


def config_dir() -> Path:
    """The presets folder: $TOKENDROP_CONFIG_DIR, else ``configs/`` at the repository root (an
    editable install), else the copy a regular install puts under ``<prefix>/share/tokendrop``."""
    env = os.environ.get(CONFIG_DIR_ENV)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[3] / "configs"
    installed = Path(sys.prefix) / "share" / "tokendrop" / "configs"
    return repo if repo.is_dir() or not installed.is_dir() else installed


def resolve_preset(name_or_path: str | os.PathLike, relative_to: Path | None = None) -> Path:
    p = Path(name_or_path)
    candidates = []
    if relative_to is not None and not p.is_absolute():
        candidates.append(relative_to / p)
    candidates.append(p)
    if p.suffix != ".toml":
        candidates.append(config_dir() / f"{p}.toml")
    candidates.append(config_dir() / p)
    for c in candidates:
        if c.is_file():
            return c
    if p.is_dir():
        raise ConfigError(f"config: {p} is a directory; expected a preset name or a .toml file")
    names = sorted(c.stem for c in config_dir().glob("*.toml")) if config_dir().is_dir() else []
    typed = p.stem if p.suffix == ".toml" else str(name_or_path)
    hint = difflib.get_close_matches(typed, names, n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint and os.sep not in str(name_or_path) else ""
    raise ConfigError(
        f"config: no such file or preset {str(name_or_path)!r} (looked in {config_dir()}){extra}"
    )


def _read_toml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'extends' forms a cycle")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not UTF-8 text (invalid byte at {e.start}); expected a TOML file"
        ) from None
    except OSError as e:
        raise ConfigError(
            f"{path}: cannot read ({e.strerror or e}); expected a readable TOML file"
        ) from None
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: 'extends' must be a string naming a preset or a .toml file")
    base = _read_toml(resolve_preset(parent, path.parent), seen + (path,))
    return merge_layer(base, data)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected section.key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare string such as drop.method=cumulative
    return key.split("."), value


def _unheld_integer(value: Any) -> bool:
    """``value`` is a number written as an integer that no integer setting holds."""
    if isinstance(value, float) and value.is_integer():
        return abs(value) > 2**53
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # float | list[float]: the first type that fits
        options = typing.get_args(tp)
        if int in options and float not in options and _unheld_integer(value):
            return _coerce(value, int, where)  # the integer bound's own message
        for option in options:
            try:
                return _coerce(value, option, where)
            except ConfigError:
                pass
        names = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
        raise ConfigError(
            f"{where}: expected "
            f"{' or '.join(names.get(o, 'a list') for o in options)}, got {value!r}"
        )
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            if _unheld_integer(value):  # 1e3 is exactly 1000; 1e30 no exact integer
                raise ConfigError(
                    f"{where}: expected an integer, got {value!r}, a float beyond the exact "
                    "integers (2**53); write the integer's digits"
                )
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if _unheld_integer(value):
                raise ConfigError(
                    f"{where}: {value} is beyond the largest integer a setting holds ({MAX_INT})"
                )
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if origin is dict:
        key_tp, item_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return {
            _coerce(k, key_tp, where): _coerce(v, item_tp, f"{where}.{k}") for k, v in value.items()
        }
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ConfigError(f"{where}: unsupported type {tp}")


def _factory_table(f: dataclasses.Field, tp: type) -> dict[str, Any]:
    """The fields a dataclass field's ``default_factory`` sets differently from ``tp()``, as a TOML
    table (a nested dataclass whole); {} for a plain ``default_factory=tp``."""
    if f.default_factory is dataclasses.MISSING or f.default_factory is tp:
        return {}
    made, plain = f.default_factory(), tp()
    out: dict[str, Any] = {}
    for g in dataclasses.fields(tp):
        v = getattr(made, g.name)
        if v != getattr(plain, g.name):
            out[g.name] = dataclasses.asdict(v) if dataclasses.is_dataclass(v) else copy.deepcopy(v)
    return out


def _close_key(key: str, cls: type, fields: dict[str, dataclasses.Field]) -> str:
    """The key of ``cls`` closest to an unknown ``key``: its own fields, and the dotted keys of its
    sections (``datapath`` -> ``data.path``, ``batch_size`` at the top -> ``train.batch_size``)."""
    hints = typing.get_type_hints(cls)
    keys = {name: name for name in fields}
    for name in fields:
        if dataclasses.is_dataclass(hints[name]):
            for f in dataclasses.fields(hints[name]):
                keys.setdefault(f"{name}.{f.name}", f"{name}.{f.name}")
                keys.setdefault(f"{name}{f.name}", f"{name}.{f.name}")  # the dot left out
                keys.setdefault(f.name, f"{name}.{f.name}")  # the section left out
    best = difflib.get_close_matches(key, list(keys), n=1)
    return keys[best[0]] if best else ""


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key not in fields:
            sub = next(iter(value), "") if isinstance(value, dict) and len(value) == 1 else ""
            hint = _close_key(f"{key}.{sub}" if sub else key, cls, fields)  # trian.steps
            extra = (
                f"; did you mean '{prefix}{hint}'?"
                if hint
                else f"; expected one of {', '.join(fields)}"
            )
            raise ConfigError(f"unknown config key {where!r}{extra}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a [{where}] table, got {value!r}")
            # a table layers over what its field's default_factory sets (a suite's [glue] over
            # _glue_base), as a preset layers over the one it extends
            kwargs[key] = _build(
                tp, deep_merge(_factory_table(fields[key], tp), value), f"{where}."
            )
        else:
            kwargs[key] = _coerce(value, tp, where)
    return cls(**kwargs)


def from_dict(cls: type, data: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Build ``cls`` from a TOML-shaped dict plus ``section.key=value`` overrides.  Pure: nothing is
    read from disk.

    With ``model.init`` set (continued pretraining) and no shape recorded, the [model] section keeps
    what was given: the command that runs resolves the source once and takes the shape from it
    (``tokendrop.models.source.resolve_model_init``; an explicitly given shape field that
    contradicts the source is an error then).  A run's own config.toml records the resolved shape.
    """
    layer: dict[str, Any] = {}  # the overrides: one layer over ``data`` (``merge_layer``)
    for item in overrides:
        keys, value = _parse_override(item)
        node, above = layer, data
        for k in keys[:-1]:
            above = above.get(k, {}) if isinstance(above, dict) else {}
            if not isinstance(above, dict):
                raise ConfigError(f"override {item!r}: {k!r} is not a section")
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {k!r} is not a section")
        node[keys[-1]] = value
    obj = _build(cls, merge_layer(data, layer), "")
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def recorded_config(data: dict[str, Any]) -> dict[str, Any]:
    """A config a run recorded (its config.toml, a checkpoint's meta.json) as a TOML-shaped dict,
    with the 0 (``train.warmup_steps``: -1) an older tokendrop wrote for a size now named
    (``data.seq_len = "data"``, ``train.tokens = "unset"``, ``train.batch_warmup_start = "off"``,
    ...) read as that name; a new dict.  Only a recorded config is read so: a 0 a user writes is
    refused."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for dotted, (old, name) in _RECORDED_SENTINEL.items():
        section, key = dotted.split(".")
        for sec in _FINETUNE_SECTIONS if section == "finetune" else (section,):
            if isinstance(out.get(sec), dict):
                _name_sentinel(out[sec], key, old, name)
    return out


def recorded_finetune(data: dict[str, Any]) -> dict[str, Any]:
    """A fine-tuning config a run recorded flat (a cell's ``metrics.json`` ``config``), with the 0
    an older tokendrop wrote for a size now named (``max_train_examples = "all"``, ``threads =
    "auto"``, ...) read as that name; a new dict."""
    out = dict(data)
    for dotted, (old, name) in _RECORDED_SENTINEL.items():
        section, key = dotted.split(".")
        if section == "finetune":
            _name_sentinel(out, key, old, name)
    return out


def _name_sentinel(section: dict[str, Any], key: str, old: int, name: str) -> None:
    if section.get(key) == old and not isinstance(section.get(key), bool):
        section[key] = name


def load_config(
    path: str | os.PathLike | None,
    overrides: list[str] | tuple[str, ...] = (),
    cls: type = Config,
    recorded: bool = False,
) -> Any:
    """Load a preset (name or .toml path) into ``cls`` and apply ``section.key=value`` overrides;
    ``recorded``: the file is a run's config.toml (:func:`recorded_config`)."""
    check_path_arg("load_config", "path", path, optional=True)
    check_arg(
        "load_config",
        "overrides",
        overrides,
        (list, tuple),
        "a list of 'section.key=value' strings",
    )
    for o in overrides:
        check_arg("load_config", "overrides", o, str, "a list of 'section.key=value' strings")
    data = _read_toml(resolve_preset(path)) if path else {}
    return from_dict(cls, recorded_config(data) if recorded else data, overrides)


def to_dict(cfg: Any) -> dict[str, Any]:
    """``cfg`` as a TOML-shaped dict (``from_dict`` reads it back).  A [model] section that waits
    for its ``init`` source keeps only the fields it was given (``ModelConfig.given``): read back,
    it still takes the others from the source."""
    d = dataclasses.asdict(cfg)
    model = cfg if isinstance(cfg, ModelConfig) else getattr(cfg, "model", None)
    if isinstance(model, ModelConfig) and model.init and not model.resolved:
        given = {
            k: v
            for k, v in (d if model is cfg else d["model"]).items()
            if k in model.given() or k == "init"
        }
        return given if model is cfg else {**d, "model": given}
    return d


# the escapes TOML's basic strings name; every other control character is \uXXXX
_TOML_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string, quotes included: backslash, quote and every control character
    (U+0000-U+001F, U+007F) escaped, so any string reads back as itself.  A string holding a lone
    surrogate (a path with bytes that are not UTF-8) has no TOML form: ``ValueError``."""
    out = []
    for ch in s:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04X}")
        elif "\ud800" <= ch <= "\udfff":
            raise ValueError(f"{s!r} holds {ch!r}, which is not a character TOML can hold")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def to_toml(cfg: Any) -> str:
    """Serialise a config dataclass as TOML (scalars and flat lists only, which is all we use);
    every string goes through :func:`toml_string`.  A string with no TOML form: ConfigError naming
    the field."""

    def fmt(v: Any, where: str) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            try:
                return toml_string(v)
            except ValueError as e:
                raise ConfigError(
                    f"{where}: {e}; give it as text (a path whose name is valid UTF-8)"
                ) from None
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x, where) for x in v) + "]"
        return str(v)

    d = to_dict(cfg)
    top = [f"{k} = {fmt(v, k)}" for k, v in d.items() if not isinstance(v, dict)]
    out = top + ([""] if top else [])
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(f"[{k}]")
            out += [f"{kk} = {fmt(vv, f'{k}.{kk}')}" for kk, vv in v.items()]
            out.append("")
    return "\n".join(out)
