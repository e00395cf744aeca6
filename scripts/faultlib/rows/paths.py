"""Bad paths: --out under a file, a config.toml broken by hand, sizes that cannot fit in memory."""

from __future__ import annotations

from pathlib import Path

from faultlib.case import Case
from faultlib.commands import finetune, prepare, pretrain
from faultlib.setups import make_file


def broken_config(c: Path) -> None:
    with open(c / "run" / "config.toml", "a") as f:
        f.write("\n[train\nsteps = = 3\n")  # edited by hand


def rows() -> list[Case]:
    """One line naming the path or the size, before anything is read or written."""
    C: list[Case] = []
    add = C.append
    # bad paths: one line naming the path, before anything is read or written
    under = "{C}/target/out"
    for cmd, argv, needs in (
        ("export", ["export", "{C}/run", under], ("run",)),
        ("pretrain", pretrain(under, "{B}/data"), ()),
        ("prepare", prepare("{C}/corpus.txt", under, "--vocab-size", "150"), ("corpus.txt",)),
        ("finetune", finetune("{C}/run", under), ("run", "sst2")),
    ):
        add(
            Case(
                f"{cmd}-out-under-a-file",
                "bad paths",
                argv,
                "refused naming the file in the way; file intact",
                needs=needs,
                setup=make_file("target"),
                watch=("target",),
                says=("{C}/target/out", "{C}/target is a file, not a directory"),
            )
        )
    add(
        Case(
            "resume-config-toml-broken-by-hand",
            "bad paths",
            ["pretrain", "--resume", "{C}/run", "--quiet"],
            "refused naming config.toml and the fix; the run untouched",
            needs=("run",),
            setup=broken_config,
            watch=("run",),
            says=("{C}/run/config.toml", "invalid TOML", "meta.json"),
        )
    )
    for setting, names in (
        ("model.hidden_size=1000000", "model.hidden_size"),
        ("model.num_layers=100000", "model.num_layers"),
        ("train.batch_size=50000000", "train.batch_size"),
    ):
        add(
            Case(
                f"pretrain-{setting.split('.', 1)[1].replace('_', '-').replace('=', '-')}",
                "bad paths",
                pretrain("{C}/r", "{B}/data", "--set", setting),
                "refused before allocating, with the numbers (GiB needed and "
                "available); no run dir",
                absent=("r",),
                says=("too large", "GiB", names, "train.memory_check"),
                timeout=120,
            )
        )
    return C
