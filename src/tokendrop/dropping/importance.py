"""Which tokens are important: the paper's cumulative-loss vector and its alternatives
(docs/design.md §2.3).

``TokenSelector`` owns a length-|V| fp32 vector ``m`` (training state, not part of the exported
model).  The score of a position is ``m[input_id]``; each sequence keeps its top-M positions, ties
broken by position (stable sort), and the kept positions are returned in ascending order.

Corrections to the public reference implementation (docs/design.md §3), all deliberate:
* only real prediction slots (weight > 0) update ``m``; padded slots never erode [PAD];
* repeated ids in a batch are averaged (scatter_add of sums and counts), not one arbitrary write;
* pinned ids ([CLS], [SEP], [MASK], configured extras = +1e4; [PAD] = -1e4) are re-pinned after
  every update;
* ``drop.mask_rows = "ranked"`` (beyond the paper) unpins [MASK]: after every update its score is
  the expected importance of the id a masked slot hides (the mean of the scores over the step's
  real slots), so a [MASK] row competes with the other rows at the score of a typical target;
  ties among [MASK] rows are broken at random (a jitter below ``MASK_JITTER``), never by position
  or by the row's own target (docs/design.md §2.3);
* under ``torch.distributed`` the sums and counts are all-reduced so every rank holds the same
  ``m``.

How each ``drop.method`` selects is its row of ``tokendrop.dropping.methods.METHODS``
(:class:`~tokendrop.dropping.methods.SelectionMethod`); the selector computes the position scores,
the kept count for the batch's length and the random source, and dispatches through the row.
Everything stays on the device: no host synchronisation in ``select`` or ``update``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.methods import METHODS, PIN_HIGH, PIN_LOW, Uniform
from tokendrop.errors import ConfigError, check_arg

MASK_JITTER = 1e-4  # mask_rows = "ranked": ties among [MASK] rows broken by U[0, 1e-4) draws


def pinned_ids(drop, vocab: list[str]) -> list[int]:
    """The ids of ``drop.pinned_tokens`` in ``vocab`` (the tokens by id); ConfigError for one not in
    it."""
    if not drop.pinned_tokens:
        return []
    index = {t: i for i, t in enumerate(vocab) if t}
    out = []
    for tok in drop.pinned_tokens:
        if tok not in index:
            raise ConfigError(f"drop.pinned_tokens: {tok!r} is not in the vocabulary")
        out.append(index[tok])
    return out


def build_selector(
    drop: DropConfig,
    vocab_size: int,
    special_ids: Mapping[str, int],
    seq_len: int,
    pinned_ids: Iterable[int] = (),
    counts: Any = None,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> TokenSelector:
    """The one way the library makes a ``TokenSelector`` (``tokendrop.dropping.plan.DropPlan`` calls
    it for pretraining, the ``transformers`` integration, ``tokendrop inspect`` and the benchmark):
    ``special_ids`` are the data's ids ([CLS]/[SEP]/[MASK] pinned high, [PAD] low), ``pinned_ids``
    the extra ids kept always (``drop.pinned_tokens``, resolved by the caller),
    ``counts`` the per-id corpus counts (array or tensor; used by ``method = "frequency"`` only,
    which needs them), ``seed`` the random methods' generator seed; on ``device`` when given."""
    sel = TokenSelector(
        drop,
        vocab_size,
        dict(special_ids),
        seq_len,
        list(pinned_ids),
        counts if drop.selection.needs_counts else None,
        seed=seed,
    )
    return sel if device is None else sel.to(device)


class TokenSelector(nn.Module):
    """Holds the importance vector and turns a batch into ``keep_idx`` (B, M)."""

    def __init__(
        self,
        drop: DropConfig,
        vocab_size: int,
        special_ids: dict[str, int],
        seq_len: int,
        extra_pinned_ids: list[int] | None = None,
        counts: Tensor | None = None,
        seed: int = 0,
    ):
        check_arg(
            "TokenSelector", "drop", drop, DropConfig, "a tokendrop.DropConfig", "a Config's .drop"
        )
        check_arg("TokenSelector", "vocab_size", vocab_size, int, "an int")
        check_arg("TokenSelector", "seq_len", seq_len, int, "an int")
        super().__init__()
        self.method = drop.method
        self.selection = drop.selection  # the registry row: what the method is and how it selects
        self.beta = drop.beta
        self.keep_mlm_targets = drop.keep_mlm_targets
        self.seq_len = seq_len
        self._drop = drop
        self.num_kept = drop.num_kept(seq_len)
        self.num_random = self.selection.random_slots(drop, seq_len)
        # DropConfig.validate refuses this for every T; a direct caller too
        if self.num_random > self.num_kept:
            raise ConfigError(
                f"drop.half_random_frac: {self.num_random} random slots exceed the {self.num_kept} "
                f"kept positions of T={seq_len} at drop.rate={drop.rate}; lower "
                "half_random_frac or drop.rate"
            )
        # mask_rows = "ranked": [MASK] is scored, not pinned (its score learns the mean slot loss)
        self.ranked_mask_id = special_ids.get("mask", -1) if drop.mask_rows == "ranked" else -1
        kinds = ("cls", "sep") if self.ranked_mask_id >= 0 else ("cls", "sep", "mask")
        pinned = [special_ids[k] for k in kinds if k in special_ids]
        pinned += list(extra_pinned_ids or [])
        self.register_buffer(
            "pinned_ids", torch.tensor(sorted(set(pinned)), dtype=torch.long), persistent=False
        )
        self.pad_id = special_ids.get("pad", -1)
        fixed = sorted(set(pinned) | ({self.pad_id} if self.pad_id >= 0 else set()))
        # the ids whose score is fixed (pinned, [PAD]): left out of a ranked [MASK]'s expectation
        self.register_buffer("fixed_ids", torch.tensor(fixed, dtype=torch.long), persistent=False)
        m = self.selection.initial_scores(drop, vocab_size, counts)
        self.register_buffer("scores", m)  # the vector m
        self._repin()
        self.generator: torch.Generator | None = None
        self.seed = seed

    # -- state ------------------------------------------------------------------------------------

    def _repin(self) -> None:
        # scalar fills (a kernel argument), not a Python scalar written through an index: on CUDA
        # that is a blocking host-to-device copy of the value
        self.scores.index_fill_(0, self.pinned_ids, PIN_HIGH)
        if self.pad_id >= 0:
            self.scores.narrow(0, self.pad_id, 1).fill_(PIN_LOW)

    def _gen(self, device: torch.device) -> torch.Generator:
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.seed)
        return self.generator

    def rng_state(self) -> Tensor | None:
        return None if self.generator is None else self.generator.get_state()

    def set_rng_state(self, state: Tensor, device: torch.device) -> None:
        self._gen(device).set_state(state)

    @torch.no_grad()
    def set_scores(self, values: Tensor, where: Tensor) -> None:
        """m_i <- values_i where ``where`` (a warm start, tokendrop.train.continued); pinned ids
        stay pinned."""
        self.scores.copy_(
            torch.where(where.to(self.scores.device), values.to(self.scores), self.scores)
        )
        self._repin()

    # -- selection --------------------------------------------------------------------------------

    def position_scores(
        self,
        input_ids: Tensor,
        mlm_positions: Tensor | None = None,
        mlm_weights: Tensor | None = None,
    ) -> Tensor:
        """(B, T) importance of each position (pinned positions at +/-1e4)."""
        s = self.scores[input_ids]
        if self.keep_mlm_targets and mlm_positions is not None:
            pin = torch.full_like(mlm_positions, 0, dtype=s.dtype) + PIN_HIGH
            if mlm_weights is not None:  # unused slots (position 0 = [CLS]) are pinned anyway
                pin = torch.where(mlm_weights > 0, pin, s.gather(1, mlm_positions))
            s = s.scatter(1, mlm_positions, pin)
        return s

    def _uniform(self, device: torch.device) -> Uniform:
        """U[0, 1) draws of a given shape from the selector's generator on ``device`` (made on first
        use)."""

        def draw(shape: tuple[int, ...]) -> Tensor:
            return torch.rand(shape, generator=self._gen(device), device=device)

        return draw

    @torch.no_grad()
    def select(
        self,
        input_ids: Tensor,
        mlm_positions: Tensor | None = None,
        mlm_weights: Tensor | None = None,
        random: bool = False,
    ) -> Tensor:
        """input_ids (B, T) -> keep_idx (B, M), ascending (the method's ``select``; with
        ``random``, method ``random``'s uniform draw among the unpinned rows: the random
        start)."""
        t = input_ids.shape[1]
        # a warm-up's shorter pieces: the same rate
        kept = self.num_kept if t == self.seq_len else self._drop.num_kept(t)
        s = self.position_scores(input_ids, mlm_positions, mlm_weights)
        uniform = self._uniform(input_ids.device)
        if random:
            return METHODS["random"].select(s, kept, self._drop, uniform)
        if self.ranked_mask_id >= 0:  # ties among [MASK] rows: at random, not by position
            is_mask = input_ids == self.ranked_mask_id
            s = torch.where(is_mask & (s < PIN_HIGH), s + MASK_JITTER * uniform(tuple(s.shape)), s)
        return self.selection.select(s, kept, self._drop, uniform)

    @torch.no_grad()
    def select_layers(self, input_ids: Tensor, kept: int, num_layers: int) -> Tensor:
        """A per-layer method (random_ltd): input_ids (B, T) -> keep_idx (S, B, M), ``kept``
        ascending positions per half layer and sequence (the method's ``select_layers``)."""
        pad = input_ids == self.pad_id if self.pad_id >= 0 else None
        return self.selection.select_layers(
            tuple(input_ids.shape), pad, kept, num_layers, self._uniform(input_ids.device)
        )

    # -- update -----------------------------------------------------------------------------------

    @torch.no_grad()
    def update(
        self, labels: Tensor, nll: Tensor, weights: Tensor, valid: Tensor | None = None
    ) -> None:
        """m_i <- beta m_i + (1 - beta) mean(loss of id i in this step), for ids seen in real slots.

        labels/nll/weights: (B, P) original ids, per-slot NLL, 1/0 slot weights (any leading shape).
        valid: a 0-dim bool tensor (same on every rank); False leaves ``m`` unchanged (a skipped,
        non-finite step), decided on the device without a host synchronisation.
        """
        if not self.selection.learns_from_loss:
            return
        v = self.scores.numel()
        ids = labels.reshape(-1)
        w = (weights.reshape(-1) > 0).to(torch.float32)
        stats = torch.zeros(2, v, dtype=torch.float32, device=self.scores.device)
        stats[0].index_add_(0, ids, nll.reshape(-1).float() * w)
        stats[1].index_add_(0, ids, w)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(stats)
        sums, counts = stats
        seen = counts > 0
        if valid is not None:
            seen = seen & valid
        mean = sums / counts.clamp(min=1.0)
        new = torch.where(seen, self.beta * self.scores + (1.0 - self.beta) * mean, self.scores)
        if self.ranked_mask_id >= 0:
            # [MASK]: the expected importance of the id a masked slot hides -- the mean of the new
            # scores over this step's real slots (ids weighted by their slot counts; pinned ids
            # and [PAD] left out), the same for every [MASK] row, so it tells nothing of one row's
            # target
            c = counts.index_fill(0, self.fixed_ids, 0.0)
            n = c.sum()
            expected = (c * new).sum() / n.clamp(min=1.0)
            some = n > 0 if valid is None else (n > 0) & valid
            at_mask = new.narrow(0, self.ranked_mask_id, 1)
            at_mask.copy_(torch.where(some, expected, at_mask))
        self.scores.copy_(new)
        self._repin()
