"""Part ``env``: the machine (GPU, driver, versions), which SDPA backends work at bf16 (forward and
backward, with and without dropout), which one SDPA picks by itself, and ``pytest -m gpu``."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult
from tokendrop.lab.bench.campaign.config import CampaignConfig
from tokendrop.lab.bench.profiling import FUSED_SDPA, sdpa_backends

# SDPBackend name -> its label in a profile (tokendrop.lab.bench.profiling: FUSED_SDPA)
BACKENDS = {
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "mem-efficient",
    "CUDNN_ATTENTION": "cudnn",
    "MATH": "math",
}
TEST_FILE = Path(__file__).resolve().parents[5] / "tests" / "integration" / "lab" / "test_gpu.py"


@dataclass
class SdpaProbe:
    backend: str
    dropout: float
    usable: bool
    reason: str = ""


def _version(mod: str) -> str | None:
    try:
        m = __import__(mod)
        return getattr(m, "__version__", "?")
    except Exception:
        return None


def _driver() -> str | None:
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _nccl() -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def versions(device: torch.device) -> dict[str, object]:
    v: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        v.update(
            {
                "gpu": torch.cuda.get_device_name(device),
                "gpu_count": torch.cuda.device_count(),
                "gpu_memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}",
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
                "driver": _driver(),
                "bf16_supported": torch.cuda.is_bf16_supported(),
                "nccl": _nccl(),
            }
        )
    return v


def _qkv(
    device: torch.device,
    dtype: torch.dtype,
    seq_len: int = 128,
    heads: int = 12,
    head_dim: int = 64,
):
    g = torch.Generator(device="cpu").manual_seed(0)
    return [
        torch.randn(2, heads, seq_len, head_dim, generator=g).to(device, dtype).requires_grad_()
        for _ in range(3)
    ]


def probe_sdpa(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> list[SdpaProbe]:
    """Each SDPA backend forced alone: does forward + backward run at ``dtype`` (bert-base head
    shape)?"""
    out = []
    for name in BACKENDS:
        for p in (0.0, 0.1):
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                out.append(SdpaProbe(name.lower(), p, False, "not in this torch"))
                continue
            q, k, v = _qkv(device, dtype)
            try:
                with sdpa_kernel([backend]), warnings.catch_warnings():
                    # the why-not warnings: the error message says it
                    warnings.simplefilter("ignore")
                    y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
                    y.float().sum().backward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                out.append(SdpaProbe(name.lower(), p, True))
            except RuntimeError as e:
                msg = next(
                    (ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__
                )
                out.append(SdpaProbe(name.lower(), p, False, msg[:200]))
    return out


def default_sdpa(
    device: torch.device, dtype: torch.dtype = torch.bfloat16, dropout: float = 0.1
) -> list[str]:
    """The backend(s) SDPA picks by itself for a training-shaped call (profiled op names)."""
    from torch.profiler import ProfilerActivity, profile

    q, k, v = _qkv(device, dtype)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout).float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return sdpa_backends({e.name for e in prof.events()})


def run_pytest(out: Path, timeout: float) -> dict[str, object]:
    """``python -m pytest -m gpu tests/integration/lab/test_gpu.py`` in a subprocess; counts
    from its JUnit XML."""
    if importlib.util.find_spec("pytest") is None:
        return {
            "ran": False,
            "reason": "pytest is not installed (gpu_campaign_prepare.sh carries it in "
            "runs/gpu-carry/pylib)",
        }
    if not TEST_FILE.is_file():
        return {"ran": False, "reason": f"{TEST_FILE} not found (run from a checkout)"}
    xml = out / "env-pytest.xml"
    xml.unlink(missing_ok=True)  # never read an earlier run's results as this one's
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        str(TEST_FILE),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
    ]
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=TEST_FILE.parents[3]
        )
    except subprocess.TimeoutExpired:
        return {"ran": False, "reason": f"timed out after {timeout:.0f}s"}
    res: dict[str, object] = {
        "ran": True,
        "returncode": p.returncode,
        "command": " ".join(cmd[1:]),
        "output_tail": (p.stdout + p.stderr)[-3000:],
    }
    if xml.is_file():
        root = ET.parse(xml).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        cases = []
        for tc in suite.iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                el = tc.find(tag)
                if el is not None:
                    outcome = (
                        tag if tag != "skipped" else f"skipped: {(el.get('message') or '')[:120]}"
                    )
                    break
            cases.append(
                {"test": tc.get("name"), "outcome": outcome, "seconds": float(tc.get("time") or 0)}
            )
        res["cases"] = cases
        res["counts"] = {
            k: sum(1 for c in cases if str(c["outcome"]).startswith(k))
            for k in ("passed", "failure", "error", "skipped")
        }
    return res


def run_env(cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log) -> None:
    dev = torch.device("cuda", 0) if cfg.device == "cuda" else torch.device("cpu")
    cuda = dev.type == "cuda"
    v = versions(dev)
    r.data["versions"] = v
    r.summary.append(
        ", ".join(
            f"{k} {v[k]}"
            for k in ("gpu", "driver", "torch", "cuda", "cudnn", "transformers", "triton")
            if v.get(k) is not None
        )
        or f"torch {v['torch']}"
    )
    if cuda:
        r.check("bf16 supported", bool(v.get("bf16_supported")))
    probes = probe_sdpa(dev)
    r.data["sdpa_probes"] = probes
    r.tables.append(
        (
            "SDPA backends at bf16 (forced alone; forward + backward, B=2, 12 heads, T=128, d=64)",
            ["backend", "dropout", "usable", "why not"],
            [[p.backend, p.dropout, "yes" if p.usable else "no", p.reason] for p in probes],
        )
    )
    usable = sorted({p.backend for p in probes if p.usable and p.dropout > 0})
    picked = default_sdpa(dev)
    r.data["sdpa_default_with_dropout"] = picked
    r.summary.append(
        f"SDPA usable at bf16 with dropout: {', '.join(usable) or 'none'}; picked by default: "
        f"{', '.join(picked) or '?'}"
    )
    r.check(
        "a fused SDPA kernel (flash, memory-efficient or cuDNN) usable at bf16 with dropout",
        bool({BACKENDS[b.upper()] for b in usable} & FUSED_SDPA) if cuda else None,
        ", ".join(usable),
    )
    r.check(
        "SDPA picks a fused kernel by itself (training shape)",
        bool(set(picked) & FUSED_SDPA) if cuda else None,
        ", ".join(picked),
    )
    save()
    if not cfg.pytest:
        return
    if not budget.allows(30):
        r.skip("pytest -m gpu", log)
        return
    log("  pytest -m gpu ...")
    pt = run_pytest(out, timeout=max(10.0, budget.left() - 10))
    r.data["pytest"] = pt
    if (out / "env-pytest.xml").is_file():
        r.files.append("env-pytest.xml")
    if not pt["ran"]:
        r.check("pytest -m gpu", None if cfg.dry_run else False, str(pt["reason"]))
        return
    counts = pt.get("counts") or {}
    r.tables.append(
        (
            "pytest -m gpu",
            ["test", "outcome", "seconds"],
            [[c["test"], c["outcome"], c["seconds"]] for c in pt.get("cases", [])],
        )
    )
    bad = int(counts.get("failure", 0)) + int(counts.get("error", 0))
    detail = ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" (exit {pt['returncode']})"
    if bad or pt["returncode"] not in (0, 5):
        r.check("pytest -m gpu", False, detail)
    elif counts.get("passed", 0):
        r.check("pytest -m gpu", True, detail)
    else:
        r.check(
            "pytest -m gpu",
            False if cuda else None,
            detail + ("" if cuda else "; all skip without CUDA"),
        )
    r.summary.append(f"pytest -m gpu: {detail}")
