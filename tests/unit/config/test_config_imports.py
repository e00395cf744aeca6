"""Parsing and validating a config loads no torch (docs/design.md §4.1): ``tokendrop.config`` reads
the selection-method registry (``tokendrop.dropping.methods``) and the run-length parser
(``tokendrop.train.budget``), whose torch code imports torch where it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"

SCRIPT = """
import sys
from tokendrop.config import Config, FinetuneConfig, from_dict, load_config, to_toml
from tokendrop.dropping.methods import METHODS
import tomllib
assert 'torch' not in sys.modules, 'import tokendrop.config loaded torch'
for m in METHODS:  # every method's [drop] checks (DropConfig.validate asks the registry's rows)
    load_config('tiny', [f'drop.method={m}'])
cfg = load_config('modern-tiny', ['train.time_budget="90s"', 'drop.method=half_random'])
from_dict(Config, tomllib.loads(to_toml(cfg)))
load_config('finetune-demo', cls=FinetuneConfig)
bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]
assert not bad, f'parsing a config loaded {bad[:5]}'
print('ok')
"""


def test_parsing_and_validating_a_config_imports_no_torch():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_the_registry_still_computes_with_torch():
    """The behaviour behind the lazy imports: a row selects and starts its vector as before."""
    import torch

    from tokendrop.dropping.config import DropConfig
    from tokendrop.dropping.methods import METHODS, stable_topk_positions

    scores = torch.tensor([[0.5, 2.0, 1.0, 2.0]])
    assert stable_topk_positions(scores, 2).tolist() == [[1, 3]]
    drop = DropConfig(method="frequency")
    m = METHODS["frequency"].initial_scores(drop, 3, torch.tensor([0, 9, 99]))
    assert m.argmax().item() == 0 and m.dtype == torch.float32
    assert METHODS["none"].initial_scores(drop, 2, None).tolist() == [10.0, 10.0]
