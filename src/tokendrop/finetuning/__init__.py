"""Fine-tuning and evaluation: every GLUE task and SQuAD v1.1/v2.0, with the paper's protocol.

Public API::

    from tokendrop.finetuning import finetune, evaluate, FinetuneError, SuiteConfig, load_suite
    result = finetune(cfg: FinetuneConfig, model_path, out_dir)        # one task, one setting
    summary = evaluate(["runs/a-seed0", "runs/a-seed1"], "configs/suite-cpu.toml", "runs/eval")

Modules: ``tasks/`` (one file per task on ``tasks/base.py``: the ``TaskSpec`` interface and the GLUE
TSV readers; ``tasks/squad.py``: SQuAD reading, windows, post-processing; ``tasks/sst2_vader.py``:
an SST-2-format task from the vaderSentiment sdist), ``metrics`` (accuracy, F1, MCC,
Pearson/Spearman, SQuAD EM/F1), ``columns`` (the evaluation table's columns), ``trainer``
(``finetune``), ``suite`` (``evaluate``), ``run`` (``finetune_config``: preset + overrides +
task/data -> FinetuneConfig). A task's generated examples (for tests): ``TaskSpec.write_examples``.
"""

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.fit import finetune
from tokendrop.finetuning.run import finetune_config
from tokendrop.finetuning.suite import SuiteConfig, evaluate, load_suite

__all__ = ["FinetuneError", "finetune", "evaluate", "SuiteConfig", "load_suite", "finetune_config"]
