"""Continued pretraining: start a run from a published checkpoint (``model.init``).

``tokendrop pretrain --init SOURCE`` (or ``model.init = "SOURCE"`` in a preset) takes the model's
shape from SOURCE's ``config.json``: ``pretrain`` resolves SOURCE once
(``tokendrop.models.source``), builds the run's config from it (``tokendrop.train.run_config``,
where ``check_vocabulary`` checks that the prepared data was tokenized with SOURCE's vocabulary)
and, when a new run starts:

1. ``start_from_source`` checks that the resolved weights have the sha256 the run's config
   recorded, loads the weights (a missing MLM head is initialised the way BERT does: tied decoder,
   zero bias) and copies SOURCE's config.json and tokenizer files to ``RUN/source/`` (so ``export``
   keeps them and ``--resume`` never needs SOURCE again);
2. ``head_warmup`` trains a freshly initialised MLM head alone for ``train.head_warmup_steps``
   steps with the encoder frozen, so that the head's random gradients do not reach the encoder
   in the first steps (docs/design.md, "Continued pretraining", has the measurement);
3. ``warm_start_importance`` fills the cumulative-loss vector before the first update
   (``drop.importance_init``): a trained encoder's losses are ~2-4 nats while a fresh vector holds
   ``init_score`` (10) everywhere, which would otherwise decay too slowly to mean anything in a
   short continued run.

Both warm-ups draw their batches from their own loader stream (the training split with another
seed), so the main loader's position, and with it exact resume, is unaffected.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tokendrop.config import WARMUP_OFF, TrainConfig
from tokendrop.config.model import ModelConfig
from tokendrop.data import MLMLoader
from tokendrop.data.tokenizer import tokenizer_vocab_sha256
from tokendrop.dropping.config import DropConfig
from tokendrop.errors import ConfigError, DataError
from tokendrop.models.hf import save_source_files
from tokendrop.models.source import load_init_weights
from tokendrop.train.console import Progress, is_terminal
from tokendrop.train.schedules import lr_linear_steps

# the loader seed offset of the warm-up streams (never equal to the training stream's)
WARMUP_SEED_OFFSET = 7919


def start_from_source(
    model_cfg: ModelConfig, src, model, run_dir: Path, main: bool
) -> dict[str, Any]:
    """Load ``src`` (``model.init`` of the run's ``[model]`` section ``model_cfg``, resolved once by
    the command that runs: ``tokendrop.train.run_config.resolve_init``) into ``model``; -> a summary
    for the run log."""
    if model_cfg.init_sha256 and src.sha256 != model_cfg.init_sha256:
        raise ConfigError(
            f"model.init: {src.weights_file} has sha256 {src.sha256[:12]}... but the config "
            f"recorded {model_cfg.init_sha256[:12]}...; the source changed since the "
            "config was resolved"
        )
    report = load_init_weights(src, model)
    if main:
        save_source_files(src, run_dir)
    summary = {
        "event": "init",
        "source": model_cfg.init,
        "path": str(src.path),
        "layout": src.layout,
        "weights_file": str(src.weights_file),
        "sha256": src.sha256,
        "fresh": report.fresh,
        "unexpected": report.unexpected,
        "ignored": report.ignored,
        "notes": report.notes,
    }
    if main:
        say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        say(f"init: {model_cfg.init} ({src.layout}, sha256 {src.sha256[:12]}...)")
        for note in report.notes:
            say(f"init: {note}")
        if report.fresh:
            say(f"init: freshly initialised ({len(report.fresh)}): {', '.join(report.fresh)}")
        if report.unexpected:
            say(
                f"init: unexpected tensors, not used ({len(report.unexpected)}): "
                f"{', '.join(report.unexpected)}"
            )
    return summary


def check_vocabulary(src, data) -> None:
    """The prepared data must use the source's vocabulary: the same vocabulary hash
    (``tokendrop.data.tokenizer.tokenizer_vocab_sha256`` of the source's tokenizer: its vocab.txt,
    or its tokenizer.json for a tokenizer used as it is, e.g. ModernBERT's BPE) and an id space that
    the source's embedding covers.  The source's ``vocab_size`` may exceed the tokenizer's ids
    (ModernBERT pads its embedding); ``prepare --tokenizer MODEL_DIR`` then records that size, which
    the run needs (the model is built with the source's shape and the data's size must equal it).  A
    source with fewer embedding rows than the data has ids is an error."""
    if src.tokenizer_dir is not None:
        try:
            h = tokenizer_vocab_sha256(src.tokenizer_dir)
        except DataError as e:
            raise ConfigError(
                f"model.init: the tokenizer of {src.source} does not load ({e})"
            ) from None
        if h != data.vocab_hash:
            what = "tokenizer.json" if data.tokenizer_backend == "file" else "vocab.txt"
            raise ConfigError(
                f"data.path: {data.path} was prepared with another vocabulary ({what} sha256 "
                f"{data.vocab_hash[:12]}...) than model.init's {src.tokenizer_dir} (sha256 "
                f"{h[:12]}...); prepare the data with `tokendrop prepare --tokenizer "
                f"{src.tokenizer_dir}`"
            )
    else:
        print(
            f"warning: model.init {src.source} has no tokenizer files; only the vocabulary "
            "size was checked",
            file=sys.stderr,
        )
    if data.vocab_size > src.model.vocab_size:
        raise ConfigError(
            f"data.path: {data.path} holds token ids up to {data.vocab_size - 1} but model.init "
            f"{src.source} has only "
            f"{src.model.vocab_size} embedding rows (config.json vocab_size); prepare the data "
            "with the source's own "
            f"tokenizer: `tokendrop prepare --tokenizer {src.tokenizer_dir or src.path}`"
        )
    if data.vocab_size < src.model.vocab_size:
        raise ConfigError(
            f"data.path: {data.path} was prepared for a vocabulary of {data.vocab_size} ids but "
            f"model.init {src.source} has {src.model.vocab_size} embedding rows; prepare the data "
            "with `tokendrop prepare --tokenizer "
            f"{src.path if src.kind == 'huggingface' else src.tokenizer_dir or src.path}` (a model "
            "directory: its config.json's vocab_size sizes the data)"
        )


def head_warmup_plan(tc) -> tuple[int, str]:
    """The MLM-head warm-up of a run whose source has no MLM head (``train.head_warmup_*``): ->
    (steps, how they were chosen).  ``head_warmup_steps`` steps, but at most ``head_warmup_share``
    of the run's ``train.steps`` ("off": not scaled); a time-budgeted run is not scaled."""
    cap = tc.head_warmup_steps
    if cap <= 0:
        return 0, "none (train.head_warmup_steps = 0)"
    steps = tc.fixed_steps
    if tc.head_warmup_share == WARMUP_OFF or tc.time_budget or not steps:
        why = (
            "a time-budgeted run: not scaled"
            if tc.time_budget
            else f'train.head_warmup_share = "{WARMUP_OFF}": not scaled'
        )
        return cap, f"{cap} steps (train.head_warmup_steps; {why})"
    scaled = max(1, math.ceil(tc.head_warmup_share * steps))
    if scaled < cap:
        return scaled, (
            f"{scaled} steps ({tc.head_warmup_share:g} of the run's {steps} steps; "
            f"train.head_warmup_share, at most train.head_warmup_steps = {cap})"
        )
    return (
        cap,
        f"{cap} steps (train.head_warmup_steps; {tc.head_warmup_share:g} of the run "
        f"would be {scaled})",
    )


def importance_plan(drop: DropConfig, selector, from_source: bool) -> tuple[str, int, str]:
    """How the importance vector starts (``drop.importance_init`` of the ``[drop]`` section
    ``drop``; "auto" is a dense pass for a run continued from a source, ``from_source``) -> (how,
    dense batches it costs before step 1, a description)."""
    how = drop.importance_init
    how = ("dense_pass" if from_source else "constant") if how == "auto" else how
    learns = drop.selection.learns_from_loss
    if selector is None:  # nothing selects: no importance vector
        what = "no dropping" if not drop.enabled else f"variant {drop.variant} selects nothing"
        return "constant", 0, f"none ({what})"
    if not learns or how == "constant":
        what = (
            f"{drop.method} keeps no loss record"
            if not learns
            else f"constant (init_score {drop.init_score:g})"
        )
        return "constant", 0, f"none ({what})"
    if how == "frequency":
        return how, 0, "frequency (unigram surprisal of the data's counts; no extra pass)"
    n = drop.importance_init_batches
    return (
        how,
        n,
        f"dense pass over {n} batches before step 1 (drop.importance_init = "
        f"{drop.importance_init})",
    )


def describe_warm_ups(
    model_cfg: ModelConfig,
    tc: TrainConfig,
    drop: DropConfig,
    model,
    selector,
    events: list[dict],
    new: bool = True,
) -> tuple[str, str, str]:
    """For the start-up banner: (the source, the MLM-head warm-up, the importance start) of a run
    with these ``[model]``, ``[train]`` and ``[drop]`` sections (``events``: ``load_source``'s;
    ``new``: not a resumed run)."""
    fresh = bool(events) and head_is_fresh(model, events[0]["fresh"])
    source = ""
    if model_cfg.init:
        source = (
            f"model.init = {model_cfg.init} (sha256 {model_cfg.init_sha256[:12]}...)"
            + (f"; {events[0]['layout']}" if events else "")
            + ("; no MLM head: warmed up first" if fresh else "")
        )
    if not new:
        return source, "done before the checkpoint resumed", "the checkpoint's"
    head = (
        head_warmup_plan(tc)[1]
        if fresh
        else "none (the source has its MLM head)"
        if model_cfg.init
        else "none (no model.init)"
    )
    return source, head, importance_plan(drop, selector, bool(model_cfg.init))[2]


def head_warmup(
    model,
    batches: Iterator[dict[str, Tensor]],
    steps: int,
    lr: float,
    device: torch.device,
    amp: torch.dtype | None,
    progress=None,
) -> list[float]:
    """Train the MLM head alone (``model.head_parameters()``: encoder and the tied decoder weight
    frozen, no encoder backward) for ``steps`` steps; any family's
    ``tokendrop.models.masked_lm.MaskedLM``.

    AdamW on the head's parameters, linear warm-up over the first 10% then linear decay to 0.
    -> the per-step MLM losses.  Every parameter's ``requires_grad`` is restored on return.
    """
    params = model.head_parameters()
    head = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in head and p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = max(1, steps // 10)
    losses: list[float] = []
    was_training = model.training
    model.train()
    # a tokendrop.train.console.Progress (a bar on a terminal, else a line every ~10%), or None
    pbar = progress
    every = max(1, steps // 10)
    try:
        for p in frozen:
            p.requires_grad_(False)
        for step in range(steps):
            mb = {k: v.to(device) for k, v in next(batches).items()}
            for g in opt.param_groups:
                g["lr"] = lr_linear_steps(step, lr, warm, steps)
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                with torch.no_grad():
                    # (B, P, d)
                    h = model.hidden(
                        mb["input_ids"],
                        mb["mlm_positions"],
                        mb["attention_mask"],
                        mb["token_type_ids"],
                    )
                logits = model.head_logits(h)
            nll = model.mlm_nll(logits, mb["mlm_labels"])
            w = mb["mlm_weights"]
            loss = (nll * w).sum() / w.sum().clamp(min=1.0)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if pbar is not None:
                pbar.update(1, loss=f"{losses[-1]:.3f}")
                if (step + 1) % every == 0 or step + 1 == steps:
                    pbar.line(
                        f"MLM-head warm-up: step {step + 1}/{steps} | loss {losses[-1]:.4f} | "
                        f"{pbar.elapsed():.1f} s"
                    )
    finally:
        for p in frozen:
            p.requires_grad_(True)
        if pbar is not None:
            pbar.close()
        model.train(was_training)
    return losses


def head_is_fresh(model, fresh: list[str]) -> bool:
    """Whether any of the MLM head's own parameters were initialised fresh (``fresh``: parameter
    names from the source load), for either family (BERT ``mlm.*``, ModernBERT ``head.*`` /
    ``decoder.bias``)."""
    head = {id(p) for p in model.head_parameters()}
    names = {n for n, p in model.named_parameters() if id(p) in head}
    return any(n in names for n in fresh)


@torch.no_grad()
def warm_start_importance(
    selector,
    model,
    batches: Iterator[dict[str, Tensor]],
    how: str,
    num_batches: int,
    device: torch.device,
    amp: torch.dtype | None,
    counts=None,
) -> dict[str, Any]:
    """Fill the importance vector before training (``drop.importance_init``).

    ``dense_pass``: the full model (no dropping, no update) scores ``num_batches`` training
    batches; every id seen in a prediction slot gets its mean loss, unseen ids keep ``init_score``.
    ``frequency``: every id gets its unigram surprisal -log p(id) (add-one smoothed corpus counts),
    the loss of a unigram model, on the same nats scale as the MLM loss.
    ``constant``: nothing (every id at ``init_score``, as the paper starts from scratch).
    """
    if how == "constant":
        return {"importance_init": how}
    if how == "frequency":
        c = torch.as_tensor(counts, dtype=torch.float64)
        p = (c + 1.0) / (c.sum() + c.numel())
        selector.set_scores(
            (-torch.log(p)).float().to(selector.scores.device), torch.ones_like(c, dtype=torch.bool)
        )
        return {"importance_init": how}
    if how != "dense_pass":
        raise ConfigError(f"drop.importance_init: unknown {how!r}")
    was_training = model.training
    model.eval()
    v = selector.scores.numel()
    stats = torch.zeros(2, v, dtype=torch.float64, device=selector.scores.device)
    for _ in range(num_batches):
        mb = {k: t.to(device) for k, t in next(batches).items()}
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            logits = model(
                mb["input_ids"], mb["mlm_positions"], mb["attention_mask"], mb["token_type_ids"]
            )
        nll = model.mlm_nll(logits, mb["mlm_labels"])
        w = (mb["mlm_weights"] > 0).double()
        ids = mb["mlm_labels"].reshape(-1)
        stats[0].index_add_(0, ids, (nll.double() * w).reshape(-1))
        stats[1].index_add_(0, ids, w.reshape(-1))
    model.train(was_training)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(stats)
    seen = stats[1] > 0
    selector.set_scores((stats[0] / stats[1].clamp(min=1.0)).float(), seen)
    return {
        "importance_init": how,
        "ids_scored": int(seen.sum()),
        "mean_score": float(stats[0].sum() / stats[1].sum().clamp(min=1.0)),
    }


def load_source(model_cfg: ModelConfig, model, run_dir: Path, dd, src) -> list[dict]:
    """A new run with ``model.init`` (of its ``[model]`` section ``model_cfg``): load the source
    ``src`` (resolved by the caller) -> the run log's events ([] without ``model.init``)."""
    if not model_cfg.init:
        return []
    return [start_from_source(model_cfg, src, model, run_dir, dd.main)]


def warm_start(
    tc: TrainConfig,
    drop: DropConfig,
    mask_prob: float,
    from_source: bool,
    model,
    selector,
    data,
    events: list[dict],
    dd,
    device,
    amp,
    micro_bs: int,
    log=None,
    progress: bool = True,
) -> list[dict]:
    """A new run, after ``load_source`` (its ``events``): warm up a fresh MLM head
    (``head_warmup_plan`` of the ``[train]`` section ``tc``) and fill the importance vector
    (``importance_plan`` of the ``[drop]`` section ``drop``; ``from_source``: the run has a
    ``model.init``) -> events for the run log (each phase's seconds in its event).  The warm-ups'
    batches are masked at ``mask_prob`` (``data.mask_prob_start``).  ``log``: a
    ``tokendrop.train.console.RunLog`` (rank 0) that says what each pass does while it runs;
    ``progress``: the head warm-up's bar (a terminal) or lines."""
    how, n_batches, _ = importance_plan(drop, selector, from_source)
    warm_importance = how != "constant"
    head_steps, _ = head_warmup_plan(tc)
    fresh_head = bool(events) and head_steps > 0 and head_is_fresh(model, events[0]["fresh"])
    if not fresh_head and not warm_importance:
        return events
    t0 = time.perf_counter()
    stream = MLMLoader(
        data,
        split="train",
        batch_size=micro_bs,
        seed=tc.seed + WARMUP_SEED_OFFSET,
        rank=dd.rank,
        world_size=dd.world,
        mask_prob=mask_prob,
        num_workers=0,
        shuffle=True,
        loop=True,
    )
    it = iter(stream)
    if fresh_head:
        bar = None
        if log is not None:
            bar = Progress(
                log,
                head_steps,
                desc="MLM-head warm-up",
                bar=progress and is_terminal(),
                console=progress,
            )
        losses = head_warmup(model, it, head_steps, tc.head_warmup_lr, device, amp, bar)
        events.append(
            {
                "event": "head_warmup",
                "steps": len(losses),
                "first_loss": losses[0],
                "last_loss": losses[-1],
                "seconds": time.perf_counter() - t0,
            }
        )
    if warm_importance:
        t1 = time.perf_counter()
        if log is not None and n_batches:
            log.say(f"importance warm start: {how} over {n_batches} batches (no update) ...")
        counts = data.token_counts() if how == "frequency" else None
        ev = warm_start_importance(selector, model, it, how, n_batches, device, amp, counts)
        events.append({"event": "importance_init", **ev, "seconds": time.perf_counter() - t1})
        if log is not None and n_batches:
            log.say(
                f"importance warm start: done in {events[-1]['seconds']:.1f} s"
                + (f", {ev['ids_scored']} ids scored" if "ids_scored" in ev else "")
            )
    stream.close()
    events.append({"event": "init_done", "seconds": time.perf_counter() - t0})
    return events
