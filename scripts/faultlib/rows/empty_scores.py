"""Scores on n = 0: refused where they would be computed, rejected by verify."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case
from faultlib.commands import EV, finetune, pretrain, run_cli
from faultlib.files import edit_json, set_shard_hash, shard_path


def header_only(rel: str) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        p = c / rel
        p.write_text(p.read_text().splitlines()[0] + "\n")

    return setup


def scored_on_nothing(c: Path) -> None:
    """CASE/ft: a finetune output whose dev split was scored on n = 0 (what a header-only dev file
    gave)."""
    run_cli([a.replace("{C}", str(c)) for a in finetune("{C}/run", "{C}/ft")], c)

    def fn(m):
        m["metrics"]["dev"].update(n=0, accuracy=0.0, score=0.0)
        m["scores"] = {k: 0.0 for k in m["scores"]}

    edit_json(c / "ft" / "metrics.json", fn)


def eval_without_slots(c: Path) -> None:
    """CASE/data whose held-out split holds rows of [CLS] then [SEP] only, so no slot can be masked
    (meta.json's hash updated)."""
    import numpy as np

    meta = json.loads((c / "data" / "meta.json").read_text())
    f = shard_path(c / "data", "eval")
    a = np.fromfile(f, dtype=meta["dtype"])
    a[:] = meta["special_ids"]["sep"]
    a[:: meta["seq_len"]] = meta["special_ids"]["cls"]  # every prepared row starts with [CLS]
    a.tofile(f)
    set_shard_hash(c / "data", "eval")


def rows() -> list[Case]:
    """A header-only dev file, a held-out split without slots, a score on n = 0."""
    C: list[Case] = []
    add = C.append
    # scores on n = 0: refused where they would be computed, rejected by verify
    add(
        Case(
            "evaluate-header-only-dev-file",
            "empty scores",
            [
                "evaluate",
                "--models",
                "{C}/run",
                "--out",
                "{C}/ev",
                *EV,
                "--set",
                "tasks=['sst2', 'qnli']",
            ],
            "refused before the first cell, naming the file; no output",
            needs=("run", "glue", "squad"),
            setup=header_only("glue/QNLI/dev.tsv"),
            absent=("ev",),
            says=("{C}/glue/QNLI/dev.tsv", "no examples"),
        )
    )
    add(
        Case(
            "pretrain-held-out-split-without-slots",
            "empty scores",
            pretrain("{C}/r"),
            "refused before the run starts (no eval loss from n = 0); no run dir",
            needs=("data",),
            setup=eval_without_slots,
            absent=("r",),
            watch=("data",),
            says=("held-out split", "n = 0"),
        )
    )
    add(
        Case(
            "verify-finetune-scored-on-n-0",
            "empty scores",
            ["verify", "{C}/ft"],
            "non-zero, names metrics.json",
            rc=(1, 2),
            needs=("run", "sst2"),
            setup=scored_on_nothing,
            watch=("ft",),
            says=("{C}/ft/metrics.json", "scored on n = 0"),
        )
    )
    return C
