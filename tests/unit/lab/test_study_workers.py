"""The study's worker pool: a SIGTERM to the study stops the running tasks (they checkpoint) and
starts no other, including those the pool had already queued."""

import os
import signal
import threading
import time

import pytest
from pool_tasks import checkpointing_task

from tokendrop.lab.study.common import StudyError
from tokendrop.lab.study.workers import run_parallel


def test_sigterm_starts_no_queued_task(tmp_path):
    done = []

    def send_sigterm_once_both_run():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(list(tmp_path.glob("started-*"))) >= 2:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    t = threading.Thread(target=send_sigterm_once_both_run, daemon=True)
    t.start()
    with pytest.raises(StudyError, match="interrupted"):
        run_parallel(
            2,
            checkpointing_task,
            [(str(tmp_path), k) for k in range(6)],
            lambda task, res: done.append(res),
        )
    t.join()
    # the two running tasks were stopped by the signal (not run to their end); none of the four
    # waiting ones (one or two already handed to the pool's call queue) began
    assert sorted(p.name for p in tmp_path.glob("started-*")) == ["started-0", "started-1"]
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"]
    assert done == []
