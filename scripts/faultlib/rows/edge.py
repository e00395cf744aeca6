"""Edge settings: runs that must succeed and stay sound (clipping off, a diverging learning rate,
bf16 on CPU, a [PAD] id that is not 0, packing, file modes, warnings on stderr)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome
from faultlib.commands import CKPT, prepare, pretrain, run_cli
from faultlib.files import checkpoints, flip, load_tensors, metrics, sha256, shard_path
from faultlib.setups import chain, fresh_run


def no_sep_sep(c: Path, o: Outcome) -> str | None:
    import numpy as np

    if o.rc != 0:
        return None
    d = c / "out"
    meta = json.loads((d / "meta.json").read_text())
    sep = meta["special_ids"]["sep"]
    n = 0
    for split in ("train", "eval"):
        a = np.fromfile(shard_path(d, split), dtype=meta["dtype"]).reshape(-1, meta["seq_len"])
        n += int(((a[:, 1:] == sep) & (a[:, :-1] == sep)).sum())
    return f"{n} [SEP][SEP] pairs in the packed shards" if n else None


def normal_permissions(rel: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        bad = sorted(
            str(p.relative_to(c)) + f" {oct(p.stat().st_mode & 0o777)}"
            for p in (c / rel).rglob("*")
            if p.is_file() and p.stat().st_mode & 0o777 != 0o644
        )
        return f"files not 0644 under umask 022: {', '.join(bad[:3])}" if bad else None

    return check


def finite_checkpoints(c: Path, o: Outcome) -> str | None:
    import numpy as np

    for ck in checkpoints(c / "r"):
        t = load_tensors(ck / "model.safetensors")
        bad = [k for k, v in t.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:
            return f"{ck.name} holds non-finite weights ({bad[0]})"
    return None


def same_weights_as(other: str) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        if o.rc != 0:
            return None
        a, b = checkpoints(c / "r"), checkpoints(c / other)
        if not a or not b:
            return "no checkpoint to compare"
        if sha256(a[-1] / "model.safetensors") != sha256(b[-1] / "model.safetensors"):
            return f"weights differ from the run with {other} (grad_clip=0 is not 'off')"
        return None

    return check


def pad_not_zero_vocab(c: Path) -> None:
    lines = (c / "other-vocab.txt").read_text().splitlines()
    pad = lines.index("[PAD]")
    lines.pop(pad)
    lines.insert(7, "[PAD]")
    (c / "pad7-vocab.txt").write_text("\n".join(lines) + "\n")


def rows() -> list[Case]:
    """Numerical edge settings and what every output must hold."""
    C: list[Case] = []
    add = C.append
    # numerical and distributed edge cases
    add(
        Case(
            "half-random-more-random-than-kept",
            "edge settings",
            pretrain(
                "{C}/r",
                "{B}/data",
                "--set",
                "drop.method=half_random",
                "--set",
                "drop.rate=0.75",
                "--set",
                "drop.half_random_frac=0.5",
            ),
            "refused at config time; no run dir",
            absent=("r",),
            says=("half_random",),
        )
    )
    add(
        Case(
            "grad-clip-0-is-off",
            "edge settings",
            pretrain("{C}/r", "{C}/data", "--set", "train.grad_clip=0"),
            "runs; same weights as with clipping off (1e30)",
            rc=0,
            needs=("data",),
            setup=fresh_run("ref", "--set", "train.grad_clip=1e30"),
            check=same_weights_as("ref"),
            one_line=False,
        )
    )
    add(
        Case(
            "diverging-lr-no-nonfinite-checkpoint",
            "edge settings",
            pretrain(
                "{C}/r",
                "{B}/data",
                "--set",
                "train.lr=1e30",
                "--set",
                "train.ckpt_every=1",
                "--set",
                "train.steps=4",
                "--set",
                "train.warmup_steps=0",
            ),
            "stops (one line) or skips; no checkpoint holds non-finite weights",
            rc=(0, 2),
            check=finite_checkpoints,
        )
    )
    add(
        Case(
            "bf16-cpu-unpacked-mask-fill",
            "edge settings",
            pretrain("{C}/r", "{C}/unpacked", "--set", "train.precision=bf16"),
            "runs with finite losses",
            rc=0,
            needs=("corpus.txt",),
            one_line=False,
            setup=lambda c: run_cli(
                prepare(
                    str(c / "corpus.txt"), str(c / "unpacked"), "--vocab-size", "150", "--unpacked"
                ),
                c,
            ),
            check=lambda c, o: (
                None
                if all(
                    r["loss"] == r["loss"] and abs(r["loss"]) != float("inf")
                    for r in metrics(c / "r")
                    if "loss" in r
                )
                else "non-finite loss"
            ),
        )
    )
    add(
        Case(
            "pad-id-not-zero",
            "edge settings",
            pretrain("{C}/r", "{C}/unpacked"),
            "runs on data whose [PAD] is id 7",
            rc=0,
            needs=("corpus.txt", "other-vocab.txt"),
            one_line=False,
            setup=chain(
                pad_not_zero_vocab,
                lambda c: run_cli(
                    prepare(
                        str(c / "corpus.txt"),
                        str(c / "unpacked"),
                        "--vocab",
                        str(c / "pad7-vocab.txt"),
                        "--unpacked",
                    ),
                    c,
                ),
            ),
        )
    )
    add(
        Case(
            "packing-no-sep-sep",
            "edge settings",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150", "--seq-len", "32"),
            "packed shards hold no [SEP][SEP]",
            rc=0,
            needs=("corpus.txt",),
            check=no_sep_sep,
            one_line=False,
        )
    )
    add(
        Case(
            "export-file-permissions",
            "edge settings",
            ["export", "{C}/run", "{C}/out"],
            "files 0644 under umask 022",
            rc=0,
            needs=("run",),
            check=normal_permissions("out"),
            one_line=False,
        )
    )
    add(
        Case(
            "checkpoint-file-permissions",
            "edge settings",
            pretrain("{C}/r", "{B}/data"),
            "files 0644 under umask 022",
            rc=0,
            check=normal_permissions("r/checkpoints"),
            one_line=False,
        )
    )
    add(
        Case(
            "warnings-on-stderr",
            "edge settings",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "a corrupt newest checkpoint: warning on stderr, resumes from the previous one",
            rc=0,
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            one_line=False,
            check=lambda c, o: (
                None
                if "warning" in o.stderr.lower()
                and "warning" not in o.stdout.replace(str(c), "CASE").lower()
                else "the warning is not on stderr (only)"
            ),
        )
    )
    return C
