"""Bad ``--init`` sources: a Hugging Face directory with a missing, foreign or broken config.json
or weights."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultlib.case import Case, Outcome
from faultlib.commands import ENV, PT, PY, finetune
from faultlib.files import edit_json, load_tensors, save_tensors


def init(src, data="{B}/data"):
    """The pretrain command from ``src``: the `continue-plain` preset has no model shape (it comes
    from the source); the tiny run settings on top."""
    return [
        "pretrain",
        "--config",
        "continue-plain",
        "--out",
        "{C}/r",
        "--set",
        f'data.path="{data}"',
        *PT,
        "--init",
        src,
    ]


def hf_config(c: Path, **changes: Any) -> None:
    def fn(d):
        d.update(changes)

    edit_json(c / "hf" / "config.json", fn)


def pickle_only(c: Path) -> None:
    """hf/ with pytorch_model.bin holding a pickled object that weights_only=True refuses, no
    safetensors."""
    hf = c / "hf"
    (hf / "model.safetensors").unlink()
    code = (
        "import datetime, sys, torch; torch.save({'bert.embeddings.word_embeddings.weight': "
        "torch.zeros(2, 2), 'when': datetime.date(2020, 1, 1)}, sys.argv[1])"
    )
    subprocess.run([PY, "-c", code, str(hf / "pytorch_model.bin")], check=True, env=ENV)


def mismatched_shapes(c: Path) -> None:
    p = c / "hf" / "model.safetensors"
    t = load_tensors(p)
    key = next(k for k in t if k.endswith("intermediate.dense.weight"))
    t[key] = t[key][: t[key].shape[0] // 2].copy()
    save_tensors(t, p)


def short_positions(c: Path) -> None:
    """hf/ whose model has max_position_embeddings=32 (consistent weights) < the data's T=64."""
    p = c / "hf" / "model.safetensors"
    t = load_tensors(p)
    key = next(k for k in t if k.endswith("position_embeddings.weight"))
    t[key] = t[key][:32].copy()
    for k in [k for k in t if k.endswith("position_ids")]:
        t[k] = t[k][..., :32].copy()
    save_tensors(t, p)
    hf_config(c, max_position_embeddings=32)


def saved_config_keeps(key: str, value: Any) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        d = json.loads((c / "ft" / "model" / "config.json").read_text())
        if d.get(key) != value:
            return f"ft/model/config.json has {key} = {d.get(key)!r}, the source {value!r}"
        r = subprocess.run(
            [PY, "-m", "tokendrop", "verify", str(c / "ft")],
            env=ENV,
            capture_output=True,
            text=True,
        )
        return None if r.returncode == 0 else f"verify ft failed: {r.stderr.strip()[:200]}"

    return check


def sources() -> list[Case]:
    """Sources refused before a run directory is made."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "init-dir-without-config-json",
            "--init",
            init("{C}/hf"),
            "refused naming config.json; no run dir",
            needs=("hf",),
            setup=lambda c: (c / "hf" / "config.json").unlink(),
            absent=("r",),
            watch=("hf",),
            says=("config.json",),
        )
    )
    add(
        Case(
            "init-roberta-config",
            "--init",
            init("{C}/hf"),
            "refused naming model_type; no run dir",
            needs=("hf",),
            setup=lambda c: hf_config(
                c, model_type="roberta", architectures=["RobertaForMaskedLM"]
            ),
            absent=("r",),
            watch=("hf",),
            says=("model_type",),
        )
    )
    add(
        Case(
            "init-modernbert-config",
            "--init",
            init("{C}/hf"),
            "a ModernBERT config over BERT weights: refused; no run dir",
            needs=("hf",),
            setup=lambda c: hf_config(
                c, model_type="modernbert", architectures=["ModernBertForMaskedLM"]
            ),
            absent=("r",),
            watch=("hf",),
            says=("model_type",),
        )
    )
    add(
        Case(
            "init-pickle-only-checkpoint",
            "--init",
            init("{C}/hf"),
            "refused (weights_only); no run dir",
            needs=("hf",),
            setup=pickle_only,
            absent=("r",),
            watch=("hf",),
            says=("pytorch_model.bin",),
        )
    )
    add(
        Case(
            "init-mismatched-tensor-shapes",
            "--init",
            init("{C}/hf"),
            "refused naming the tensor; no run dir",
            needs=("hf",),
            setup=mismatched_shapes,
            absent=("r",),
            watch=("hf",),
            says=("intermediate",),
        )
    )
    add(
        Case(
            "init-data-with-another-vocab",
            "--init",
            init("{C}/hf", "{B}/data-other"),
            "refused naming both vocabularies; no run dir",
            needs=("hf",),
            absent=("r",),
            watch=("hf",),
            says=("vocab",),
        )
    )
    add(
        Case(
            "init-seq-len-above-max-positions",
            "--init",
            init("{C}/hf"),
            "refused naming T, the source's learned positions and the source",
            needs=("hf",),
            setup=short_positions,
            absent=("r",),
            watch=("hf",),
            says=("T=64", "32 learned position embeddings", "{C}/hf"),
        )
    )
    add(
        Case(
            "init-missing-directory",
            "--init",
            init("{C}/nowhere"),
            "refused naming the path; no run dir",
            absent=("r",),
            says=("{C}/nowhere",),
        )
    )
    return C


def config_shapes() -> list[Case]:
    """config.json shapes, and a fine-tuned model's saved config."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "finetune-save-model-keeps-source-config",
            "--init",
            finetune("{C}/hf", "{C}/ft", "--set", "save_model=true"),
            "runs; the saved config.json keeps the source's sep_token_id; verify passes",
            rc=0,
            needs=("hf", "sst2"),
            setup=lambda c: hf_config(c, sep_token_id=3),
            check=saved_config_keeps("sep_token_id", 3),
            one_line=False,
        )
    )
    for key, val in (("num_hidden_layers", 0), ("hidden_size", 0), ("hidden_size", None)):
        what = "missing" if val is None else f"{val}"
        add(
            Case(
                f"init-config-{key.replace('_', '-')}-{what}",
                "--init",
                init("{C}/hf"),
                "refused naming config.json and the field (no preset shape); no run dir",
                needs=("hf",),
                setup=(
                    lambda f, v: (
                        lambda c: edit_json(
                            c / "hf" / "config.json",
                            lambda d: d.pop(f) if v is None else d.update({f: v}),
                        )
                    )
                )(key, val),
                absent=("r",),
                watch=("hf",),
                says=("{C}/hf/config.json", key),
            )
        )
    add(
        Case(
            "finetune-config-num-hidden-layers-0",
            "--init",
            finetune("{C}/hf", "{C}/ft"),
            "refused naming config.json and the field; no output",
            needs=("hf", "sst2"),
            setup=lambda c: hf_config(c, num_hidden_layers=0),
            absent=("ft",),
            watch=("hf",),
            says=("{C}/hf/config.json", "num_hidden_layers"),
        )
    )
    return C


def one_source() -> list[Case]:
    """Two sources for the starting weights (``--init`` and ``--set model.init``): refused."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "init-and-set-model-init",
            "--init",
            init("{C}/hf") + ["--set", 'model.init="{C}/run"'],
            "refused naming both sources; no run dir",
            needs=("hf", "run"),
            absent=("r",),
            watch=("hf", "run"),
            says=("--init and --set model.init both name the weights",),
        )
    )
    return C
