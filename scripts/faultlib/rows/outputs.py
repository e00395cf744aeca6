"""Outputs: no command deletes or overwrites what tokendrop did not write (export, inspect,
prepare, pretrain, finetune, evaluate, study, demo)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case
from faultlib.commands import EV, finetune, prepare, pretrain
from faultlib.setups import MINE, make_dir, make_file


def copied_study_data(rel: str, overrides: list[str]) -> Callable[[Path], None]:
    """``rel/data/prepared.json`` of study-tiny with ``overrides``: another study's data directory
    copied into a new --out (its stamp only: the refusal reads nothing else)."""

    def setup(c: Path) -> None:
        from tokendrop.lab.study import load_study
        from tokendrop.lab.study.data import data_fingerprint

        d = c / rel / "data"
        d.mkdir(parents=True, exist_ok=True)
        fp = data_fingerprint(load_study("study-tiny", overrides))
        (d / "prepared.json").write_text(json.dumps({"fingerprint": fp}) + "\n")

    return setup


def rows() -> list[Case]:
    """Every command's --out: a foreign directory, a file, its own input, a copied study's data
    (and inspect's --text)."""
    C: list[Case] = []
    add = C.append
    # no deletion of what tokendrop did not write
    add(
        Case(
            "export-into-foreign-dir",
            "outputs",
            ["export", "{C}/run", "{C}/mine"],
            "refused; the dir untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine", "run"),
            says=("{C}/mine", "--overwrite"),
        )
    )
    add(
        Case(
            "export-overwrite-foreign-dir",
            "outputs",
            ["export", "{C}/run", "{C}/mine", "--overwrite"],
            "refused (not tokendrop's); untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("not written by tokendrop",),
        )
    )
    add(
        Case(
            "export-to-a-file",
            "outputs",
            ["export", "{C}/run", "{C}/target"],
            "refused; file intact, no .old-*",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
            says=("not a directory",),
        )
    )
    add(
        Case(
            "export-overwrite-a-file",
            "outputs",
            ["export", "{C}/run", "{C}/target", "--overwrite"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "export-overwrite-its-own-input",
            "outputs",
            ["export", "{C}/run", "{C}/run", "--overwrite"],
            "refused; the run untouched",
            needs=("run",),
            watch=("run",),
        )
    )
    add(
        Case(
            "export-overwrite-previous-export",
            "outputs",
            ["export", "{C}/run", "{C}/hf", "--overwrite"],
            "replaces only its own earlier export",
            rc=0,
            needs=("run", "hf"),
            watch=("run",),
        )
    )
    add(
        Case(
            "inspect-out-a-file",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/target", "--examples", "1"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target", "run"),
        )
    )
    add(
        Case(
            "inspect-text-without-tokens",
            "edge settings",
            ["inspect", "{C}/run", "--text", "   "],
            "refused: the text has no tokens; nothing written",
            needs=("run",),
            watch=("run",),
            says=("has no tokens for the run's tokenizer",),
        )
    )
    add(
        Case(
            "inspect-text-with-out",
            "edge settings",
            ["inspect", "{C}/run", "--text", "a b", "--out", "{C}/ins"],
            "refused: --text writes nothing; nothing written",
            needs=("run",),
            watch=("run",),
            absent=("ins",),
            says=("--text prints what the run keeps",),
        )
    )
    add(
        Case(
            "inspect-overwrite-a-file",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/target", "--overwrite"],
            "refused; file intact",
            needs=("run",),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "inspect-into-foreign-dir",
            "outputs",
            ["inspect", "{C}/run", "--out", "{C}/mine", "--overwrite"],
            "refused; untouched",
            needs=("run",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "prepare-into-foreign-dir",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/mine", "--vocab-size", "150"),
            "refused; untouched",
            needs=("corpus.txt",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("--overwrite",),
        )
    )
    add(
        Case(
            "prepare-overwrite-foreign-dir",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/mine", "--vocab-size", "150", "--overwrite"),
            "refused (not tokendrop's); untouched",
            needs=("corpus.txt",),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "prepare-overwrite-dir-holding-its-corpus",
            "outputs",
            prepare("{C}/data/corpus.txt", "{C}/data", "--vocab-size", "150", "--overwrite"),
            "refused; corpus and data intact",
            needs=("data", "corpus.txt"),
            setup=lambda c: shutil.copy(c / "corpus.txt", c / "data" / "corpus.txt"),
            watch=("data",),
            says=("input",),
        )
    )
    add(
        Case(
            "prepare-overwrite-dir-holding-its-vocab",
            "outputs",
            prepare("{C}/corpus.txt", "{C}/data", "--vocab", "{C}/data/vocab.txt", "--overwrite"),
            "refused; vocab and data intact",
            needs=("data", "corpus.txt"),
            watch=("data",),
            says=("input",),
        )
    )
    add(
        Case(
            "pretrain-out-existing-run",
            "outputs",
            pretrain("{C}/run", "{B}/data"),
            "refused, suggests --resume/--overwrite",
            needs=("run",),
            watch=("run",),
            says=("--resume",),
        )
    )
    add(
        Case(
            "pretrain-overwrite-foreign-dir",
            "outputs",
            pretrain("{C}/mine", "{B}/data", "--overwrite"),
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "pretrain-overwrite-an-export",
            "outputs",
            pretrain("{C}/hf", "{B}/data", "--overwrite"),
            "refused (another kind); untouched",
            needs=("hf",),
            watch=("hf",),
        )
    )
    add(
        Case(
            "finetune-into-foreign-dir",
            "outputs",
            finetune("{C}/run", "{C}/mine"),
            "refused; untouched",
            needs=("run", "sst2"),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "finetune-out-a-file",
            "outputs",
            finetune("{C}/run", "{C}/target", "--overwrite"),
            "refused; file intact",
            needs=("run", "sst2"),
            setup=make_file("target"),
            watch=("target",),
        )
    )
    add(
        Case(
            "evaluate-into-foreign-dir",
            "outputs",
            ["evaluate", "--models", "{C}/run", "--out", "{C}/mine", *EV],
            "refused; untouched",
            needs=("run", "glue", "squad"),
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "study-into-foreign-dir",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/mine"],
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
        )
    )
    add(
        Case(
            "study-copied-data-without-stamp",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/reuse", "--only"],
            "refused before any write: not a study's data directory; untouched",
            setup=make_dir("reuse/data", {"packed-32/meta.json": b"{}\n"}),
            watch=("reuse",),
            absent=("reuse/.tokendrop.json",),
            says=("{C}/reuse/data", "no prepared.json"),
        )
    )
    add(
        Case(
            "study-copied-data-of-another-config",
            "outputs",
            ["study", "--config", "study-tiny", "--out", "{C}/reuse", "--only"],
            "refused before any write: the copy's fingerprint names what differs; untouched",
            setup=copied_study_data("reuse", ["seq_len=16"]),
            watch=("reuse",),
            absent=("reuse/.tokendrop.json",),
            says=("{C}/reuse/data", "seq_len changed"),
        )
    )
    add(
        Case(
            "demo-into-foreign-dir",
            "outputs",
            ["demo", "--out", "{C}/mine", "--cache", "{C}/cache", "--no-finetune"],
            "refused before any download; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
            absent=("cache",),
        )
    )
    return C
