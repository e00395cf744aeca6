"""Fine-tuning and evaluation: GLUE-style classification and SQuAD v1.1/v2.0 with the paper's protocol.

Public API::

    from tokendrop.finetune import finetune, evaluate, FinetuneError, SuiteConfig, load_suite
    result = finetune(cfg: FinetuneConfig, model_path, out_dir)        # one task, one setting
    summary = evaluate(["runs/a-seed0", "runs/a-seed1"], "configs/suite-cpu.toml", "runs/eval")

Modules: ``tasks`` (GLUE/JSONL/CSV readers), ``squad`` (SQuAD reading, windows, post-processing),
``metrics`` (accuracy, F1, MCC, SQuAD EM/F1), ``trainer`` (``finetune``), ``suite`` (``evaluate``),
``sst2_vader`` (an SST-2-format task from the vaderSentiment sdist), ``run`` (``finetune_config``:
preset + overrides + task/data -> FinetuneConfig).  Generated toy tasks: ``tokendrop.lab.toydata``.
"""

from tokendrop.finetune.common import FinetuneError
from tokendrop.finetune.run import finetune_config
from tokendrop.finetune.suite import SuiteConfig, evaluate, load_suite
from tokendrop.finetune.trainer import finetune

__all__ = ["FinetuneError", "finetune", "evaluate", "SuiteConfig", "load_suite", "finetune_config"]
