"""A run's metrics: ``metrics.jsonl`` (one JSON object per line) plus TensorBoard scalars.

``MetricsLog`` appends records on rank 0 only; ``read_metrics`` reads them back (reports, study,
resume checks).  ``tokendrop.rundir`` exposes both as part of the run-directory API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsLog:
    """JSONL + TensorBoard, rank 0 only."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool = True):
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:  # tensorboard not installed: JSONL only
                self.tb = None

    def write(self, rec: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_record(self.path, rec)
        if self.tb is not None:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.tb.add_scalar(k, v, rec["step"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def append_record(path: Path, rec: dict[str, Any]) -> None:
    """Append one JSON line (a single write of the whole line)."""
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    p = Path(run_dir) / "metrics.jsonl"
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
