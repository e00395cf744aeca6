"""A census of a step on CPU: the aten ops it dispatches and every op that would make a CUDA host
wait for the device, each named by the file:line in ``tokendrop`` that issued it.

CUDA's sync debug mode (``torch.cuda.set_sync_debug_mode``) warns where the host blocks on the
device; on CPU nothing blocks, so :class:`Census` applies the same rules to the ops themselves, with
a ``TorchDispatchMode`` (aten ops, forward and backward) and a ``TorchFunctionMode`` (Python-level
calls that never reach the dispatcher on CPU):

* a read of a value: ``.item()``, ``bool()`` / ``int()`` / ``float()`` of a tensor
  (``aten._local_scalar_dense``), ``.tolist()``, ``.numpy()``, ``.cpu()``, ``.to("cpu")``,
  ``aten.equal`` / ``aten.allclose`` / ``aten.is_nonzero``;
* an output whose size depends on the data: ``nonzero``, ``masked_select``, boolean-mask indexing
  and assignment, ``unique`` (every form), ``repeat_interleave`` of a tensor without
  ``output_size``, ``bincount``, ``argwhere``;
* a blocking host-to-device copy: a Python scalar written through an index (``x[i] = 1.0``,
  ``x[idx] = 1.0``: PyTorch makes the value on the host and copies it), ``torch.tensor`` /
  ``torch.as_tensor`` with a ``device``.

Not seen on CPU: ``torch.cuda.synchronize`` and stream/event waits (device-only calls the step
guards by device type), and ``.to(device)`` from pageable memory (a plain ``.to`` is taken for a
copy between device tensors).  Work marked :func:`tokendrop.host.host_side` (host tensors on every
device) is neither counted nor checked; inside the census ``tokendrop.host.host_reads_free`` is
False, so a step takes the path it takes on an accelerator.

    with Census() as c:
        step()
    c.ops, c.syncs          # aten ops dispatched; [Sync(kind, op, where), ...]
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tokendrop.host import emulate_accelerator, in_host_side

_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../src/tokendrop
_SELF = {str(Path(__file__).resolve()), str(Path(__file__).resolve().parents[1] / "host.py")}

aten = torch.ops.aten
_READS = {aten._local_scalar_dense, aten.equal, aten.allclose, aten.is_nonzero}
_DATA_SIZED = {
    aten.nonzero,
    aten.masked_select,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.unique_consecutive,
    aten.unique_dim_consecutive,
    aten.bincount,
    aten.argwhere,
}
_REPEATS = {aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor}
_INDEX_PUT = {aten.index_put_, aten.index_put, aten._index_put_impl_}
_TENSOR_OPS = {torch.tensor, torch.as_tensor}
_READ_METHODS = {
    torch.Tensor.tolist: "tolist",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.cpu: "cpu",
}


@dataclass(frozen=True)
class Sync:
    kind: str  # read | data-sized | h2d
    op: str
    where: str  # file:line of the first frame in tokendrop ("?" when none, e.g. an autograd thread)


@dataclass
class Census:
    """Counts while entered (see the module doc); ``ops`` and ``syncs`` accumulate over entries."""

    ops: int = 0
    syncs: list[Sync] = field(default_factory=list)
    op_names: Counter = field(default_factory=Counter)

    def __enter__(self) -> Census:
        self._stack = ExitStack()
        # Python scalars made tensors (on the host on CUDA)
        self._lifted: weakref.WeakSet = weakref.WeakSet()
        self._stack.enter_context(emulate_accelerator())
        self._stack.enter_context(_Functions(self))
        self._stack.enter_context(_Dispatch(self))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def report(self) -> str:
        """One line per distinct sync: count, kind, op, where."""
        c = Counter(self.syncs)
        return "\n".join(
            f"{n} x {s.kind} {s.op} at {s.where}"
            for s, n in sorted(c.items(), key=lambda x: x[0].where)
        )

    def _sync(self, kind: str, op: str) -> None:
        self.syncs.append(Sync(kind, op, _where()))


def _where() -> str:
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(_PACKAGE) and name not in _SELF:
            return f"{Path(name).relative_to(Path(_PACKAGE).parent)}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _is_bool_index(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


class _Dispatch(TorchDispatchMode):
    def __init__(self, census: Census):
        super().__init__()
        self.c = census

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if in_host_side():
            return out
        c = self.c
        c.ops += 1
        packet = func.overloadpacket
        c.op_names[packet.__name__] += 1
        if packet in _READS:
            c._sync("read", packet.__name__)
        elif packet in _DATA_SIZED:
            c._sync("data-sized", packet.__name__)
        elif func in _REPEATS and kwargs.get("output_size") is None:
            c._sync("data-sized", "repeat_interleave without output_size")
        elif packet is aten.index and any(_is_bool_index(i) for i in args[1]):
            c._sync("data-sized", "index (boolean mask)")
        elif packet in _INDEX_PUT:
            if any(_is_bool_index(i) for i in args[1]):
                c._sync("data-sized", "index_put (boolean mask)")
            elif args[2] in c._lifted:
                c._sync("h2d", "index_put of a Python scalar")
        elif packet is aten.copy_ and args[1] in c._lifted and args[0].dim() == 0:
            c._sync("h2d", "copy_ of a Python scalar")
        elif packet in (aten.lift_fresh, aten.lift_fresh_copy):
            c._lifted.add(out)
        return out


class _Functions(TorchFunctionMode):
    def __init__(self, census: Census):
        super().__init__()
        self.c = census

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if in_host_side():
            return out
        if func in _READ_METHODS:
            self.c._sync("read", _READ_METHODS[func])
        elif func is torch.Tensor.to and _to_host(args[1:], kwargs):
            self.c._sync("read", "to('cpu')")
        elif func in _TENSOR_OPS and kwargs.get("device") is not None:
            self.c._sync("h2d", f"torch.{func.__name__}(device=...)")
            self.c._lifted.discard(out)  # made on the device: not a host scalar any more
        return out


def _to_host(args, kwargs) -> bool:
    target = kwargs.get("device", args[0] if args else None)
    return isinstance(target, str) and target.split(":")[0] == "cpu"


__all__ = ["Census", "Sync"]
