"""The docs stay true to the code: every module path, folder and dotted module name that
``docs/*.md`` and the README name exists, every ``tokendrop.X`` name of a docstring or comment of
the package exists (an importable module, or an attribute or field reached from one), and
docs/design.md §4.5's error table is the package's error classes (``errors.TokendropError`` and
every subclass, read from the source with ``ast``)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import re
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = SRC / "tokendrop"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# files of other projects that the docs name (the reference implementations, transformers' examples)
EXTERNAL = {
    "scheduler.py": "DeepSpeed's random-LTD (data_routing/scheduler.py)",
    "basic_layer.py": "DeepSpeed's random-LTD (data_routing/basic_layer.py)",
    "helper.py": "DeepSpeed's random-LTD (data_routing/helper.py)",
    "fairseq-sctd/criterions/cross_entropy.py": "ScTD's reference code",
    "tasks/fairseq_task.py": "ScTD's reference code (fairseq)",
    "run_mlm.py": "transformers' MLM example script",
}
# a Python file (``a/b.py``), a folder of the source or tests (``src/x/``, ``tests/unit/``,
# ``lab/bench/``)
PY = re.compile(r"(?<![\w./-])((?:\.\./)*(?:[\w.-]+/)*[\w-]+\.py)\b")
FOLDER = re.compile(r"`((?:[\w.-]+/)+)`")
DOTTED = re.compile(r"\btokendrop(?:\.[A-Za-z_]\w*)+")
# tokendrop.json, RUN.tokendrop.lock are file names
NOT_MODULES = {
    "json",
    "toml",
    "md",
    "txt",
    "lock",
}


def _repo_files() -> tuple[list[str], set[str]]:
    files, folders = [], set()
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if (
            rel.parts
            and rel.parts[0] in (".git", ".venv", "build", "dist")
            or "__pycache__" in rel.parts
        ):
            continue
        (files.append if p.is_file() else folders.add)(rel.as_posix())
    return files, folders


def _module_names() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def dotted_name_exists(name: str, modules: dict[str, Path]) -> bool:
    """Whether ``tokendrop.a.b.C.d`` names something: the longest prefix that is a module of the
    package is imported, and each further part is an attribute of what the previous one gave, a
    dataclass field or an annotated class attribute (reached through its resolved type)."""
    parts = name.split(".")
    if parts[-1] in NOT_MODULES:
        return True
    known = list(parts)
    while known and ".".join(known) not in modules:
        known.pop()
    if not known:
        return False
    obj = importlib.import_module(".".join(known))
    for part in parts[len(known) :]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if not isinstance(obj, type):
            return False
        fields = (
            {f.name: f.type for f in dataclasses.fields(obj)}
            if dataclasses.is_dataclass(obj)
            else {}
        )
        annotations = {
            k: v for c in obj.__mro__ for k, v in vars(c).get("__annotations__", {}).items()
        }
        if part not in fields and part not in annotations:
            return False
        hint = fields.get(part, annotations.get(part))
        if isinstance(hint, str):
            hint = vars(importlib.import_module(obj.__module__)).get(hint)
        if not isinstance(hint, type):
            return True  # a field whose type is not a plain class: nothing further to follow
        obj = hint
    return True


def _docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every docstring (module, class, function) and comment of ``path``."""
    source = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.append((first.lineno, first.value.value))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return sorted(out)


def stale_source_names(package: Path = PACKAGE) -> list[str]:
    """``file:line: name`` for every ``tokendrop.X`` name in a docstring or comment under
    ``package`` that names nothing (``line``: where the docstring or comment starts)."""
    modules = _module_names()
    out = []
    for p in sorted(package.rglob("*.py")):
        for line, text in _docstrings_and_comments(p):
            for m in DOTTED.finditer(text):
                if not dotted_name_exists(m.group(0), modules):
                    out.append(f"{p.relative_to(package.parent).as_posix()}:{line}: {m.group(0)}")
    return out


def stale_names(docs: list[Path] = DOCS) -> list[str]:
    """``doc:line: name`` for every module path, source folder or dotted module name that names
    nothing in the checkout (a file path may be given from any folder: ``bert/model.py``)."""
    files, folders = _repo_files()
    modules = _module_names()
    package_folders = {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    out = []
    for doc in docs:
        here = doc.parent if doc.parent.is_relative_to(ROOT) else ROOT / "docs"
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in PY.finditer(line):
                path = m.group(1)
                if path.startswith("../"):
                    target = (here / path).resolve()
                    path = (
                        target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else path
                    )
                if path not in EXTERNAL and not any(
                    f == path or f.endswith("/" + path) for f in files
                ):
                    out.append(f"{doc.name}:{n}: {m.group(1)}")
            for m in FOLDER.finditer(line):
                path = m.group(1).rstrip("/")
                if path.split("/")[0] not in {"src", "tests", *package_folders}:
                    continue  # a run directory's or a data directory's layout
                if not any(f == path or f.endswith("/" + path) for f in folders):
                    out.append(f"{doc.name}:{n}: {m.group(1)}")
            for m in DOTTED.finditer(line):
                if not dotted_name_exists(m.group(0), modules):
                    out.append(f"{doc.name}:{n}: {m.group(0)}")
    return out


def test_the_stale_name_check_finds_stale_names(tmp_path):
    doc = ROOT / "docs" / "design.md"
    fake = tmp_path / "design.md"
    fake.write_text(
        "`models/bert/model.py` and `dropping/engine.py`; `hf_bert.py`, `train.py`\n"
        "`src/tokendrop/bench/` `lab/bench/` `checkpoints/step-N/`\n"
        "tokendrop.models.families.FAMILIES tokendrop.model tokendrop.json "
        "tokendrop.errors.NoSuchError\n"
        "DeepSpeed's scheduler.py\n"
    )
    bad = stale_names([fake])
    assert bad == [
        "design.md:1: hf_bert.py",
        "design.md:1: train.py",
        "design.md:2: src/tokendrop/bench/",
        "design.md:3: tokendrop.model",
        "design.md:3: tokendrop.errors.NoSuchError",
    ], bad
    assert doc.exists()


def test_every_name_the_docs_give_exists():
    bad = stale_names()
    assert not bad, (
        "the docs name modules, folders or names that do not exist (correct the doc; a file of "
        "another project goes into EXTERNAL):\n" + "\n".join(bad)
    )


def test_the_source_name_check_finds_stale_names(tmp_path):
    pkg = tmp_path / "tokendrop"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        textwrap.dedent(
            '''\
            """See :func:`tokendrop.runs.files.atomic_file`, ``tokendrop.runs.atomic_file``."""


            def f():
                """``tokendrop.config.Config.train.steps``, ``tokendrop.config.Config.nothing``."""
                # tokendrop.bench.longctx and tokendrop.lab.bench.longctx
                return "tokendrop.flops"  # a string is no docstring
            '''
        )
    )
    assert stale_source_names(pkg) == [
        "tokendrop/a.py:1: tokendrop.runs.atomic_file",
        "tokendrop/a.py:5: tokendrop.config.Config.nothing",
        "tokendrop/a.py:6: tokendrop.bench.longctx",
    ]


def test_every_name_the_docstrings_and_comments_give_exists():
    bad = stale_source_names()
    assert not bad, (
        "docstrings or comments name tokendrop modules or attributes that do not exist (name the "
        "module that defines it):\n" + "\n".join(bad)
    )


# --- docs/design.md §4.5: the error classes ---------------------------------------------------

BUILTINS = {"Exception", "ValueError", "RuntimeError", "OSError", "KeyError", "TypeError"}
ERROR_TABLE = (
    "<!-- the error classes: tests/unit/test_docs_names.py writes this table (error_table) -->"
)


def error_classes(package: Path = PACKAGE) -> list[tuple[str, str, list[str]]]:
    """(class, module path under the package, its bases) for ``TokendropError`` and every class of
    the package that derives from it, in the order of the modules' paths and lines."""
    found: dict[str, tuple[str, int, list[str]]] = {}
    for p in sorted(package.rglob("*.py")):
        for node in ast.parse(p.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                found[node.name] = (p.relative_to(package).as_posix(), node.lineno, bases)

    def derives(name: str) -> bool:
        return name == "TokendropError" or name in found and any(derives(b) for b in found[name][2])

    rows = [
        (name, path, line, bases) for name, (path, line, bases) in found.items() if derives(name)
    ]
    return [
        (name, path, bases)
        for name, path, _, bases in sorted(rows, key=lambda r: (r[1] != "errors.py", r[1], r[2]))
    ]


def error_table(classes: list[tuple[str, str, list[str]]]) -> str:
    """§4.5's table: each class, its module, the package class it refines and its built-in base."""
    known = {name: bases for name, _, bases in classes}

    def builtin(name: str) -> str:
        bases = known.get(name, [])
        direct = [b for b in bases if b in BUILTINS]
        return direct[0] if direct else next((builtin(b) for b in bases if b in known), "Exception")

    lines = ["| class | module | derives from | built-in base |", "|---|---|---|---|"]
    for name, path, bases in classes:
        parent = ", ".join(f"`{b}`" for b in bases if b in known) or "(the root)"
        lines.append(f"| `{name}` | `{path}` | {parent} | `{builtin(name)}` |")
    return "\n".join(lines)


def test_the_error_table_reads_the_classes(tmp_path):
    (tmp_path / "errors.py").write_text(
        "class TokendropError(Exception):\n    pass\n\n\n"
        "class ConfigError(TokendropError, ValueError):\n    pass\n"
    )
    (tmp_path / "a.py").write_text(
        "from errors import ConfigError\n\n\nclass StudyError(ConfigError):\n    pass\n\n\n"
        "class Other(ValueError):\n    pass\n"
    )
    classes = error_classes(tmp_path)
    assert classes == [
        ("TokendropError", "errors.py", ["Exception"]),
        ("ConfigError", "errors.py", ["TokendropError", "ValueError"]),
        ("StudyError", "a.py", ["ConfigError"]),
    ]
    assert error_table(classes).splitlines()[2:] == [
        "| `TokendropError` | `errors.py` | (the root) | `Exception` |",
        "| `ConfigError` | `errors.py` | `TokendropError` | `ValueError` |",
        "| `StudyError` | `a.py` | `ConfigError` | `ValueError` |",
    ]


def test_design_md_lists_every_error_class():
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert ERROR_TABLE in text, f"docs/design.md §4.5 lost the line {ERROR_TABLE}"
    table = text.split(ERROR_TABLE, 1)[1].strip("\n").split("\n\n", 1)[0]
    want = error_table(error_classes())
    assert table == want, (
        "docs/design.md §4.5's error table is not the package's; paste this in its place:\n" + want
    )
