"""The one base class of every error ``tokendrop`` reports to its user.

A ``TokendropError`` means bad input or a state the user can fix (a config field, a data
directory, a model directory, a checkpoint, a download): its message is one line naming the file or
field and the fix.  ``tokendrop.cli.main`` catches this class once, prints ``error: <message>`` and
exits with status 2; anything else is a bug and keeps its traceback.

Each module keeps its own subclass, defined beside the code that raises it (docs/design.md §4.5):
``config.ConfigError`` (``study.StudyError``), ``data.DataError``, ``hf.InteropError``
(``init_source.InitError``), ``train.TrainingError``, ``checkpoint.CheckpointError``
(``inspect_run.InspectError``), ``finetune.FinetuneError`` and ``demo.FetchError``.  They also keep
their historical built-in base (``ValueError`` or ``RuntimeError``), so ``except ValueError`` in
callers' code still works.
"""

from __future__ import annotations


class TokendropError(Exception):
    """A user-facing error: one line, naming the file or field and the fix."""
