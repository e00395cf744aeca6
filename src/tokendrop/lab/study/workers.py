"""Worker processes (``study.parallel > 1``): a forkserver pool, one torch thread per worker by
default, failures and Ctrl-C turned into a resumable StudyError, SIGTERM passed on to the
workers."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import torch

from tokendrop.lab.study.common import StudyError

# set once the study is stopping (Ctrl-C, SIGTERM, a failure): the pool has already handed a few
# tasks to its call queue, which cancel_futures cannot take back, so a worker that receives one
# returns CANCELLED instead of starting it
_stop = None
CANCELLED = "cancelled"


def _worker_init(threads: int, stop) -> None:
    global _stop
    _stop = stop
    torch.set_num_threads(max(1, threads))


def _guarded(fn: Callable, *args: Any) -> Any:
    if _stop is not None and _stop.is_set():
        return CANCELLED
    return fn(*args)


def _pool(parallel: int):
    threads = max(1, (os.cpu_count() or 1) // parallel)
    # forkserver: workers fork from a clean server process (no OpenMP state inherited from this one,
    # unlike fork) that has imported tokendrop once (unlike spawn, which re-imports torch per
    # worker)
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["tokendrop.lab.study", "tokendrop.train.trainer", "tokendrop.finetuning"]
        )
    else:
        ctx = mp.get_context("spawn")
    stop = ctx.Event()
    pool = ProcessPoolExecutor(
        parallel, mp_context=ctx, initializer=_worker_init, initargs=(threads, stop)
    )
    return pool, stop


def run_parallel(
    parallel: int, fn: Callable, tasks: list[tuple], on_done: Callable[[tuple, Any], None]
) -> None:
    """``fn(*task)`` for every task in ``parallel`` spawned processes; ``on_done(task, result)`` in
    this process as each finishes.  A failure or Ctrl-C cancels what has not started; started runs
    checkpoint on the SIGINT they receive too (same process group).  SIGTERM to this process is
    passed on to the workers, so none outlives it.  Once stopping, no further task starts (one the
    pool had already queued returns without running)."""
    ex, stop = _pool(parallel)

    def on_sigterm(signum, frame):  # pass SIGTERM on: a training worker checkpoints and stops
        stop.set()
        for proc in list(getattr(ex, "_processes", {}).values()):
            try:
                proc.terminate()
            except (OSError, ValueError):
                pass
        raise KeyboardInterrupt

    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        futs = {ex.submit(_guarded, fn, *t): t for t in tasks}
        for f in as_completed(futs):
            on_done(futs[f], f.result())
    except BaseException as e:
        stop.set()
        ex.shutdown(wait=True, cancel_futures=True)
        if isinstance(e, KeyboardInterrupt):
            raise StudyError(
                "interrupted (running runs saved a checkpoint); run the same command "
                "again to resume"
            ) from None
        if type(e).__name__ == "BrokenProcessPool":
            raise StudyError(
                f"a worker process died ({e}); finished runs and cells are kept, run the same "
                "command again to resume (from a Python script, call run_study under `if __name__ "
                "== '__main__':`, which worker processes need; or set parallel = 1)"
            ) from None
        raise
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    ex.shutdown(wait=True)
