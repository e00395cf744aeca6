"""What a run says: the start-up banner (checked against the run's resolved config), one plain line
per log interval off a terminal (no progress-bar frames), the end summary with each phase's time,
RUN/log.txt; the MLM-head warm-up scaled to the run; the unigram entropy beside the MLM loss; the
trackers of train.report_to (TensorBoard tags namespaced, W&B and MLflow offline); the export's
model card and config.json."""

from __future__ import annotations

import io
import json
import math
import os
import re
import sys

import numpy as np
import pytest

from tokendrop.cli import main as cli_main
from tokendrop.config import TrainConfig, load_config
from tokendrop.data.masking import unigram_entropy
from tokendrop.errors import ConfigError
from tokendrop.runs.metrics import read_metrics
from tokendrop.runs.trackers import scalars, tag_of
from tokendrop.train.console import LOG_FILE, eta, interval_line, is_terminal
from tokendrop.train.continued import head_warmup_plan
from tokendrop.train.resume import load_run_config
from tokendrop.train.trainer import pretrain

SMALL = [
    "train.steps=4",
    "train.batch_size=8",
    "train.log_every=2",
    "train.eval_every=4",
    "train.eval_batches=1",
    "train.ckpt_every=4",
    "train.threads=1",
    "data.num_workers=0",
]


def run_cli(tmp_path, tiny_data, *extra, name="run"):
    argv = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(tmp_path / name),
        "--set",
        f'data.path="{tiny_data}"',
        *[x for o in SMALL for x in ("--set", o)],
        *extra,
    ]
    return cli_main(argv)


def test_head_warmup_is_a_share_of_the_run_capped():
    assert head_warmup_plan(TrainConfig(steps=40))[0] == 20  # 0.5 of 40, under the cap of 100
    assert head_warmup_plan(TrainConfig(steps=1000))[0] == 100  # the cap
    assert head_warmup_plan(TrainConfig(steps=40, head_warmup_share=0.1))[0] == 4
    # at least one step
    assert head_warmup_plan(TrainConfig(steps=3, head_warmup_share=0.1))[0] == 1
    assert head_warmup_plan(TrainConfig(steps=40, head_warmup_share="off"))[0] == 100  # unscaled
    # a budget: not scaled
    assert head_warmup_plan(TrainConfig(steps="unset", time_budget="20s"))[0] == 100
    n, why = head_warmup_plan(TrainConfig(steps=40, head_warmup_steps=0))
    assert n == 0 and "none" in why
    assert "0.5 of the run's 40 steps" in head_warmup_plan(TrainConfig(steps=40))[1]
    with pytest.raises(ConfigError, match="train.head_warmup_share"):
        load_config("tiny", ["train.head_warmup_share=1.5"])


def test_unigram_entropy_leaves_out_the_special_ids():
    # id 0: a special (e.g. [CLS] counted), ids 2-5 equally frequent
    counts = np.array([1000, 0, 5, 5, 5, 5])
    assert unigram_entropy(counts, {"cls": 0}) == pytest.approx(math.log(4))
    assert unigram_entropy(np.zeros(3), []) is None


def test_interval_line_and_eta():
    rec = {"loss": 4.25, "lr": 1e-4, "tokens_per_s": 12345.6}
    line = interval_line(20, 40, rec, {"eval_loss": 4.5}, 65.0, 30.0)
    assert (
        line == "step 20/40 | loss 4.2500 | eval loss 4.5000 | lr 1.00e-04 | 12,346 tok/s | 1:05 "
        "elapsed, ETA 0:30"
    )
    assert (
        interval_line(7, None, None, {"eval_loss": 3.0}, 5, None)
        == "step 7 | eval loss 3.0000 | 0:05 elapsed"
    )
    assert (
        eta(10.0, 0.0, 0.25) == pytest.approx(30.0)
        and eta(10.0, 0.5, 0.5) is None
        and eta(1.0, 0.0, 1.0) == 0.0
    )


def _banner(text: str) -> dict[str, str]:
    start = text.index("tokendrop pretrain: new run")
    lines = text[start:].splitlines()
    out = {"head": lines[0]}
    for line in lines[1:]:
        m = re.match(r"  (\w[\w-]*)\s+(.*)", line)
        if not m:
            break
        out[m[1]] = m[2]
    return out


def test_banner_lines_and_summary_of_a_dropping_run(tiny_data, tmp_path, capsys):
    assert run_cli(tmp_path, tiny_data, "--set", "drop.method=cumulative") == 0
    err = capsys.readouterr().err
    cfg = load_run_config(tmp_path / "run")
    b = _banner(err)
    m, tc = cfg.model, cfg.train
    start, end = cfg.drop.span(m.num_layers)
    assert b["model"].startswith(
        f"bert, {m.num_layers} layers x {m.hidden_size} ({m.num_heads} heads, "
        f"FFN {m.intermediate_size}), vocab {m.vocab_size}, T=64"
    )
    assert b["source"].startswith("random initialisation")
    assert b["dropping"].startswith(f"ON: cumulative/drop, rate {cfg.drop.rate:g} ")
    assert (
        f"in layers [{start}, {end}) of {m.num_layers}" in b["dropping"]
        and "FLOP bound" in b["dropping"]
    )
    assert b["length"].startswith(f"{tc.steps} steps (train.steps) = ")
    assert b["batch"].startswith(f"{tc.batch_size} sequences per step")
    assert b["lr"].startswith(f"peak {tc.lr:g}, linear: warm-up {tc.warmup_steps} steps")
    assert b["device"].startswith("cpu, fp32, 1 process, 1 CPU thread")
    assert "unigram entropy" in b["data"] and "MLM-head: none (no model.init)" in b["warm-ups"]
    assert b["logging"].startswith(f"every {tc.log_every} steps; eval every {tc.eval_every}")
    # off a terminal: one line per log interval, never a bar's frames
    steps = [line for line in err.splitlines() if line.startswith("step ") and " | " in line]
    assert [s.split(" |")[0] for s in steps] == ["step 2/4", "step 4/4"], steps
    assert "eval loss" in steps[-1] and "ETA" in steps[-1] and "\r" not in err and "it/s" not in err
    assert "step 0 (before training): eval loss" in err
    summary = err[err.index("tokendrop pretrain: finished") :]
    assert "at step 4 of 4" in summary
    assert (
        summary.split("\n")[1].startswith("  phases    ") and "training " in summary.split("\n")[1]
    ), summary
    log = (tmp_path / "run" / LOG_FILE).read_text()
    assert _banner(log) == b and "step 4/4 | loss" in log and "tokendrop pretrain: finished" in log
    rec = read_metrics(tmp_path / "run")
    end_rec = next(r for r in rec if r.get("event") == "end")
    # the report is written after this record
    assert set(end_rec["phases_s"]) == {
        "set-up",
        "MLM-head warm-up",
        "importance pass",
        "training",
        "evaluation",
        "checkpoints",
    }
    assert end_rec["phases_s"]["training"] > 0 and end_rec["cpu_time"] > 0
    assert next(r for r in rec if r.get("event") == "start")["command"].startswith(
        "tokendrop pretrain --config tiny"
    )
    entropy = next(r for r in rec if r.get("event") == "start")["unigram_entropy"]
    assert all(r["unigram_entropy"] == entropy for r in rec if "eval_loss" in r)


def test_dense_run_says_so_and_quiet_writes_only_the_log_file(tiny_data, tmp_path, capsys):
    assert run_cli(tmp_path, tiny_data, "--quiet") == 0
    io = capsys.readouterr()
    # --quiet: the result line only (scripts)
    assert io.err == "" and io.out.startswith("finished: 4 steps")
    log = (tmp_path / "run" / LOG_FILE).read_text()  # ... and the log file has everything
    assert _banner(log)["dropping"].startswith("OFF: a dense run (drop.method = none")
    assert "step 2/4 | loss" in log and "tokendrop pretrain: finished" in log


def test_a_runs_throughput_is_its_tokens_over_its_wall_time(tmp_path):
    """Not the median of the logged intervals' rates, which a slow start or a loaded machine
    skews: 4 intervals of 100 tokens at rates 50, 400, 400, 400 are 400 tokens in 2.75 s."""
    from tokendrop.train.report import summarize

    recs, wall = [], 0.0
    for step, rate in enumerate((50.0, 400.0, 400.0, 400.0), start=1):
        wall += 100 / rate
        recs.append(
            {
                "step": step,
                "loss": 5.0,
                "tokens_per_s": rate,
                "step_time": 100 / rate,
                "wall_time": wall,
                "tokens": 100 * step,
            }
        )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert summarize(tmp_path)["tokens_per_s"] == pytest.approx(400 / 2.75)
    # records written before the tokens were logged: the median interval rate, as documented
    for r in recs:
        del r["tokens"]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert summarize(tmp_path)["tokens_per_s"] == 400.0


def test_tensorboard_tags_are_namespaced():
    assert [
        tag_of(k)
        for k in ("loss", "lr", "eval_loss", "eval_acc", "tokens_per_s", "unigram_entropy")
    ] == [
        "train/loss",
        "train/lr",
        "eval/loss",
        "eval/acc",
        "perf/tokens_per_s",
        "eval/unigram_entropy",
    ]
    assert scalars({"step": 3, "loss": 2.0, "dropping": True, "mix": "x"}) == {"train/loss": 2.0}


def _tb_tags(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return set(acc.Tags()["scalars"]), set(acc.Tags()["tensors"])


def test_trackers_offline(tiny_data, tmp_path, monkeypatch):
    """TensorBoard, W&B (offline) and MLflow (a local file store) get the same namespaced metrics
    and the config; a resumed run continues the same MLflow run."""
    pytest.importorskip("tensorboard")
    wandb = pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri = (tmp_path / "mlruns").as_uri()  # a local MLflow file store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    cfg = load_config(
        "tiny",
        [f'data.path="{tiny_data}"', *SMALL, 'train.report_to=["tensorboard","wandb","mlflow"]'],
    )
    run = tmp_path / "run"
    pretrain(cfg, run, progress=False, stop_at=2)
    pretrain(load_run_config(run), run, resume=True, progress=False)
    scalars_, texts = _tb_tags(run)
    assert {"train/loss", "train/lr", "eval/loss", "eval/acc", "perf/tokens_per_s"} <= scalars_
    # nothing flat, no config as scalars
    assert not {"loss", "params", "first_loss", "seq_len"} & scalars_
    assert any(t.startswith("config") for t in texts)
    start = next(r for r in read_metrics(run) if r.get("event") == "start")
    ids = start["tracker_ids"]
    assert set(ids) == {"wandb", "mlflow"}
    assert list((run / "wandb").glob(f"offline-run-*-{ids['wandb']}"))
    client = MlflowClient(tracking_uri=uri)
    r = client.get_run(ids["mlflow"])
    assert r.info.status == "FINISHED" and r.data.params["train.batch_size"] == "8"
    hist = client.get_metric_history(ids["mlflow"], "train/loss")
    assert sorted(m.step for m in hist) == [2, 4]  # the resumed run logged into the same MLflow run
    assert [m.step for m in client.get_metric_history(ids["mlflow"], "eval/loss")][-1] == 4
    assert wandb.run is None  # finished


def test_a_tracker_not_installed_is_a_one_line_error_before_anything_is_written(
    tiny_data, tmp_path, monkeypatch, capsys
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    assert run_cli(tmp_path, tiny_data, "--set", 'train.report_to=["wandb"]') == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "train.report_to: 'wandb' is asked for but the wandb package is not installed" in err[0]
    )
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="train.report_to"):
        load_config("tiny", ['train.report_to=["comet"]'])


def test_export_model_card_and_config(tiny_data, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    assert run_cli(tmp_path, tiny_data, "--set", "drop.method=cumulative", "--quiet") == 0
    capsys.readouterr()
    assert cli_main(["export", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    out = capsys.readouterr()
    assert "BertForMaskedLM" in out.out and "AutoModelForMaskedLM.from_pretrained" in out.out
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert conf["transformers_version"] == transformers.__version__ and "_name_or_path" not in conf
    card = (tmp_path / "hf" / "README.md").read_text()
    ev = [r for r in read_metrics(tmp_path / "run") if "eval_loss" in r][-1]
    for field in (
        "| architecture | BertForMaskedLM (bert: 4 layers x 64",
        "| source | random initialisation",
        f"| data | `{tiny_data.name}` (train split sha256 ",
        "| length | step 4 of 4, 8 sequences per step of 64 tokens",
        "| method | token dropping: cumulative/drop, rate 0.5",
        f"| final eval MLM loss | {ev['eval_loss']:.4f}",
        f"unigram entropy {ev['unigram_entropy']:.3f} nats",
        "| trained with | `tokendrop pretrain --config tiny",
        "| exported with | `tokendrop export .../run .../hf`",
        "pipeline_tag: fill-mask",
    ):
        assert field in card, field
    # a card goes to the Hub: no directory of its author's machine in it
    assert str(tmp_path) not in card and str(tiny_data.parent) not in card
    if ev["eval_loss"] >= ev["unigram_entropy"]:  # 4 steps: a head this young says so on export
        assert "is not below the unigram entropy" in out.err
    assert (
        transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").__class__.__name__
        == "BertForMaskedLM"
    )


def test_the_model_card_of_a_resumed_run_names_every_command(tiny_data, tmp_path, capsys):
    pytest.importorskip("transformers")
    from tokendrop.config import load_config
    from tokendrop.train.trainer import pretrain

    run = tmp_path / "run"
    cfg = load_config("tiny", [f'data.path="{tiny_data}"', *SMALL])
    assert pretrain(cfg, run, progress=False, stop_at=2, command="tokendrop pretrain A").interrupted
    pretrain(cfg, run, resume=True, progress=False, command="tokendrop pretrain --resume B")
    assert cli_main(["export", str(run), str(tmp_path / "hf")]) == 0
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "| trained with | `tokendrop pretrain A`; then `tokendrop pretrain --resume B` |" in card


def _pty_stream(columns: int):
    """The far end of a pseudo-terminal of ``columns`` columns, as a text stream (closing it closes
    both ends)."""
    import contextlib
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))

    @contextlib.contextmanager
    def stream():
        with os.fdopen(follower, "w") as f:
            try:
                yield f
            finally:
                os.close(leader)

    return stream()


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_a_terminal_of_zero_columns_gets_the_plain_progress_lines():
    with _pty_stream(80) as wide, _pty_stream(0) as no_width:
        assert is_terminal(wide)
        assert not is_terminal(no_width)  # a bar needs a width; the plain lines need none
    assert not is_terminal(io.StringIO())


def test_on_a_terminal_a_bar_and_the_log_file_keeps_the_lines(
    tiny_data, tmp_path, capsys, monkeypatch
):
    import tokendrop.train.trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "is_terminal", lambda stream=None: True)
    assert run_cli(tmp_path, tiny_data) == 0
    err = capsys.readouterr().err
    assert "pretrain: 100%" in err and "eval=" in err  # tqdm's bar, the eval loss in its figures
    assert not [line for line in err.splitlines() if line.startswith("step 2/4 |")]
    assert "step 2/4 | loss" in (tmp_path / "run" / LOG_FILE).read_text()
