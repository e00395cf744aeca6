"""Test gates: named points where a command, under a test-only switch, stops and waits, so that a
test can signal or kill it while it is provably mid-work (never by guessing how long it takes).

    TOKENDROP_TEST_GATE=NAME=PATH tokendrop ...

The first time the process reaches ``gate(NAME)`` it creates ``PATH`` (holding its pid) and waits
there until ``PATH`` is removed (the test releases it), or a signal ends it; after
:data:`MAX_WAIT` seconds it goes on by itself (a test that died does not leave it waiting for
ever).  Without the variable, or for another name, ``gate`` returns at once.  Signals keep their
handlers while a process waits: SIGINT raises ``KeyboardInterrupt`` from the gate as it would from
the work around it; ``pretrain``'s handler sets its stop flag, acted on once the gate is released.

The gates (docs/reliability.md):

* ``prepare-units``: ``prepare``, every work unit tokenized into ``OUT.partial``, before the shards;
* ``pretrain-step``: ``pretrain``, the first training step logged (rank 0);
* ``finetune-step``: fine-tuning (``finetune``, and every cell of ``evaluate``), the first
  optimizer step taken;
* ``bench-round``: ``bench``, the first timed round measured;
* ``campaign-part``: ``bench --campaign``, a part's first files written, before it finishes.
"""

from __future__ import annotations

import os
import time

ENV = "TOKENDROP_TEST_GATE"
MAX_WAIT = 600.0
GATES = ("prepare-units", "pretrain-step", "finetune-step", "bench-round", "campaign-part")
_passed: set[str] = set()


def gate(name: str) -> None:
    """Wait at the gate ``name`` if the test switch names it (once per process); see the module
    doc."""
    spec = os.environ.get(ENV)
    if not spec or name in _passed:
        return
    want, _, path = spec.partition("=")
    if want != name or not path:
        return
    _passed.add(name)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)  # the test sees the file complete
    deadline = time.monotonic() + MAX_WAIT
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
