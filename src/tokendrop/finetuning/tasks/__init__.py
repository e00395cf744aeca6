"""The fine-tuning tasks, one file each: ``TASKS`` (name -> :class:`TaskSpec`) is collected from the
``TASKS`` list of every module of this package, so a new task is a new file here.

GLUE: ``cola`` ``sst2`` ``mrpc`` ``stsb`` ``qqp`` ``mnli`` (+ ``ax``) ``qnli`` ``rte`` ``wnli``;
SQuAD: ``squad1`` ``squad2`` (``squad.py``); ``custom`` (JSONL/CSV with named columns).  ``base.py``
holds the interface and the GLUE TSV readers; ``sst2_vader.py`` builds an SST-2-format stand-in
task."""

from __future__ import annotations

import importlib
import pkgutil

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.tasks.base import (
    KINDS,
    Columns,
    Example,
    TaskData,
    TaskSpec,
    refuse_empty,
    subsample,
    task_dir,
)


def _collect() -> dict[str, TaskSpec]:
    tasks: dict[str, TaskSpec] = {}
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        for spec in getattr(importlib.import_module(f"{__name__}.{m.name}"), "TASKS", ()):
            if spec.name in tasks:
                raise ImportError(
                    f"task {spec.name!r} is defined twice (tokendrop.finetuning.tasks.{m.name})"
                )
            tasks[spec.name] = spec
    return tasks


TASKS: dict[str, TaskSpec] = _collect()


def load_task(spec: TaskSpec, data, **kwargs) -> TaskData:
    """``spec.load(data, **kwargs)``; a file whose header lacks the task's columns but has another
    task's is named as that task's data (the task and the data do not match)."""
    try:
        return spec.load(data, **kwargs)
    except FinetuneError as e:
        if "header lacks column(s)" not in str(e):
            raise
        path = str(e).split(":", 1)[0]
        raise FinetuneError(f"{e}{_other_task(spec, path)}") from None


def _other_task(spec: TaskSpec, path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            header = next((line.rstrip("\r\n").split("\t") for line in f if line.strip()), [])
    except OSError:
        return ""
    fits = [
        t.name
        for t in TASKS.values()
        if t.name != spec.name
        and t.columns is not None
        and t.columns.has_header
        and set(t.columns.required(True)) <= set(header)
    ]
    if not fits:
        return ""
    return (
        f"; the task and the data do not match: this is {' or '.join(fits)} data, not "
        f"{spec.name}'s (pass --task {fits[0]}, or {spec.name}'s own files)"
    )


TASK_ALIASES = {a: spec.name for spec in TASKS.values() for a in spec.aliases}


def get_task(name: str) -> TaskSpec:
    """A fresh copy of the task called ``name`` (or one of its aliases; any case)."""
    key = name.strip().lower()
    key = TASK_ALIASES.get(key, key)
    if key not in TASKS:
        raise FinetuneError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[key].copy()


__all__ = [
    "TASKS",
    "TASK_ALIASES",
    "KINDS",
    "Columns",
    "Example",
    "TaskData",
    "TaskSpec",
    "get_task",
    "load_task",
    "refuse_empty",
    "subsample",
    "task_dir",
]
