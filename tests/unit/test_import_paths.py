"""One import path per name (docs/design.md §7): ``from tokendrop.a.b import name`` names the module
that defines ``name`` (a top-level ``def``, ``class`` or assignment, or a submodule ``a.b.name``) or
a package's ``__init__.py`` (``tokendrop``, ``tokendrop.data``, ...: the faces the packages show).
No other module hands on what it imported itself.  Read with ``ast`` from the source, the tests,
the scripts, the benchmarks and the examples; an access through a module object
(``trainer.MLMStep``) is not seen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = ("src", "tests", "scripts", "benchmarks", "examples")


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for p in src.rglob("*.py"):
        parts = p.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _top_level(body: list[ast.stmt]):
    """The module's top-level statements, those inside top-level ``if`` / ``try`` blocks too."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            yield from _top_level(node.body + handlers + node.orelse + node.finalbody)


def _defined(path: Path) -> tuple[set[str], dict[str, str]]:
    """(names the module defines, {name it imports: the module it imports it from})."""
    defined, imported = set(), {}
    for node in _top_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.update({a.asname or a.name: node.module for a in node.names})
    return defined, imported


def handed_on_imports(root: Path = ROOT, readers: tuple[str, ...] = READERS) -> list[str]:
    """``file:line: name from M (defined in D)`` for every import of a name from a module (not a
    package) that only imported it."""
    modules = _modules(root / "src")
    cache: dict[str, tuple[set[str], dict[str, str]]] = {}

    def facts(module: str) -> tuple[set[str], dict[str, str]]:
        if module not in cache:
            cache[module] = _defined(modules[module])
        return cache[module]

    out = []
    for top in readers:
        for p in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom) or node.module not in modules:
                    continue
                if modules[node.module].name == "__init__.py":
                    continue
                defined, imported = facts(node.module)
                for a in node.names:
                    if a.name in defined or f"{node.module}.{a.name}" in modules:
                        continue
                    if a.name in imported:
                        out.append(
                            f"{p.relative_to(root).as_posix()}:{node.lineno}: {a.name} from "
                            f"{node.module} (imported there from {imported[a.name]})"
                        )
    return out


def test_the_check_finds_a_name_handed_on(tmp_path):
    pkg = tmp_path / "src" / "tokendrop"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from tokendrop.low import thing\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def thing():\n    pass\n\n\nLIMIT = 3\n")
    (pkg / "mid.py").write_text(
        "from tokendrop.low import LIMIT, thing\n\n"
        "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n\n\n"
        "def own():\n    return thing()\n"
    )
    (pkg / "top.py").write_text(
        "from tokendrop import thing\n"  # a package's face
        "from tokendrop.low import LIMIT\n"  # the defining module
        "from tokendrop.mid import own, numpy\n"  # defined there (in a try block)
        "from tokendrop.mid import thing as t\n"  # handed on
        "from tokendrop.sub import x\n"  # a package
    )
    assert handed_on_imports(tmp_path, ("src",)) == [
        "src/tokendrop/top.py:4: thing from tokendrop.mid (imported there from tokendrop.low)"
    ]


def test_every_import_names_the_defining_module():
    bad = handed_on_imports()
    assert not bad, (
        "these imports take a name from a module that only imported it; import it from the "
        "module that defines it (docs/design.md §7):\n" + "\n".join(bad)
    )
