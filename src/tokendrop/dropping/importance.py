"""Which tokens are important: the paper's cumulative-loss vector and its alternatives (docs/design.md §2.3).

``TokenSelector`` owns a length-|V| fp32 vector ``m`` (training state, not part of the exported
model).  The score of a position is ``m[input_id]``; each sequence keeps its top-M positions, ties
broken by position (stable sort), and the kept positions are returned in ascending order.

Corrections to the public reference implementation (docs/design.md §3), all deliberate:
* only real prediction slots (weight > 0) update ``m``; padded slots never erode [PAD];
* repeated ids in a batch are averaged (scatter_add of sums and counts), not one arbitrary write;
* pinned ids ([CLS], [SEP], [MASK], configured extras = +1e4; [PAD] = -1e4) are re-pinned after
  every update;
* under ``torch.distributed`` the sums and counts are all-reduced so every rank holds the same ``m``.

Methods: ``cumulative`` (the paper's), ``half_random`` (last J = int(0.05 T) of the top-M replaced
by J positions drawn from ranks M-J+1..T; [PAD] drawn last, pinned ids always drawn), ``random`` (M uniform among non-pinned positions,
pinned always kept, [PAD] dropped first), ``frequency`` (static: rarer ids first), ``random_ltd``
(:meth:`TokenSelector.select_layers`: a uniform draw per half layer, nothing pinned, [PAD] last).
Everything stays on the device: no host synchronisation in ``select`` or ``update``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tokendrop.config import LOSS_METHODS, METHODS, ConfigError, DropConfig
from tokendrop.dropping.random_ltd import sample_layers

PIN_HIGH = 1e4
PIN_LOW = -1e4


def stable_topk_positions(scores: Tensor, m: int) -> Tensor:
    """(B, T) scores -> (B, M) positions of the M highest scores, ties to the earlier position,
    returned in ascending position order."""
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # (B, T) rank -> position
    return order[:, :m].sort(dim=1).values


def pinned_ids(drop, vocab: list[str]) -> list[int]:
    """The ids of ``drop.pinned_tokens`` in ``vocab`` (the tokens by id); ConfigError for one not in it."""
    if not drop.pinned_tokens:
        return []
    index = {t: i for i, t in enumerate(vocab) if t}
    out = []
    for tok in drop.pinned_tokens:
        if tok not in index:
            raise ConfigError(f"drop.pinned_tokens: {tok!r} is not in the vocabulary")
        out.append(index[tok])
    return out


def build_selector(drop: DropConfig, vocab_size: int, special_ids: Mapping[str, int], seq_len: int,
                   pinned_ids: Iterable[int] = (), counts: Any = None, seed: int = 0,
                   device: torch.device | str | None = None) -> "TokenSelector":
    """The one way the library makes a ``TokenSelector`` (pretraining, ``tokendrop inspect``, the
    benchmark): ``special_ids`` are the data's ids ([CLS]/[SEP]/[MASK] pinned high, [PAD] low),
    ``pinned_ids`` the extra ids kept always (``drop.pinned_tokens``, resolved by the caller),
    ``counts`` the per-id corpus counts (array or tensor; used by ``method = "frequency"`` only, which
    needs them), ``seed`` the random methods' generator seed; on ``device`` when given."""
    sel = TokenSelector(drop, vocab_size, dict(special_ids), seq_len, list(pinned_ids),
                        counts if METHODS[drop.method].needs_counts else None, seed=seed)
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
        super().__init__()
        self.method = drop.method
        self.beta = drop.beta
        self.keep_mlm_targets = drop.keep_mlm_targets
        self.seq_len = seq_len
        self._drop = drop
        self.num_kept = drop.num_kept(seq_len)
        self.num_random = int(drop.half_random_frac * seq_len) if drop.method == "half_random" else 0
        if self.num_random > self.num_kept:  # DropConfig.validate refuses this for every T; a direct caller too
            raise ConfigError(f"drop.half_random_frac: {self.num_random} random slots exceed the {self.num_kept} kept "
                              f"positions of T={seq_len} at drop.rate={drop.rate}; lower half_random_frac or drop.rate")
        pinned = [special_ids[k] for k in ("cls", "sep", "mask") if k in special_ids]
        pinned += list(extra_pinned_ids or [])
        self.register_buffer("pinned_ids", torch.tensor(sorted(set(pinned)), dtype=torch.long), persistent=False)
        self.pad_id = special_ids.get("pad", -1)
        m = torch.full((vocab_size,), float(drop.init_score), dtype=torch.float32)
        if drop.method == "frequency":
            if counts is None:
                raise ConfigError("drop.method: 'frequency' needs token counts (drop.counts_path or the prepared data's counts)")
            counts = torch.as_tensor(counts, dtype=torch.float64)
            if counts.shape != (vocab_size,):
                raise ConfigError(f"drop.counts_path: expected {vocab_size} counts, got shape {tuple(counts.shape)}")
            m = (-torch.log1p(counts)).float()  # rarer -> higher score
        self.register_buffer("scores", m)  # the vector m
        self._repin()
        self.generator: torch.Generator | None = None
        self.seed = seed

    # -- state ------------------------------------------------------------------------------------

    def _repin(self) -> None:
        self.scores[self.pinned_ids] = PIN_HIGH
        if self.pad_id >= 0:
            self.scores[self.pad_id] = PIN_LOW

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
        """m_i <- values_i where ``where`` (a warm start, tokendrop.train.continued); pinned ids stay pinned."""
        self.scores.copy_(torch.where(where.to(self.scores.device), values.to(self.scores), self.scores))
        self._repin()

    # -- selection --------------------------------------------------------------------------------

    def position_scores(self, input_ids: Tensor, mlm_positions: Tensor | None = None, mlm_weights: Tensor | None = None) -> Tensor:
        """(B, T) importance of each position (pinned positions at +/-1e4)."""
        s = self.scores[input_ids]
        if self.keep_mlm_targets and mlm_positions is not None:
            pin = torch.full_like(mlm_positions, 0, dtype=s.dtype) + PIN_HIGH
            if mlm_weights is not None:  # unused slots (position 0 = [CLS]) are pinned anyway
                pin = torch.where(mlm_weights > 0, pin, s.gather(1, mlm_positions))
            s = s.scatter(1, mlm_positions, pin)
        return s

    @torch.no_grad()
    def select(self, input_ids: Tensor, mlm_positions: Tensor | None = None, mlm_weights: Tensor | None = None) -> Tensor:
        """input_ids (B, T) -> keep_idx (B, M), ascending."""
        b, t = input_ids.shape
        m, j = self.num_kept, self.num_random
        if t != self.seq_len:  # a sequence-length warm-up's shorter pieces: the same rate of them
            m, j = self._drop.num_kept(t), (int(self._drop.half_random_frac * t) if j else 0)
        s = self.position_scores(input_ids, mlm_positions, mlm_weights)
        if self.method == "random":
            u = torch.rand((b, t), generator=self._gen(input_ids.device), device=input_ids.device)
            s = torch.where(s >= PIN_HIGH, 2.0, torch.where(s <= PIN_LOW, -1.0, u))
            return stable_topk_positions(s, m)
        if self.method != "half_random" or j == 0:
            return stable_topk_positions(s, m)
        order = torch.sort(s, dim=1, descending=True, stable=True).indices  # (B, T)
        head = order[:, : m - j]  # deterministic part: ranks 1..M-J
        pool = order[:, m - j :]  # ranks M-J+1..T
        u = torch.rand(pool.shape, generator=self._gen(input_ids.device), device=input_ids.device)
        pool_s = s.gather(1, pool)
        u = torch.where(pool_s >= PIN_HIGH, -1.0, u)  # pinned rows in the pool stay kept
        u = torch.where(pool_s <= PIN_LOW, 2.0, u)  # [PAD] is drawn last
        pick = torch.argsort(u, dim=1)[:, :j]  # J distinct draws from the pool
        return torch.cat([head, pool.gather(1, pick)], dim=1).sort(dim=1).values

    @torch.no_grad()
    def select_layers(self, input_ids: Tensor, kept: int, num_layers: int) -> Tensor:
        """random_ltd: input_ids (B, T) -> keep_idx (S, B, M), one ascending uniform draw of ``kept``
        positions per half layer and sequence (``tokendrop.dropping.random_ltd.sample_layers``)."""
        b, t = input_ids.shape
        pad = input_ids == self.pad_id if self.pad_id >= 0 else None
        return sample_layers(num_layers, b, t, kept, self._gen(input_ids.device), input_ids.device, pad)

    # -- update -----------------------------------------------------------------------------------

    @torch.no_grad()
    def update(self, labels: Tensor, nll: Tensor, weights: Tensor, valid: Tensor | None = None) -> None:
        """m_i <- beta m_i + (1 - beta) mean(loss of id i in this step), for ids seen in real slots.

        labels/nll/weights: (B, P) original ids, per-slot NLL, 1/0 slot weights (any leading shape).
        valid: a 0-dim bool tensor (same on every rank); False leaves ``m`` unchanged (a skipped,
        non-finite step), decided on the device without a host synchronisation.
        """
        if self.method not in LOSS_METHODS:
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
        self.scores.copy_(torch.where(seen, self.beta * self.scores + (1.0 - self.beta) * mean, self.scores))
        self._repin()
