"""The one base class of every error ``tokendrop`` reports to its user, and the subclasses that
more than one layer raises.

A ``TokendropError`` means bad input or a state the user can fix (a config field, a data
directory, a model directory, a checkpoint, a download): its message is one line naming the file or
field and the fix.  ``tokendrop.cli.main`` catches this class once, prints ``error: <message>`` and
exits with status 2; anything else is a bug and keeps its traceback.

A subclass raised by one module is defined beside the code that raises it (docs/design.md §4.5):
``lab.study.common.StudyError``, ``runs.checkpoint.CheckpointError`` (``lab.inspect.InspectError``),
``runs.rundir.RunDirError``, ``finetuning.common.FinetuneError`` and ``lab.fetch.FetchError``.  The
ones raised across a package or by both sides of an import live here, below every module that
raises them: ``TrainingError`` (the step, the loop and resume), ``ConfigError`` (every section of
the configuration), ``DataError`` (every module of ``tokendrop.data``), ``InteropError``
(``tokendrop.models.hf``, ``tokendrop.models.modernbert.hf``) and its subclass ``InitError``
(``tokendrop.models.source``, ``tokendrop.models.weights``).  The public API has them all
(``tokendrop.ConfigError``, ...), ``tokendrop.config`` and ``tokendrop.data`` the one they raise
(``ConfigError``, ``DataError``); no other module hands them on (docs/design.md §7).  Every
subclass also keeps its historical built-in base (``ValueError`` or ``RuntimeError``), so ``except
ValueError`` in callers' code still works.

A fix that names an option names it as the caller spells it: :func:`option` gives the command
line's flag inside :func:`command_line` (``tokendrop.cli.main``), the keyword argument otherwise.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

# set while the command line runs; an environment variable, so that worker processes (prepare's
# pool) spell the options as their parent does
COMMAND_LINE_ENV = "TOKENDROP_COMMAND_LINE"


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within it (and in the processes it starts), :func:`option` spells options as the command
    line's flags."""
    old = os.environ.get(COMMAND_LINE_ENV)
    os.environ[COMMAND_LINE_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(COMMAND_LINE_ENV, None)
        else:
            os.environ[COMMAND_LINE_ENV] = old


def option(flag: str, keyword: str) -> str:
    """How an error's fix names an option: ``flag`` (``"--overwrite"``) for the command line
    (:func:`command_line`), ``keyword`` (``"overwrite=True"``) for a Python caller."""
    return flag if os.environ.get(COMMAND_LINE_ENV) == "1" else keyword


class TokendropError(Exception):
    """A user-facing error: one line, naming the file or field and the fix."""


class ConfigError(TokendropError, ValueError):
    """A configuration problem; the message names the field and what was expected."""


class TrainingError(TokendropError, RuntimeError):
    """A run that cannot go on (non-finite loss, incompatible resume, bad data)."""


class DataError(TokendropError, ValueError):
    """Bad data input or a bad prepared directory; the message names the file/field and what was
    expected."""


class InteropError(TokendropError, ValueError):
    """A model directory that cannot be read or written as asked."""


class InitError(InteropError):
    """A continued-pretraining source that cannot be used as asked (one line, naming the
    file/field)."""


class ArgumentError(TokendropError, TypeError):
    """A public function called with an argument of a type it does not take (the Python API; the
    command line parses its own arguments)."""


def _got(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" + ("..." if len(value) > 40 else "")
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def check_arg(
    func: str,
    name: str,
    value: object,
    types: type | tuple[type, ...],
    takes: str,
    hint: str = "",
    valid: bool | None = None,
) -> None:
    """Refuse ``value`` as argument ``name`` of ``func`` unless it is an instance of ``types`` (a
    ``bool`` is no ``int``; ``valid``, when given, decides instead): :class:`ArgumentError`, one
    line naming the argument, what it got and what it takes (and ``hint``: how to make one)."""
    types = types if isinstance(types, tuple) else (types,)
    if valid is None:
        valid = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in types and int in types
        )
    if valid:
        return
    raise ArgumentError(
        f"{func}(): argument {name}: got {_got(value)}; expected {takes}"
        + (f" ({hint})" if hint else "")
    )


def check_path_arg(func: str, name: str, value: object, optional: bool = False) -> None:
    """:func:`check_arg` for a path (``str`` or ``os.PathLike``; None too when ``optional``)."""
    if optional and value is None:
        return
    check_arg(
        func,
        name,
        value,
        (str, os.PathLike),
        "a path (str or os.PathLike)" + (" or None" if optional else ""),
    )
