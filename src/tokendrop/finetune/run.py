"""The fine-tuning config of one run: a preset/file, ``section.key=value`` overrides, task and data.

``tokendrop finetune`` (``cli.cmd_finetune``) builds its ``FinetuneConfig`` here and calls
``tokendrop.finetune.finetune``; ``tokendrop evaluate`` calls ``tokendrop.finetune.evaluate``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tokendrop.config import FinetuneConfig, from_dict, load_config


def finetune_config(config: str | None, overrides: list[str] | tuple[str, ...] = (), task: str = "",
                    data: str = "") -> FinetuneConfig:
    """``config`` preset/file (optional) + ``overrides``; ``task``/``data`` (when given) win over both."""
    cfg = load_config(config, list(overrides), cls=FinetuneConfig) if config else \
        from_dict(FinetuneConfig, {}, list(overrides))
    repl: dict[str, Any] = {}
    if task:
        repl["task"] = task
    if data:
        repl["data"] = str(data)
    return dataclasses.replace(cfg, **repl).validate()
