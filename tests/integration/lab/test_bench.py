"""The benchmark's smallest preset runs on CPU and writes well-formed results (no timing
assertions)."""

import dataclasses
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tokendrop.cli import main
from tokendrop.dropping.flops import step_flops
from tokendrop.errors import ConfigError
from tokendrop.lab.bench import (
    PRESETS,
    build_settings,
    gpu_peak_flops,
    make_preset,
    sdpa_backends,
    synthetic_batch,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    assert main(["bench", "--preset", "smoke", "--json", str(out / "smoke.json"), "--quiet"]) == 0
    assert torch.get_num_threads() == threads  # the preset's thread count is not left behind
    return out / "smoke.json"


def _positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_smoke_json_is_well_formed(smoke):
    res = json.loads(smoke.read_text())
    assert smoke.with_suffix(".md").is_file()
    for key in (
        "schema",
        "preset",
        "date",
        "command",
        "env",
        "config",
        "info",
        "settings",
        "speedups",
        "vs_hf",
        "memory",
        "headline",
        "noise",
        "wall_s",
    ):
        assert key in res, key
    assert res["preset"] == "smoke"
    for key in (
        "torch",
        "transformers",
        "cpu_model",
        "cpu_count",
        "torch_threads",
        "machine",
        "device",
    ):
        assert res["env"][key] not in (None, ""), key
    names = [s["name"] for s in res["settings"]]
    assert names == ["T32/dense", "T32/drop-0.5", "T32/hf"]
    for s in res["settings"]:
        for key in (
            "batch_size",
            "kept",
            "tokens_per_step",
            "flops_per_step",
            "tokens_per_s",
            "achieved_tflops",
        ):
            assert _positive(s[key]), (s["name"], key, s[key])
        t = s["time_s"]
        assert t["n"] == res["config"]["rounds"] * res["config"]["reps"] == len(s["samples_s"])
        assert all(_positive(t[k]) for k in ("median", "q25", "q75", "min", "max"))
        assert t["min"] <= t["q25"] <= t["median"] <= t["q75"] <= t["max"]
        assert s["mfu"] is None  # no peak table on CPU
        mem = s["memory"]
        assert _positive(mem["state_bytes"]) and _positive(mem["peak_step_bytes"])
        assert mem["peak_bytes"] == mem["state_bytes"] + mem["peak_step_bytes"]
        assert isinstance(s["sdpa_backend"], list) and s["sdpa_backend"], s["sdpa_backend"]
        assert _positive(s["profile"]["total"])
        assert s["census"]["ops"] > 100, s["census"]  # one step's aten ops, beside the times
        if s["impl"] == "tokendrop":  # our step never waits for the device (docs/design.md §4.7)
            assert s["census"]["syncs"] == 0 and s["census"]["locations"] == [], s["census"]
    drop = res["settings"][1]
    assert drop["kept"] == 16 and drop["flops_per_step"] < res["settings"][0]["flops_per_step"]
    (sp,) = res["speedups"]
    assert sp["setting"] == "T32/drop-0.5"
    assert all(
        _positive(sp[k])
        for k in (
            "speedup",
            "speedup_paired_min",
            "speedup_paired_max",
            "flop_bound",
            "fraction_of_bound",
        )
    )
    assert 1.0 < sp["flop_bound"] < 2.0
    (hf,) = res["vs_hf"]
    assert (
        _positive(hf["ratio"])
        and _positive(hf["dense_tokens_per_s"])
        and _positive(hf["hf_tokens_per_s"])
    )
    (mem,) = res["memory"]
    assert _positive(mem["peak_ratio"])
    assert set(res["headline"]) >= {
        "T32_drop50_speedup",
        "T32_drop50_flop_bound",
        "T32_dense_over_hf_tokens_per_s",
        "T32_drop50_memory_ratio",
    }
    assert res["info"]["hf_attn_implementation"] == "sdpa"
    md = smoke.with_suffix(".md").read_text()
    assert "FLOP bound" in md and "transformers.BertForMaskedLM" in md and res["env"]["torch"] in md
    assert "| host syncs | aten ops |" in md


def test_plot_from_results(smoke, tmp_path):
    png = tmp_path / "speedup.png"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "plot_speedup.py"),
            str(smoke),
            "--out",
            str(png),
        ],
        check=True,
        capture_output=True,
    )
    assert png.stat().st_size > 1000


def test_presets_cover_the_issue_grid():
    full = make_preset("cpu-full")
    names = [s.name for s in build_settings(full)]
    # dense, 4 rates x {drop, pass}, avg, hf at T=128 and 512
    assert len(names) == 2 * (1 + 4 * 2 + 1 + 1)
    assert "T512/avg-0.5" in names and "T128/pass-0.625" in names and "T512/hf" in names
    gpu = make_preset("gpu-full", "cuda")
    assert gpu.model == "bert-base" and gpu.precision == "bf16" and gpu.seq_lens == [128, 512]
    quick = make_preset("cpu-quick")
    assert [s.name for s in build_settings(quick)] == [
        "T128/dense",
        "T128/drop-0.5",
        "T128/hf",
        "T512/dense",
        "T512/drop-0.5",
        "T512/hf",
    ]
    assert make_preset("", "cuda").name == "gpu-full" and make_preset("", "cpu").name == "cpu-quick"
    assert set(PRESETS) >= {"smoke", "cpu-quick", "cpu-full", "gpu-full"}


def test_preset_overrides_and_errors():
    p = make_preset(
        "cpu-quick", overrides=["seq_lens=[128]", "rounds=3", "compile=true", "peak_tflops=1"]
    )
    assert p.seq_lens == [128] and p.rounds == 3 and p.compile is True and p.peak_tflops == 1.0
    with pytest.raises(ConfigError, match="unknown config key 'round'; did you mean 'rounds'"):
        make_preset("cpu-quick", overrides=["round=3"])
    with pytest.raises(ConfigError, match="bench.rates"):
        make_preset("cpu-quick", overrides=["rates=[1.5]"])
    with pytest.raises(ConfigError, match="unknown preset"):
        make_preset("nope")
    with pytest.raises(ConfigError, match="expected true or false"):
        make_preset("cpu-quick", overrides=["hf=1"])


def test_bench_variants_run_their_registry_rows():
    """Each bench variant's [drop] section: drop/pass with bench.method at the rate; avg pools at
    0.5 with method none; random_ltd (a per-layer METHODS row) keeps 1 - rate at its schedule's
    first step. The headline rows (the 50% speedups a README quotes) are the dropping ones."""
    from tokendrop.dropping.config import DropConfig
    from tokendrop.lab.bench.presets import BENCH_VARIANTS
    from tokendrop.lab.bench.workload import Setting

    def setting(variant, rate=0.625):
        return Setting("tokendrop", variant, rate, 128, 2).drop_config("half_random")

    assert setting("drop") == DropConfig(method="half_random", variant="drop", rate=0.625)
    assert setting("pass") == DropConfig(method="half_random", variant="pass", rate=0.625)
    assert setting("avg", 0.5) == DropConfig(method="none", variant="avg", rate=0.5)
    assert setting("random_ltd", 0.25) == DropConfig(method="random_ltd", ltd_start_fraction=0.75)
    assert (
        setting("dense") is None
        and Setting("hf", "drop", 0.5, 128, 2).drop_config("cumulative") is None
    )
    # the model built once
    assert BENCH_VARIANTS["random_ltd"].drop_config("cumulative") == DropConfig(method="random_ltd")
    assert [v for v, row in BENCH_VARIANTS.items() if row.headline] == ["drop", "random_ltd"]


def test_synthetic_batch_is_a_valid_packed_mlm_batch():
    mb = synthetic_batch(3, 128, 1000, torch.device("cpu"))
    b, t = mb["input_ids"].shape
    assert (b, t) == (3, 128) and mb["mlm_positions"].shape == (3, round(0.15 * 128))
    pos = mb["mlm_positions"]
    assert (pos[:, 1:] > pos[:, :-1]).all() and (pos > 0).all()  # distinct, ascending, never [CLS]
    assert (mb["input_ids"].gather(1, pos) == 4).all()  # [MASK] at the slots
    assert (mb["mlm_labels"] >= 5).all() and (mb["mlm_weights"] == 1).all()


def test_peak_table_and_sdpa_names():
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_flops("NVIDIA H200") == 989e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_flops("Some Unknown GPU") is None
    assert sdpa_backends(
        {
            "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_flash_attention_backward",
        }
    ) == ["flash"]
    assert sdpa_backends({"aten::_scaled_dot_product_attention_math", "aten::softmax"}) == ["math"]
    assert sdpa_backends({"aten::_scaled_dot_product_flash_attention_for_cpu"}) == ["cpu-flash"]
    assert sdpa_backends({"aten::_scaled_dot_product_efficient_attention"}) == ["mem-efficient"]


class _Ev:
    def __init__(self, name, start, end, thread=1, dev="DeviceType.CPU", nbytes=0):
        self._n, self._s, self._e, self._t, self._d, self._b = name, start, end, thread, dev, nbytes

    def name(self):
        return self._n

    def start_ns(self):
        return self._s

    def end_ns(self):
        return self._e

    def duration_ns(self):
        return self._e - self._s

    def start_thread_id(self):
        return self._t

    def device_type(self):
        return self._d

    def nbytes(self):
        return self._b


def test_profile_self_times_and_memory_peak():
    from tokendrop.lab.bench import cpu_peak_from_events, profile_breakdown, self_times

    evs = [
        _Ev("aten::linear", 0, 100),
        _Ev("aten::addmm", 10, 90),
        _Ev("aten::copy_", 20, 30),
        _Ev("Optimizer.step#AdamW.step", 100, 150),
        _Ev("aten::_fused_adamw_", 105, 145),
        _Ev("aten::mm", 0, 40, thread=2),
    ]
    st = dict(self_times(evs, "cpu"))
    assert st["aten::linear"] == 20 and st["aten::addmm"] == 70 and st["aten::copy_"] == 10
    assert st["Optimizer.step#AdamW.step"] == 10 and st["aten::mm"] == 40
    b = profile_breakdown(evs, "cpu")
    assert b["matmul"] == pytest.approx((20 + 70 + 40) / 1e9) and b[
        "optimizer kernels"
    ] == pytest.approx(40 / 1e9)
    assert b["optimizer step (inclusive, host)"] == pytest.approx(50 / 1e9)
    mem = [
        _Ev("[memory]", t, t, nbytes=n)
        for t, n in [(1, 100), (2, 50), (3, -100), (4, 200), (5, -50), (6, -200)]
    ]
    assert cpu_peak_from_events(mem) == 250
    # the real profiler: two live 1 MiB tensors -> a peak of at least 2 MiB
    from torch.profiler import ProfilerActivity, profile

    from tokendrop.lab.bench import kineto_events

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        a = torch.ones(1 << 18)
        c = a + 1
        del a, c
    assert cpu_peak_from_events(kineto_events(prof)) >= 2 << 20


def test_every_module_imports_and_the_trainer_does_not_need_the_benchmark():
    """Every tokendrop module imports in a fresh interpreter, in file order, and the trainer (which
    takes the GPU peak table from tokendrop.dropping.flops) loads without bench.  The import
    structure itself (no cycle, counting imports inside functions) is
    tests/unit/test_structure.py."""
    code = (
        "import importlib, pkgutil, sys, tokendrop\n"
        "import tokendrop.train.trainer\n"
        "assert 'tokendrop.lab.bench' not in sys.modules, 'tokendrop.train.trainer imports "
        "tokendrop.lab.bench'\n"
        "names = sorted(m.name for m in pkgutil.walk_packages(tokendrop.__path__, 'tokendrop.'))\n"
        "for n in names:\n"
        "    if not n.endswith('__main__'):\n"
        "        importlib.import_module(n)\n"
        "print(len(names))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout.split()[-1]) > 20
    from tokendrop.dropping.flops import gpu_peak_flops as from_flops

    assert from_flops is gpu_peak_flops


def test_cli_overrides_go_through_the_config_parser(capsys):
    assert main(["bench", "--preset", "smoke", "--set", "round=3"]) == 2
    assert "unknown config key 'round'; did you mean 'rounds'" in capsys.readouterr().err
    assert main(["bench", "--preset", "smoke", "--set", "seq_lens=[4]"]) == 2
    assert "bench.seq_lens" in capsys.readouterr().err
    p = make_preset(str(ROOT / "configs" / "bench-smoke.toml"), "cpu", ["rounds=1", "num_layers=2"])
    assert p.name == "smoke" and p.rounds == 1 and p.model_config().num_layers == 2


@pytest.fixture(scope="module")
def modern_smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-modern")
    assert (
        main(["bench", "--preset", "modern-smoke", "--json", str(out / "modern.json"), "--quiet"])
        == 0
    )
    return out / "modern.json"


def test_modern_smoke_json(modern_smoke):
    """The ModernBERT family: our dense step, 50% drop and transformers.ModernBertForMaskedLM side
    by side."""
    res = json.loads(modern_smoke.read_text())
    assert [s["name"] for s in res["settings"]] == ["T128/dense", "T128/drop-0.5", "T128/hf"]
    info = res["info"]
    assert (
        info["hf_model"] == "transformers.ModernBertForMaskedLM"
        and info["hf_attn_implementation"] == "sdpa"
    )
    m = info["model"]
    assert (
        m["family"] == "modernbert" and m["global_layers"] == [0, 3] and m["local_attention"] == 64
    )
    assert m["intermediate_size"] == 96 and m["document_attention"] == "off"
    dense, drop, hf = res["settings"]
    assert drop["kept"] == 64 and drop["flops_per_step"] < dense["flops_per_step"]
    # HF's head on all T positions (sparse_prediction off)
    assert hf["flops_per_step"] > dense["flops_per_step"]
    (sp,) = res["speedups"]
    assert _positive(sp["speedup"]) and 1.0 < sp["flop_bound"] < 2.0
    # T=128 > the 65 positions of the window: counting the masked dense scores raises the bound
    assert sp["flop_bound_masked_dense"] > sp["flop_bound"]
    (v,) = res["vs_hf"]
    assert _positive(v["ratio"]) and _positive(v["hf_tokens_per_s"])
    md = modern_smoke.with_suffix(".md").read_text()
    assert (
        "transformers.ModernBertForMaskedLM" in md
        and "attention `sdpa`" in md
        and "sliding window" in md
    )


@pytest.mark.parametrize(
    "preset,T,hf_class,sparse_name",
    [
        ("smoke", 64, "transformers.BertForMaskedLM", " (head on the masked slots)"),
        ("modern-smoke", 96, "transformers.ModernBertForMaskedLM", " (sparse_prediction)"),
    ],
    ids=["bert", "modernbert"],
)
def test_hf_baseline_is_the_same_network_with_either_head(preset, T, hf_class, sparse_name):
    """transformers' model built by the bench (config.json of our export, our initial weights)
    computes our model's first-step loss both as released (its head on all T positions) and like for
    like (the head on the masked slots: ModernBERT's sparse_prediction; BERT's own head on the
    gathered slots): the comparisons time the same network, and only the like-for-like one has our
    FLOPs."""
    from tokendrop.lab.bench.steps import StepBuilder
    from tokendrop.lab.bench.workload import Setting

    for sparse in (False, True):
        cfg = make_preset(
            preset, overrides=[f"seq_lens=[{T}]", f"hf_sparse_prediction={str(sparse).lower()}"]
        )
        b = StepBuilder(cfg, torch.device("cpu"))
        # no dropout: the two models draw their dropout masks from the RNG in different orders
        b.model_cfg = dataclasses.replace(b.model_cfg, hidden_dropout=0.0, attention_dropout=0.0)
        hf = b.hf()  # built from our dense model's initial weights, before either takes a step
        if preset.startswith("modern"):
            assert hf.model.config.sparse_prediction is sparse
        ours = b.runner(Setting("tokendrop", "dense", 0.0, T, 2)).step()["loss"]
        h = b.runner(Setting("hf", "dense", 0.0, T, 2))
        theirs = h.step()["loss"]
        assert math.isfinite(float(ours)) and float(ours) > 1.0
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        dense_flops = b.runner(Setting("tokendrop", "dense", 0.0, T, 2)).flops
        assert (h.flops == dense_flops) is sparse  # the head on the P slots only when like for like
        assert b.info().hf_model == hf_class + (sparse_name if sparse else "")


def test_modern_presets_and_sequence_limits():
    cpu = make_preset("modern-cpu")
    mc = cpu.model_config()
    assert (mc.family, mc.num_layers, mc.hidden_size, mc.num_heads, mc.intermediate_size) == (
        "modernbert",
        12,
        256,
        4,
        384,
    )
    assert mc.local_attention == 128 and mc.resolved_layer_types().count("full_attention") == 4
    assert [s.name for s in build_settings(cpu)] == [
        "T512/dense",
        "T512/drop-0.5",
        "T512/hf",
        "T1024/dense",
        "T1024/drop-0.5",
        "T1024/hf",
        "T2048/dense",
        "T2048/drop-0.5",
        "T2048/hf",
    ]
    assert cpu.batch_size(512) == 4 and cpu.batch_size(1024) == 2 and cpu.batch_size(2048) == 1
    gpu = make_preset("modern-gpu")
    assert gpu.model_config().num_layers == 22 and gpu.model_config().intermediate_size == 1152
    assert gpu.seq_lens == [512, 1024] and gpu.precision == "bf16"
    with pytest.raises(
        ConfigError, match=r"bench.seq_lens: expected lengths in \[8, 8192\] for model 'cpu-12x256'"
    ):
        make_preset("cpu-quick", overrides=["seq_lens=[16384]"])
    assert (
        make_preset("cpu-quick", overrides=["seq_lens=[8192]"])
        .model_config()
        .max_position_embeddings
        == 8192
    )
    with pytest.raises(ConfigError, match=r"model.document_attention"):
        make_preset("modern-smoke", overrides=['document_attention="sometimes"'])
    on = make_preset("modern-smoke", overrides=['document_attention="on"']).model_config()
    assert on.uses_document_attention and on.sep_token_id == 3  # the synthetic batch's [SEP]


def test_transformers_integration_arm(tmp_path):
    """hf_token_dropping: transformers' model patched by tokendrop.transformers at every variant x
    rate, next to the unpatched model and ours, with its comparisons in the JSON, the headline and
    the report."""
    out = tmp_path / "td.json"
    assert (
        main(
            [
                "bench",
                "--preset",
                "smoke",
                "--set",
                "hf_token_dropping=true",
                "--set",
                'variants=["drop", "random_ltd"]',
                "--set",
                "hf_sparse_prediction=true",
                "--set",
                "memory=false",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    names = [s["name"] for s in res["settings"]]
    assert names == [
        "T32/dense",
        "T32/drop-0.5",
        "T32/random_ltd-0.5",
        "T32/hf",
        "T32/hf-drop-0.5",
        "T32/hf-random_ltd-0.5",
    ]
    rows = {s["name"]: s for s in res["settings"]}
    assert rows["T32/hf-drop-0.5"]["kept"] == rows["T32/drop-0.5"]["kept"] == 16
    # both heads sparse
    assert rows["T32/hf-drop-0.5"]["flops_per_step"] == rows["T32/drop-0.5"]["flops_per_step"]
    assert rows["T32/hf-drop-0.5"]["impl"] == "hf_td"
    by = {p["setting"]: p for p in res["hf_patched"]}
    assert (
        set(by) == {"T32/hf-drop-0.5", "T32/hf-random_ltd-0.5"}
        and by["T32/hf-drop-0.5"]["ours"] == "T32/drop-0.5"
    )
    for p in by.values():
        for k in (
            "speedup_over_hf",
            "speedup_over_hf_paired_min",
            "time_over_ours",
            "flop_bound",
            "speedup_over_hf_cpu",
        ):
            assert _positive(p[k]), k
    assert {
        "T32_hf_drop50_speedup_over_hf",
        "T32_hf_drop50_time_over_ours",
        "T32_hf_random_ltd50_speedup_over_hf",
    } <= set(res["headline"])
    assert "patched by `tokendrop.transformers`" in out.with_suffix(".md").read_text()
    with pytest.raises(ConfigError, match="hf_token_dropping"):
        make_preset("smoke", overrides=["hf_token_dropping=true", "hf=false"]).validate()
    quick = make_preset("transformers-cpu")
    assert [s.name for s in build_settings(quick)] == [
        "T128/dense",
        "T128/drop-0.5",
        "T128/hf",
        "T128/hf-drop-0.5",
        "T512/dense",
        "T512/drop-0.5",
        "T512/hf",
        "T512/hf-drop-0.5",
    ]
    modern = make_preset("transformers-modern-cpu")
    assert modern.model == "modern-base" and modern.seq_lens == [1024] and modern.hf_token_dropping


def test_transformers_integration_three_numbers(tmp_path):
    """hf_released: transformers' model as released (head on all T positions) timed beside the
    sparse-head baseline and the patched model; the three ratios are the arms' paired per-round
    times, each next to its FLOP bound."""
    out = tmp_path / "three.json"
    opts = [
        "hf_token_dropping=true",
        "hf_sparse_prediction=true",
        "hf_released=true",
        "memory=false",
    ]
    sets = [x for o in opts for x in ("--set", o)]
    assert main(["bench", "--preset", "smoke", *sets, "--json", str(out), "--quiet"]) == 0
    res = json.loads(out.read_text())
    rows = {s["name"]: s for s in res["settings"]}
    assert list(rows) == [
        "T32/dense",
        "T32/drop-0.5",
        "T32/hf",
        "T32/hf-released",
        "T32/hf-drop-0.5",
    ]
    released = rows["T32/hf-released"]
    assert released["impl"] == "hf_released" and released["kept"] == 32
    cfg = make_preset("smoke").model_config()
    assert released["flops_per_step"] == step_flops(cfg, 32, 2, num_predictions=32).total
    # the sparse head: round(0.15 T) slots
    assert rows["T32/hf"]["flops_per_step"] == step_flops(cfg, 32, 2).total

    def ratio(base, arm, key="round_median_s"):
        return statistics.median(b / a for b, a in zip(rows[base][key], rows[arm][key]))

    (three,) = res["hf_three"]
    assert three["setting"] == "T32/hf-drop-0.5"
    arms = {
        "patched_vs_released": ("T32/hf-drop-0.5", "T32/hf-released"),
        "sparse_head_alone": ("T32/hf", "T32/hf-released"),
        "dropping_alone": ("T32/hf-drop-0.5", "T32/hf"),
    }
    for part, (arm, base) in arms.items():
        x, head = three[part], res["headline"]
        assert (x["arm"], x["base"]) == (arm, base)
        assert math.isclose(x["speedup"], ratio(base, arm))
        assert math.isclose(x["speedup_cpu"], ratio(base, arm, "round_median_cpu_s"))
        bound = rows[base]["flops_per_step"] / rows[arm]["flops_per_step"]
        assert math.isclose(x["flop_bound"], bound)
        assert math.isclose(head[f"T32_hf_drop50_{part}"], x["speedup"])
        assert math.isclose(head[f"T32_hf_drop50_{part}_flop_bound"], bound)
    assert three["sparse_head_alone"]["flop_bound"] > 1
    assert three["dropping_alone"]["flop_bound"] > 1
    assert "## The integration's three numbers" in out.with_suffix(".md").read_text()
    with pytest.raises(ConfigError, match="hf_released"):
        make_preset("smoke", overrides=["hf_released=true", "hf_token_dropping=true"]).validate()
    preset = make_preset("transformers-released-cpu")
    assert [s.name for s in build_settings(preset)] == [
        "T128/dense",
        "T128/drop-0.5",
        "T128/hf",
        "T128/hf-released",
        "T128/hf-drop-0.5",
    ]
