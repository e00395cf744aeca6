"""The fine-tuning config of one run: a preset/file, ``section.key=value`` overrides, task and data.

``tokendrop finetune`` (``cli.cmd_finetune``) builds its ``FinetuneConfig`` here and calls
``tokendrop.finetuning.finetune``; ``tokendrop evaluate`` calls ``tokendrop.finetuning.evaluate``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tokendrop.config import FinetuneConfig, from_dict, load_config
from tokendrop.errors import check_arg, check_path_arg

# the section name the fields' messages use: --set finetune.epochs=1 is --set epochs=1
PREFIX = "finetune."


def finetune_overrides(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``KEY=VALUE`` or ``finetune.KEY=VALUE`` (the name messages give a field) -> ``KEY=VALUE``."""
    return [
        o[len(PREFIX) :] if o.strip().startswith(PREFIX) else o
        for o in (x.strip() for x in overrides)
    ]


def finetune_config(
    config: str | None, overrides: list[str] | tuple[str, ...] = (), task: str = "", data: str = ""
) -> FinetuneConfig:
    """``config`` preset/file (optional) + ``overrides`` (``KEY=VALUE`` or ``finetune.KEY=VALUE``);
    ``task``/``data`` (when given) win over both."""
    check_path_arg("finetune_config", "config", config, optional=True)
    check_arg(
        "finetune_config", "overrides", overrides, (list, tuple), "a list of 'key=value' strings"
    )
    check_arg("finetune_config", "task", task, str, "a task name (str)")
    check_path_arg("finetune_config", "data", data)
    overrides = finetune_overrides(overrides)
    cfg = (
        load_config(config, overrides, cls=FinetuneConfig)
        if config
        else from_dict(FinetuneConfig, {}, overrides)
    )
    repl: dict[str, Any] = {}
    if task:
        repl["task"] = task
    if data:
        repl["data"] = str(data)
    return dataclasses.replace(cfg, **repl).validate()
