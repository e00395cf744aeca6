"""What a trained run's selection keeps of a text: ``tokendrop.text_selection(run, text)`` and
``tokendrop inspect RUN --text "..."``.

The text is tokenized as the run's corpus was (its tokenizer, ``RUN/tokenizer/``, with special-token
strings in the text read as ordinary characters) and framed ``[CLS] text [SEP]`` as a packed row,
cut to the run's sequence length T.  The run's selector -- its method and variant, the importance
vector ``m`` of its newest checkpoint (``state.safetensors["importance"]``), its pinned ids --
then keeps the top M = round(n (1 - rate)) of the text's n positions, as it keeps M of the T
positions of a training row; the dropped tokens skip the middle layers of the drop span.  The
scores are ``m[id]``: for ``cumulative`` and ``half_random`` the running mean MLM loss of the id
(an id never predicted keeps ``drop.init_score``), for ``frequency`` -log(1 + count); [CLS]/[SEP]
(and ``drop.pinned_tokens``) are pinned, always kept.  ``half_random`` fills part of the kept rows
by a draw of the run's seeded generator.

A run that keeps no learned selection is one line (:class:`~tokendrop.runs.checkpoint.
CheckpointError`): a dense run (``drop.method = none``), token averaging (``drop.variant = avg``),
and the methods that draw uniformly without reading scores (``random``, ``random_ltd``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tokendrop.config import Config, from_dict, recorded_config
from tokendrop.data import DataError
from tokendrop.data.tokenizer import (
    has_tokenizer_files,
    is_byte_level,
    plain_copy,
    read_tokenizer_spec,
    readable_token,
    special_ids,
    tokenizer_from_spec,
    vocab_tokens,
)
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.importance import pinned_ids
from tokendrop.dropping.methods import PIN_HIGH
from tokendrop.dropping.plan import DropPlan
from tokendrop.errors import check_arg
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.checkpoint import CheckpointError

PINNED = 0.999 * PIN_HIGH  # a score at or beyond this (or its negative) is a pin, not a learned one


def no_selection_reason(drop: DropConfig) -> str | None:
    """Why a run with ``drop`` keeps no importance vector to select by (a dense run, token
    averaging), or None when it selects."""
    if drop.pools:
        return (
            f"token averaging (drop.variant = {drop.variant}) pools adjacent token pairs 2:1 "
            "instead of selecting tokens, so there is no importance vector and nothing is "
            "dropped by score"
        )
    if not drop.selection.drops:
        return (
            "this is a dense run (drop.method = none, e.g. a baseline): it trains every token in "
            "every layer, so it keeps no importance vector and drops nothing. Inspect a run "
            "trained with drop.method = cumulative (the paper's method), half_random, "
            "frequency or random"
        )
    return None


def undropped_reason(drop: DropConfig, train_steps: int, step: int) -> str | None:
    """Why the first ``step`` optimizer steps of a ``train_steps``-step run with ``drop`` dropped no
    token (its phases make them all dense), or None when one of them dropped or the run's length
    is not a number of steps (a time budget)."""
    if train_steps <= 0 or not drop.selection.drops:
        return None
    first, end = drop.dense_start_steps(train_steps), drop.stage2_start(train_steps)
    if first >= end:
        return (
            f"every step of the run is dense (drop.dense_start_share = {drop.dense_start_share:g} "
            f"and drop.stage2_fraction = {drop.stage2_fraction:g} cover its {train_steps} steps): "
            "it never dropped a token, so there are no kept tokens to show"
        )
    if step <= first:
        return (
            f"step {step} is inside the run's dense start (its first {first} of {train_steps} "
            f"steps, drop.dense_start_share = {drop.dense_start_share:g}): no step so far dropped "
            f"a token, so there are no kept tokens to show; inspect a checkpoint after step {first}"
        )
    return None


@dataclass(frozen=True)
class TextSelection:
    """What a run's selection keeps of one text (:func:`text_selection`); one entry per position
    of the framed text ([CLS] ... [SEP])."""

    run: str  # the run directory
    checkpoint: str  # the checkpoint whose importance vector selected
    step: int  # its optimizer step
    method: str  # drop.method
    variant: str  # drop.variant
    rate: float  # drop.rate
    span: tuple[int, int]  # the middle layers [start, end) the dropped tokens skip
    num_layers: int
    tokens: list[str]  # the tokens, readable (byte-level BPE pieces as text)
    ids: list[int]
    scores: list[float]  # m[id]; +/-1e4 for a pinned id
    kept: list[bool]
    truncated: int = 0  # tokens of the text past the run's sequence length, not shown
    notes: list[str] = field(default_factory=list)

    @property
    def kept_tokens(self) -> list[str]:
        return [t for t, k in zip(self.tokens, self.kept) if k]

    @property
    def dropped_tokens(self) -> list[str]:
        return [t for t, k in zip(self.tokens, self.kept) if not k]

    def to_dict(self) -> dict[str, Any]:
        """The fields, JSON-ready."""
        return {
            "run": self.run,
            "checkpoint": self.checkpoint,
            "step": self.step,
            "drop": {"method": self.method, "variant": self.variant, "rate": self.rate},
            "span": list(self.span),
            "num_layers": self.num_layers,
            "tokens": [
                {"token": t, "id": i, "score": s, "kept": k}
                for t, i, s, k in zip(self.tokens, self.ids, self.scores, self.kept)
            ],
            "truncated": self.truncated,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The selection as console lines: what selected, the kept and the dropped tokens, then one
        row per token with its score ("pin": always kept)."""
        start, end = self.span
        out = [
            f"{self.run} at step {self.step} (drop.method = {self.method}, rate {self.rate:g}): "
            f"keeps {sum(self.kept)} of the {len(self.tokens)} tokens of the text; the "
            f"{len(self.tokens) - sum(self.kept)} dropped skip layers {start}-{end - 1} (of "
            f"0-{self.num_layers - 1})",
            "kept:    " + " ".join(self.kept_tokens),
            "dropped: " + (" ".join(self.dropped_tokens) or "(none)"),
            "",
            f"{'pos':>4}  {'token':<20} {'score':>8}  selection",
        ]
        for n, (t, s, k) in enumerate(zip(self.tokens, self.scores, self.kept)):
            out.append(f"{n:>4}  {t:<20} {_score(s):>8}  {'kept' if k else 'dropped'}")
        out += [f"note: {n}" for n in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _score(s: float) -> str:
    if s >= PINNED:
        return "pin"
    if s <= -PINNED:
        return "-pin"
    return f"{s:.3f}"


def _checkpoint_of(path: Path) -> None:
    """A one-line CheckpointError unless ``path`` is a run directory (or a checkpoint of one)."""
    if not path.exists():
        raise CheckpointError(f"{path}: no such directory")
    if not path.is_dir():
        raise CheckpointError(
            f"{path}: not a directory; expected a run directory written by `tokendrop pretrain`"
        )
    one = (path / "meta.json").is_file() and path.parent.name == "checkpoints"
    if not one and not (path / "checkpoints").is_dir():
        raise CheckpointError(
            f"{path}: not a tokendrop run directory (no checkpoints/); expected the --out "
            "directory of `tokendrop pretrain` after its first checkpoint (train.ckpt_every)"
        )


def text_selection(run_dir: str | os.PathLike, text: str) -> TextSelection:
    """Which tokens of ``text`` the run ``run_dir`` (a run directory: its newest checkpoint; or one
    of its ``checkpoints/step-*``) keeps, with each token's learned score (module docstring).
    The checkpoint is held while it is read and its state file verified against meta.json.
    CheckpointError (one line) for a directory that is not a run, a run that keeps no learned
    selection, or a text with no tokens."""
    check_arg("text_selection", "run_dir", run_dir, (str, os.PathLike), "a run directory path")
    check_arg("text_selection", "text", text, str, "a string")
    path = Path(run_dir)
    _checkpoint_of(path)
    run = path.parent.parent if path.parent.name == "checkpoints" else path
    with ckpt_mod.reading(path) as ckpt:
        meta = ckpt_mod.read_meta(ckpt)
        try:
            cfg = from_dict(Config, recorded_config(meta["config"]))
        except (ValueError, KeyError) as e:
            raise CheckpointError(f"{ckpt}/meta.json: unreadable run config ({e})") from None
        drop = cfg.drop
        reason = no_selection_reason(drop)
        if reason is None and not drop.selection.reads_scores:
            reason = (
                f"drop.method = {drop.method} keeps a uniform random draw of the tokens and learns "
                "no scores, so there is no learned selection to show; inspect a run trained with "
                "cumulative (the paper's method), half_random or frequency"
            )
        if reason:
            raise CheckpointError(f"{run}: {reason}")
        state = ckpt_mod.read_tensors(ckpt, "state.safetensors", meta)
    if "importance" not in state:
        raise CheckpointError(
            f"{ckpt}/state.safetensors: no importance vector (key 'importance'); drop.method = "
            f"{drop.method} should have one -- was the checkpoint written by tokendrop?"
        )
    scores = state["importance"].float()
    tok_dir = run / "tokenizer"
    if not has_tokenizer_files(tok_dir) and cfg.data.path and has_tokenizer_files(cfg.data.path):
        tok_dir = Path(cfg.data.path)
    if not has_tokenizer_files(tok_dir):
        raise CheckpointError(
            f"{run}: no tokenizer/ (vocab.txt or tokenizer.json) in the run directory; the text "
            "cannot be tokenized as the run's corpus was"
        )
    try:
        spec = read_tokenizer_spec(tok_dir)
        tok = tokenizer_from_spec(spec)
        special = special_ids(tok, dict(spec.special_tokens))
    except DataError as e:
        raise CheckpointError(f"{tok_dir}: the run's tokenizer does not load ({e})") from None
    body = plain_copy(tok).encode(text, add_special_tokens=False).ids
    if not body:
        raise CheckpointError(
            f"text: {text[:40]!r} has no tokens for the run's tokenizer; give a sentence"
        )
    # the run's T: what its checkpoint records of the data, else the config's, else the positions
    seq_len = (meta.get("data_fingerprint") or {}).get("seq_len", cfg.data.seq_len)
    limit = cfg.model.max_position_embeddings
    if isinstance(seq_len, int) and not isinstance(seq_len, bool):
        limit = min(limit, seq_len)
    ids = [special["cls"], *body, special["sep"]]
    truncated = max(0, len(ids) - limit)
    if truncated:
        ids = [*ids[: limit - 1], special["sep"]]
    if max(ids) >= len(scores):
        raise CheckpointError(
            f"{tok_dir}: token id {max(ids)} is past the run's importance vector "
            f"({len(scores)} ids); the tokenizer is not the run's"
        )
    plan = DropPlan(
        drop,
        special,
        num_layers=cfg.model.num_layers,
        vocab_size=len(scores),
        seq_len=len(ids),
        pinned_ids=pinned_ids(drop, vocab_tokens(tok)),
        counts=torch.zeros(len(scores), dtype=torch.int64),
        seed=cfg.train.seed,
        total_steps=cfg.train.fixed_steps,
    )
    plan.selector.scores.copy_(scores)
    x = torch.tensor([ids])
    keep = plan.select(x, plan.selector.num_kept)[0]
    kept = torch.zeros(len(ids), dtype=torch.bool)
    kept[keep] = True
    byte_level = is_byte_level(tok)
    notes = []
    if truncated:
        notes.append(
            f"the text is longer than the run's {limit}-token sequences: its last {truncated} "
            "tokens are left out"
        )
    if drop.selection.random and plan.selector.num_random:
        notes.append(
            f"drop.method = {drop.method}: the kept rows include {plan.selector.num_random} "
            f"drawn by the run's seeded generator (seed {cfg.train.seed}), not chosen by score"
        )
    total = cfg.train.fixed_steps
    if total and not drop.dropping_at(max(int(meta.get("step", 0)) - 1, 0), total):
        notes.append(
            f"at step {meta.get('step', 0)} the run trains dense (its dense start or stage 2); "
            "this is the selection its dropping steps make with the scores learnt so far"
        )
    return TextSelection(
        run=str(run),
        checkpoint=str(ckpt),
        step=int(meta.get("step", 0)),
        method=drop.method,
        variant=drop.variant,
        rate=float(drop.rate),
        span=drop.span(cfg.model.num_layers),
        num_layers=cfg.model.num_layers,
        tokens=[readable_token(tok.id_to_token(i) or f"<id {i}>", byte_level) for i in ids],
        ids=ids,
        scores=[float(s) for s in scores[x[0]].tolist()],
        kept=kept.tolist(),
        truncated=truncated,
        notes=notes,
    )


__all__ = ["TextSelection", "no_selection_reason", "text_selection", "undropped_reason"]
