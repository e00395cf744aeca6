"""Command-line entry points (``tokendrop finetune`` / ``tokendrop evaluate``): argument values in,
library calls out.  ``cli.py`` parses the arguments and calls these with its ``argparse.Namespace``."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from ..config import FinetuneConfig, from_dict, load_config


def finetune_config(config: str | None, overrides: list[str] | tuple[str, ...] = (), task: str = "",
                    data: str = "") -> FinetuneConfig:
    """``--config`` preset/file (optional) + ``--set`` overrides; ``--task``/``--data`` win over both."""
    cfg = load_config(config, list(overrides), cls=FinetuneConfig) if config else \
        from_dict(FinetuneConfig, {}, list(overrides))
    repl: dict[str, Any] = {}
    if task:
        repl["task"] = task
    if data:
        repl["data"] = str(data)
    return dataclasses.replace(cfg, **repl).validate()


def cli_finetune(a) -> int:
    """``tokendrop finetune --model M --task T --data DIR --out DIR [--config F] [--set k=v ...]``."""
    from .trainer import finetune

    cfg = finetune_config(getattr(a, "config", None), getattr(a, "overrides", []) or [], a.task, a.data)
    r = finetune(cfg, a.model, a.out)
    tr = r["train"]
    print(f"{r['task']}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["scores"].items())
          + f"; {tr['steps']} steps, {tr['examples_per_s']:.1f} train examples/s on {r['device']} ({r['precision']})"
          + f"; metrics: {a.out}/metrics.json")
    return 0


def cli_evaluate(a) -> int:
    """``tokendrop evaluate --models RUN_DIR... --suite configs/suite-NAME.toml --out DIR [--set k=v ...]``."""
    from .suite import evaluate

    s = evaluate(a.models, a.suite, a.out, overrides=getattr(a, "overrides", []) or [])
    print(s["markdown"])
    print(f"{s['computed']} cells computed, {s['skipped']} reused; results: {a.out}/results.md, {a.out}/results.json",
          file=sys.stderr)
    return 0
