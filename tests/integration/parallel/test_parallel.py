"""FSDP2 vs DDP, sharded checkpoints (exact resume, another world size, export/verify), idempotent
launches, and torchrun as the engine: a simulated two-node launch and a killed-rank restart.

Every multi-process run is ``torchrun`` (``python -m torch.distributed.run``) with gloo on CPU.  The
FSDP and DDP runs of the default suite are made once per module and shared by the assertions."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from parallel_variants import COMBOS

from tokendrop.cli import main as cli_main
from tokendrop.config import load_config
from tokendrop.errors import ConfigError
from tokendrop.models.families import FAMILIES
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.trainer import pretrain

ENV = dict(os.environ, OMP_NUM_THREADS="1")
# dropout off: the world-size-1 resume compares with the 2-rank run (each rank has its own dropout
# stream)
COMMON = [
    "train.steps=10",
    "train.log_every=1",
    "train.batch_size=8",
    "train.micro_batch_size=2",
    "train.ckpt_every=5",
    "train.eval_every=5",
    "train.eval_batches=1",
    "drop.method=cumulative",
    "model.hidden_dropout=0.0",
    "model.attention_dropout=0.0",
    "train.deterministic=true",
    "train.threads=1",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(
    *args: str, nproc: int = 2, timeout: int = 300, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-port",
        str(free_port()),
        *extra,
        "-m",
        "tokendrop",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)


def sets(data, *overrides: str) -> list[str]:
    out = []
    for o in [f'data.path="{data}"', *COMMON, *overrides]:
        out += ["--set", o]
    return out


def losses(run) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if "loss" in r]


def assert_same_tensors(a: Path, b: Path) -> None:
    """Every tensor of every tensor file of checkpoints ``a`` and ``b`` equal, bit for bit (the
    files' bytes may differ: safetensors writes the header's metadata table in no fixed order)."""
    from safetensors import safe_open

    fa, fb = ckpt_mod.read_meta(a)["files"], ckpt_mod.read_meta(b)["files"]
    assert sorted(fa) == sorted(fb)
    for name in fa:
        with safe_open(str(a / name), "pt") as x, safe_open(str(b / name), "pt") as y:
            assert sorted(x.keys()) == sorted(y.keys()), name
            for k in x.keys():
                assert torch.equal(x.get_tensor(k), y.get_tensor(k)), (name, k)


@pytest.fixture(scope="module")
def runs(tiny_data, tmp_path_factory):
    """An FSDP and a DDP run (2 ranks each, 10 steps, dropping on, 4 micro-batches per rank)."""
    root = tmp_path_factory.mktemp("parallel")
    for kind in ("fsdp", "ddp"):
        p = torchrun(
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(root / kind),
            "--quiet",
            *sets(tiny_data, f'train.parallel="{kind}"'),
        )
        assert p.returncode == 0, p.stderr[-3000:]
    return root


def test_fsdp_matches_ddp_with_dropping(runs):
    a, b = losses(runs / "fsdp"), losses(runs / "ddp")
    assert len(a) == len(b) == 10
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)
    last = ckpt_mod.latest(runs / "fsdp")
    meta = ckpt_mod.read_meta(last)
    assert meta["sharded"] == {"format": "dcp-safetensors", "world_size": 2}
    assert sorted(meta["files"]) == [
        "shards/shard-00001-model-00001-of-00001.safetensors",
        "shards/shard-00002-model-00001-of-00001.safetensors",
        "state.safetensors",
    ]
    # no pickle, no full copy
    assert not list(last.rglob("*.metadata")) and not (last / "model.safetensors").exists()
    full = ckpt_mod.read_model(last)  # consolidated in this process, no process group
    ddp = ckpt_mod.read_model(ckpt_mod.latest(runs / "ddp"))
    assert full.keys() == ddp.keys()
    for k in ddp:
        torch.testing.assert_close(full[k], ddp[k], atol=1e-5, rtol=0)
    st_f = ckpt_mod.read_tensors(last, "state.safetensors")
    st_d = ckpt_mod.read_tensors(ckpt_mod.latest(runs / "ddp"), "state.safetensors")
    torch.testing.assert_close(st_f["importance"], st_d["importance"], atol=1e-5, rtol=0)


def test_every_method_and_variant_under_fsdp_matches_ddp(tmp_path):
    """Every family, every dropping method and variant, random-LTD and ScTD (its dense pass through
    the FSDP root's registered ``hidden`` method): 2 steps x 2 micro-batches per rank."""
    out = tmp_path / "variants.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            str(Path(__file__).resolve().parents[2] / "fixtures" / "parallel_variants.py"),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert len(res) == len(FAMILIES) * len(COMBOS)
    for key, r in res.items():
        for (loss_d, norm_d), (loss_f, norm_f) in zip(r["ddp"], r["fsdp"]):
            assert abs(loss_d - loss_f) <= 1e-5 and abs(norm_d - norm_f) <= 1e-5, (key, r)
        assert all(0 < x < 20 for step in r["fsdp"] for x in step), (key, r)  # finite, trained


def test_fsdp_resume_is_bit_identical(runs, tmp_path):
    run = tmp_path / "resumed"
    shutil.copytree(runs / "fsdp", run)
    # as if stopped after the checkpoint of step 5
    shutil.rmtree(run / "checkpoints" / "step-00000010")
    p = torchrun("pretrain", "--resume", str(run), "--quiet")
    assert p.returncode == 0, p.stderr[-3000:]
    assert losses(run) == losses(runs / "fsdp")
    # weights, AdamW moments (shards), importance and every rank's RNG (state): the same bytes
    assert_same_tensors(
        run / "checkpoints" / "step-00000010", runs / "fsdp" / "checkpoints" / "step-00000010"
    )


@pytest.mark.slow
def test_ddp_checkpoint_resumes_under_fsdp(runs, tmp_path):
    """An unsharded checkpoint (DDP) resumed with train.parallel = "fsdp": each rank keeps its rows
    of the AdamW state; the continuation equals DDP's own, and the new checkpoints are sharded."""
    run = tmp_path / "to-fsdp"
    shutil.copytree(runs / "ddp", run)
    shutil.rmtree(run / "checkpoints" / "step-00000010")
    p = torchrun("pretrain", "--resume", str(run), "--quiet", "--set", 'train.parallel="fsdp"')
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = losses(run), losses(runs / "ddp")
    assert a[:5] == b[:5] and max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)
    assert ckpt_mod.is_sharded(ckpt_mod.read_meta(run / "checkpoints" / "step-00000010"))


@pytest.mark.slow
@pytest.mark.parametrize("parallel,nproc", [("ddp", 2), ("fsdp", 4)])
def test_fsdp_checkpoint_resumes_under_ddp_and_at_four_ranks(runs, tmp_path, parallel, nproc):
    """A 2-rank sharded checkpoint resumed by 2 DDP ranks (consolidated on load), or resharded onto
    4 FSDP ranks: the same global batches, so the continuation equals the 2-rank FSDP run's to
    1e-5."""
    run = tmp_path / f"{parallel}-{nproc}"
    shutil.copytree(runs / "fsdp", run)
    shutil.rmtree(run / "checkpoints" / "step-00000010")
    p = torchrun(
        "pretrain",
        "--resume",
        str(run),
        "--quiet",
        "--set",
        f'train.parallel="{parallel}"',
        nproc=nproc,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = losses(run), losses(runs / "fsdp")
    assert len(a) == len(b) == 10 and a[:5] == b[:5]
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)
    meta = ckpt_mod.read_meta(run / "checkpoints" / "step-00000010")
    assert (meta.get("sharded") or {}).get("world_size") == (nproc if parallel == "fsdp" else None)


def test_fsdp_checkpoint_resumes_in_one_process(runs, tiny_data, tmp_path, capsys):
    run = tmp_path / "one"
    shutil.copytree(runs / "fsdp", run)
    shutil.rmtree(run / "checkpoints" / "step-00000010")
    cfg = load_config("tiny", [f'data.path="{tiny_data}"', *COMMON])
    with pytest.raises(ConfigError, match=r"train.parallel: 'fsdp' shards the model .* has none"):
        pretrain(
            load_config("tiny", [f'data.path="{tiny_data}"', *COMMON, 'train.parallel="fsdp"']),
            run,
            resume=True,
            progress=False,
        )
    # train.parallel = "ddp": one plain process, world size 1
    res = pretrain(cfg, run, resume=True, progress=False)
    assert res.steps == 10 and not res.already_finished
    a, b = losses(run), losses(runs / "fsdp")
    assert a[:5] == b[:5]
    assert abs(a[5] - b[5]) <= 2e-6, (a[5], b[5])  # the next step after the checkpoint
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5
    # written unsharded
    assert ckpt_mod.read_meta(run / "checkpoints" / "step-00000010").get("sharded") is None
    # resuming the finished run: nothing to do, exit 0
    assert cli_main(["pretrain", "--resume", str(run), "--quiet"]) == 0
    assert (
        "already finished (its last checkpoint is step 10, the end of train.steps=10)"
        in capsys.readouterr().err
    )


def test_sharded_checkpoint_exports_and_verifies(runs, tmp_path, capsys):
    import transformers

    from tokendrop.models.bert.model import BertForMaskedLM
    from tokendrop.models.source import load_pretrained

    run = runs / "fsdp"
    assert cli_main(["verify", str(run)]) == 0
    assert "sharded by 2 ranks" in capsys.readouterr().out
    assert cli_main(["export", str(run), str(tmp_path / "hf")]) == 0
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    ours = BertForMaskedLM(load_pretrained(run, BertForMaskedLM)[0].config)
    # the unsharded model of the same weights
    ours.load_state_dict(ckpt_mod.read_model(ckpt_mod.latest(run)))
    ids = torch.randint(5, 150, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, ours.eval()(ids), atol=1e-5, rtol=1e-5)
    # a corrupt shard: one line naming the file, from verify and from every loader
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    shard = (
        bad
        / "checkpoints"
        / "step-00000010"
        / "shards"
        / "shard-00002-model-00001-of-00001.safetensors"
    )
    raw = bytearray(shard.read_bytes())
    raw[-5] ^= 0xFF
    shard.write_bytes(bytes(raw))
    capsys.readouterr()
    assert cli_main(["verify", str(bad)]) != 0
    cap = capsys.readouterr()
    assert "shard-00002-model-00001-of-00001.safetensors: corrupt (sha256" in cap.out + cap.err, cap
    with pytest.raises(ckpt_mod.CheckpointError, match="shard-00002.*corrupt"):
        ckpt_mod.read_model(bad / "checkpoints" / "step-00000010")
    assert (
        cli_main(["export", str(bad / "checkpoints" / "step-00000010"), str(tmp_path / "hf2")]) == 2
    )
    assert not (tmp_path / "hf2").exists()


def test_sharded_checkpoint_step_counters_are_checked(runs, tiny_data, tmp_path, capsys):
    """The optimizer's step counters of a sharded checkpoint, read from its shard files without a
    process group, are checked against meta.json by verify and by --resume (one line naming the
    shards)."""
    from tokendrop.errors import TrainingError

    ck = runs / "fsdp" / "checkpoints" / "step-00000010"
    counters = ckpt_mod.step_counters(ck, ckpt_mod.read_meta(ck))
    assert counters and {float(t) for t in counters.values()} == {10.0}, counters
    assert all(k.startswith("optim.state.") for k in counters)
    run = tmp_path / "renamed"
    shutil.copytree(runs / "fsdp", run)
    old = run / "checkpoints" / "step-00000010"
    meta = json.loads((old / "meta.json").read_text())
    meta["step"] = 11
    (old / "meta.json").write_text(json.dumps(meta))
    old.rename(run / "checkpoints" / "step-00000011")
    says = "shards: the optimizer made 10 update(s) but meta.json records step 11"
    capsys.readouterr()
    assert cli_main(["verify", str(run)]) != 0
    cap = capsys.readouterr()
    assert says in cap.out + cap.err, cap
    cfg = load_config("tiny", [f'data.path="{tiny_data}"', *COMMON, "train.steps=12"])
    with pytest.raises(TrainingError) as e:
        pretrain(cfg, run, resume=True, progress=False)
    assert says in str(e.value) and "\n" not in str(e.value), e.value


def test_fsdp_without_process_group_is_one_line(tiny_data, tmp_path, capsys):
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "r"),
            "--quiet",
            *sets(tiny_data, 'train.parallel="fsdp"'),
        ]
    )
    err = capsys.readouterr().err
    assert (
        rc == 2 and err.count("\n") == 1 and "train.parallel: 'fsdp'" in err and "torchrun" in err
    ), err
    assert not (tmp_path / "r").exists()
    rc = cli_main(
        [
            "pretrain",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "r"),
            *sets(tiny_data, 'train.parallel="zero"'),
        ]
    )
    assert rc == 2 and "train.parallel: expected ddp or fsdp, got 'zero'" in capsys.readouterr().err


def test_resume_if_exists_starts_resumes_and_finishes(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    cmd = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--resume-if-exists",
        "--quiet",
        *sets(tiny_data, "train.steps=4", "train.ckpt_every=2"),
    ]
    # a run killed before its first checkpoint (config written, no checkpoint): started over
    assert cli_main([*cmd[:-2], "--set", "train.steps=1", "--set", "train.ckpt_every=1"]) == 0
    shutil.rmtree(run / "checkpoints")
    assert cli_main(cmd) == 0 and len(losses(run)) == 4
    shutil.copytree(run / "checkpoints" / "step-00000004", tmp_path / "first")
    # stopped after step 2: resumed, same result
    shutil.rmtree(run / "checkpoints" / "step-00000004")
    assert cli_main(cmd) == 0
    assert_same_tensors(run / "checkpoints" / "step-00000004", tmp_path / "first")
    capsys.readouterr()
    assert cli_main(cmd) == 0  # finished: exit 0, nothing written
    assert "already finished" in capsys.readouterr().err
    # a user error: one line, exit 2
    assert cli_main(["pretrain", "--resume", str(run), "--resume-if-exists"]) == 2
    assert "--resume-if-exists goes with --config and --out" in capsys.readouterr().err


TWO_NODE_ARGS = ("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-id", "tokendrop-test")


def two_nodes(port: int, *args: str) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents (one process each) meeting at a c10d rendezvous on localhost."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "1",
        *TWO_NODE_ARGS,
        "--rdzv-endpoint",
        f"localhost:{port}",
        "-m",
        "tokendrop",
        *args,
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for _ in range(2)
    ]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(cmd, p.returncode, o, e))
    return out


@pytest.mark.slow
def test_two_node_launch_trains_checkpoints_and_resumes(tiny_data, tmp_path):
    run = tmp_path / "run"
    base = ["pretrain", "--config", "tiny", "--out", str(run), "--resume-if-exists", "--quiet"]
    for steps in (4, 6):  # the second launch (same command, more steps) resumes from step 4
        for p in two_nodes(
            free_port(),
            *base,
            *sets(tiny_data, f"train.steps={steps}", "train.ckpt_every=2", 'train.parallel="fsdp"'),
        ):
            assert p.returncode == 0, p.stderr[-3000:]
        meta = ckpt_mod.read_meta(ckpt_mod.latest(run))
        assert meta["step"] == steps and meta["sharded"]["world_size"] == 2
    assert [r["step"] for r in read_metrics(run) if "loss" in r] == [1, 2, 3, 4, 5, 6]
    assert [r["world_size"] for r in read_metrics(run) if r.get("event") == "start"] == [2]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_killed_rank_restarts_bit_identical(tiny_data, tmp_path, parallel):
    """torchrun --max-restarts 1; rank 1 SIGKILLed after the checkpoint of step 10 and a later
    logged step; the restarted workers resume (--resume-if-exists) and end with the uninterrupted
    bytes."""
    args = [
        "--quiet",
        *sets(
            tiny_data,
            "train.steps=60",
            "train.ckpt_every=10",
            "train.eval_every=100",
            f'train.parallel="{parallel}"',
        ),
    ]
    ref = torchrun(
        "pretrain", "--config", "tiny", "--out", str(tmp_path / "ref"), "--resume-if-exists", *args
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"localhost:{free_port()}",
        "-m",
        "tokendrop",
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--resume-if-exists",
        *args,
    ]
    agent = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    killed = restarted = (
        None  # the killed rank-1 pid (and the step logged then); the new rank-1 pid
    )
    try:
        while agent.poll() is None and restarted is None:
            rank1 = [pid for pid in _children(agent.pid) if _env(pid).get("RANK") == "1"]
            if killed is None:
                logged = (
                    [r["step"] for r in read_metrics(run) if "loss" in r]
                    if (run / "metrics.jsonl").is_file()
                    else []
                )
                if (
                    rank1
                    and (run / "checkpoints" / "step-00000010").is_dir()
                    and logged
                    and max(logged) > 10
                ):
                    os.kill(rank1[0], signal.SIGKILL)
                    killed = (rank1[0], max(logged))
            elif any(pid != killed[0] for pid in rank1):
                restarted = rank1
            time.sleep(0.02)
        out, err = agent.communicate(timeout=300)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert killed is not None and killed[1] < 60, "rank 1 was not killed mid-run"
    assert restarted, "torchrun did not start a new rank 1"
    assert agent.returncode == 0, err[-3000:]
    last = run / "checkpoints" / "step-00000060"
    assert_same_tensors(last, tmp_path / "ref" / "checkpoints" / "step-00000060")
    assert losses(run) == losses(tmp_path / "ref")


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(tiny_data, tmp_path):
    """SIGTERM reaches rank 1 only, between the steps where the ranks agree (every 5th): both stop
    after the same step with one checkpoint (collective), instead of rank 1 checkpointing while rank
    0 trains on."""
    run = tmp_path / "run"
    args = [
        "--quiet",
        *sets(
            tiny_data,
            "train.steps=100000",
            "train.log_every=5",
            "train.ckpt_every=100000",
            "train.eval_every=100000",
        ),
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"localhost:{free_port()}",
        "-m",
        "tokendrop",
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        *args,
    ]
    # on failure its workers go with it (killpg below)
    agent = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while agent.poll() is None and time.monotonic() < deadline:
            rank1 = [pid for pid in _children(agent.pid) if _env(pid).get("RANK") == "1"]
            if (
                rank1
                and (run / "metrics.jsonl").is_file()
                and b'"loss"' in (run / "metrics.jsonl").read_bytes()
            ):
                os.kill(rank1[0], signal.SIGTERM)  # its handler is installed: a step was logged
                break
            time.sleep(0.01)
        # a rank left waiting in a collective would hang here
        out, err = agent.communicate(timeout=240)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    last = ckpt_mod.latest(run)
    assert last is not None, err[-3000:]
    step = ckpt_mod.verify(last)["step"]
    assert step % 5 == 0 and step < 100000  # a step where the ranks agreed
    recs = read_metrics(run)
    assert recs[-1]["event"] == "interrupted" and recs[-1]["step"] == step
    assert "interrupted (checkpoint saved)" in out


def test_finetune_reads_a_sharded_checkpoint(runs, tmp_path, capsys):
    """finetune --model RUN of the FSDP run (shards consolidated in one process) fine-tunes what the
    DDP run's (unsharded) checkpoint fine-tunes: their weights agree to 1e-5, so do the results."""
    from tokendrop.finetuning.tasks import TASKS

    task = TASKS["sst2"].write_examples(tmp_path / "sst", n_train=32, n_dev=16)
    got = {}
    for kind in ("fsdp", "ddp"):
        rc = cli_main(
            [
                "finetune",
                "--model",
                str(runs / kind),
                "--task",
                "sst2",
                "--data",
                str(task),
                "--out",
                str(tmp_path / f"ft-{kind}"),
                "--set",
                "epochs=2",
                "--set",
                "batch_size=8",
                "--set",
                "lr=1e-3",
                "--set",
                "threads=1",
                "--set",
                "log_every=0",
                "--set",
                'device="cpu"',
            ]
        )
        assert rc == 0, capsys.readouterr().err
        got[kind] = json.loads((tmp_path / f"ft-{kind}" / "metrics.json").read_text())
    capsys.readouterr()
    a, b = got["fsdp"]["train"], got["ddp"]["train"]
    assert a["steps"] == b["steps"] == 8
    # 8 steps from the same encoder
    assert a["final_loss"] == pytest.approx(b["final_loss"], abs=1e-4)
    assert a["mean_loss_last_epoch"] == pytest.approx(b["mean_loss_last_epoch"], abs=1e-4)
    print(a["final_loss"], b["final_loss"])
