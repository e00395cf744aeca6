"""Where the host may read device data: the one switch the sync-free step is written against.

On an accelerator a host read of device data (``.item()``, ``bool(t)``, a size taken from the
data) makes the host wait for the device.  On CPU the "device" is the host and such a read costs
nothing, so a few CPU-only paths take a data-dependent shortcut (``host_reads_free``).  The census
of host syncs (``tokendrop.train.census``) runs on CPU but counts as CUDA would: while it runs,
``host_reads_free`` says False, so the step takes its accelerator path, and work on tensors that
stay on the host even on an accelerator (a loader's collation, a clock agreed over a CPU process
group) is marked with :func:`host_side` and not counted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_state = threading.local()


def host_reads_free(device) -> bool:
    """Whether reading a tensor on ``device`` from the host is free (CPU, and no census emulating
    an accelerator) rather than a host-device synchronisation."""
    return getattr(device, "type", device) == "cpu" and not getattr(_state, "emulate", 0)


def in_host_side() -> bool:
    """Whether the calling thread is inside a :func:`host_side` region."""
    return getattr(_state, "host", 0) > 0


@contextlib.contextmanager
def host_side() -> Iterator[None]:
    """A region whose tensors are host tensors on every device (the census does not count it)."""
    _state.host = getattr(_state, "host", 0) + 1
    try:
        yield
    finally:
        _state.host -= 1


@contextlib.contextmanager
def emulate_accelerator() -> Iterator[None]:
    """While inside, :func:`host_reads_free` is False on CPU too (the census's view of a step)."""
    _state.emulate = getattr(_state, "emulate", 0) + 1
    try:
        yield
    finally:
        _state.emulate -= 1
