"""tokendrop: token dropping for faster BERT pretraining (Hou et al., ACL 2022).

The public API (docs/api.md); every other module is internal and may change between releases::

    import tokendrop as td

    cfg = td.load_config("tiny", ["drop.method=cumulative", "drop.rate=0.5"])
    model = td.build_model(cfg.model, cfg.drop)  # any family's MLM model, dropping on
    model, info = td.load_pretrained("all-MiniLM-L6-v2", "mlm", drop=cfg.drop)  # shape + weights
    td.prepare(["corpus.txt"], "data/t128", seq_len=128, vocab_size=8000)
    td.pretrain(cfg, "runs/drop")  # the trainer: packed data, exact resume, DDP/FSDP2
    td.export("runs/drop", "export/drop")  # a transformers directory
    print(td.text_selection("runs/drop", "The film was wonderful."))  # what the run keeps of it
    td.finetune(td.finetune_config(None, task="sst2", data="glue/SST-2"), "export/drop", "ft/sst2")

``tokendrop.transformers`` adds token dropping to transformers' own models and ``Trainer``.
Names are imported on first use, so ``import tokendrop`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tokendrop.version import __version__

# public name -> (module, attribute)
_API: dict[str, tuple[str, str]] = {
    # configuration
    "Config": ("tokendrop.config", "Config"),
    "ModelConfig": ("tokendrop.config", "ModelConfig"),
    "DropConfig": ("tokendrop.dropping.config", "DropConfig"),
    "FinetuneConfig": ("tokendrop.config", "FinetuneConfig"),
    "load_config": ("tokendrop.config", "load_config"),
    "finetune_config": ("tokendrop.finetuning.run", "finetune_config"),
    # the method
    "METHODS": ("tokendrop.dropping.methods", "METHODS"),
    "DropPlan": ("tokendrop.dropping.plan", "DropPlan"),
    "DropStep": ("tokendrop.dropping.plan", "DropStep"),
    "TokenSelector": ("tokendrop.dropping.importance", "TokenSelector"),
    "step_flops": ("tokendrop.dropping.flops", "step_flops"),
    "flop_ratio": ("tokendrop.dropping.flops", "flop_ratio"),
    # models
    "FAMILIES": ("tokendrop.models.families", "FAMILIES"),
    "build_model": ("tokendrop.models.families", "build_model"),
    "load_pretrained": ("tokendrop.models.source", "load_pretrained"),
    "resolve_model": ("tokendrop.models.source", "resolve_model"),
    "export": ("tokendrop.models.source", "export_hf"),
    "text_selection": ("tokendrop.train.selection", "text_selection"),
    # jobs
    "prepare": ("tokendrop.data.prepare", "prepare"),
    "pretrain": ("tokendrop.train.trainer", "pretrain"),
    "finetune": ("tokendrop.finetuning.fit", "finetune"),
    "evaluate": ("tokendrop.finetuning.suite", "evaluate"),
    "verify": ("tokendrop.verification", "verify_path"),
    # errors
    "TokendropError": ("tokendrop.errors", "TokendropError"),
    "ConfigError": ("tokendrop.errors", "ConfigError"),
    "DataError": ("tokendrop.errors", "DataError"),
    "TrainingError": ("tokendrop.errors", "TrainingError"),
    "InteropError": ("tokendrop.errors", "InteropError"),
    "InitError": ("tokendrop.errors", "InitError"),
    "ArgumentError": ("tokendrop.errors", "ArgumentError"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'tokendrop' has no attribute {name!r}")
    module, attr = _API[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from tokendrop.config import Config, FinetuneConfig, ModelConfig, load_config  # noqa: F401
    from tokendrop.data.prepare import prepare  # noqa: F401
    from tokendrop.dropping.config import DropConfig  # noqa: F401
    from tokendrop.dropping.flops import flop_ratio, step_flops  # noqa: F401
    from tokendrop.dropping.importance import TokenSelector  # noqa: F401
    from tokendrop.dropping.methods import METHODS  # noqa: F401
    from tokendrop.dropping.plan import DropPlan, DropStep  # noqa: F401
    from tokendrop.errors import (  # noqa: F401
        ArgumentError,
        ConfigError,
        DataError,
        InitError,
        InteropError,
        TokendropError,
        TrainingError,
    )
    from tokendrop.finetuning.fit import finetune  # noqa: F401
    from tokendrop.finetuning.run import finetune_config  # noqa: F401
    from tokendrop.finetuning.suite import evaluate  # noqa: F401
    from tokendrop.models.families import FAMILIES, build_model  # noqa: F401
    from tokendrop.models.source import (  # noqa: F401
        export_hf as export,
        load_pretrained,
        resolve_model,
    )
    from tokendrop.train.selection import text_selection  # noqa: F401
    from tokendrop.verification import verify_path as verify  # noqa: F401
