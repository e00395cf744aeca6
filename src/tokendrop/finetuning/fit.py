"""``finetune(cfg, model_path, out_dir)``: one fine-tuning run on one task, then dev evaluation.

The task's kind (``finetuning/tasks/``) picks the head and the loss.  Classification (GLUE-style):
pooler ([CLS], tanh) + dropout + linear classifier, cross-entropy, the argmax is the prediction;
regression (STS-B): the same head with one output, mean squared error, the output is the
prediction; span (SQuAD): a linear start/end layer on every position.  Optimisation as BERT
(docs/design.md §2.5, §2.7): AdamW (beta 0.9/0.999, eps 1e-6), weight decay on matrices only (none
on biases and LayerNorm), linear warm-up over ``warmup_ratio`` of the steps then linear decay to 0,
gradient clipping.  The model is the plain encoder of ``tokendrop.models.bert.model`` (no token
dropping at fine-tuning), with bf16 autocast on CUDA. Batches are padded to their longest sequence
only (dynamic padding); dev batches are sorted by length.

Outputs in ``out_dir`` (the directory written atomically, under a lock; ``tokendrop.runs.rundir``):
``metrics.json`` and ``predictions/<split>.tsv`` (classification, regression) or
``predictions/dev.json`` + ``dev_nbest.json`` (+ ``dev_null_odds.json`` for v2.0, the official
evaluation script's inputs)."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tokendrop.config import EXAMPLES_ALL, THREADS_AUTO, FinetuneConfig
from tokendrop.config.checks import check_cpu_count
from tokendrop.data.tokenizer import num_ids
from tokendrop.errors import ConfigError, check_arg, check_path_arg
from tokendrop.finetuning.columns import task_scores
from tokendrop.finetuning.common import FinetuneError, finetune_tokenizer
from tokendrop.finetuning.metrics import split_metrics
from tokendrop.finetuning.tasks import (
    TASKS,
    Example,
    TaskSpec,
    get_task,
    load_task,
    subsample,
    task_dir,
)
from tokendrop.finetuning.tasks.base import refuse_constant
from tokendrop.finetuning.tasks.squad import build_features, postprocess, read_squad, squad_metrics
from tokendrop.models.bert.model import BertForQuestionAnswering, BertForSequenceClassification
from tokendrop.models.families import spec_for_hf_model_type
from tokendrop.models.hf import save_pretrained
from tokendrop.models.source import load_pretrained
from tokendrop.runs import rundir
from tokendrop.runs.checkpoint import sha256_file
from tokendrop.runs.files import atomic_directory, atomic_write_json, atomic_write_text
from tokendrop.runs.gate import gate
from tokendrop.train.runtime import adamw, autocast_dtype, resolve_device, seed_everything
from tokendrop.train.schedules import lr_linear_steps

LogFn = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# set-up helpers


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """lr multiplier for optimizer step ``step`` (0-based): linear warm-up to 1, linear decay to 0
    (pretraining's ``linear`` schedule, ``tokendrop.train.schedules.lr_linear_steps``, with peak
    1)."""
    return lambda step: lr_linear_steps(step, 1.0, warmup, total)


def _load_model(model_path, cls, **kw):
    try:
        return load_pretrained(model_path, cls, **kw)
    except FinetuneError:
        raise
    except (ValueError, KeyError, OSError) as e:  # InteropError, ConfigError, unreadable files
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise FinetuneError(f"cannot load model {model_path}: {msg}") from None


def _load_model_and_tokenizer(
    model_path, cls, max_seq_len: int, field: str = "max_seq_len", log: LogFn | None = None, **kw
):
    """-> (model, info, tokenizer, max_len, specials), the tokenizer checked against the model's
    vocabulary.

    ``max_len`` is ``max_seq_len`` clamped to the model's positions (the clamp is reported through
    ``log``, or on stderr when ``log`` is None, with the value used); ``specials``: the declared
    special tokens' ids ({"pad", "cls", "sep", ...}; ``"pad"`` is the model config's pad id only
    when the vocabulary has no pad token)."""
    model, info = _load_model(model_path, cls, **kw)
    mcfg = info["model_config"]
    tok, specials = finetune_tokenizer(info.get("tokenizer"), model_path)
    # more rows than the tokenizer's ids is fine (ModernBERT pads its embedding)
    if num_ids(tok) > mcfg.vocab_size:
        raise FinetuneError(
            f"tokenizer has {num_ids(tok)} token ids but model {model_path} only "
            f"{mcfg.vocab_size} embeddings: wrong vocab.txt for this model (or wrong "
            "tokenizer.json)"
        )
    max_len = min(max_seq_len, mcfg.max_position_embeddings)
    if max_len < max_seq_len:
        (log or _stderr)(
            f"warning: finetune.{field}={max_seq_len} is more than the model's "
            "max_position_embeddings="
            f"{mcfg.max_position_embeddings}; using {field} {max_len}"
        )
    if specials["pad"] is None:
        specials["pad"] = mcfg.pad_token_id
    return model, info, tok, max_len, specials


def _pad(seqs: list[list[int]], pad: int) -> torch.Tensor:
    n = max(len(s) for s in seqs)
    out = np.full((len(seqs), n), pad, dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return torch.from_numpy(out)


def _batch(ids: list[list[int]], types: list[list[int]], pad_id: int, device: torch.device):
    input_ids = _pad(ids, pad_id)
    token_types = _pad(types, 0)
    lens = torch.tensor([len(s) for s in ids])
    mask = None
    if int(lens.min()) != input_ids.shape[1]:
        mask = (torch.arange(input_ids.shape[1])[None, :] < lens[:, None]).long()
        mask = mask.to(device, non_blocking=True)
    return input_ids.to(device, non_blocking=True), mask, token_types.to(device, non_blocking=True)


# ----------------------------------------------------------------------------------------------
# training loop (shared by both heads)


@dataclasses.dataclass
class TrainStats:
    steps: int
    examples: int
    seconds: float
    examples_per_s: float
    tokens_per_s: float
    final_loss: float
    mean_loss_last_epoch: float
    cpu_s: float  # CPU seconds of this process (all its threads) in the training loop


def _train(
    model, cfg: FinetuneConfig, n: int, batch_fn, loss_fn, device, bf16: bool, log: LogFn | None
) -> TrainStats:
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = max(1, math.ceil(cfg.epochs * steps_per_epoch))
    warmup = int(cfg.warmup_ratio * total)
    opt = adamw(model, cfg.lr, cfg.weight_decay, (0.9, 0.999), 1e-6, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_schedule(warmup, total))
    g = torch.Generator().manual_seed(cfg.seed)
    model.train()
    seen = toks = 0
    losses: list[float] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    step = 0
    tlog, seen_log = t0, 0
    while step < total:
        perm = torch.randperm(n, generator=g).tolist()
        for b in range(0, n, cfg.batch_size):
            if step >= total:
                break
            idx = perm[b : b + cfg.batch_size]
            inputs, targets, ntok = batch_fn(idx)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                out = model(*inputs)
            loss = loss_fn(out, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            gate("finetune-step")  # a test-only pause point (tokendrop.runs.gate)
            seen += len(idx)
            toks += ntok
            if (
                log is not None
                and cfg.log_every > 0
                and (step % cfg.log_every == 0 or step == total)
            ):
                now = time.perf_counter()
                log(
                    f"step {step}/{total} loss {float(loss.detach()):.4f} lr "
                    f"{sched.get_last_lr()[0]:.2e} "
                    f"{(seen - seen_log) / max(now - tlog, 1e-9):.1f} ex/s"
                )
                tlog, seen_log = now, seen
            losses.append(loss.detach())
            if len(losses) > steps_per_epoch:
                losses.pop(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    last = torch.stack(losses).float() if losses else torch.zeros(1)
    return TrainStats(
        step,
        seen,
        secs,
        seen / max(secs, 1e-9),
        toks / max(secs, 1e-9),
        float(last[-1]),
        float(last.mean()),
        time.process_time() - cpu0,
    )


# ----------------------------------------------------------------------------------------------
# sequence tasks: classification and regression


def _encode_pairs(
    tok, examples: list[Example], max_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    tok.enable_truncation(max_length=max_len, strategy="longest_first")
    try:
        if examples and examples[0].text_b is not None:
            enc = tok.encode_batch([(e.text_a, e.text_b or "") for e in examples])
        else:
            enc = tok.encode_batch([e.text_a for e in examples])
    finally:
        tok.no_truncation()
    return [e.ids for e in enc], [e.type_ids for e in enc]


@torch.no_grad()
def _predict(model, kind: str, ids, types, pad_id, device, bf16, batch_size) -> np.ndarray:
    """Class indices (classification: the argmax) or floats (regression: the one output)."""
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    preds = np.zeros(len(ids), dtype=np.float64 if kind == "regression" else np.int64)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        x, m, t = _batch([ids[i] for i in idx], [types[i] for i in idx], pad_id, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(x, m, t).float()
        preds[idx] = (out[:, 0] if kind == "regression" else out.argmax(-1)).cpu().numpy()
    return preds


def _loss(kind: str):
    if kind == "regression":
        return lambda out, y: F.mse_loss(out.float()[:, 0], y)
    return lambda out, y: F.cross_entropy(out.float(), y)


def _write_predictions(
    path: Path, spec: TaskSpec, examples: list[Example], preds: np.ndarray
) -> None:
    """``index  prediction  label`` per example: label names (classification) or numbers
    (regression)."""

    def show(v) -> str:
        if v is None:
            return ""
        return f"{float(v):.6g}" if spec.kind == "regression" else spec.labels[int(v)]

    lines = ["index\tprediction\tlabel"] + [
        f"{e.guid}\t{show(p)}\t{show(e.label)}" for e, p in zip(examples, preds)
    ]
    atomic_write_text(path, "\n".join(lines) + "\n")


def _finetune_sequence(cfg, spec: TaskSpec, model_path, out: Path, device, bf16, log) -> dict:
    """Classification or regression on (pairs of) sentences: train, then score every dev split."""
    skipped: list[str] | None = [] if cfg.skip_malformed else None
    data = load_task(
        spec,
        cfg.data,
        text_a=cfg.text_a,
        text_b=cfg.text_b,
        label=cfg.label,
        labels=cfg.labels or None,
        skipped=skipped,
    )
    spec = data.spec
    dev = {k: (spec, v) for k, v in data.dev.items()}
    files = dict(data.files)
    for split, (sp, exs, f) in spec.extra_dev(
        Path(cfg.data), data.dir, cfg.ax_data, skipped
    ).items():
        dev[split] = (sp, exs)
        files[split] = str(f)
    train = subsample(data.train, cfg.max_train_examples)
    dev = {k: (sp, subsample(v, cfg.max_eval_examples)) for k, (sp, v) in dev.items()}
    for k, (sp, exs) in dev.items():
        refuse_constant(
            sp,
            exs,
            files.get(k, cfg.data),
            "use a dev split holding more than one label"
            + (
                f" (finetune.max_eval_examples = {cfg.max_eval_examples} keeps a subset of "
                "them: raise it)"
                if cfg.max_eval_examples != EXAMPLES_ALL
                else ""
            ),
        )
    if not train:
        raise FinetuneError(f"task {spec.name}: no training examples in {cfg.data}")

    model, info, tok, max_len, specials = _load_model_and_tokenizer(
        model_path,
        BertForSequenceClassification,
        cfg.max_seq_len,
        "max_seq_len",
        log,
        num_labels=spec.num_outputs,
    )
    pad_id = specials["pad"]
    model.to(device)

    t_enc = time.perf_counter()
    tr_ids, tr_types = _encode_pairs(tok, train, max_len)
    dev_enc = {k: _encode_pairs(tok, v, max_len) for k, (_, v) in dev.items()}
    enc_s = time.perf_counter() - t_enc
    targets = torch.tensor(
        [e.label for e in train], dtype=torch.float32 if spec.kind == "regression" else torch.long
    )

    def batch_fn(idx):
        x, m, t = _batch([tr_ids[i] for i in idx], [tr_types[i] for i in idx], pad_id, device)
        return (x, m, t), targets[idx].to(device, non_blocking=True), int(x.numel())

    if log:  # the banner once the data and the model have loaded (their errors come first, alone)
        sizes = (
            ", ".join(f"{k} {len(v)}" for k, (_, v) in dev.items())
            if list(dev) != ["dev"]
            else str(len(dev["dev"][1]))
        )
        for line in _banner(
            cfg, spec, model_path, model, device, bf16, f"{len(train)} train examples, dev {sizes}"
        ):
            log(line)
    stats = _train(model, cfg, len(train), batch_fn, _loss(spec.kind), device, bf16, log)

    metrics: dict[str, dict] = {}
    t_ev = time.perf_counter()
    for split, (sp, exs) in dev.items():
        ids, types = dev_enc[split]
        preds = _predict(model, sp.kind, ids, types, pad_id, device, bf16, cfg.eval_batch_size)
        metrics[split] = split_metrics(sp.metrics, sp.main, [e.label for e in exs], preds.tolist())
        _write_predictions(out / "predictions" / f"{split}.tsv", sp, exs, preds)
    eval_s = time.perf_counter() - t_ev
    if skipped and log:
        log(f"{spec.name}: left out {len(skipped)} malformed row(s), first: {skipped[0]}")
    return {
        "spec": spec,
        "model": model,
        "info": info,
        "metrics": metrics,
        "stats": stats,
        "files": files,
        "n_train": len(train),
        "encode_s": enc_s,
        "eval_s": eval_s,
        "labels": spec.labels,
        "skipped_rows": skipped or [],
        "seq_len": {"field": "max_seq_len", "requested": cfg.max_seq_len, "used": max_len},
    }


# ----------------------------------------------------------------------------------------------
# SQuAD


@torch.no_grad()
def _predict_spans(model, feats, pad_id, device, bf16, batch_size):
    model.eval()
    order = sorted(range(len(feats)), key=lambda i: len(feats[i].input_ids))
    starts: list = [None] * len(feats)
    ends: list = [None] * len(feats)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        x, m, t = _batch(
            [feats[i].input_ids for i in idx],
            [feats[i].token_type_ids for i in idx],
            pad_id,
            device,
        )
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            s, e = model(x, m, t)
        s, e = s.float().cpu().numpy(), e.float().cpu().numpy()
        for j, i in enumerate(idx):
            n = len(feats[i].input_ids)
            starts[i], ends[i] = s[j, :n], e[j, :n]
    return starts, ends


def _finetune_squad(cfg, spec, model_path, out: Path, device, bf16, log) -> dict:
    d = task_dir(spec, cfg.data)
    train_path, dev_path = d / spec.train, d / spec.dev["dev"]
    train_ex, _ = read_squad(train_path, spec.version)
    dev_ex, _ = read_squad(dev_path, spec.version)
    train_ex = subsample(train_ex, cfg.max_train_examples)
    dev_ex = subsample(dev_ex, cfg.max_eval_examples)

    model, info, tok, max_len, specials = _load_model_and_tokenizer(
        model_path, BertForQuestionAnswering, cfg.max_seq_len_qa, "max_seq_len_qa", log
    )
    pad_id = specials["pad"]
    model.to(device)

    t_enc = time.perf_counter()
    skipped: list[str] | None = [] if cfg.skip_malformed else None
    tr_feats = build_features(
        train_ex,
        tok,
        max_len,
        cfg.doc_stride,
        cfg.max_query_len,
        training=True,
        specials=specials,
        skipped=skipped,
        path=train_path,
    )
    dev_feats = build_features(
        dev_ex, tok, max_len, cfg.doc_stride, cfg.max_query_len, training=False, specials=specials
    )
    enc_s = time.perf_counter() - t_enc
    if not tr_feats:
        raise FinetuneError(f"{train_path}: no usable training questions")
    pos = torch.tensor([[f.start_position, f.end_position] for f in tr_feats], dtype=torch.long)

    def batch_fn(idx):
        x, m, t = _batch(
            [tr_feats[i].input_ids for i in idx],
            [tr_feats[i].token_type_ids for i in idx],
            pad_id,
            device,
        )
        return (x, m, t), pos[idx].to(device, non_blocking=True), int(x.numel())

    def loss_fn(out, y):
        s, e = out
        return 0.5 * (F.cross_entropy(s.float(), y[:, 0]) + F.cross_entropy(e.float(), y[:, 1]))

    if log:  # the banner once the data and the model have loaded (their errors come first, alone)
        for line in _banner(
            cfg,
            spec,
            model_path,
            model,
            device,
            bf16,
            f"{len(train_ex)} train questions -> {len(tr_feats)} windows, dev {len(dev_ex)} -> "
            f"{len(dev_feats)} windows",
        ):
            log(line)
    if skipped and log:
        log(f"{spec.name}: left out {len(skipped)} training question(s), first: {skipped[0]}")
    stats = _train(model, cfg, len(tr_feats), batch_fn, loss_fn, device, bf16, log)

    t_ev = time.perf_counter()
    starts, ends = _predict_spans(model, dev_feats, pad_id, device, bf16, cfg.eval_batch_size)
    preds = postprocess(dev_ex, dev_feats, starts, ends, cfg.n_best, cfg.max_answer_len)
    m, final = squad_metrics(dev_ex, preds, spec.version)
    eval_s = time.perf_counter() - t_ev
    pdir = out / "predictions"
    atomic_write_json(pdir / "dev.json", final, indent=2)
    atomic_write_json(pdir / "dev_nbest.json", {q: p.nbest for q, p in preds.items()}, indent=2)
    if spec.version == 2:
        atomic_write_json(
            pdir / "dev_null_odds.json", {q: p.na_score for q, p in preds.items()}, indent=2
        )
    return {
        "spec": spec,
        "model": model,
        "info": info,
        "metrics": {"dev": m},
        "stats": stats,
        "files": {"train": str(train_path), "dev": str(dev_path)},
        "n_train": len(train_ex),
        "n_train_features": len(tr_feats),
        "skipped_rows": skipped or [],
        "encode_s": enc_s,
        "eval_s": eval_s,
        "seq_len": {"field": "max_seq_len_qa", "requested": cfg.max_seq_len_qa, "used": max_len},
    }


# ----------------------------------------------------------------------------------------------
# entry point


def finetune(
    cfg: FinetuneConfig,
    model_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    log: LogFn | None = _stderr,
    overwrite: bool = False,
) -> dict:
    """Fine-tune ``model_path`` (a tokendrop run/checkpoint dir or a Hugging Face BERT dir) on
    ``cfg.task`` with the data in ``cfg.data``; evaluate on the dev split(s); write ``out_dir``.

    ``out_dir`` is written atomically (all of it or, on any error or Ctrl-C, nothing) under a lock;
    an existing non-empty one is refused unless ``overwrite``, which replaces only an earlier
    fine-tuning output (never a file, or a directory holding the model or the data).

    Returns the content of ``metrics.json``: ``{"task", "model", "scores": {column: value},
    "metrics": {split: {...}}, "train": {"examples_per_s", ...}, "config": {...}, ...}``.
    """
    check_arg(
        "finetune",
        "cfg",
        cfg,
        FinetuneConfig,
        "a tokendrop.FinetuneConfig",
        "tokendrop.finetune_config(None, task='sst2', data='DIR')",
    )
    check_path_arg("finetune", "model_path", model_path)
    check_path_arg("finetune", "out_dir", out_dir)
    try:
        cfg.validate()
        check_cpu_count("finetune.threads", cfg.threads, "threads", 'set threads = "auto"')
    except ConfigError as e:
        raise FinetuneError(str(e)) from None
    if not cfg.task:
        raise FinetuneError(
            f"no task given (set task={'|'.join(n for n, t in TASKS.items() if t.train)})"
        )
    if not cfg.data:
        raise FinetuneError("no data directory given (--data DIR)")
    spec = get_task(cfg.task)
    if not spec.train:
        raise FinetuneError(
            f"task {spec.name} is evaluation-only; it is scored by the MNLI model (task mnli)"
        )
    out = Path(out_dir)
    threads_before = torch.get_num_threads()
    if cfg.threads != THREADS_AUTO:
        torch.set_num_threads(cfg.threads)
    try:
        with rundir.lock(out, FinetuneError):
            rundir.prepare_output(
                out, "finetune", overwrite, inputs=[model_path, cfg.data], error=FinetuneError
            )
            with atomic_directory(out) as tmp:
                rundir.write_marker(tmp, "finetune")
                return _finetune(cfg, spec, model_path, tmp, log, final=out)
    finally:
        if cfg.threads != THREADS_AUTO:
            torch.set_num_threads(threads_before)


# the source config.json's fields that describe its own head, not the fine-tuned one (ours are
# written)
_HEAD_FIELDS = ("id2label", "label2id", "num_labels", "problem_type", "finetuning_task")


def _saved_model_base(hf_config: dict | None) -> dict | None:
    """The source model's config.json as the base of ``--save-model``'s config.json, so the
    fine-tuned model keeps every field of its source that ours do not set (token ids such as
    ``sep_token_id`` / ``cls_token_id``, ``sparse_prediction``, ...; ``save_pretrained`` drops
    ``_name_or_path``); the source's head fields are left out, and for BERT its
    ``classifier_dropout`` (ours is ``hidden_dropout_prob``)."""
    if not hf_config:
        return None
    family = spec_for_hf_model_type(str(hf_config.get("model_type", "bert")))
    drop = _HEAD_FIELDS + (family.hf_head_fields if family is not None else ())
    return {k: v for k, v in hf_config.items() if k not in drop}


def _scores(spec: TaskSpec, metrics: dict[str, dict]) -> dict[str, float]:
    """The numbers under the task's table columns (``finetuning/columns.py``); SQuAD: + exact
    match."""
    s = task_scores(spec.name, metrics)
    if spec.kind == "span":
        s[f"{spec.name}_em"] = metrics["dev"]["exact"]
    return s


def _finetune(
    cfg: FinetuneConfig,
    spec: TaskSpec,
    model_path,
    out: Path,
    log: LogFn | None,
    final: Path | None = None,
) -> dict:
    """Write into ``out`` (the temp dir that becomes ``final``); paths in the result name
    ``final``."""
    final = final or out
    device = resolve_device(cfg.device, field="finetune.device", error=FinetuneError)
    bf16 = autocast_dtype(cfg.precision, device) is not None
    seed_everything(cfg.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    if spec.kind == "span":
        r = _finetune_squad(cfg, spec, model_path, out, device, bf16, log)
    else:
        r = _finetune_sequence(cfg, spec, model_path, out, device, bf16, log)
    st: TrainStats = r["stats"]
    result = {
        "task": r["spec"].name,
        "model": str(model_path),
        "model_source": r["info"].get("source", ""),
        "scores": _scores(r["spec"], r["metrics"]),
        # the task's main dev number (%, as the paper's tables): its main metric on its first dev
        # split
        "score": next(iter(r["metrics"].values()))["score"],
        "metrics": r["metrics"],
        "train": {
            **dataclasses.asdict(st),
            "train_examples": r["n_train"],
            **({"train_features": r["n_train_features"]} if "n_train_features" in r else {}),
        },
        "timing": {
            "total_s": time.perf_counter() - t0,
            "encode_s": r["encode_s"],
            "train_s": st.seconds,
            "eval_s": r["eval_s"],
            # CPU seconds of this process, all its threads (time.process_time): beside total_s,
            # the figure that holds on a shared machine
            "cpu_s": time.process_time() - cpu0,
            "train_cpu_s": st.cpu_s,
        },
        "data": r["files"],
        "labels": r.get("labels", []),
        "skipped_rows": {
            "count": len(r.get("skipped_rows", [])),
            "first": r.get("skipped_rows", [])[:20],
        },
        "seq_len": r[
            "seq_len"
        ],  # the max length asked for and the one used (clamped to the model's positions)
        "device": str(device),
        "precision": "bf16" if bf16 else "fp32",
        "threads": torch.get_num_threads(),
        "config": dataclasses.asdict(cfg),
    }
    if r["spec"].kind == "classification":
        result["accuracy"] = next(iter(r["metrics"].values()))["accuracy"]  # first dev split, in %
    if cfg.save_model:
        save_pretrained(
            r["model"].cpu(),
            out / "model",
            tokenizer=r["info"].get("tokenizer"),
            base_config=_saved_model_base(r["info"].get("hf_config")),
        )
        result["saved_model"] = str(final / "model")
        # `tokendrop verify OUT` checks the saved weights against this (a Hugging Face dir records
        # no hash)
        result["saved_model_sha256"] = sha256_file(out / "model" / "model.safetensors")
    atomic_write_json(out / "metrics.json", result, indent=2)
    if log:
        for line in _summary(result, final):
            log(line)
    return result


def _banner(
    cfg: FinetuneConfig, spec: TaskSpec, model_path, model, device, bf16: bool, sizes: str
) -> list[str]:
    """What a fine-tuning run will do, before its first step (``sizes``: the examples it has)."""
    kept = "kept in OUT/model" if cfg.save_model else "not kept (--set save_model=true keeps it)"
    capped = cfg.max_train_examples != EXAMPLES_ALL
    cap = f" (at most {cfg.max_train_examples} train examples)" if capped else ""
    seq = cfg.max_seq_len_qa if spec.kind == "span" else cfg.max_seq_len
    return [
        f"tokendrop finetune: {spec.name} from {model_path} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)",
        f"  task      {spec.name} ({spec.kind}, {'/'.join(spec.metrics)})",
        f"  data      {cfg.data}: {sizes}{cap}",
        f"  length    {cfg.epochs:g} epochs of batch {cfg.batch_size}, max length {seq}",
        f"  lr        peak {cfg.lr:g}, warm-up {cfg.warmup_ratio:g} of the steps, linear decay to "
        f"0; AdamW (weight decay {cfg.weight_decay:g}, grad clip {cfg.grad_clip:g})",
        f"  device    {device}, {'bf16' if bf16 else 'fp32'}, seed {cfg.seed}, "
        f"{torch.get_num_threads()} CPU thread(s)",
        f"  outputs   metrics.json, predictions/; the fine-tuned model: {kept}",
    ]


def _summary(result: dict, final: Path) -> list[str]:
    """The end of a fine-tuning run: its scores, the time of each phase, where the outputs are."""
    t = result["timing"]
    phases = {"encoding": t["encode_s"], "training": t["train_s"], "evaluation": t["eval_s"]}
    other = t["total_s"] - sum(phases.values())
    st = result["train"]
    return [
        f"tokendrop finetune: {result['task']} finished in {t['total_s']:.1f} s "
        f"({t['cpu_s']:.1f} CPU s)",
        "  scores    " + ", ".join(f"{k} {v:.2f}" for k, v in result["scores"].items()),
        "  phases    "
        + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
        + (f", other {other:.1f} s" if other >= 0.05 else "")
        + f"; {st['steps']} steps, {st['examples_per_s']:.1f} train examples/s",
        f"  outputs   {final / 'metrics.json'}, {final / 'predictions'}"
        + (f", {final / 'model'}" if result.get("saved_model") else " (the model is not kept)"),
    ]
