#!/usr/bin/env python
"""Recompute the findings of written study reports with the current judging rules (no run is
repeated): ``python scripts/refresh_study_findings.py docs/study-cpu docs/study-continue``.

Each directory needs the ``study.json``, ``study.toml`` and ``study.md`` that ``tokendrop study``
wrote (or copied to its ``docs_dir``); only the findings and claim-by-claim lists change."""

from __future__ import annotations

import sys
from pathlib import Path

from tokendrop.lab.study.report import refresh_findings

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        n = len(refresh_findings(Path(arg)))
        print(f"{arg}: {n} findings rewritten")
