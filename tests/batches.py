"""Hand-made MLM micro-batches for step-level tests (no loader, no data on disk)."""

from __future__ import annotations

import torch

from tokendrop.data.tokenizer import SPECIAL_IDS


def mlm_batch(vocab_size: int, b: int, t: int, seed: int = 0, seps: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """(b, t) random ids framed [CLS] ... [SEP] (and a [SEP] at each of ``seps``: more documents),
    15% of the inner positions masked with [MASK], every slot weighted 1."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL_IDS), vocab_size, (b, t), generator=g)
    ids[:, 0] = SPECIAL_IDS["cls"]
    for s in seps:
        ids[:, s] = SPECIAL_IDS["sep"]
    ids[:, -1] = SPECIAL_IDS["sep"]
    p = round(0.15 * t)
    pos = torch.stack([torch.randperm(t - 2, generator=g)[:p] + 1 for _ in range(b)]).sort(-1).values
    labels = ids.gather(1, pos)
    ids = ids.scatter(1, pos, SPECIAL_IDS["mask"])
    return {"input_ids": ids, "mlm_positions": pos, "mlm_labels": labels, "mlm_weights": torch.ones(b, p),
            "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
