"""MLMLoader: masking statistics, static shapes, determinism, resume, data parallelism, workers."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from batches import same, take, unmask
from toydata import toy_prepared

from tokendrop.data import DataError, MLMLoader, PreparedData, num_prediction_slots


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return PreparedData.open(
        toy_prepared(tmp_path_factory.mktemp("d") / "packed", seq_len=64, num_docs=400)
    )


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    return PreparedData.open(
        toy_prepared(
            tmp_path_factory.mktemp("d") / "unpacked", seq_len=64, num_docs=300, packed=False
        )
    )


def test_batch_shapes_and_contract(packed):
    B, T = 8, packed.seq_len
    P = num_prediction_slots(T, 0.15)
    assert P == round(0.15 * T) == 10
    loader = MLMLoader(packed, batch_size=B, num_workers=0)
    b = next(iter(loader))
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in b.items()}
    assert shapes == {
        "input_ids": ((B, T), torch.int64),
        "attention_mask": ((B, T), torch.int64),
        "token_type_ids": ((B, T), torch.int64),
        "mlm_positions": ((B, P), torch.int64),
        "mlm_labels": ((B, P), torch.int64),
        "mlm_weights": ((B, P), torch.float32),
    }
    assert (b["attention_mask"] == 1).all() and (b["token_type_ids"] == 0).all()
    unused = b["mlm_weights"] == 0
    assert (b["mlm_positions"][unused] == 0).all() and (b["mlm_labels"][unused] == 0).all()
    for i in range(B):  # sorted, distinct real positions
        pos = b["mlm_positions"][i][b["mlm_weights"][i] > 0]
        assert (pos[1:] > pos[:-1]).all()
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["position"] == 1


def test_masking_statistics(packed, unpacked):
    sp = packed.special_ids
    specials = torch.tensor([sp["cls"], sp["sep"], sp["pad"], sp["mask"]])
    for pd in (packed, unpacked):
        T = pd.seq_len
        P = num_prediction_slots(T)
        loader = MLMLoader(pd, batch_size=64, num_workers=0, seed=3)
        n_maskable = n_pred = n_mask = n_keep = n_rand = 0
        vocab = pd.vocab()
        bracketed = torch.tensor(
            [i for i, t in enumerate(vocab) if t.startswith("[") and t.endswith("]")]
        )
        for b in take(loader, 60 if pd is packed else 120):
            orig = unmask(b)
            maskable = ~torch.isin(orig, specials)
            m = maskable.sum(1)
            k = (b["mlm_weights"] > 0).sum(1)
            want = torch.clamp(torch.floor(m * 0.15 + 0.5), min=1, max=P).long()
            assert torch.equal(k, want)  # the exact BERT count per sequence
            real = b["mlm_weights"] > 0
            pos, lab = b["mlm_positions"][real], b["mlm_labels"][real]
            rows = torch.arange(len(k)).repeat_interleave(k)
            assert not torch.isin(lab, specials).any()  # special tokens are never predicted
            assert maskable[rows, pos].all()
            new = b["input_ids"][rows, pos]
            n_mask += int((new == sp["mask"]).sum())
            n_keep += int((new == lab).sum())
            rnd = (new != sp["mask"]) & (new != lab)
            n_rand += int(rnd.sum())
            assert not torch.isin(new[rnd], bracketed).any()  # random ids are ordinary tokens
            # nothing outside the prediction slots changed
            changed = b["input_ids"] != orig
            changed[rows, pos] = False
            assert not changed.any()
            n_maskable += int(m.sum())
            n_pred += int(k.sum())
        assert n_maskable >= 100_000
        assert abs(n_pred / n_maskable - 0.15) < 0.005
        assert abs(n_mask / n_pred - 0.8) < 0.015
        assert abs(n_rand / n_pred - 0.1) < 0.01
        assert abs(n_keep / n_pred - 0.1) < 0.01


def test_masks_depend_only_on_seed_epoch_and_sequence(packed):
    a = MLMLoader(packed, batch_size=6, num_workers=0, seed=5)
    b = MLMLoader(packed, batch_size=3, num_workers=2, seed=5)
    ba = take(a, 4)
    bb = take(b, 8)
    cat = [{k: torch.cat([bb[2 * i][k], bb[2 * i + 1][k]]) for k in bb[0]} for i in range(4)]
    same(ba, cat)
    c = take(MLMLoader(packed, batch_size=6, num_workers=0, seed=6), 1)[0]
    assert not torch.equal(c["input_ids"], ba[0]["input_ids"])


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_equals_uninterrupted(packed, workers):
    N = packed.num_sequences("train")
    B = 16
    spe = N // B
    total = spe + 5  # crosses an epoch boundary
    full = take(MLMLoader(packed, batch_size=B, num_workers=workers, seed=1), total)
    for cut in (3, spe - 1, spe + 1):
        first = MLMLoader(packed, batch_size=B, num_workers=workers, seed=1, prefetch=3)
        it = iter(first)
        head = take(it, cut)
        state = first.state_dict()
        take(it, 2)  # consumed beyond the checkpoint: irrelevant to the saved state
        import json

        state = json.loads(json.dumps(state))  # JSON-serialisable
        second = MLMLoader(packed, batch_size=B, num_workers=workers, seed=1)
        second.load_state_dict(state)
        same(head + take(second, total - cut), full)
        first.close()
        second.close()


def test_load_state_while_iterating_restarts_at_that_batch(packed):
    loader = MLMLoader(packed, batch_size=8, num_workers=2)
    it = iter(loader)
    ref = take(MLMLoader(packed, batch_size=8, num_workers=0), 6)
    take(it, 2)
    s = loader.state_dict()
    take(it, 3)
    loader.load_state_dict(s)
    same(take(it, 4), ref[2:6])
    loader.close()


def test_data_parallel_ranks(packed):
    N = packed.num_sequences("train")
    B, W = 4, 2
    single = take(MLMLoader(packed, batch_size=B * W, num_workers=0, seed=2), 10)
    ranks = [
        take(MLMLoader(packed, batch_size=B, world_size=W, rank=r, num_workers=1, seed=2), 10)
        for r in range(W)
    ]
    for s in range(10):
        for k in single[s]:
            assert torch.equal(torch.cat([ranks[0][s][k], ranks[1][s][k]]), single[s][k])
    # within an epoch no two ranks (and no two steps) share a sequence
    seen = []
    for r in range(W):
        ld = MLMLoader(packed, batch_size=B, world_size=W, rank=r, num_workers=0, seed=2)
        seen += [ld.batch_indices(0, s) for s in range(ld.steps_per_epoch)]
    flat = np.concatenate(seen)
    assert len(flat) == len(set(flat.tolist())) == (N // (B * W)) * B * W
    # resuming with a different world size but the same global batch
    ld1 = MLMLoader(packed, batch_size=B * W, num_workers=0, seed=2)
    take(ld1, 3)
    ld2 = MLMLoader(packed, batch_size=B, world_size=W, rank=1, num_workers=0, seed=2)
    ld2.load_state_dict(ld1.state_dict())
    assert torch.equal(next(iter(ld2))["input_ids"], single[3]["input_ids"][B:])


def test_epochs_reshuffle_and_drop_the_tail(packed):
    N = packed.num_sequences("train")
    B = 7
    ld = MLMLoader(packed, batch_size=B, num_workers=0, seed=0)
    spe = ld.steps_per_epoch
    assert spe == N // B and len(ld) == spe
    e0 = np.concatenate([ld.batch_indices(0, s) for s in range(spe)])
    e1 = np.concatenate([ld.batch_indices(1, s) for s in range(spe)])
    assert len(set(e0.tolist())) == spe * B and not np.array_equal(e0, e1)
    batches = take(ld, spe + 1)
    assert ld.state_dict()["epoch"] == 1 and ld.state_dict()["position"] == 1
    assert len(batches) == spe + 1


def test_eval_pass_covers_every_sequence_once(packed):
    N = packed.num_sequences("eval")
    B, W = 4, 2
    assert N % (B * W) != 0  # the interesting case: a partial last batch
    seqs = torch.from_numpy(np.asarray(packed.sequences("eval")).astype(np.int64))
    got = []
    counts = []
    for r in range(W):
        ld = MLMLoader(
            packed,
            split="eval",
            batch_size=B,
            world_size=W,
            rank=r,
            shuffle=False,
            loop=False,
            num_workers=1,
        )
        batches = list(ld)
        counts.append(len(batches))
        assert len(batches) == len(ld) == -(-N // (B * W))
        for s, b in enumerate(batches):
            idx = ld.batch_indices(0, s)
            real = b["mlm_weights"].sum(1) > 0
            assert torch.equal(real, torch.from_numpy(idx >= 0))  # placeholders carry no weight
            assert torch.equal(unmask(b)[real], seqs[idx[idx >= 0]])
            got += idx[idx >= 0].tolist()
        again = list(
            MLMLoader(
                packed, split="eval", batch_size=B, world_size=W, rank=r, shuffle=False, loop=False
            )
        )
        same(batches, again)  # deterministic masks on every eval pass
        same(take(ld, 2), batches[:2])  # a new pass over the same loader restarts at the beginning
        same(take(ld, 2), batches[:2])
        ld.load_state_dict({"epoch": 0, "position": 1})
        same(list(ld), batches[1:])  # ... unless a position was loaded
    assert counts[0] == counts[1]
    assert sorted(got) == list(range(N))


def test_errors(packed):
    with pytest.raises(DataError, match="fewer than one global batch"):
        MLMLoader(packed, batch_size=packed.num_sequences("train") + 1)
    with pytest.raises(DataError, match="rank/world_size"):
        MLMLoader(packed, batch_size=2, rank=2, world_size=2)
    ld = MLMLoader(packed, batch_size=4, num_workers=0)
    with pytest.raises(DataError, match="seed=9 does not match"):
        ld.load_state_dict({**ld.state_dict(), "seed": 9})
    with pytest.raises(DataError, match="not a multiple of the global batch"):
        ld.load_state_dict({"epoch": 0, "position": 1, "consumed": 6})


def test_workers_shut_down(packed):
    ld = MLMLoader(packed, batch_size=4, num_workers=2)
    take(ld, 3)  # islice abandons the generator
    assert ld.state_dict()["position"] == 3
    it = iter(ld)
    next(it)
    assert len(mp.active_children()) == 2
    ld.close()
    assert mp.active_children() == []
    it2 = iter(ld)
    next(it2)
    del it2
    import gc

    gc.collect()
    assert mp.active_children() == []


def test_interpreter_exit_does_not_hang(packed):
    code = textwrap.dedent(f"""
        from tokendrop.data import MLMLoader, PreparedData
        ld = MLMLoader(PreparedData.open({packed.path!r}), batch_size=4, num_workers=2, prefetch=2)
        it = iter(ld)
        next(it)
        print("ok", flush=True)
        # exit with workers running and full queues
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
