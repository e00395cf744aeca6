"""The process ``torchrun --nproc-per-node 1`` starts for the campaign's ``pretrain`` part.

    python -m torch.distributed.run --standalone --nproc-per-node 1 \
        -m tokendrop.lab.bench.campaign.torchrun_worker JOB.json

JOB.json: ``{"config": <Config as a dict>, "run_dir", "device", "result"}``.  It starts the process
group itself (NCCL on CUDA, gloo on CPU) -- ``tokendrop pretrain`` alone starts one only for more
than one process -- checks an all-reduce, pretrains inside that group (the importance update
all-reduces through it) and writes ``result``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tokendrop.config import Config, from_dict
from tokendrop.train.trainer import pretrain


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    cuda = job["device"] == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    t0 = time.perf_counter()
    try:
        x = torch.ones(4, device="cuda" if cuda else "cpu")
        dist.all_reduce(x)
        ok = bool((x == dist.get_world_size()).all())
        cfg = from_dict(Config, job["config"])
        res = pretrain(cfg, job["run_dir"], progress=False)
        out = {
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "rank": dist.get_rank(),
            "all_reduce_ok": ok,
            "steps": res.steps,
            "tokens_per_s": res.tokens_per_s,
            "final_eval": res.final_eval,
            "seconds": time.perf_counter() - t0,
            "torchelastic": "TORCHELASTIC_RUN_ID" in os.environ,
        }
    finally:
        # the run's DDP/FSDP state before the group goes
        # (tokendrop.train.parallel.close_distributed)
        gc.collect()
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        Path(job["result"]).write_text(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(
            "usage: python -m torch.distributed.run ... -m "
            "tokendrop.lab.bench.campaign.torchrun_worker JOB.json"
        )
    sys.exit(main(sys.argv[1]))
