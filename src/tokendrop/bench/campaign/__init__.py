"""The GPU campaign (issue 15): parts that each fit one ~9-minute call on a lent GPU machine.

    tokendrop bench --campaign env --out $OUT                  # one part per call
    tokendrop bench --campaign all --out /tmp/dry --dry-run     # every part, tiny sizes, on CPU

Parts (``PARTS``): ``env`` (versions, usable SDPA backends at bf16, ``pytest -m gpu``), ``bench``
(bert-base eager: ours dense / 50% drop / transformers', MFU, memory, the largest batch that fits),
``bench-compile`` (the same compiled), ``pretrain`` (real runs from carried data, resume, torchrun),
``quality`` (time-to-quality of a small BERT, dense vs token drop, then fine-tuning),
``bench-modern`` (the ModernBERT-architecture family, modern-base eager at T=512 and 1024: ours
dense / 50% drop / ``transformers.ModernBertForMaskedLM``).  Each writes
``OUT/PART.json`` + ``OUT/PART.md`` (after every phase) and stops itself within ``budget_s``.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from ...config import ConfigError
from .common import Budget, Log, PartResult, write_part
from .config import PARTS, BenchPart, CampaignConfig, PretrainPart, QualityPart, campaign_config

TITLES = {
    "env": "environment, SDPA backends, GPU tests",
    "bench": "bert-base step time, eager (ours dense / token drop / transformers), largest batch",
    "bench-compile": "bert-base step time, torch.compile",
    "pretrain": "bert-base-128 pretraining runs, resume, torchrun",
    "quality": "time to quality: dense vs token dropping, then fine-tuning",
    "bench-modern": "ModernBERT-architecture step time, eager (ours dense / token drop / transformers.ModernBertForMaskedLM)",
}


def _runner(part: str):
    if part == "env":
        from .env_part import run_env as fn
    elif part in ("bench", "bench-compile", "bench-modern"):
        from .bench_part import run_bench_part as fn
    elif part == "pretrain":
        from .pretrain_part import run_pretrain_part as fn
    else:
        from .quality_part import run_quality_part as fn
    return fn


def _device_name(cfg: CampaignConfig) -> str:
    import torch

    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("campaign.device: cuda, but CUDA is not available here (run with --dry-run on CPU)")
        return torch.cuda.get_device_name(0)
    return f"cpu ({os.cpu_count()} cores)"


def run_parts(cfg: CampaignConfig, parts: list[str] | tuple[str, ...], out: str | os.PathLike,
              log: Log | None = None) -> list[PartResult]:
    """Run the named parts (``all`` = every part) in order, each within ``cfg.budget_s``."""
    names: list[str] = []
    for p in parts:
        for name in (PARTS if p == "all" else [p]):
            if name not in PARTS:
                raise ConfigError(f"bench --campaign: unknown part {name!r}; expected {', '.join(PARTS)} or all")
            if name not in names:
                names.append(name)
    cfg.validate()
    device = _device_name(cfg)
    out_dir = Path(out)
    say = log or (lambda s: None)
    results = []
    for name in names:
        budget = Budget(cfg.budget_s)
        r = PartResult(part=name, dry_run=cfg.dry_run, device=device, budget_s=cfg.budget_s)

        def save(r: PartResult = r, budget: Budget = budget, name: str = name) -> None:
            r.wall_s = budget.elapsed()
            write_part(r, out_dir, TITLES[name])

        say(f"[{name}] {TITLES[name]} (budget {cfg.budget_s:.0f}s)")
        try:
            _runner(name)(cfg, out_dir, budget, r, save, say)
        except Exception as e:  # recorded in PART.json; the next part still runs
            r.error = " ".join(f"{type(e).__name__}: {e}".split())[:2000]
            r.data["traceback"] = traceback.format_exc()[-4000:]
            say(f"[{name}] stopped: {r.error}")
        save()
        results.append(r)
    return results


__all__ = ["PARTS", "TITLES", "CampaignConfig", "BenchPart", "PretrainPart", "QualityPart", "PartResult", "Budget",
           "campaign_config", "run_parts"]
