"""The lab configs' sizes whose source is named instead of given (the lab's counterpart of
``tokendrop.config.NAMED_SIZES``): one registry, ``LAB_NAMED_SIZES``, that the configs check their
fields against (:func:`check_lab_size`) and tests derive their grids from.  A size is a positive
value or its name; 0 or a negative value is refused in one line naming the field, the name and
the fix."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokendrop.config import THREADS_AUTO
from tokendrop.config.checks import check_size, positive_int

# bench.num_layers / hidden_size / num_heads / intermediate_size / attention_dropout and the
# long-context run's per-family shapes: the model preset's
SHAPE_PRESET = "preset"
# bench.peak_tflops: the GPU's bf16 peak from tokendrop.lab.bench.environment's table (none on CPU)
PEAK_TABLE = "table"
# bench.time_budget_s / longctx.time_budget_s: no time budget
BUDGET_NONE = "none"
# bench.document_tokens / longctx.document_tokens: one document per row
DOCUMENT_ROW = "row"
# the campaign's max_batch_memory_bytes: a batch fits when it runs without running out of memory
BATCH_MEMORY_DEVICE = "device"
# longctx.memory_limit_gib: the machine's memory (CPU) or the GPU's
MEMORY_MACHINE = "machine"
# study.corpus_max_bytes: the whole corpus
CORPUS_ALL = "all"
# study.vocab_size: study.vocab's file, study.source's tokenizer, or the toy data's TOY_VOCAB_SIZE
VOCAB_SOURCE = "source"
TOY_VOCAB_SIZE = 300  # the vocabulary trained on the toy corpus (study.toy_data, no study.vocab)


def _positive_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf


def _probability(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1


def _vocabulary(v: object) -> bool:
    return positive_int(v) and v >= 100  # type: ignore[operator]


@dataclass(frozen=True)
class LabSize:
    """A named size: its ``name``, what the name ``means``, the ``fix`` ending the message
    (``write FIELD = "name" to FIX``), what else it ``takes`` and the test of that (``ok``)."""

    name: str
    means: str
    fix: str
    takes: str = "a positive integer"
    ok: Callable[[object], bool] = positive_int


_THREADS = LabSize(THREADS_AUTO, "torch's default", "let torch choose")
_SHAPE = LabSize(SHAPE_PRESET, "the model preset's", "use the model preset's")
_DOCS = LabSize(
    DOCUMENT_ROW,
    "one document per row",
    "make each row one document",
    "a document length >= 2",
    lambda v: positive_int(v) and v >= 2,  # type: ignore[operator]
)
_BUDGET = LabSize(
    BUDGET_NONE,
    "no time budget",
    "run without one",
    "a positive number of seconds",
    _positive_number,
)
# the model shape a bench (and a long-context family) may override: a size or "preset"
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "intermediate_size")

# dotted field (as its message names it; the campaign's [bench] and [modern] tables: campaign.*)
# -> its named size
LAB_NAMED_SIZES: dict[str, LabSize] = {
    **{f"bench.{k}": _SHAPE for k in SHAPE_FIELDS},
    "bench.attention_dropout": LabSize(
        SHAPE_PRESET,
        "the model preset's",
        "use the model preset's",
        "a probability in [0, 1)",
        _probability,
    ),
    "bench.document_tokens": _DOCS,
    "bench.threads": _THREADS,
    "bench.peak_tflops": LabSize(
        PEAK_TABLE,
        "the GPU's bf16 peak from the table; none on CPU",
        "take it from the table",
        "a positive number of TFLOP/s",
        _positive_number,
    ),
    "bench.time_budget_s": _BUDGET,
    **{f"longctx.{fam}.{k}": _SHAPE for fam in ("bert", "modern") for k in SHAPE_FIELDS},
    "longctx.document_tokens": _DOCS,
    "longctx.threads": _THREADS,
    "longctx.memory_limit_gib": LabSize(
        MEMORY_MACHINE,
        "this machine's memory, or the GPU's",
        "judge the rows against it",
        "a positive number of GiB",
        _positive_number,
    ),
    "longctx.time_budget_s": _BUDGET,
    "campaign.threads": _THREADS,
    "campaign.max_batch_memory_bytes": LabSize(
        BATCH_MEMORY_DEVICE,
        "a batch fits when it runs without running out of memory",
        "search up to the device's memory",
        "a positive number of bytes",
    ),
    "study.prepare_workers": LabSize(THREADS_AUTO, "one per core", "use every core"),
    "study.corpus_max_bytes": LabSize(
        CORPUS_ALL,
        "the whole corpus",
        "prepare all of it",
        "a positive number of bytes (a subset of whole documents)",
    ),
    "study.vocab_size": LabSize(
        VOCAB_SOURCE,
        f"study.vocab's file, study.source's tokenizer, or the toy data's {TOY_VOCAB_SIZE}",
        "take the vocabulary from them",
        "a vocabulary size >= 100 to train",
        _vocabulary,
    ),
}

# the study.toml fields an older tokendrop recorded as 0 before they were named: read back as the
# name (tokendrop.lab.study.spec.load_study's ``recorded``)
RECORDED_STUDY_SENTINELS = ("prepare_workers", "corpus_max_bytes", "vocab_size")


def check_lab_size(key: str, value: Any, field: str | None = None) -> None:
    """Raise ConfigError unless ``value`` is the name or a size ``LAB_NAMED_SIZES[key]`` takes;
    the message names ``field`` (default: ``key``)."""
    s = LAB_NAMED_SIZES[key]
    check_size(field or key, value, s.name, s.means, s.fix, s.takes, s.ok)


def recorded_study(data: dict[str, Any]) -> dict[str, Any]:
    """A study's own study.toml as a dict, with the 0 an older tokendrop wrote for a size now
    named (``prepare_workers = "auto"``, ``corpus_max_bytes = "all"``, ``vocab_size =
    "source"``) read as that name; a new dict."""
    out = dict(data)
    for key in RECORDED_STUDY_SENTINELS:
        if out.get(key) == 0 and not isinstance(out[key], bool):
            out[key] = LAB_NAMED_SIZES[f"study.{key}"].name
    return out
