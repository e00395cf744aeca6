"""The GPU campaign's CPU dry run: ``benchmarks/gpu_campaign.sh`` with tiny sizes, so the script and
every part's code path cannot rot between GPU runs.  The whole campaign (every part) takes a few
minutes on 2 cores and is ``slow``, as is part scratch alone (~1 min); the default run checks the
script's plumbing, the config, the largest-batch search and the time-to-loss and gap arithmetic."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tokendrop.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "gpu_campaign.sh"


def _run_script(
    out: Path, parts: list[str], extra: list[str] = (), **env
) -> subprocess.CompletedProcess:
    e = {
        **os.environ,
        "PY": sys.executable,
        "OUT": str(out),
        "DRY_RUN": "1",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *parts, "--", "--quiet", *extra],
        capture_output=True,
        text=True,
        env=e,
        timeout=900,
    )


@pytest.fixture(scope="module")
def toy_glue(tmp_path_factory):
    from tokendrop.lab.toydata import write_toy_glue

    return write_toy_glue(tmp_path_factory.mktemp("glue"), n_train=32, n_dev=16)


def _part(out: Path, name: str) -> dict:
    d = json.loads((out / f"{name}.json").read_text())
    assert (out / f"{name}.md").read_text().startswith(f"# GPU campaign, part `{name}`")
    return d


@pytest.mark.slow
def test_dry_run_of_every_part(tmp_path, tiny_data, toy_glue):
    out = tmp_path / "out"
    p = _run_script(out, ["all"], DATA=str(tiny_data), GLUE=str(toy_glue))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for name in (
        "env",
        "bench",
        "bench-compile",
        "pretrain",
        "quality",
        "bench-modern",
        "strong",
        "scratch",
        "bench-longctx",
    ):
        d = _part(out, name)
        assert d["ok"] and not d["error"] and not d["skipped"], (
            name,
            d["error"],
            d["skipped"],
            d["checks"],
        )
        assert d["dry_run"] and d["wall_s"] < d["budget_s"]
        assert f"[{name}] ok" in p.stdout
    env = _part(out, "env")
    assert any(x["backend"] == "math" and x["usable"] for x in env["data"]["sdpa_probes"])
    # no CUDA: they skip
    assert env["data"]["pytest"]["ran"] and env["data"]["pytest"]["counts"]["skipped"] >= 4
    bench = _part(out, "bench")
    res = json.loads((out / "bench-T32.json").read_text())
    assert [s["name"] for s in res["settings"]] == ["T32/dense", "T32/drop-0.5", "T32/hf"]
    tries = [t for m in bench["data"]["max_batch"] for t in m["tries"]]
    # the memory limit stopped the search somewhere
    assert {t["fits"] for t in tries} == {
        True,
        False,
    }
    assert all(m["largest_fit"] >= 4 for m in bench["data"]["max_batch"])
    modern = json.loads((out / "bench-modern-T128.json").read_text())
    assert [s["name"] for s in modern["settings"]] == ["T128/dense", "T128/drop-0.5", "T128/hf"]
    assert modern["info"]["hf_model"] == "transformers.ModernBertForMaskedLM"
    assert modern["info"]["model"]["family"] == "modernbert"
    assert "T128/drop-0.5" in (out / "bench-modern.md").read_text()
    comp = json.loads((out / "bench-compile-T32.json").read_text())
    assert comp["config"]["compile"] is True and comp["config"]["compile_backend"] == "eager"
    pre = _part(out, "pretrain")
    names = {c["name"]: c["ok"] for c in pre["checks"]}
    assert names["torchrun --nproc-per-node 1 runs pretraining with gloo"] is True
    assert (
        names[
            "torchrun --nproc-per-node 1 runs pretraining with gloo, train.parallel=fsdp "
            "(sharded checkpoint)"
        ]
        is True
    )
    assert names["the FSDP run wrote a sharded checkpoint"] is True
    # fp32 on CPU: FSDP equals DDP
    assert pre["data"]["torchrun_fsdp"]["max_abs_loss_diff_vs_ddp"] <= 1e-5
    assert any(k.startswith("resumed losses equal") and v is True for k, v in names.items())
    assert pre["data"]["resume"]["max_abs_loss_diff"] == 0.0  # CPU: the resume is exact
    assert (out / "pretrain-dense-metrics.jsonl").is_file() and (
        out / "pretrain-compare" / "report.md"
    ).is_file()
    q = _part(out, "quality")
    assert set(q["data"]["finetune"]) == {"dense", "token-drop"}
    assert all(set(v) == {"sst2", "qnli"} for v in q["data"]["finetune"].values())
    assert q["data"]["unigram_plateau"] > 0 and (out / "quality.png").is_file()
    curves = q["data"]["runs"]
    assert all(len(r["eval_curve"]) >= 2 for r in curves.values())
    _check_strong(out)
    _check_scratch(out)
    _check_longctx(out)
    assert not [f for f in out.rglob("*") if f.name.endswith(".tmp")]
    assert not [f for f in out.rglob("*.safetensors")]  # checkpoints stay out of OUT


def _check_strong(out: Path) -> None:
    s = _part(out, "strong")
    runs = [f"{a}-seed{k}" for k in (0, 1) for a in ("dense", "token-drop-rate0", "token-drop")]
    assert list(s["data"]["runs"]) == runs and "finetune" not in s["data"]  # seed by seed
    assert (
        "train.lr_schedule='wsd'" in s["data"]["recipe"]
        and "data.mask_prob=[0.3, 0.15]" in s["data"]["recipe"]
    )
    assert "train.batch_warmup_start=4" in s["data"]["recipe"]  # half of the dry run's batch of 8
    ttl = s["data"]["time_to_dense_final_loss"]
    assert set(ttl["seconds"]) == set(runs) and len(ttl["dense_final_eval_losses"]) == 2
    assert (out / "strong.png").is_file()
    for name in runs:  # every run trained with the recipe: masking decay and batch warm-up logged
        recs = [
            json.loads(x) for x in (out / f"strong-{name}-metrics.jsonl").read_text().splitlines()
        ]
        steps = [x for x in recs if "loss" in x and "lr" in x]
        assert steps[0]["mask_prob"] > steps[-1]["mask_prob"] and steps[0]["batch_size"] == 4
        assert any(x["dropping"] for x in steps) == name.startswith("token-drop")
        full = all(x["kept_fraction"] == 1.0 for x in steps)
        assert full == (not name.startswith("token-drop-seed"))
    assert any(
        c["name"].startswith("dense-seed0: final eval loss at least") and c["ok"] is None
        for c in s["checks"]
    )
    checks = {c["name"].split(" (")[0]: c["ok"] for c in s["checks"]}
    assert checks["token drop at rate 0 tracks dense step for step"] is True  # fp32 CPU: to 1e-4
    assert s["data"]["rate0"]["max_diff"] <= 1e-4 and len(s["data"]["rate0"]["steps"]) == 6
    assert checks["token drop: CPU fp32 and cpu bf16 agree over the first 3 steps"] is True
    # the selector's diagnostics at the dropping runs' kept checkpoints, none for rate 0
    sel = s["data"]["selection"]
    assert set(sel) == {"token-drop-seed0", "token-drop-seed1"}
    for trace in sel.values():
        assert len(trace) >= 2 and [d["step"] for d in trace] == sorted(d["step"] for d in trace)
        for d in trace:  # [MASK] is pinned: its share of the kept rows ~ 0.8 x masking rate / 0.5
            assert 0 < d["kept_mask_share"] <= d["kept_target_share"] <= 1
            assert -1 <= d["spearman_score_vs_rarity"] <= 1
            assert abs(d["kept_mask_share"] - 0.8 * d["mask_prob"] / 0.5) < 0.15
    assert "what the selector keeps" in (out / "strong.md").read_text()


def _check_scratch(out: Path) -> None:
    s = _part(out, "scratch")
    d = s["data"]
    # the paper's layout at 12 layers: full layers 0-4 and 11, the drop span 5-10
    lay = d["layout"]
    assert (lay["family"], lay["num_layers"]) == ("modernbert", 12)
    assert lay["drop_span"] == [5, 10] and lay["full_layers"] == [0, 1, 2, 3, 4, 11]
    lrs = d["lrs"]
    runs = [f"{a}-lr{lr:g}" for lr in lrs for a in ("dense", "token-drop", "dense-75")]
    assert list(d["runs"]) == runs and [x["run"] for x in d["results"]] == runs  # rate by rate
    by = {x["run"]: x for x in d["results"]}
    for x in d["results"]:  # every run's lr, arm, steps, final held-out loss, FLOPs and time
        assert x["lr"] in lrs and x["final_eval_loss"] > 0 and x["flops"] > 0
        assert 0 < x["train_s"] <= x["wall_s"]
        recs = [json.loads(r) for r in (out / f"scratch-{x['run']}-metrics.jsonl").open()]
        steps = [r for r in recs if "loss" in r and "lr" in r]
        assert steps[-1]["step"] == x["steps"]
        assert max(r["lr"] for r in steps) == pytest.approx(x["lr"], rel=0.3)  # its own peak
        assert steps[-1]["lr"] < 0.3 * x["lr"]  # linear decay to zero over its own steps
        assert any(r["dropping"] for r in steps) == (x["arm"] == "token-drop")
    for lr in lrs:  # equal steps; dense-75 a quarter fewer, with about token drop's FLOPs
        dense, drop, d75 = (by[f"{a}-lr{lr:g}"] for a in ("dense", "token-drop", "dense-75"))
        assert drop["steps"] == dense["steps"] == 12 and d75["steps"] == 9
        assert 0.6 < drop["flops"] / dense["flops"] < 0.9 and d75["flops"] / dense["flops"] == 0.75
    cmp = d["comparison"]
    assert [x["lr"] for x in cmp] == lrs
    for x in cmp:
        assert x["gap_equal_steps"] == x["token_drop"] - x["dense"]
        assert x["gap_equal_flops"] == x["token_drop"] - x["dense_75"]
    assert set(d["best_lr"]) == {"dense", "token-drop", "dense-75"}
    assert d["at_best_lr"]["gap_equal_steps"] is not None
    assert d["time_to_dense_final_loss"]["dense_lr"] == d["best_lr"]["dense"]
    checks = {c["name"].split(" (")[0]: c["ok"] for c in s["checks"]}
    assert checks["equal steps: every arm ran its planned step count"] is True
    assert "at equal steps and at equal FLOPs" in (out / "scratch.md").read_text()
    assert (out / "scratch.png").is_file()


def _check_longctx(out: Path, ts: tuple[int, ...] = (32, 64, 128)) -> None:
    d = _part(out, "bench-longctx")
    res = json.loads((out / "bench-longctx-rows.json").read_text())
    assert res["kind"] == "longctx" and res["config"]["device"] == "cpu"
    rows = [(r["family"], r["seq_len"], r["status"]) for r in res["rows"]]
    assert rows == [(f, t, "measured") for f in ("bert", "modernbert") for t in ts]
    assert all(0 < r["attention_share_dense"] < 1 and r["flop_bound"] > 1 for r in res["rows"])
    for r in res["rows"]:  # a median and a range at every T, over min_rounds rounds at least
        assert r["rounds_done"] >= 2 and r["speedup_min"] <= r["speedup"] <= r["speedup_max"]
        assert r["dense_ms_min"] <= r["dense_ms"] <= r["dense_ms_max"]
        assert r["drop_ms_min"] <= r["drop_ms"] <= r["drop_ms_max"]
    assert any(
        c["name"] == "every measured row timed over at least 2 rounds (a median and a range)"
        and c["ok"] is True
        for c in d["checks"]
    )
    (table,) = d["tables"]
    assert "speed-up min-max" in table["header"] and "rounds" in table["header"]
    assert {(f["family"], f["setting"]) for f in d["data"]["fits"]} == {
        (f, s) for f in ("bert", "modernbert") for s in ("dense", "drop")
    }
    assert (out / "bench-longctx-rows.md").read_text().startswith("# Long context")
    assert any(
        c["name"] == f"bert T={ts[-1]}: 50% drop faster than dense" and c["ok"] is None
        for c in d["checks"]
    )


def test_script_plumbing_env_part(tmp_path):
    out = tmp_path / "out"
    p = _run_script(out, ["env"], ["--set", "pytest=false"])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    d = _part(out, "env")
    assert d["ok"] and d["data"]["versions"]["torch"] == torch.__version__
    assert "[env] ok" in p.stdout and "(dry run)" in p.stdout
    # a part that cannot find its data records a one-line error and the script exits non-zero
    p = _run_script(out, ["pretrain"], DATA=str(tmp_path / "nowhere"))
    assert p.returncode == 1
    d = _part(out, "pretrain")
    assert not d["ok"] and "campaign.data: no prepared data at" in d["error"]
    p = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr


def test_campaign_config_and_errors():
    from tokendrop.lab.bench.campaign import PARTS, RUNNERS, TITLES, campaign_config, run_parts
    from tokendrop.lab.bench.campaign.config import PRIORITY

    gpu = campaign_config("gpu")
    assert gpu.device == "cuda" and not gpu.dry_run and gpu.bench.model == "bert-base"
    assert (
        gpu.bench.seq_lens == [128, 512]
        and gpu.pretrain.config == "bert-base-128"
        and gpu.budget_s <= 540
    )
    dry = campaign_config("gpu", ["budget_s=100", "bench.rate=0.25"], dry_run=True)
    assert dry.device == "cpu" and dry.dry_run and dry.budget_s == 100 and dry.bench.rate == 0.25
    with pytest.raises(ConfigError, match="did you mean 'bench.rounds'"):
        campaign_config("dry", ["bench.round=3"])
    with pytest.raises(ConfigError, match="no campaign preset 'nope'"):
        campaign_config("nope")
    with pytest.raises(ConfigError, match="one per bench.seq_lens"):
        campaign_config("dry", ["bench.seq_lens=[32, 64]"])
    with pytest.raises(ConfigError, match="unknown part 'benchmark'"):
        run_parts(campaign_config("dry"), ["benchmark"], "/nonexistent")
    assert PARTS == (
        "step",
        "env",
        "bench",
        "bench-compile",
        "pretrain",
        "quality",
        "bench-modern",
        "strong",
        "scratch",
        "bench-longctx",
    )
    # the step's measurements first, then the paper's setting from scratch
    assert set(PRIORITY) == set(PARTS) and PRIORITY[:3] == ("step", "scratch", "strong")
    assert gpu.step.rows()[0] == ("bert", 128, 16384) and gpu.step.modes == [
        "off",
        "step",
        "graphs",
    ]
    with pytest.raises(ConfigError, match="step.settings: 'bert:128' is not"):
        campaign_config("dry", ["step.settings=['bert:128']"])
    assert set(RUNNERS) == set(TITLES) == set(PARTS)  # every part has its runner and its title
    st = gpu.strong
    assert (
        st.strong_recipe
        and not st.tasks
        and st.batch_size == 256
        and "train.batch_warmup_start=128" in st.recipe()
    )
    assert "model.hidden_size=384" in st.overrides
    assert st.arms == ["dense", "token-drop-rate0", "token-drop"] and st.seeds == [0, 1]
    assert st.rate0_steps > 0 and st.agreement_steps > 0 and st.diagnostics > 0
    assert gpu.quality.arms == ["dense", "token-drop"] and gpu.quality.seeds == [0]  # one pair
    with pytest.raises(ConfigError, match="strong.arms: expected distinct names of dense, token"):
        campaign_config("dry", ["strong.arms=['token-drop']"])
    with pytest.raises(ConfigError, match="strong.seeds: expected a non-empty list"):
        campaign_config("dry", ["strong.seeds=[0, 0]"])
    # equal wall-clock per run on the GPU
    assert gpu.strong.run_length == gpu.quality.run_length == "time"
    with pytest.raises(
        ConfigError, match='strong.run_length: expected "time", "steps" or "equal-steps"'
    ):
        campaign_config("dry", ["strong.run_length='tokens'"])
    sc = gpu.scratch  # the paper's setting at BERT-base width, from scratch
    assert "model.preset='modern-base'" in sc.overrides and "model.num_layers=12" in sc.overrides
    assert "model.global_attn_every_n_layers=1" in sc.overrides and not sc.strong_recipe
    assert sc.arms == ["dense", "token-drop", "dense-75"] and len(sc.lrs) == 2
    assert sc.run_length == "equal-steps" and sc.batch_size == 256 and sc.calibrate_steps > 0
    assert 0 < sc.min_budget_s <= gpu.budget_s and not sc.tasks
    with pytest.raises(ConfigError, match=r"scratch.lrs: expected distinct learning rates > 0"):
        campaign_config("dry", ["scratch.lrs=[1e-3, 0]"])
    with pytest.raises(ConfigError, match=r"scratch.lrs: expected distinct"):
        campaign_config("dry", ["scratch.lrs=[1e-3, 1e-3]"])
    with pytest.raises(ConfigError, match=r"scratch.calibrate_steps/min_budget_s: expected >= 0"):
        campaign_config("dry", ["scratch.min_budget_s=-1"])
    lc = gpu.longctx
    assert (
        lc.seq_lens == [512, 1024, 2048, 4096, 8192]
        and lc.precision == "bf16"
        and lc.document_attention == "on"
    )
    assert lc.min_rounds == lc.rounds >= 5  # a median and a range at every T on the GPU
    assert [s.model for s in lc.shapes()] == ["bert-base", "modern-base"]
    assert campaign_config("dry").longctx.seq_lens == [32, 64, 128]
    m = gpu.modern
    assert (
        m.model == "modern-base"
        and m.seq_lens == [512, 1024]
        and m.vocab_size == 50368
        and m.precision == "bf16"
    )
    dm = campaign_config("dry").modern
    assert dm.model == "modern-tiny" and dm.seq_lens == [128] and dm.precision == "fp32"
    with pytest.raises(
        ConfigError, match="modern.batch_sizes/modern.max_batch_caps: one per modern.seq_lens"
    ):
        campaign_config("dry", ["modern.seq_lens=[64, 128]"])


def test_largest_batch_search_with_a_memory_limit():
    from tokendrop.lab.bench import bench_config
    from tokendrop.lab.bench.max_batch import largest_batch
    from tokendrop.lab.bench.steps import StepBuilder
    from tokendrop.lab.bench.workload import Setting

    cfg = bench_config(
        {
            "model": "debug-4x64",
            "vocab_size": 128,
            "seq_lens": [16],
            "batch_sizes": [2],
            "threads": 1,
        }
    )
    b = StepBuilder(cfg, torch.device("cpu"))
    free = largest_batch(b, Setting("tokendrop", "dense", 0.0, 16, 2), cap=8)
    assert free.largest_fit == 8 and free.first_fail is None and free.stopped == "cap"
    assert [t.batch_size for t in free.tries] == [2, 4, 8]
    peaks = {t.batch_size: t.peak_bytes for t in free.tries}
    assert peaks[2] < peaks[4] < peaks[8]
    limit = (peaks[4] + peaks[8]) // 2  # 4 fits, 8 does not: bisection between them
    m = largest_batch(
        b, Setting("tokendrop", "drop", 0.5, 16, 2), cap=64, memory_limit=limit, resolution=1
    )
    assert 4 <= m.largest_fit < m.first_fail <= 8 and m.first_fail - m.largest_fit == 1
    assert all(t.fits == (t.batch_size <= m.largest_fit) for t in m.tries)
    none = largest_batch(b, Setting("tokendrop", "dense", 0.0, 16, 2), cap=8, memory_limit=1)
    assert none.largest_fit == 0 and none.first_fail == 2 and "does not fit" in none.describe()


def test_time_to_loss_and_plateau(tiny_data):
    from tokendrop.lab.bench.campaign.quality_part import time_to_loss, unigram_plateau

    curve = [(0.0, 6.0), (10.0, 4.0), (20.0, 3.0)]
    assert time_to_loss(curve, 4.0) == 10.0
    assert time_to_loss(curve, 3.5) == pytest.approx(15.0)
    assert time_to_loss(curve, 7.0) == 0.0 and time_to_loss(curve, 2.0) is None
    h = unigram_plateau(str(tiny_data))
    assert 0 < h < torch.log(torch.tensor(200.0)).item()  # below the uniform distribution's entropy


def test_bench_modern_part_dry_run(tmp_path):
    """The ModernBERT rows alone through the script (seconds): ours dense, 50% drop,
    transformers'."""
    out = tmp_path / "out"
    p = _run_script(out, ["bench-modern"])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    d = _part(out, "bench-modern")
    assert d["ok"] and not d["error"] and not d["skipped"], (d["error"], d["skipped"], d["checks"])
    assert "[bench-modern] ok" in p.stdout
    res = json.loads((out / "bench-modern-T128.json").read_text())
    assert [s["name"] for s in res["settings"]] == ["T128/dense", "T128/drop-0.5", "T128/hf"]
    assert res["info"]["hf_model"] == "transformers.ModernBertForMaskedLM"
    assert res["config"]["model"] == "modern-tiny" and res["config"]["document_attention"] == "off"
    assert "max_batch" not in d["data"]  # the [modern] table turns the largest-batch search off
    # GPU-only
    assert any(
        c["name"].startswith("T=128: 50% drop faster") and c["ok"] is None for c in d["checks"]
    )


def test_new_parts_dry_run(tmp_path, tiny_data):
    """The parts strong and bench-longctx through the script on CPU: the strong-recipe pair from
    scratch and the long-context rows of both families."""
    out = tmp_path / "out"
    p = _run_script(
        out,
        ["strong", "bench-longctx"],
        ["--set", "longctx.seq_lens=[32, 64]", "--set", "strong.max_steps=8"],
        DATA=str(tiny_data),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for name in ("strong", "bench-longctx"):
        d = _part(out, name)
        assert d["ok"] and not d["error"] and not d["skipped"], (
            name,
            d["error"],
            d["skipped"],
            d["checks"],
        )
        assert f"[{name}] ok" in p.stdout and d["wall_s"] < d["budget_s"]
    _check_strong(out)
    _check_longctx(out, (32, 64))


@pytest.mark.slow
def test_priority_runs_the_step_part_first_and_a_second_call_continues(tmp_path, tiny_data):
    """``priority``: the step part (eager and compiled, dense and drop; the trainer's step, a short
    real pretrain, beside the bench's at the same micro-batch) first; a part that would start with
    less than ``min_part_s`` of ``total_s`` left is not started; a second call into the same OUT
    skips what the first finished."""
    out = tmp_path / "out"
    few = [
        "--set",
        "step.settings=['bert:32:128']",
        "--set",
        "total_s=600",
        "--set",
        "min_part_s=590",
    ]
    p = _run_script(out, ["priority"], few, DATA=str(tiny_data))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    d = _part(out, "step")
    assert d["ok"] and not d["skipped"], (d["error"], d["checks"])
    rows = d["data"]["rows"]
    assert [r["mode"] for r in rows] == ["off", "step"] and all(r["flop_bound"] > 1 for r in rows)
    assert all(r["dense_ms"] > 0 and r["drop_ms"] > 0 for r in rows)
    tb = d["data"]["trainer_vs_bench"]
    assert [(x["mode"], x["step"]) for x in tb] == [("off", "dense"), ("off", "drop")]
    assert all(x["trainer_ms"] > 0 and x["bench_ms"] > 0 and x["micro_batches"] == 1 for x in tb)
    assert all(x["ratio"] == x["trainer_ms"] / x["bench_ms"] for x in tb)
    assert "the trainer's step vs the bench's" in (out / "step.md").read_text()
    # AdamW's update alone: the fused kernel first, then CompiledAdamW per compiled mode
    up = d["data"]["update_alone"]
    assert [x["mode"] for x in up] == ["off", "step"] and up[0]["vs_fused"] == 1.0
    assert all(x["ms"] > 0 and x["parameters"] > 0 for x in up)
    assert up[1]["vs_fused"] == up[1]["ms"] / up[0]["ms"]
    assert "AdamW's update alone" in (out / "step.md").read_text()
    # the next part: not started
    assert "[step] ok" in p.stdout and not (out / "strong.json").exists()
    # too little left to start a part
    again = _run_script(out, ["priority"], [*few, "--set", "total_s=100"])
    # finished by the first call: not rerun
    assert again.returncode == 0 and "[step]" not in again.stdout
    assert _part(out, "step")["started"] == d["started"] and not (out / "strong.json").exists()


@pytest.mark.slow
def test_scratch_part_dry_run(tmp_path, tiny_data):
    """Part scratch through the script on CPU (~1 min on 2 cores): the paper's layout at 12 layers
    (ModernBERT family, every layer global), dense, token drop and dense-75 at both rates, equal
    steps, every run's lr / arm / steps / loss / FLOPs / time and the gaps in scratch.json."""
    out = tmp_path / "out"
    p = _run_script(out, ["scratch"], DATA=str(tiny_data))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    d = _part(out, "scratch")
    assert d["ok"] and not d["error"] and not d["skipped"], (d["error"], d["skipped"], d["checks"])
    assert "[scratch] ok" in p.stdout and d["wall_s"] < d["budget_s"]
    _check_scratch(out)


def test_equal_steps_comparison_arithmetic():
    """The gaps scratch reports, from given runs: token drop minus dense at equal steps, minus
    dense-75 at equal FLOPs, minus dense's eval curve read at token drop's FLOPs; each arm's best
    rate."""
    from tokendrop.lab.bench.campaign.common import PartResult
    from tokendrop.lab.bench.campaign.config import QualityPart
    from tokendrop.lab.bench.campaign.quality_part import (
        Calibration,
        equal_steps_comparison,
        value_at,
    )
    from tokendrop.lab.bench.campaign.runs import RunSummary

    assert value_at([(0.0, 6.0), (10.0, 4.0)], 5.0) == 5.0 and value_at([(0.0, 6.0)], 1.0) is None
    q = QualityPart(
        arms=["dense", "token-drop", "dense-75"], lrs=[1e-3, 2e-3], run_length="equal-steps"
    )
    cal = Calibration(0.1, 0.08, 10.0, 100, 100)

    def run(name, steps, loss, flops):
        curve = [(0.0, 7.0), (flops / 2, (7.0 + loss) / 2), (flops, loss)]
        return RunSummary(name, steps, 1.0, None, None, None, None, 7.0, loss, [], flops, curve)

    finals = {  # (arm, lr) -> final loss
        ("dense", 1e-3): 4.0,
        ("token-drop", 1e-3): 4.3,
        ("dense-75", 1e-3): 4.4,
        ("dense", 2e-3): 3.8,
        ("token-drop", 2e-3): 4.5,
        ("dense-75", 2e-3): 4.1,
    }
    share = {"dense": (100, 1.0), "token-drop": (100, 0.75), "dense-75": (75, 0.75)}
    runs, meta = {}, {}
    for (arm, lr), loss in finals.items():
        n = q.run_name(arm, 0, lr)
        steps, f = share[arm]
        runs[n] = run(n, steps, loss, 1e12 * f)
        meta[n] = (arm, lr, 0)
    r = PartResult("scratch", True, "cpu")
    equal_steps_comparison(q, cal, runs, meta, r)
    c1, c2 = r.data["comparison"]
    assert c1["lr"] == 1e-3 and c1["gap_equal_steps"] == pytest.approx(0.3)
    assert c1["gap_equal_flops"] == pytest.approx(-0.1) and c1["drop_flops_ratio"] == 0.75
    # dense's curve at 0.75e12 FLOPs: between (0.5e12, 5.5) and (1e12, 4.0) -> 4.75
    assert c1["dense_curve_at_drop_flops"] == pytest.approx(4.75)
    assert c1["gap_vs_dense_curve"] == pytest.approx(4.3 - 4.75)
    assert c2["gap_equal_steps"] == pytest.approx(0.7)
    # each arm at its own best rate: dense 2e-3, token drop 1e-3, dense-75 2e-3
    assert r.data["best_lr"] == {"dense": 2e-3, "token-drop": 1e-3, "dense-75": 2e-3}
    assert r.data["at_best_lr"]["gap_equal_steps"] == pytest.approx(4.3 - 3.8)
    assert r.data["at_best_lr"]["gap_equal_flops"] == pytest.approx(4.3 - 4.1)
    assert {c.name.split(" (")[0]: c.ok for c in r.checks} == {
        "equal steps: every arm ran its planned step count": True
    }
    runs[q.run_name("dense-75", 0, 2e-3)].steps = 100  # not 0.75 of the dense run's
    r = PartResult("scratch", True, "cpu")
    equal_steps_comparison(q, cal, runs, meta, r)
    assert r.checks[0].ok is False


def test_priority_starts_a_part_only_with_its_minimum_left(tmp_path, monkeypatch):
    """--campaign priority: scratch starts only with scratch.min_budget_s of total_s left; the
    parts after it still run, and a later call finds it unfinished."""
    import tokendrop.lab.bench.campaign as camp
    from tokendrop.lab.bench.campaign import campaign_config, run_parts
    from tokendrop.lab.bench.campaign.config import PRIORITY

    ran = []

    def fake(cfg, out, budget, r, save, log):
        ran.append(r.part)

    monkeypatch.setattr(camp, "_runner", lambda name: fake)
    said = []
    cfg = campaign_config(
        "dry", ["total_s=100", "min_part_s=1", "scratch.min_budget_s=200"], dry_run=True
    )
    run_parts(cfg, ["priority"], tmp_path / "out", log=said.append)
    assert ran == [p for p in PRIORITY if p != "scratch"]
    assert any(x.startswith("[scratch] not started:") and "it needs 200 s" in x for x in said)
    assert not (tmp_path / "out" / "scratch.json").exists()


def test_a_diverging_rate_is_a_result_not_a_stop(tmp_path, tiny_data):
    """A run stopped for non-finite steps (here at an absurd rate) is recorded in ``results`` with
    its error; the part goes on with the next rate and ends complete."""
    from tokendrop.lab.bench.campaign import campaign_config, run_parts

    cfg = campaign_config(
        "dry",
        [
            f'data="{tiny_data}"',
            "scratch.arms=['dense']",
            "scratch.lrs=[2e-3, 1e9]",  # the calibration runs at the first
            "scratch.max_steps=6",
            "scratch.calibrate_steps=4",
            "scratch.evals=2",
            "scratch.overrides=['model.num_layers=2', 'train.eval_batches=1', "
            "'data.num_workers=0', 'train.threads=1', 'train.max_nonfinite_steps=1']",
        ],
        dry_run=True,
    )
    (r,) = run_parts(cfg, ["scratch"], tmp_path / "out")
    assert r.complete and not r.error, r.error
    res = {x["run"]: x for x in r.data["results"]}
    assert set(res) == {"dense-lr0.002", "dense-lr1e+09"}
    assert "non-finite" in res["dense-lr1e+09"]["error"] and "error" not in res["dense-lr0.002"]
    assert list(r.data["runs"]) == ["dense-lr0.002"]
    assert any(s.startswith("dense-lr1e+09: stopped: non-finite") for s in r.summary)
