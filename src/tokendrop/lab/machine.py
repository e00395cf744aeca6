"""The machine a measurement ran on: the CPU's model name and the load average (stdlib only, so
benchmarks, studies and scripts all describe a host the same way;
``tokendrop.lab.bench.environment`` adds versions and the GPU)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, or None where the system has none."""
    try:
        return [float(x) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None
