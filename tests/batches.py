"""MLM batches in tests: hand-made micro-batches for step-level tests (no loader, no data on disk),
and the helpers the loader tests share (take, same, unmask)."""

from __future__ import annotations

import itertools

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


def take(loader, n: int) -> list:
    """The next ``n`` batches of ``loader``."""
    return list(itertools.islice(loader, n))


def same(a: list, b: list) -> None:
    """Two lists of batches equal, tensor for tensor."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def unmask(b: dict[str, torch.Tensor]) -> torch.Tensor:
    """The original sequences of a batch (labels put back at the prediction slots)."""
    ids = b["input_ids"].clone()
    for i in range(ids.shape[0]):
        w = b["mlm_weights"][i] > 0
        ids[i, b["mlm_positions"][i][w]] = b["mlm_labels"][i][w]
    return ids
