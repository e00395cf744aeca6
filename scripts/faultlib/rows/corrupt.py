"""Corrupt files: checkpoints, prepared data and every output ``verify`` checks, bit-flipped, cut
short or edited by hand."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case
from faultlib.commands import CKPT, EV, cli, finetune, pretrain, run_cli
from faultlib.files import (
    checkpoints,
    ckpt_ok,
    edit_json,
    flip,
    flip_byte,
    load_tensors,
    save_tensors,
    set_shard_hash,
    sha256,
    shard_path,
    truncate,
)
from faultlib.setups import chain, chain_checks, says_in_output


def oov_token(c: Path) -> None:
    """Token 10 of every training sequence set to an id far above the vocabulary (meta.json's hash
    updated: only a bound check can find it)."""
    import numpy as np

    meta = json.loads((c / "data" / "meta.json").read_text())
    f = shard_path(c / "data")
    a = np.fromfile(f, dtype=meta["dtype"]).reshape(-1, meta["seq_len"])
    a[:, 10] = np.iinfo(a.dtype).max // 2
    a.tofile(f)
    set_shard_hash(c / "data")


def foreign_checkpoint(c: Path) -> None:
    """Replace the run's step-2 checkpoint by the step-2 checkpoint of a 2-layer run on the same
    data."""
    cli(pretrain(str(c / "other"), str(c / "data"), "--set", "model.num_layers=2"), c)
    shutil.rmtree(c / "run" / "checkpoints" / "step-00000002")
    shutil.copytree(
        c / "other" / "checkpoints" / "step-00000002", c / "run" / "checkpoints" / "step-00000002"
    )
    shutil.rmtree(c / "other")


def run_into(rel: str, argv: Callable[[Path], list[str]]) -> Callable[[Path], None]:
    def setup(c: Path) -> None:
        run_cli(argv(c), c)

    return setup


def ft_into(rel: str, *extra: str) -> Callable[[Path], None]:
    return run_into(
        rel, lambda c: [a.replace("{C}", str(c)) for a in finetune("{C}/run", "{C}/" + rel, *extra)]
    )


def ev_into(rel: str) -> Callable[[Path], None]:
    return run_into(
        rel,
        lambda c: [
            a.replace("{C}", str(c))
            for a in ["evaluate", "--models", "{C}/run", "--out", "{C}/" + rel, *EV]
        ],
    )


def cell_file(rel: str, name: str) -> Callable[[Path], Path]:
    return lambda c: next((c / rel).glob(f"cells/*/*/*/{name}"))


MINI_STUDY = [
    "study",
    "--config",
    "study-tiny",
    "--set",
    "methods=['baseline']",
    "--set",
    "drop_rates=[0.0]",
    "--set",
    'inspect_method="baseline"',
]


def rows() -> list[Case]:
    """Weights and data verified before they are used."""
    C: list[Case] = []
    add = C.append
    # verify weights and data before using them
    add(
        Case(
            "export-bit-flipped-checkpoint",
            "corrupt files",
            ["export", CKPT, "{C}/out"],
            "refused naming the file",
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            watch=("run",),
            absent=("out",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "export-truncated-checkpoint",
            "corrupt files",
            ["export", CKPT, "{C}/out"],
            "refused naming the file",
            needs=("run",),
            setup=lambda c: truncate(c / CKPT[4:] / "model.safetensors"),
            watch=("run",),
            absent=("out",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "finetune-bit-flipped-checkpoint",
            "corrupt files",
            finetune(CKPT, "{C}/ft"),
            "refused naming the file",
            needs=("run", "sst2"),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("ft",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "inspect-bit-flipped-state",
            "corrupt files",
            ["inspect", "{C}/run", "--out", "{C}/ins", "--examples", "1"],
            "refused naming the file (every checkpoint corrupt)",
            needs=("run",),
            setup=lambda c: [flip_byte(ck / "state.safetensors") for ck in checkpoints(c / "run")],
            absent=("ins",),
            says=("state.safetensors",),
        )
    )
    add(
        Case(
            "evaluate-bit-flipped-checkpoint",
            "corrupt files",
            ["evaluate", "--models", CKPT, "--out", "{C}/ev", *EV],
            "refused naming the file",
            needs=("run", "glue", "squad"),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("ev",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "init-from-bit-flipped-checkpoint",
            "corrupt files",
            [*pretrain("{C}/r", "{B}/data"), "--init", CKPT],
            "refused naming the file; no run dir",
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            absent=("r",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "resume-every-checkpoint-corrupt",
            "corrupt files",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused: no valid checkpoint; run untouched",
            needs=("run",),
            setup=lambda c: [flip_byte(ck / "model.safetensors") for ck in checkpoints(c / "run")],
            watch=("run",),
            says=("checkpoint",),
        )
    )
    add(
        Case(
            "data-meta-counts-vs-shard",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming meta.json/shard; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json",
                lambda d: d["splits"]["train"].update(
                    num_sequences=d["splits"]["train"]["num_sequences"] + 1
                ),
            ),
            absent=("r",),
            watch=("data",),
        )
    )
    add(
        Case(
            "data-truncated-shard",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming the shard; no run dir",
            needs=("data",),
            setup=lambda c: truncate(shard_path(c / "data")),
            absent=("r",),
            watch=("data",),
        )
    )
    add(
        Case(
            "data-token-id-out-of-vocab",
            "corrupt files",
            pretrain("{C}/r"),
            "refused naming the shard (id >= vocab size, found at open or per batch); no "
            "checkpoint of it",
            needs=("data",),
            setup=oov_token,
            watch=("data",),
            says=("train.bin", "vocab"),
            check=lambda c, o: (
                "a checkpoint was written from the bad data" if checkpoints(c / "r") else None
            ),
        )
    )
    add(
        Case(
            "verify-good-run",
            "corrupt files",
            ["verify", "{C}/run"],
            "exit 0, run untouched",
            rc=0,
            needs=("run",),
            watch=("run",),
        )
    )
    add(
        Case(
            "verify-good-data",
            "corrupt files",
            ["verify", "{C}/data"],
            "exit 0",
            rc=0,
            needs=("data",),
            watch=("data",),
        )
    )
    add(
        Case(
            "verify-bit-flipped-checkpoint",
            "corrupt files",
            ["verify", CKPT],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run",),
            setup=flip(CKPT[4:] + "/model.safetensors"),
            watch=("run",),
            says=("model.safetensors",),
        )
    )
    add(
        Case(
            "verify-run-with-truncated-state",
            "corrupt files",
            ["verify", "{C}/run"],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run",),
            setup=lambda c: truncate(c / CKPT[4:] / "state.safetensors"),
            watch=("run",),
            says=("state.safetensors",),
        )
    )
    add(
        Case(
            "verify-bit-flipped-shard",
            "corrupt files",
            ["verify", "{C}/data"],
            "non-zero, names the shard",
            rc=(1, 2),
            needs=("data",),
            setup=lambda c: flip_byte(shard_path(c / "data"), 50),
            watch=("data",),
        )
    )
    return C


def hand_edited_meta() -> list[Case]:
    """A prepared dataset's meta.json and a checkpoint's meta.json edited by hand."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "data-meta-missing",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming meta.json; no run dir",
            needs=("data",),
            setup=lambda c: (c / "data" / "meta.json").unlink(),
            absent=("r",),
            says=("meta.json",),
        )
    )
    add(
        Case(
            "data-meta-invalid-json",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming meta.json; no run dir",
            needs=("data",),
            setup=lambda c: (c / "data" / "meta.json").write_text('{"format": "tokendrop-prep'),
            absent=("r",),
            says=("meta.json",),
        )
    )
    add(
        Case(
            "data-meta-seq-len-a-string",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json", lambda d: d.update(seq_len="sixty")
            ),
            absent=("r",),
            says=("seq_len",),
        )
    )
    add(
        Case(
            "data-meta-special-ids-a-list",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(
                c / "data" / "meta.json", lambda d: d.update(special_ids=[0, 1])
            ),
            absent=("r",),
            says=("special_ids",),
        )
    )
    add(
        Case(
            "data-meta-splits-a-string",
            "bad input, full disk",
            pretrain("{C}/r"),
            "refused naming the field; no run dir",
            needs=("data",),
            setup=lambda c: edit_json(c / "data" / "meta.json", lambda d: d.update(splits="train")),
            absent=("r",),
            says=("splits",),
        )
    )

    def step3(c):
        return edit_json(c / CKPT.replace("{C}/", "") / "meta.json", lambda d: d.update(step=3))

    add(
        Case(
            "verify-meta-step-vs-directory",
            "corrupt files",
            ["verify", "{C}/run"],
            "fails naming the step and the directory",
            rc=(1, 2),
            needs=("run",),
            setup=step3,
            watch=("run",),
            says=("records step 3 but its directory is step-00000004",),
        )
    )
    add(
        Case(
            "resume-meta-step-vs-directory",
            "corrupt files",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "refused naming the step and the directory; run untouched",
            needs=("run",),
            setup=step3,
            watch=("run",),
            says=("records step 3 but its directory is step-00000004",),
        )
    )
    add(
        Case(
            "verify-checkpoint-of-another-run",
            "corrupt files",
            ["verify", "{C}/run"],
            "fails naming the field that differs from the run's config",
            rc=(1, 2),
            needs=("run", "data"),
            setup=foreign_checkpoint,
            says=("model.num_layers is 2 but the run's config.toml has 4",),
        )
    )
    return C


def verified_outputs() -> list[Case]:
    """``verify`` of a finetune, an evaluate and a study output: good, and corrupt."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "verify-good-finetune",
            "corrupt files",
            ["verify", "{C}/ft"],
            "exit 0",
            rc=0,
            needs=("run", "sst2"),
            setup=ft_into("ft", "--set", "save_model=true"),
            watch=("ft",),
        )
    )
    add(
        Case(
            "verify-finetune-flipped-saved-model",
            "corrupt files",
            ["verify", "{C}/ft"],
            "non-zero, names the weights file",
            rc=(1, 2),
            needs=("run", "sst2"),
            watch=("ft",),
            says=("{C}/ft/model/model.safetensors", "sha256"),
            setup=chain(
                ft_into("ft", "--set", "save_model=true"),
                lambda c: flip_byte(c / "ft/model/model.safetensors"),
            ),
        )
    )
    add(
        Case(
            "verify-finetune-torn-metrics",
            "corrupt files",
            ["verify", "{C}/ft"],
            "non-zero, names metrics.json",
            rc=(1, 2),
            needs=("run", "sst2"),
            watch=("ft",),
            says=("{C}/ft/metrics.json", "invalid JSON"),
            setup=chain(ft_into("ft"), lambda c: truncate(c / "ft" / "metrics.json")),
        )
    )
    add(
        Case(
            "verify-good-evaluate",
            "corrupt files",
            ["verify", "{C}/ev"],
            "exit 0",
            rc=0,
            needs=("run", "glue", "squad"),
            setup=ev_into("ev"),
            watch=("ev",),
        )
    )
    add(
        Case(
            "verify-evaluate-cell-predictions-gone",
            "corrupt files",
            ["verify", "{C}/ev"],
            "non-zero, names the file",
            rc=(1, 2),
            needs=("run", "glue", "squad"),
            watch=("ev",),
            says=("dev.tsv", "recomputes the cell"),
            setup=chain(
                ev_into("ev"), lambda c: cell_file("ev", "predictions/dev.tsv")(c).unlink()
            ),
        )
    )
    add(
        Case(
            "verify-good-study",
            "corrupt files",
            ["verify", "{C}/st"],
            "exit 0",
            rc=0,
            watch=("st",),
            setup=run_into("st", lambda c: [*MINI_STUDY, "--out", str(c / "st")]),
        )
    )
    add(
        Case(
            "verify-study-flipped-run-checkpoint",
            "corrupt files",
            ["verify", "{C}/st"],
            "non-zero, names the file",
            rc=(1, 2),
            watch=("st",),
            says=("{C}/st/runs/baseline-seed0/checkpoints/step-00000008/model.safetensors",),
            setup=chain(
                run_into("st", lambda c: [*MINI_STUDY, "--out", str(c / "st")]),
                lambda c: flip_byte(
                    c / "st/runs/baseline-seed0/checkpoints/step-00000008/model.safetensors"
                ),
            ),
        )
    )
    return C


def rows_and_counts_edited(c: Path) -> None:
    """CASE/data/meta.json with T halved and every split's sequence count doubled: consistent with
    the shards' sizes, so only their bytes (rows that start with [CLS]) can tell."""

    def fn(d):
        d["seq_len"] //= 2
        for info in d["splits"].values():
            info["num_sequences"] *= 2

    edit_json(c / "data" / "meta.json", fn)


def vocab_size_raised(c: Path) -> None:
    """CASE/data/meta.json says 50 more word pieces than its vocab.txt holds."""

    def fn(d):
        d["vocab_size"] += 50
        d["tokenizer"]["num_ids"] = d["vocab_size"]

    edit_json(c / "data" / "meta.json", fn)


def nan_weights_rehashed(c: Path) -> None:
    """One NaN in the newest checkpoint's embeddings, its meta.json's size and sha256 rewritten:
    only a check of the values can find it."""
    import numpy as np

    ck = checkpoints(c / "run")[-1]
    p = ck / "model.safetensors"
    t = load_tensors(p)
    key = next(k for k in t if k.endswith("word_embeddings.weight"))
    t[key][0, 0] = np.nan
    save_tensors(t, p)
    edit_json(
        ck / "meta.json",
        lambda d: d["files"]["model.safetensors"].update(bytes=p.stat().st_size, sha256=sha256(p)),
    )


NAN_SAID = ("{C}/run/checkpoints/step-00000004/model.safetensors", "NaN/inf value(s)")


def edited_consistently() -> list[Case]:
    """Edits that keep every recorded size and hash consistent: a prepared dataset's T and counts,
    its vocabulary size, NaN weights in a rehashed checkpoint -- found by their values."""
    C: list[Case] = []
    add = C.append
    for what, argv in (("verify", ["verify", "{C}/data"]), ("pretrain", pretrain("{C}/r"))):
        add(
            Case(
                f"{what}-data-rows-and-counts-edited",
                "corrupt files",
                argv,
                "refused naming the shard: its rows do not start with [CLS]",
                rc=(1, 2),
                needs=("data",),
                setup=rows_and_counts_edited,
                watch=("data",),
                absent=("r",),
                says=("{C}/data/train.bin", "do not start with [CLS]", "seq_len or num_sequences"),
            )
        )
    add(
        Case(
            "verify-data-vocab-size-above-vocab-txt",
            "corrupt files",
            ["verify", "{C}/data"],
            "refused naming meta.json, its vocab_size and vocab.txt's",
            rc=(1, 2),
            needs=("data",),
            setup=vocab_size_raised,
            watch=("data",),
            says=("{C}/data/meta.json: vocab_size 200", "{C}/data/vocab.txt holds 150 tokens"),
        )
    )
    for what, argv, absent in (
        ("verify", ["verify", "{C}/run"], ()),
        ("export", ["export", "{C}/run", "{C}/out"], ("out",)),
    ):
        add(
            Case(
                f"{what}-nan-weights-rehashed",
                "corrupt files",
                argv,
                "refused naming the file and the tensor; the run untouched",
                rc=(1, 2),
                needs=("run",),
                setup=nan_weights_rehashed,
                watch=("run",),
                absent=absent,
                says=(*NAN_SAID, "word_embeddings"),
            )
        )
    add(
        Case(
            "resume-nan-weights-rehashed",
            "corrupt files",
            ["pretrain", "--resume", "{C}/run", "--quiet", "--set", "train.steps=6"],
            "a warning naming the file and its NaN; resumes from the checkpoint before",
            rc=0,
            needs=("run",),
            setup=nan_weights_rehashed,
            one_line=False,
            check=chain_checks(
                says_in_output("run/checkpoints/step-00000004/model.safetensors", *NAN_SAID[1:]),
                lambda c, o: (
                    None
                    if ckpt_ok(c / "run" / "checkpoints" / "step-00000006")
                    else "no intact step-6 checkpoint"
                ),
            ),
        )
    )
    return C
