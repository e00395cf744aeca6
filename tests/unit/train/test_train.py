"""Pretraining: learning, every method, exact resume, crash safety, DDP equivalence, stage 2,
errors."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from combos import method_variant_combos
from processes import wait_for_training
from safetensors.torch import load_file

from tokendrop.cli import main as cli_main
from tokendrop.config import MICRO_BATCH_AUTO, load_config
from tokendrop.dropping.methods import PAPER_METHOD
from tokendrop.errors import ConfigError, TrainingError
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.trainer import pretrain

REPO = Path(__file__).resolve().parents[3]


def tiny(data, *overrides):
    return load_config("tiny", [f'data.path="{data}"', *overrides])


def losses(run):
    return [r["loss"] for r in read_metrics(run) if "loss" in r]


def evals(run):
    return [r["eval_loss"] for r in read_metrics(run) if "eval_loss" in r]


def test_tiny_learns(tiny_data, tmp_path):
    res = pretrain(
        tiny(tiny_data, "train.steps=60", "drop.method=cumulative"),
        tmp_path / "run",
        progress=False,
    )
    ev = evals(tmp_path / "run")
    # eval MLM loss (full model) falls clearly
    assert ev[-1] < ev[0] - 1.0 and ev[-1] < 0.75 * ev[0], ev
    assert res.steps == 60 and not res.interrupted
    assert (tmp_path / "run" / "report.md").is_file() and (
        tmp_path / "run" / "curves.png"
    ).is_file()
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "run" / "config.toml").is_file()
    # importance vector moved away from its initial 10.0 for seen ids, pinned ids intact
    imp = res.importance
    assert (imp < 10.0).sum() > 20 and imp.max() == 1e4 and imp.min() == -1e4
    # the exported model of the finished run loads in transformers with identical logits
    import transformers

    assert cli_main(["export", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    from tokendrop.models.bert.model import BertForMaskedLM
    from tokendrop.models.source import load_pretrained

    ours, _ = load_pretrained(tmp_path / "run", BertForMaskedLM)
    ids = torch.randint(5, 150, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, ours.eval()(ids), atol=1e-5, rtol=1e-5)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("alice sees the red house")["input_ids"][0] == tok.cls_token_id


@pytest.mark.parametrize(
    "overrides",
    # every method that keeps one subset for the span, every variant (from the registry;
    # random_ltd's per-layer subsets: tests/unit/dropping/test_random_ltd.py), and two options
    [[f"drop.method={m}", f"drop.variant={v}"] for m, v in method_variant_combos(per_layer=False)]
    + [
        [f"drop.method={PAPER_METHOD}", "drop.rate=0.75", "drop.keep_mlm_targets=true"],
        [
            f"drop.method={PAPER_METHOD}",
            "drop.rate=0.25",
            "drop.stage2_fraction=0.5",
            "train.micro_batch_size=8",
        ],
    ],
    ids=lambda o: "+".join(x.split("=")[1] for x in o),
)
def test_every_method_runs(tiny_data, tmp_path, overrides, monkeypatch):
    # record (layer, sequences, query rows, key/value rows) of every encoder-layer call in training
    # mode
    import tokendrop.models.bert.model as model_mod

    calls = []
    encoder_init = model_mod.Encoder.__init__

    def init(self, cfg):
        encoder_init(self, cfg)
        for i, layer in enumerate(self.layers):

            def hook(mod, args, kwargs, i=i):
                if mod.training:
                    x, kv = args[0], kwargs.get("kv_in", args[1] if len(args) > 1 else None)
                    calls.append((i, x.shape[0], x.shape[1], (x if kv is None else kv).shape[1]))

            layer.register_forward_pre_hook(hook, with_kwargs=True)

    monkeypatch.setattr(model_mod.Encoder, "__init__", init)
    cfg = tiny(tiny_data, "train.steps=4", "train.eval_every=4", "train.log_every=2", *overrides)
    res = pretrain(cfg, tmp_path / "r", progress=False)
    assert res.steps == 4
    assert all(torch.isfinite(torch.tensor(losses(tmp_path / "r"))))

    # dropping happened: in the half layers [start, end) every sequence has exactly M = num_kept(T)
    # < T query rows (keys/values: all T rows in the first half layer, and in every half layer for
    # `pass`); the full layers, and every layer in stage 2, see all T rows
    L, T, d = cfg.model.num_layers, 64, cfg.drop
    start, end = d.span(L)
    m = d.num_kept(T)
    assert 0 < m < T
    mb = cfg.train.micro_batch_size
    micro = cfg.train.batch_size if mb == MICRO_BATCH_AUTO else mb
    accum = cfg.train.batch_size // micro
    dense_from = cfg.train.steps - round(d.stage2_fraction * cfg.train.steps)
    expected = []
    for fwd in range(cfg.train.steps * accum):
        dropping = fwd // accum < dense_from
        for i in range(L):
            half = dropping and start <= i < end
            q = m if half else T
            kv = T if not half or i == start or d.variant_row.frozen_kv else m
            expected.append((i, micro, q, kv))
    assert calls == expected
    assert any(q < T for _, _, q, _ in calls)


def test_unpacked_baseline_runs(tiny_data_unpacked, tmp_path):
    res = pretrain(
        tiny(tiny_data_unpacked, "train.steps=4", "drop.method=cumulative"),
        tmp_path / "r",
        progress=False,
    )
    assert res.steps == 4 and all(torch.isfinite(torch.tensor(losses(tmp_path / "r"))))


def _weights(run):
    return load_file(str(ckpt_mod.latest(run) / "model.safetensors"))


def test_exact_resume(tiny_data, tmp_path):
    ov = [
        "train.steps=12",
        "train.log_every=1",
        "train.ckpt_every=100",
        "train.deterministic=true",
        "drop.method=half_random",
        "model.hidden_dropout=0.1",
    ]
    pretrain(tiny(tiny_data, *ov), tmp_path / "full", progress=False)
    part = pretrain(tiny(tiny_data, *ov), tmp_path / "split", progress=False, stop_at=6)
    assert part.interrupted and part.steps == 6
    pretrain(tiny(tiny_data, *ov), tmp_path / "split", resume=True, progress=False)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "split")
    assert len(a) == len(b) == 12
    assert a == b  # bit-identical on CPU in deterministic mode
    wa, wb = _weights(tmp_path / "full"), _weights(tmp_path / "split")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    sa = load_file(str(ckpt_mod.latest(tmp_path / "full") / "state.safetensors"))
    sb = load_file(str(ckpt_mod.latest(tmp_path / "split") / "state.safetensors"))
    assert torch.equal(sa["importance"], sb["importance"])


def test_resume_incompatible_config(tiny_data, tmp_path):
    pretrain(
        tiny(tiny_data, "train.steps=6", "drop.method=cumulative"),
        tmp_path / "r",
        progress=False,
        stop_at=3,
    )
    with pytest.raises(TrainingError, match=r"drop\.rate changed from 0\.5 to 0\.25"):
        pretrain(
            tiny(tiny_data, "train.steps=6", "drop.method=cumulative", "drop.rate=0.25"),
            tmp_path / "r",
            resume=True,
            progress=False,
        )
    with pytest.raises(TrainingError, match="already holds a run"):
        pretrain(tiny(tiny_data, "train.steps=6"), tmp_path / "r", progress=False)


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import safetensors.torch as st
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    real = st.save_file
    calls = {"n": 0}

    def dying_save(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] == 3:  # second checkpoint, first file: write half of it, then die
            real(tensors, path)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(tensors, path)

    st.save_file = dying_save
    cfg = load_config("tiny", [f'data.path="{sys.argv[1]}"', "train.steps=8", "train.ckpt_every=4"])
    pretrain(cfg, sys.argv[2], progress=False)
    """
)


def test_sigkill_mid_checkpoint_leaves_previous_valid(tiny_data, tmp_path):
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    run = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, str(script), str(tiny_data), str(run)], capture_output=True, text=True
    )
    assert p.returncode == -9, p.stderr
    last = ckpt_mod.latest(run)
    assert last is not None and last.name == "step-00000004"
    assert not (run / "checkpoints" / "step-00000008").exists()
    meta, model, state = ckpt_mod.load(last)
    assert meta["step"] == 4 and "importance" not in state  # dense tiny preset
    # a corrupted complete checkpoint is detected, never taken as valid
    f = last / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ckpt_mod.CheckpointError, match="corrupt"):
        ckpt_mod.load(last)
    assert ckpt_mod.latest(run) is None
    # resuming continues from a valid checkpoint only: here none is left
    with pytest.raises(TrainingError, match="no valid checkpoint"):
        pretrain(tiny(tiny_data, "train.steps=8"), run, resume=True, progress=False)


def test_sigterm_saves_and_exits_143(tiny_data, tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokendrop",
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(run),
            "--quiet",
            "--set",
            f'data.path="{tiny_data}"',
            "--set",
            "train.steps=100000",
            "--set",
            "train.ckpt_every=100000",
            "--set",
            "train.eval_every=100000",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_training(p, run)  # not "a second after start": the handler may not be installed yet
    p.terminate()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err  # 128 + SIGTERM: an interrupted run is not a success
    assert "interrupted (checkpoint saved)" in out
    # the command that continues it, beside the export one
    assert f"; continue it: tokendrop pretrain --resume {run}\n" in out, out
    last = ckpt_mod.latest(run)
    assert last is not None and 0 < ckpt_mod.verify(last)["step"] < 100000


def test_stage2_switches_exactly(tiny_data, tmp_path, monkeypatch):
    from tokendrop.dropping.importance import TokenSelector

    calls = []
    real = TokenSelector.select

    def counting(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(TokenSelector, "select", counting)
    pretrain(
        tiny(
            tiny_data,
            "train.steps=10",
            "train.log_every=1",
            "drop.method=cumulative",
            "drop.stage2_fraction=0.3",
            "train.micro_batch_size=8",
        ),
        tmp_path / "r",
        progress=False,
    )
    recs = [r for r in read_metrics(tmp_path / "r") if "loss" in r]
    assert [r["dropping"] for r in recs] == [True] * 7 + [False] * 3
    assert [r["kept_fraction"] for r in recs] == [0.5] * 7 + [1.0] * 3
    assert len(calls) == 7 * 2  # two micro-batches per step, none after the switch


def test_nan_loss_stops_with_last_good_checkpoint(tiny_data, tmp_path, monkeypatch):
    from tokendrop.models.bert.model import BertForMaskedLM

    real = BertForMaskedLM.mlm_nll
    n = {"calls": 0}

    def poisoned(self, logits, labels):
        n["calls"] += 1
        out = real(self, logits, labels)
        return out * float("nan") if self.training and n["calls"] > 6 else out

    monkeypatch.setattr(BertForMaskedLM, "mlm_nll", poisoned)
    with pytest.raises(TrainingError, match="non-finite loss.*step-00000004"):
        pretrain(
            tiny(tiny_data, "train.steps=12", "train.ckpt_every=4", "train.log_every=4"),
            tmp_path / "r",
            progress=False,
        )
    assert ckpt_mod.latest(tmp_path / "r").name == "step-00000004"


def test_data_model_mismatch_errors(tiny_data, tmp_path, capsys):
    with pytest.raises(ConfigError, match="vocabulary of .* ids but model.vocab_size is 999"):
        pretrain(tiny(tiny_data, "model.vocab_size=999"), tmp_path / "a", progress=False)
    with pytest.raises(ConfigError, match="data.seq_len: expected T=32"):
        pretrain(tiny(tiny_data, "data.seq_len=32"), tmp_path / "b", progress=False)
    with pytest.raises(ConfigError, match="exceeds model.max_position_embeddings=32"):
        pretrain(
            tiny(tiny_data, "model.max_position_embeddings=32"), tmp_path / "c", progress=False
        )
    # through the CLI: one line, exit 2, nothing written
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "d"),
            "--set",
            f'data.path="{tiny_data}"',
            "--set",
            "train.stepz=3",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "did you mean 'train.steps'" in err and err.count("\n") == 1
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "e"),
            "--set",
            "train.steps=abc",
            "--set",
            f'data.path="{tiny_data}"',
        ]
    )
    assert (
        rc == 2 and "train.steps: expected a positive integer or 'unset'" in capsys.readouterr().err
    )
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "f"),
            "--set",
            f'data.path="{tmp_path}/nope"',
        ]
    )
    assert rc == 2 and "nope" in capsys.readouterr().err
    assert (
        not (tmp_path / "d").exists()
        and not (tmp_path / "e").exists()
        and not (tmp_path / "f").exists()
    )


DDP_SCRIPT = textwrap.dedent(
    """
    import os, sys, json
    import torch
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain
    from safetensors.torch import save_file

    data, out = sys.argv[1], sys.argv[2]
    cfg = load_config("tiny", [
        f'data.path="{data}"', "train.steps=6", "train.log_every=1", "train.batch_size=8",
        "drop.method=cumulative", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
    ])
    res = pretrain(cfg, out, progress=False)
    rank = int(os.environ.get("RANK", "0"))
    name = f"importance-{os.path.basename(out)}-{rank}.safetensors"
    save_file({"m": res.importance}, os.path.join(os.path.dirname(out), name))
    """
)


def test_ddp_two_ranks_match_one(tiny_data, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one = subprocess.run(
        [sys.executable, str(script), str(tiny_data), str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(tiny_data),
            str(tmp_path / "two"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-5, (a, b)
    m0 = load_file(str(tmp_path / "importance-two-0.safetensors"))["m"]
    m1 = load_file(str(tmp_path / "importance-two-1.safetensors"))["m"]
    assert torch.equal(m0, m1)
    m_one = load_file(str(tmp_path / "importance-one-0.safetensors"))["m"]
    torch.testing.assert_close(m0, m_one, atol=1e-5, rtol=0)
    assert len(list((tmp_path / "two" / "checkpoints").iterdir())) >= 1  # rank 0 wrote; no clash


def test_pinned_tokens_from_config(tiny_data, tmp_path):
    from tokendrop.data import PreparedData, read_vocab

    res = pretrain(
        tiny(
            tiny_data, "train.steps=3", "drop.method=cumulative", "drop.pinned_tokens=['.', 'the']"
        ),
        tmp_path / "r",
        progress=False,
    )
    vocab = read_vocab(Path(PreparedData.open(tiny_data).tokenizer_path) / "vocab.txt")
    assert res.importance[vocab.index(".")] == 1e4 and res.importance[vocab.index("the")] == 1e4
    with pytest.raises(ConfigError, match="drop.pinned_tokens: 'zzzq' is not in the vocabulary"):
        pretrain(
            tiny(tiny_data, "drop.method=cumulative", "drop.pinned_tokens=['zzzq']"),
            tmp_path / "s",
            progress=False,
        )


def test_the_end_block_of_an_interrupted_run_names_the_command_that_continues_it(tmp_path):
    from tokendrop.train.console import pretrain_summary

    def block(interrupted: bool) -> list[str]:
        return pretrain_summary(
            run_dir=tmp_path / "my run",
            interrupted=interrupted,
            step=3,
            total=10,
            tokens=100,
            seconds=1.0,
            phases={},
            tokens_per_s=100.0,
            last=None,
            ev=None,
            entropy=None,
        )

    assert block(True)[-1] == f"  continue  tokendrop pretrain --resume '{tmp_path / 'my run'}'"
    assert not [line for line in block(False) if "--resume" in line]
