"""The machine a benchmark ran on: versions, CPU, GPU, load."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

import torch

from tokendrop.lab.bench.fields import optional
from tokendrop.lab.machine import cpu_model, loadavg


def machine_slug(device: str) -> str:
    """A file-name-safe name of the machine: the GPU's name on CUDA, else the CPU's and its core
    count."""
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
    else:
        name = "cpu " + cpu_model()
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug + (f"-{os.cpu_count()}c" if device != "cuda" else "")


@dataclass
class Environment:
    python: str
    torch: str
    transformers: str
    platform: str
    cpu_model: str
    cpu_count: int | None
    torch_threads: int
    OMP_NUM_THREADS: str | None
    OMP_WAIT_POLICY: str | None
    loadavg_start: list[float] | None
    device: str
    machine: str
    loadavg_end: list[float] | None = optional()
    gpu_name: str | None = optional()
    gpu_count: int | None = optional()
    cuda: str | None = optional()
    cudnn: int | None = optional()
    gpu_memory_bytes: int | None = optional()

    @property
    def where(self) -> str:
        return self.gpu_name or self.cpu_model


def environment(device: torch.device) -> Environment:
    import transformers

    env = Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        platform=platform.platform(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS"),
        OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY"),
        loadavg_start=loadavg(),
        device=device.type,
        machine=machine_slug(device.type),
    )
    if device.type == "cuda":
        env.gpu_name = torch.cuda.get_device_name(device)
        env.gpu_count = torch.cuda.device_count()
        env.cuda = torch.version.cuda
        env.cudnn = torch.backends.cudnn.version()
        env.gpu_memory_bytes = torch.cuda.get_device_properties(device).total_memory
    return env
