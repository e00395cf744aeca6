"""Inside ``tokendrop.train`` the whole ``Config`` stops at the trainer's entry and the resolution
step: every other function takes the sections (or the few values) it reads.  Checked on the source
with ``ast``: a parameter annotated ``Config`` or named ``cfg`` is allowed only in the functions of
:data:`TAKES_CONFIG`."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[3] / "src" / "tokendrop" / "train"

# (module, qualified function): why it takes the whole config
TAKES_CONFIG = {
    ("trainer", "pretrain"): "the entry: the user's Config",
    ("trainer", "_pretrain"): "the entry's body: builds the _Trainer",
    ("trainer", "_Trainer.__init__"): "the run: resolves the config and hands out its sections",
    ("run_config", "resolve_init"): "the resolution step",
    ("run_config", "resolve_run_config"): "the resolution step",
    ("run_config", "open_run_data"): "the resolution step",
    ("run_config", "resolve_config"): "the resolution step",
    ("console", "pretrain_banner"): "the start-up banner prints every section of the run",
}


def config_params(source: str, module: str) -> set[tuple[str, str]]:
    """(module, qualified function) of every function of ``source`` with a parameter annotated
    ``Config`` or named ``cfg``."""
    out: set[tuple[str, str]] = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                for p in a.posonlyargs + a.args + a.kwonlyargs:
                    ann = ast.unparse(p.annotation) if p.annotation is not None else ""
                    if p.arg == "cfg" or ann.strip("'\"") == "Config":
                        out.add((module, prefix + child.name))
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return out


def test_the_checker_finds_annotated_and_named_parameters():
    src = textwrap.dedent(
        """
        def a(cfg, x): ...
        def b(c: Config): ...
        def c(c: 'Config'): ...
        def d(tc: TrainConfig): ...
        class K:
            def __init__(self, cfg: Config): ...
        """
    )
    assert config_params(src, "m") == {("m", "a"), ("m", "b"), ("m", "c"), ("m", "K.__init__")}


def test_only_the_entry_and_the_resolution_step_take_the_whole_config():
    found: set[tuple[str, str]] = set()
    for path in sorted(TRAIN.glob("*.py")):
        found |= config_params(path.read_text(), path.stem)
    extra = sorted(found - set(TAKES_CONFIG))
    assert not extra, (
        "these tokendrop.train functions take the whole Config; pass the sections they read "
        f"(cfg.train, cfg.model, cfg.drop, cfg.data) or the values: {extra}"
    )
    assert set(TAKES_CONFIG) <= found, sorted(set(TAKES_CONFIG) - found)  # the list stays true
