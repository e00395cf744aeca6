"""The training state a patched model carries beside its weights: the method's plan
(``tokendrop.dropping.plan.DropPlan``: the dropping layout, the per-step rules and the token
selector -- importance vector + random generator), the optimizer step the rules read.

It lives in the model's ``__dict__`` (not as a submodule or buffer), so ``state_dict`` and
``save_pretrained`` see exactly the unpatched model's tensors; the selector follows the input's
device at the first forward.  :func:`save_state` / :func:`load_state` write and read it as
``token_dropping.safetensors`` (the importance vector and the generator state) plus
``token_dropping.json`` (options, step, shapes) -- inside a Trainer checkpoint folder, next to the
model files (:class:`tokendrop.transformers.TokenDroppingCallback` does this).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.engine import DropSpan
from tokendrop.dropping.importance import TokenSelector
from tokendrop.dropping.methods import PIN_HIGH, PIN_LOW
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.errors import ConfigError
from tokendrop.runs.checkpoint import CheckpointError, check_finite
from tokendrop.runs.files import atomic_file, atomic_write_json, read_json, write_safetensors
from tokendrop.transformers.options import TokenDroppingError

STATE_TENSORS = "token_dropping.safetensors"
STATE_JSON = "token_dropping.json"
STATE_FORMAT = "tokendrop.transformers.state/1"
SPECIAL_KEYS = ("cls", "sep", "mask", "pad")


def resolve_special_ids(
    drop: DropConfig,
    config: Any,
    tokenizer: Any,
    special_ids: Mapping[str, int] | None,
    vocab_size: int,
) -> dict[str, int]:
    """The [CLS]/[SEP]/[MASK]/[PAD] ids: ``special_ids``, else the tokenizer's, else what the
    model's config knows.  A selecting method keeps [CLS]/[SEP]/[MASK] always, so it needs [CLS] and
    [MASK]."""
    if special_ids is not None:
        if not isinstance(special_ids, Mapping) or any(
            k not in SPECIAL_KEYS + ("unk",) for k in special_ids
        ):
            raise TokenDroppingError(
                f"apply_token_dropping: special_ids must map some of {', '.join(SPECIAL_KEYS)} to "
                f"token ids, got {special_ids!r}"
            )
        # [UNK] is an ordinary token here
        ids = {k: v for k, v in special_ids.items() if k in SPECIAL_KEYS}
    elif tokenizer is not None:
        ids = {k: getattr(tokenizer, f"{k}_token_id", None) for k in SPECIAL_KEYS}
    else:
        ids = {k: getattr(config, f"{k}_token_id", None) for k in SPECIAL_KEYS}
    ids = {k: v for k, v in ids.items() if v is not None}
    for k, v in ids.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab_size:
            raise TokenDroppingError(
                f"apply_token_dropping: the {k} id {v!r} is not a token id of the model "
                f"(vocab_size {vocab_size})"
            )
    pins = not drop.per_layer and drop.variant_row.selects
    missing = [k for k in ("cls", "mask") if k not in ids]
    if pins and missing:
        raise TokenDroppingError(
            f"apply_token_dropping: method {drop.method!r} always keeps [CLS], [SEP] and [MASK], "
            f"but the {'/'.join(missing)} id is unknown; pass tokenizer=<the tokenizer> or "
            "special_ids={'cls': ..., 'sep': ..., 'mask': ..., 'pad': ...}"
        )
    return ids


def resolve_pinned(drop: DropConfig, tokenizer: Any) -> list[int]:
    """``pinned_tokens`` (token strings) -> ids, through the tokenizer."""
    if not drop.pinned_tokens:
        return []
    if tokenizer is None:
        raise TokenDroppingError(
            "apply_token_dropping: pinned_tokens needs tokenizer= to turn the tokens into ids"
        )
    out = []
    for t in drop.pinned_tokens:
        i = tokenizer.convert_tokens_to_ids(t)
        unk = getattr(tokenizer, "unk_token_id", None)
        if i is None or (i == unk and t != getattr(tokenizer, "unk_token", None)):
            raise TokenDroppingError(
                f"apply_token_dropping: pinned_tokens: {t!r} is not a token of the tokenizer"
            )
        out.append(int(i))
    return out


class TokenDroppingState:
    """Everything a patched model needs beyond its weights (module docstring)."""

    def __init__(
        self,
        drop: DropConfig,
        family: str,
        num_layers: int,
        vocab_size: int,
        max_len: int,
        special_ids: dict[str, int],
        pinned_ids: list[int],
        counts: Any = None,
        seed: int = 0,
        total_steps: int | None = None,
        sparse_prediction: bool = True,
    ):
        self.drop = drop
        self.family = family
        self.num_layers = num_layers
        self.vocab_size = vocab_size
        self.special_ids = dict(special_ids)
        self.pinned_ids = list(pinned_ids)
        self.seed = int(seed)
        self.sparse_prediction = bool(sparse_prediction)
        # optimizer steps done (TokenDroppingCallback sets it; custom loops call advance())
        self.step = 0
        self.enabled = True
        self.kept_fraction: float | None = None  # of the last dropping forward (logged)
        # the share of a dense forward's layer work (token rows x layers) the last training forward
        # did: (L - S + S x kept) / L over the S half layers of the span; 1 for a dense one
        self.layer_work = 1.0
        # FLOPs transformers' Trainer counts (6 x non-embedding parameters x tokens per forward)
        # that the dropping forwards since the last optimizer step did not spend;
        # TokenDroppingCallback takes them off total_flos
        self.flops_saved = 0.0
        self._dense_params: int | None = None
        try:  # the method: its rules and its selector (none when the variant pools: avg)
            self.plan = DropPlan(
                drop,
                self.special_ids,
                num_layers=num_layers,
                vocab_size=vocab_size,
                seq_len=max_len,
                pinned_ids=self.pinned_ids,
                counts=counts,
                seed=self.seed,
                total_steps=total_steps,
            )
        except ConfigError as e:
            raise TokenDroppingError(
                f"apply_token_dropping: {str(e).replace('drop.counts_path', 'counts')}"
            ) from None
        self.initial = None if self.selector is None else self.selector.scores.clone()

    @property
    def span(self) -> DropSpan:
        return self.plan.span

    @property
    def selector(self) -> TokenSelector | None:
        return self.plan.selector

    @property
    def total_steps(self) -> int | None:
        """The run's optimizer steps (TokenDroppingCallback sets ``max_steps``), or None."""
        return self.plan.total_steps

    @total_steps.setter
    def total_steps(self, steps: int | None) -> None:
        self.plan.total_steps = steps

    def __repr__(self) -> str:
        """One line: the method and where it drops, the step, whether it is on; the importance
        vector by its size (``.selector.scores`` holds it)."""
        d = self.drop
        n = None if self.selector is None else self.selector.scores.numel()
        scores = "" if n is None else f", importance=<{n} scores>"
        total = f"/{self.total_steps}" if self.total_steps else ""
        return (
            f"TokenDroppingState({self.family}, {d.method}/{d.variant} rate {d.rate:g} in layers "
            f"[{self.span.start}, {self.span.end}) of {self.num_layers}, step {self.step}{total}, "
            f"{'on' if self.enabled else 'off'}, "
            f"sparse_prediction={self.sparse_prediction}{scores})"
        )

    # -- schedule -------------------------------------------------------------------------------

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` optimizer steps (for a loop without TokenDroppingCallback)."""
        self.step += int(steps)

    def _check_length(self) -> None:
        if self.total_steps is None and (what := self.plan.needs_length):
            raise TokenDroppingError(
                f"token dropping: {what} needs the run's length; train with TokenDroppingCallback "
                "(it reads max_steps) or pass total_steps= to apply_token_dropping"
            )

    def now(self, seq_len: int) -> DropStep:
        """The plan of this step over sequences of ``seq_len`` tokens (``DropPlan.at``)."""
        self._check_length()
        return self.plan.at(self.step, seq_len)

    def dropping_now(self) -> bool:
        """Whether this step drops tokens (stage 2, the last ``stage2_fraction`` of the run, does
        not)."""
        if not self.enabled:
            return False
        self._check_length()
        return self.plan.dropping(self.step)

    def consistency_now(self) -> bool:
        """Whether this (dropping) step runs ScTD's consistency term (``consistency_every``)."""
        return self.drop.consistency_at(self.step)

    # -- selection and update -------------------------------------------------------------------

    def _follow(self, device: torch.device) -> None:
        if self.selector is not None and self.selector.scores.device != device:
            self.plan.to(device)
            self.initial = self.initial.to(device)

    def select(self, input_ids: Tensor, labels: Tensor | None) -> tuple[bool, Tensor | None]:
        """-> (active, keep_idx): keep_idx (B, M) ascending, (S, B, M) for random_ltd, or None (avg
        pools).  Not active (the unpatched forward runs): a selection that keeps every row
        (random_ltd at full length, rate 0, or a short sequence)."""
        self._follow(input_ids.device)
        b, t = input_ids.shape
        at = self.now(t)
        self.kept_fraction = at.kept_fraction
        s = self.span.end - self.span.start
        self.layer_work = (self.num_layers - s + s * min(at.kept, t) / t) / self.num_layers
        if self.selector is None:  # the variant pools: nothing to select
            return True, None
        if at.kept >= t:  # nothing to drop (kept_fraction 1): the unpatched forward
            return False, None
        pos = weights = None
        if self.drop.keep_mlm_targets and labels is not None:
            pos = torch.arange(t, device=input_ids.device).expand(b, -1)
            weights = (labels != -100).to(torch.float32)
        return True, self.plan.keep_idx(input_ids, at, pos, weights)

    def count_saved_flops(self, model: Any, tokens: int) -> None:
        """Add what a dropping training forward over ``tokens`` tokens saved of transformers' own
        estimate (6 x ``model.num_parameters(exclude_embeddings=True)`` x tokens, the Trainer's
        ``floating_point_ops``): that estimate x (1 - ``layer_work``)."""
        if self._dense_params is None:
            self._dense_params = int(model.num_parameters(exclude_embeddings=True))
        self.flops_saved += 6.0 * tokens * self._dense_params * (1.0 - self.layer_work)

    def learns(self) -> bool:
        return self.plan.learns

    @torch.no_grad()
    def update(self, labels: Tensor, nll: Tensor) -> None:
        """The cumulative-loss update from this forward's per-token NLL at the labelled positions
        (``labels`` -100 elsewhere); skipped (on the device) when any of it is not finite."""
        if not self.learns():
            return
        self._follow(labels.device)
        w = (labels != -100).to(torch.float32)
        nll = torch.where(w > 0, nll.float(), torch.zeros_like(nll, dtype=torch.float32))
        self.plan.update(labels.clamp(min=0), nll, w, valid=torch.isfinite(nll).all())

    # -- importance -----------------------------------------------------------------------------

    @property
    def importance(self) -> Tensor | None:
        """The importance vector m (one score per token id; pinned ids at +/-1e4), or None (avg)."""
        return None if self.selector is None else self.selector.scores

    def set_importance(self, values: Tensor, where: Tensor | None = None) -> None:
        """m_i <- values_i (where ``where``); pinned ids stay pinned (a warm start)."""
        if self.selector is None:
            raise TokenDroppingError(
                f"token dropping: variant {self.drop.variant!r} selects nothing, so it has no "
                "importance vector"
            )
        where = torch.ones(self.vocab_size, dtype=torch.bool) if where is None else where
        self.selector.set_scores(torch.as_tensor(values, dtype=torch.float32), where)

    @torch.no_grad()
    def summary(self) -> dict[str, float]:
        """What the callback logs: the kept fraction of the last dropping forward, and the
        importance over the ids that have moved from their initial score (count, mean, min, max)."""
        out: dict[str, float] = {}
        if self.kept_fraction is not None:
            out["token_dropping/kept_fraction"] = float(self.kept_fraction)
        if self.learns():
            s = self.selector.scores
            moved = (s != self.initial.to(s.device)) & (s.abs() < PIN_HIGH) & (s > PIN_LOW)
            n = int(moved.sum())
            out["token_dropping/importance_ids"] = float(n)
            if n:
                v = s[moved]
                out["token_dropping/importance_mean"] = float(v.mean())
                out["token_dropping/importance_min"] = float(v.min())
                out["token_dropping/importance_max"] = float(v.max())
        return out

    # -- saving ---------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "family": self.family,
            "vocab_size": self.vocab_size,
            "num_layers": self.num_layers,
            "options": dataclasses.asdict(self.drop),
            "seed": self.seed,
            "special_ids": self.special_ids,
            "pinned_ids": self.pinned_ids,
            "step": self.step,
            "total_steps": self.total_steps,
        }


def save_state(state: TokenDroppingState, directory: str | Path) -> None:
    """``token_dropping.safetensors`` + ``token_dropping.json`` into ``directory`` (each written
    atomically)."""
    directory = Path(directory)
    tensors: dict[str, Tensor] = {}
    meta = state.meta()
    if state.selector is not None:
        tensors["importance"] = state.selector.scores.detach().cpu().contiguous()
        rng = state.selector.rng_state()
        if rng is not None:
            tensors["rng_state"] = rng.cpu().contiguous()
            meta["rng_device"] = str(state.selector.generator.device)
    if not tensors:
        # safetensors needs one tensor
        tensors["step"] = torch.tensor([state.step], dtype=torch.int64)
    with atomic_file(directory / STATE_TENSORS) as tmp:
        write_safetensors(tensors, tmp)
    atomic_write_json(directory / STATE_JSON, meta)


_MUST_MATCH = ("family", "vocab_size", "num_layers")


def _check_ids(jpath: Path, meta: dict[str, Any], mine: dict[str, Any]) -> None:
    """The special and pinned ids the run was trained with must be this model's: the importance
    vector pins them, and the collator masks with them."""
    for key, what, fix in (
        ("special_ids", "special ids", "the run's tokenizer (or special_ids=)"),
        ("pinned_ids", "pinned ids", "the run's pinned_tokens"),
    ):
        if key not in meta:  # not recorded: nothing to compare
            continue
        saved, now = meta[key], mine[key]
        if isinstance(now, dict):
            diff = sorted(k for k in {*saved, *now} if saved.get(k) != now.get(k))
            if not diff:
                continue
            there = ", ".join(f"{k}={saved.get(k)}" for k in diff)
            here = ", ".join(f"{k}={now.get(k)}" for k in diff)
        elif list(saved) == list(now):
            continue
        else:
            there, here = str(list(saved)), str(list(now))
        raise TokenDroppingError(
            f"{jpath}: the run was trained with {what} {there}, this model is patched with "
            f"{here}; apply_token_dropping with {fix} to resume it"
        )


def load_state(state: TokenDroppingState, directory: str | Path) -> None:
    """Restore what :func:`save_state` wrote into ``state``; one-line errors for a missing,
    unreadable or damaged file (NaN/inf importance, a cut generator state) and for a state saved
    with other options, other special or pinned ids, or another model."""
    directory = Path(directory)
    jpath, tpath = directory / STATE_JSON, directory / STATE_TENSORS
    for p in (jpath, tpath):
        if not p.is_file():
            raise TokenDroppingError(
                f"{p}: no token-dropping state here (written by TokenDroppingCallback at every "
                "checkpoint); resume from a checkpoint of a run trained with it"
            )
    meta = read_json(jpath, TokenDroppingError, hint="the checkpoint is damaged")
    if meta.get("format") != STATE_FORMAT:
        raise TokenDroppingError(
            f"{jpath}: format {meta.get('format')!r}, expected {STATE_FORMAT!r}"
        )
    mine = state.meta()
    for k in _MUST_MATCH:
        if meta.get(k) != mine[k]:
            raise TokenDroppingError(
                f"{jpath}: {k} {meta.get(k)!r} differs from this model's {mine[k]!r}"
            )
    # an option the state does not record (saved before it existed) reads as its default: what
    # that version did
    saved = {**dataclasses.asdict(DropConfig()), **meta.get("options", {})}
    for k, v in mine["options"].items():
        if k in ("stage2_fraction", "dense_start_share", "random_start_share") or saved.get(k) == v:
            continue
        if (
            isinstance(v, float)
            and isinstance(saved.get(k), (int, float))
            and math.isclose(saved[k], v)
        ):
            continue
        raise TokenDroppingError(
            f"{jpath}: the run was trained with {k}={saved.get(k)!r}, this model is patched with "
            f"{k}={v!r}; apply_token_dropping with the run's options to resume it"
        )
    _check_ids(jpath, meta, mine)
    try:
        tensors = load_file(str(tpath))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise TokenDroppingError(f"{tpath}: unreadable ({e}); the checkpoint is damaged") from None
    try:  # the callback never saves a non-finite score: the update skips such a step
        check_finite(tensors, tpath, "the checkpoint is damaged; resume from an earlier one")
    except CheckpointError as e:
        raise TokenDroppingError(str(e)) from None
    if state.selector is not None:
        m = tensors.get("importance")
        if m is None or tuple(m.shape) != (state.vocab_size,):
            raise TokenDroppingError(
                f"{tpath}: expected an importance vector of {state.vocab_size} scores, got "
                f"{None if m is None else tuple(m.shape)}"
            )
        with torch.no_grad():
            state.selector.scores.copy_(m.to(state.selector.scores))
        if "rng_state" in tensors:
            try:
                state.selector.set_rng_state(
                    tensors["rng_state"], torch.device(meta.get("rng_device", "cpu"))
                )
            except RuntimeError as e:  # a generator state of the wrong size or kind
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise TokenDroppingError(
                    f"{tpath}: tensor rng_state is no generator state ({msg}); the checkpoint is "
                    "damaged; resume from an earlier one"
                ) from None
        else:
            state.selector.generator = None
    state.step = int(meta.get("step", 0))
    if meta.get("total_steps") is not None and state.total_steps is None:
        state.total_steps = int(meta["total_steps"])


__all__ = ["STATE_JSON", "STATE_TENSORS", "TokenDroppingState", "load_state", "save_state"]
