"""Data mixtures (tokendrop.data.mixture): weighted sources, deterministic, resumable,
rank-sharded."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from batches import same, take, unmask
from toydata import toy_prepared, write_toy_corpus, write_toy_vocab

from tokendrop.data import DataError, MLMLoader, PreparedData, prepare
from tokendrop.data.mixture import Mixture, MixturePlan, realised


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    a = toy_prepared(root / "domain", seq_len=32, num_docs=300, seed=1)
    b = toy_prepared(root / "replay", seq_len=32, num_docs=60, seed=2)  # small: repeats sooner
    return root, a, b


def origin(mix: Mixture):
    """row bytes -> source index, over every training sequence of every source."""
    table = {}
    for i, s in enumerate(mix.sources):
        for row in np.asarray(s.sequences("train"), np.int64):
            table.setdefault(row.tobytes(), i)
    return table


def mixture(sources, weights=(0.7, 0.3)):
    _, a, b = sources
    return Mixture.open([a, b], list(weights))


def test_seventy_thirty_within_sampling_error(sources):
    mix = mixture(sources)
    table = origin(mix)
    B, steps = 32, 150
    loader = MLMLoader(mix, batch_size=B, num_workers=0, seed=3)
    counts = np.zeros(2, np.int64)
    for b in take(loader, steps):
        for row in unmask(b).numpy():
            counts[table[row.tobytes()]] += 1
    n = B * steps
    bound = 4 * math.sqrt(n * 0.7 * 0.3)  # 4 sigma of the binomial count: 4 x 25.9 = 104 of 4800
    assert abs(counts[0] - 0.7 * n) < bound, counts
    # the logged shares are the counts of what was served
    assert realised(loader.state_dict()) == pytest.approx(
        {"mix_0": counts[0] / n, "mix_1": counts[1] / n}
    )
    # a long run of the assignment alone: 2M slots, 4 sigma = 0.0013
    plan = MixturePlan([100, 100], np.array([0.7, 0.3]), 64, 1, 0, seed=3)
    m = 2_000_000
    share = plan.consumed_at(m)[0] / m
    assert abs(share - 0.7) < 4 * math.sqrt(0.21 / m), share


def test_same_seed_same_batches_other_seed_other_batches(sources):
    mix = mixture(sources)
    a = take(MLMLoader(mix, batch_size=16, num_workers=0, seed=5), 12)
    # workers: the same
    b = take(MLMLoader(mixture(sources), batch_size=16, num_workers=2, seed=5), 12)
    same(a, b)
    c = take(MLMLoader(mix, batch_size=16, num_workers=0, seed=6), 12)
    assert not all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, c))


def test_each_source_is_served_without_repeats_within_its_epoch(sources):
    mix = mixture(sources, (0.5, 0.5))
    table = origin(mix)
    n_small = mix.sources[1].num_sequences("train")
    seen = []
    for b in take(MLMLoader(mix, batch_size=16, num_workers=0, seed=1), 45):
        seen += [r.tobytes() for r in unmask(b).numpy() if table[r.tobytes()] == 1]
    assert len(seen) > 2 * n_small  # the small source wrapped at least twice
    for e in range(2):
        epoch = seen[e * n_small : (e + 1) * n_small]
        assert len(set(epoch)) == n_small  # a permutation of its sequences
    assert seen[:n_small] != seen[n_small : 2 * n_small]  # re-shuffled per epoch


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_bit_identical(sources, workers):
    mix = mixture(sources)
    B = 16
    spe = MLMLoader(mix, batch_size=B, num_workers=0).steps_per_epoch
    total = spe + 6
    full = take(MLMLoader(mix, batch_size=B, num_workers=workers, seed=1), total)
    for cut in (3, spe - 1, spe + 2):
        first = MLMLoader(mix, batch_size=B, num_workers=workers, seed=1, prefetch=3)
        it = iter(first)
        head = take(it, cut)
        state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint stores it
        take(it, 2)
        second = MLMLoader(mixture(sources), batch_size=B, num_workers=workers, seed=1)
        second.load_state_dict(state)
        same(head + take(second, total - cut), full)
        first.close()
        second.close()


def test_ranks_shard_the_same_stream(sources):
    mix = mixture(sources)
    one = take(MLMLoader(mix, batch_size=16, num_workers=0, seed=2), 8)
    r0 = take(
        MLMLoader(mixture(sources), batch_size=8, rank=0, world_size=2, num_workers=0, seed=2), 8
    )
    r1 = take(
        MLMLoader(mixture(sources), batch_size=8, rank=1, world_size=2, num_workers=0, seed=2), 8
    )
    for o, a, b in zip(one, r0, r1):
        for k in o:
            assert torch.equal(o[k], torch.cat([a[k], b[k]])), k
    # a checkpoint of the one-process loader resumes on two ranks (the same stream, split)
    first = MLMLoader(mix, batch_size=16, num_workers=0, seed=2)
    take(first, 5)
    state = first.state_dict()
    ranks = [
        MLMLoader(mixture(sources), batch_size=8, rank=r, world_size=2, num_workers=0, seed=2)
        for r in (0, 1)
    ]
    for r in ranks:
        r.load_state_dict(state)
    nxt = [take(r, 3) for r in ranks]
    for o, a, b in zip(one[5:8], *nxt):
        assert torch.equal(o["input_ids"], torch.cat([a["input_ids"], b["input_ids"]]))


def test_eval_pass_covers_every_source_once(sources):
    mix = mixture(sources)
    rows = []
    for b in MLMLoader(mix, split="eval", batch_size=8, num_workers=0, shuffle=False, loop=False):
        real = b["mlm_weights"].sum(1) > 0
        rows += [r.tobytes() for r in unmask(b)[real].numpy()]
    want = [np.asarray(r, np.int64).tobytes() for s in mix.sources for r in s.sequences("eval")]
    assert rows == want


def test_resume_refuses_another_mixture(sources):
    mix = mixture(sources)
    loader = MLMLoader(mix, batch_size=8, num_workers=0)
    take(loader, 2)
    state = loader.state_dict()
    other = MLMLoader(mixture(sources, (0.5, 0.5)), batch_size=8, num_workers=0)
    with pytest.raises(DataError, match="mixture_weights"):
        other.load_state_dict(state)


def test_sources_must_share_tokenizer_and_seq_len(sources, tmp_path):
    root, a, _ = sources
    other_t = toy_prepared(tmp_path / "t16", seq_len=16, num_docs=60)
    with pytest.raises(DataError) as e:
        Mixture.open([a, other_t])
    assert str(e.value).startswith(
        f"data.paths[1]: {other_t} has another sequence length T"
    ) and "\n" not in str(e.value)
    vocab = write_toy_vocab(tmp_path / "vocab.txt", num_words=150, seed=9)
    corpus = write_toy_corpus(tmp_path / "c.txt", num_docs=60)
    other_v = tmp_path / "v"
    prepare([corpus], other_v, 32, vocab=vocab, eval_fraction=0.1, workers=1, progress=False)
    with pytest.raises(DataError, match=r"^data.paths\[1\]: .* has another vocabulary"):
        Mixture.open([a, other_v])


def test_mixture_answers_as_prepared_data(sources):
    _, a, b = sources
    mix = mixture(sources)
    pa, pb = PreparedData.open(a), PreparedData.open(b)
    assert (
        mix.seq_len == pa.seq_len
        and mix.vocab_hash == pa.vocab_hash
        and mix.special_ids == pa.special_ids
    )
    assert mix.num_sequences("train") == pa.num_sequences("train") + pb.num_sequences("train")
    assert mix.fingerprint()["sources"] == [pa.fingerprint(), pb.fingerprint()]
    assert mix.token_counts().shape == pa.token_counts().shape


def _mixture_overrides(a, b) -> list[str]:
    tokens = 16 * 32 * 6 + 1  # batch 16 x T=32: 6 steps and one token -> ceil = 7 steps
    return [
        f'data.paths=["{a}", "{b}"]',
        "data.weights=[0.7, 0.3]",
        "train.steps=unset",
        f"train.tokens={tokens}",
        "train.warmup_steps=auto",
        "train.warmup_ratio=0.3",
        "train.ckpt_every=100",
        "train.log_every=1",
        "model.max_position_embeddings=64",
        "data.num_workers=1",
    ]


@pytest.fixture(scope="module")
def full_run(sources):
    """A tiny pretrain on a 70/30 mixture, its length in tokens, its warm-up as a ratio, via the
    CLI."""
    from tokendrop.cli import main as cli_main

    root, a, b = sources
    args = [x for o in _mixture_overrides(a, b) for x in ("--set", o)]
    assert (
        cli_main(["pretrain", "--config", "tiny", "--out", str(root / "full"), "--quiet", *args])
        == 0
    )
    return root / "full"


def test_pretrain_a_mixture_for_a_token_count_through_the_cli(sources, full_run):
    """The run's config records the resolved steps and warm-up; metrics the realised shares."""
    import tomllib

    from tokendrop.runs.metrics import read_metrics

    _, a, b = sources
    rec = tomllib.loads((full_run / "config.toml").read_text())
    # ceil(0.3 x 7)
    assert (rec["train"]["steps"], rec["train"]["warmup_steps"], rec["train"]["tokens"]) == (
        7,
        3,
        "unset",
    )
    assert "sequence slot" in rec["train"]["resolved_from"]
    assert rec["data"]["paths"] == [a, b] and rec["data"]["weights"] == [0.7, 0.3]
    rows = read_metrics(full_run)
    start = next(r for r in rows if r.get("event") == "start")
    assert [m["path"] for m in start["mixture"]] == [a, b]
    logged = [r for r in rows if "mix_0" in r]
    assert [r["step"] for r in logged] == list(range(1, 8))
    assert all(abs(r["mix_0"] + r["mix_1"] - 1) < 1e-12 for r in logged)
    assert any(r.get("event") == "end" and r["step"] == 7 for r in rows)


def test_pretrain_on_a_mixture_resumes_bit_identically(sources, full_run, tmp_path):
    """Stopped after step 3 (a checkpoint), resumed through the CLI from the run's own config.toml:
    the weights and the logged shares of the uninterrupted run."""
    from safetensors.torch import load_file

    from tokendrop.cli import main as cli_main
    from tokendrop.config import load_config
    from tokendrop.runs import checkpoint as ckpt_mod
    from tokendrop.runs.metrics import read_metrics
    from tokendrop.train.trainer import pretrain

    _, a, b = sources
    res = pretrain(
        load_config("tiny", _mixture_overrides(a, b)), tmp_path / "split", progress=False, stop_at=3
    )
    assert res.interrupted and res.steps == 3
    assert cli_main(["pretrain", "--resume", str(tmp_path / "split"), "--quiet"]) == 0
    assert ckpt_mod.latest(tmp_path / "split").name == ckpt_mod.latest(full_run).name
    wa = load_file(str(ckpt_mod.latest(full_run) / "model.safetensors"))
    wb = load_file(str(ckpt_mod.latest(tmp_path / "split") / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    full = [r["mix_0"] for r in read_metrics(full_run) if "mix_0" in r]
    split = {r["step"]: r["mix_0"] for r in read_metrics(tmp_path / "split") if "mix_0" in r}
    assert [split[s] for s in range(1, 8)] == full


def test_resume_on_other_mixture_data_names_data_paths():
    """A mixture resumed on data whose fingerprint differs: the one-line error names data.paths."""
    from tokendrop.config import DataConfig
    from tokendrop.errors import TrainingError
    from tokendrop.train.resume import check_resume_data

    class Data:
        def fingerprint(self):
            return {"vocab_hash": "b" * 64}

    dc = DataConfig()
    dc.paths = ["/d/domain", "/d/wiki"]
    meta = {
        "config": {"data": {"path": "", "paths": ["/old/domain", "/old/wiki"]}},
        "data_fingerprint": {"vocab_hash": "a" * 64},
    }
    with pytest.raises(
        TrainingError,
        match=r"/d/domain, /d/wiki is not the data .*\(/old/domain, /old/wiki\).*"
        r"--set data.paths=\[\.\.\.\]",
    ) as e:
        check_resume_data(meta, dc, Data())
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_seq_len_warmup_on_a_mixture_frames_the_drawn_sequences_and_resumes(sources, workers):
    """At L < T a mixture's batch is the same slots' sequences, each cut into T/L framed pieces
    (tokendrop.data.pieces); resumed mid-warm-up the pieces are bit-identical; back at L = T the
    batches are the plain mixture loader's."""
    from tokendrop.data.pieces import frame_pieces

    mix = mixture(sources)
    B, T, L = 8, mix.seq_len, 16
    cls, sep = mix.special_ids["cls"], mix.special_ids["sep"]
    plain = take(MLMLoader(mix, batch_size=B, num_workers=0, seed=1), 8)
    loader = MLMLoader(mix, batch_size=B, num_workers=workers, seed=1)
    loader.set_seq_len(L)
    it = iter(loader)
    head = take(it, 3)
    state = json.loads(json.dumps(loader.state_dict()))
    rest = take(it, 3)
    for got, full in zip(head + rest, plain):
        assert got["input_ids"].shape == (B * T // L, L)
        want = torch.from_numpy(frame_pieces(unmask(full).numpy(), L, cls, sep))
        assert torch.equal(unmask(got), want)
        assert torch.all(got["mlm_weights"].sum(1) >= 1)  # every piece masked on its own
    loader.set_seq_len(T)
    same(take(it, 2), plain[6:8])
    loader.close()
    second = MLMLoader(mixture(sources), batch_size=B, num_workers=workers, seed=1)
    second.load_state_dict(state)
    second.set_seq_len(L)
    same(take(second, 3), rest)
    second.close()


def test_pretrain_a_mixture_with_the_seq_len_warmup_resumes_bit_identically(sources, tmp_path):
    """data.paths with data.seq_len_start: the logged lengths follow the warm-up, and a run stopped
    mid-warm-up and resumed ends with the uninterrupted run's losses and weights."""
    from safetensors.torch import load_file

    from tokendrop.config import load_config
    from tokendrop.runs import checkpoint as ckpt_mod
    from tokendrop.runs.metrics import read_metrics
    from tokendrop.train.trainer import pretrain

    _, a, b = sources
    ov = [
        *_mixture_overrides(a, b),
        "data.seq_len_start=8",
        "data.seq_len_warmup_share=0.5",
        "data.num_workers=0",
    ]
    pretrain(load_config("tiny", ov), tmp_path / "full", progress=False)
    part = pretrain(load_config("tiny", ov), tmp_path / "split", progress=False, stop_at=2)
    assert part.interrupted
    pretrain(load_config("tiny", ov), tmp_path / "split", resume=True, progress=False)
    rows = [
        [(r["step"], r["seq_len"], r["loss"], r["mix_0"]) for r in read_metrics(d) if "loss" in r]
        for d in (tmp_path / "full", tmp_path / "split")
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 7
    assert [r[1] for r in rows[0]] == sorted(r[1] for r in rows[0]) and rows[0][0][1] < 32 == rows[
        0
    ][-1][1]
    wa, wb = (
        load_file(str(ckpt_mod.latest(d) / "model.safetensors"))
        for d in (tmp_path / "full", tmp_path / "split")
    )
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


MIXTURE_DDP = """
import sys
from tokendrop.config import load_config
from tokendrop.train.trainer import pretrain

a, b, out = sys.argv[1:4]
cfg = load_config("tiny", [
    f'data.paths=["{a}", "{b}"]', "data.weights=[0.7, 0.3]", "train.steps=5", "train.log_every=1",
    "train.batch_size=8", "train.ckpt_every=100", "model.max_position_embeddings=64",
    "data.num_workers=0", "drop.method=cumulative", "model.hidden_dropout=0.0",
    "model.attention_dropout=0.0",
])
pretrain(cfg, out, progress=False)
"""


def test_a_mixture_under_torchrun_matches_one_process(sources, tmp_path):
    """torchrun with 2 ranks on a 70/30 mixture: the same losses (1e-5) and the same realised shares
    as one process taking the whole global batch."""
    import os
    import subprocess
    import sys

    from tokendrop.runs.metrics import read_metrics

    _, a, b = sources
    script = tmp_path / "mix_ddp.py"
    script.write_text(MIXTURE_DDP)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one = subprocess.run(
        [sys.executable, str(script), a, b, str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            a,
            b,
            str(tmp_path / "two"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    rows = [
        [(r["loss"], r["mix_0"]) for r in read_metrics(tmp_path / d) if "loss" in r]
        for d in ("one", "two")
    ]
    assert len(rows[0]) == len(rows[1]) == 5
    for (la, ma), (lb, mb) in zip(*rows):
        assert abs(la - lb) <= 1e-5 and ma == mb, rows
