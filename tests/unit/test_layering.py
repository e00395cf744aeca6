"""The package's import structure: the folders form a layered graph (docs/design.md §4.1).

Every folder of ``src/tokendrop`` (and every module at its top, and the package's ``__init__.py``)
has a place in :data:`LAYER_ORDER`; an import between folders goes from a higher one to a lower
one, so the folder graph has no cycle.  The test names each edge that goes up, with the
``file:line`` of every import that makes it, and docs/design.md §4.1 prints the graph this test
computes.  Besides: nothing outside ``lab/`` imports ``lab/`` but the command line (``cli.py``,
above both, dispatches to the harnesses); no module cycle either; parsing a config stays low; no
module imports another module's private (``_``) names; imports sit at the top of their modules;
a selection method is asked about through its registry row, never by its name.

Every module is parsed with ``ast`` and every ``import`` / ``from ... import`` counts -- at the top
of the module, inside a function, under ``if TYPE_CHECKING:`` alike -- so a cycle cannot hide behind
an import deferred into a function.  Relative imports are resolved against the importing module's
package; ``from pkg import name`` is an edge to the submodule ``pkg.name`` when there is one, else
to ``pkg``.  A module's implicit import of its parent package is not an edge (every submodule has
it).  Each checker is itself checked on small hand-made graphs or packages, so this test can fail.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_files(src: Path = SRC, package: str = "tokendrop") -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``src``."""
    out = {}
    for p in sorted((src / package).rglob("*.py")):
        parts = p.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _known(name: str, modules: dict[str, Path]) -> str:
    """The longest prefix of dotted ``name`` that is one of ``modules`` ("" for none: another
    package)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def import_sites(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module of ``modules``, line) for every import anywhere in ``module``'s source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(_known(a.name, modules), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub if sub in modules else _known(target, modules), node.lineno))
    return sorted((m, line) for m, line in out if m and m != module)


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` imports anywhere in its source."""
    return {m for m, _ in import_sites(module, path, modules)}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = module_files(src)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing itself),
    each sorted; Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    cycles.append(sorted(comp))
    return sorted(cycles)


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}}) == [
        ["a", "b", "c"],
        ["d", "e"],
    ]
    assert find_cycles({"a": {"a"}}) == [["a"]]


def test_imports_are_read_everywhere_in_a_module(tmp_path):
    """In-function and TYPE_CHECKING imports count; relative imports resolve; ``from pkg import
    sub`` is an edge to the submodule."""
    pkg = tmp_path / "tokendrop"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .high import g\n")
    (pkg / "high.py").write_text("from . import low\nfrom .sub import leaf\n")
    (pkg / "sub" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..low import f\n"
    )
    (pkg / "sub" / "leaf.py").write_text(
        "import os\nfrom .. import not_a_module\nimport tokendrop.sub.leaf\n"
    )
    graph = import_graph(tmp_path)
    assert graph == {
        "tokendrop": set(),
        "tokendrop.low": {"tokendrop.high"},
        "tokendrop.high": {"tokendrop.low", "tokendrop.sub.leaf"},
        "tokendrop.sub": {"tokendrop.low"},
        "tokendrop.sub.leaf": {"tokendrop"},
    }
    assert find_cycles(graph) == [["tokendrop.high", "tokendrop.low"]]


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    assert len(graph) > 50 and "tokendrop.config" in graph  # the package was found
    cycles = find_cycles(graph)
    assert not cycles, (
        "import cycles, each among the modules named (move what both sides need to a lower "
        "module): " + "; ".join(", ".join(c) for c in cycles)
    )


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_config_parsing_and_the_trainer_stay_low():
    """Parsing a config imports only the error base, the field rules, its own sections and the
    method registry (no model, no trainer, no checkpoint reader: it reads no disk); the trainer
    never needs the benchmark."""
    graph = import_graph()
    assert _reachable(graph, "tokendrop.config") <= {
        "tokendrop",
        "tokendrop.errors",
        "tokendrop.fields",
        "tokendrop.config.quantities",
        "tokendrop.config.model",
        "tokendrop.config.layers",
        "tokendrop.config.checks",
        "tokendrop.value_schedule",
        "tokendrop.dropping.config",
        "tokendrop.dropping.methods",
    }
    assert not {
        m
        for m in _reachable(graph, "tokendrop.train.trainer")
        if m.startswith("tokendrop.lab.bench")
    }


def test_selection_methods_are_one_registry():
    """Every drop.method is a row of tokendrop.dropping.methods.METHODS, and the method classes the
    code asks about are read from it (a new method cannot silently count as dense or as learning
    from the loss)."""
    from tokendrop.dropping import methods

    assert methods.DROP_METHODS == tuple(methods.METHODS)
    assert [n for n, m in methods.METHODS.items() if not m.drops] == ["none"]
    assert set(methods.LOSS_METHODS) == {"cumulative", "half_random"}
    assert set(methods.RANDOM_METHODS) == {"half_random", "random", "random_ltd"}
    assert methods.PER_LAYER_METHODS == ("random_ltd",)
    assert [n for n, m in methods.METHODS.items() if m.needs_counts] == ["frequency"]


# the registry and the [drop] section that names methods
METHOD_MODULES = (
    "tokendrop.dropping",
    "tokendrop.config",
)
OTHER_VOCABULARIES = {
    # a value compared with a string that is also a drop.method name, but that holds another
    # vocabulary
    "kind": "how train.parallel wraps the model (Parallel.kind: none | ddp | fsdp)",
    "how": "how the importance vector starts (drop.importance_init: constant | "
    "dense_pass | frequency)",
}


def _names_a_method(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
        _names_a_method(e, names) for e in node.elts
    )


def _held_name(node: ast.AST) -> str | None:
    """The name a compared value is read from: ``how`` -> how, ``self.kind`` -> kind."""
    return (
        node.id
        if isinstance(node, ast.Name)
        else node.attr
        if isinstance(node, ast.Attribute)
        else None
    )


def method_name_comparisons(src: Path = SRC, names: set[str] | None = None) -> list[str]:
    """``module:line: comparison`` for every ``==``/``!=``/``in`` against a selection method's name
    (a string literal, or a tuple/list/set holding one) outside :data:`METHOD_MODULES`, unless every
    other side is a value of one of :data:`OTHER_VOCABULARIES`."""
    if names is None:
        from tokendrop.dropping.methods import METHODS

        names = set(METHODS)
    out = []
    for mod, path in module_files(src).items():
        if any(_inside(mod, m) for m in METHOD_MODULES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            others = [x for x in sides if not _names_a_method(x, names)]
            if len(others) < len(sides) and not (
                others and all(_held_name(x) in OTHER_VOCABULARIES for x in others)
            ):
                out.append(f"{mod}:{node.lineno}: {ast.unparse(node)}")
    return sorted(out)


def test_the_method_name_check_finds_comparisons(tmp_path):
    pkg = tmp_path / "tokendrop"
    (pkg / "dropping").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "dropping" / "__init__.py").write_text("def f(m):\n    return m == 'cumulative'\n")
    (pkg / "a.py").write_text(
        "def f(d, par, how, variant):\n    if d.get('method') == 'cumulative':\n        pass\n    "
        "x = variant in ('drop', 'random_ltd')\n    y = par.kind != 'none' or how == "
        "'frequency'\n    z = d.method == 'other' or 'none' != d.method\n"
    )
    assert method_name_comparisons(tmp_path, {"none", "cumulative", "random_ltd", "frequency"}) == [
        "tokendrop.a:2: d.get('method') == 'cumulative'",
        "tokendrop.a:4: variant in ('drop', 'random_ltd')",
        "tokendrop.a:6: 'none' != d.method",
    ]


def test_no_method_is_named_outside_its_registry():
    """What a ``drop.method`` does is a fact of its row in ``METHODS`` (drops, learns from the loss,
    random, per layer, ...), or ``PAPER_METHOD``: code elsewhere asks the row, so a new method is
    one row, never a hunt through string comparisons (as ``test_families`` does for families)."""
    bad = method_name_comparisons()
    assert not bad, (
        "drop.method names compared outside tokendrop.dropping / tokendrop.config (ask the METHODS "
        "row for the fact instead; a value of another vocabulary goes into OTHER_VOCABULARIES):\n"
        + "\n".join(bad)
    )


# bench.variants (tokendrop.lab.bench.presets.BENCH_VARIANTS, its own registry: dense, drop, pass,
# avg, random_ltd) shares names with drop.variant but is another vocabulary
VARIANT_VOCABULARIES = ("tokendrop.lab.bench",)


def test_no_variant_is_named_outside_its_registry():
    """What a ``drop.variant`` does is a fact of its row in ``VARIANTS`` (pools, frozen keys/values,
    merges after the last layer): code elsewhere asks the row, so a new variant is one row."""
    from tokendrop.dropping.methods import VARIANTS

    bad = [
        line
        for line in method_name_comparisons(names=set(VARIANTS))
        if not any(
            line.split(":")[0] == m or line.startswith(m + ".") for m in VARIANT_VOCABULARIES
        )
    ]
    assert not bad, (
        "drop.variant names compared outside tokendrop.dropping / tokendrop.config (ask the "
        "VARIANTS row for the fact instead):\n" + "\n".join(bad)
    )


# The folders (a module at the package's top counts as its own folder; the package's __init__.py,
# the public API, as "tokendrop"), lowest first.  An import goes down this list, never up or
# sideways into a cycle: a folder imports only folders listed before it.  docs/design.md §4.1
# prints the graph this order allows (FOLDER_GRAPH_DOC).
LAYER_ORDER = (
    "version",  # __version__
    "errors",  # TokendropError and the errors raised across layers
    "fields",  # what a resume may change, declared on each config field
    "value_schedule",  # a value from a start to an end over the run
    "host",  # whether host reads of device data are free; host-side regions (the census)
    "runs",  # run I/O: files, run directories, checkpoints, metrics, trackers, plots
    "data",  # corpus -> prepared directory -> MLM batches
    "dropping",  # the method
    "config",  # the typed configuration
    "models",  # the encoder families
    "train",  # pretraining
    "finetuning",  # GLUE and SQuAD
    "transformers",  # token dropping inside transformers' models
    "verification",  # tokendrop verify: every output, checked with the layers that write it
    "tokendrop",  # the public API (tokendrop/__init__.py)
    "lab",  # the harnesses: bench, study, demo, inspect, verify of lab directories
    "cli",  # the command line, above the library and the harnesses
    "__main__",  # python -m tokendrop
)


def folder_of(module: str) -> str:
    """``tokendrop.models.bert.hf`` -> models; ``tokendrop.errors`` -> errors; ``tokendrop`` ->
    tokendrop."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_edges(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """(folder, imported folder) -> the ``path:line`` of every import that makes the edge."""
    modules = module_files(src)
    out: dict[tuple[str, str], list[str]] = {}
    for mod, path in modules.items():
        here = folder_of(mod)
        for dep, line in import_sites(mod, path, modules):
            if folder_of(dep) != here:
                where = f"{path.relative_to(src).as_posix()}:{line}"
                out.setdefault((here, folder_of(dep)), []).append(where)
    return out


def layer_violations(
    edges: dict[tuple[str, str], list[str]], order: tuple[str, ...] = LAYER_ORDER
) -> list[str]:
    """One line per folder edge that leaves the layering: a folder missing from ``order``, an import
    of a folder at the same or a higher layer (every cycle has one), an import of lab/ from the
    library."""
    rank = {f: i for i, f in enumerate(order)}
    out = []
    for (a, b), lines in sorted(edges.items()):
        sites = sorted(set(lines))
        missing = [f for f in (a, b) if f not in rank]
        if missing:
            out.append(
                f"{a} -> {b} ({', '.join(sites)}): {' and '.join(missing)} has no layer; add "
                "it to LAYER_ORDER"
            )
        elif rank[b] >= rank[a]:
            out.append(f"{a} -> {b} ({', '.join(sites)}): {b} is not below {a} in LAYER_ORDER")
        if b == "lab" and a not in ("lab", "cli", "__main__"):
            out.append(
                f"{a} -> lab ({', '.join(sites)}): only lab/ and the command line import lab/"
            )
    return out


def folder_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    return find_cycles(graph)


def test_the_layer_check_names_the_edge_and_the_line():
    edges = {
        ("dropping", "models"): ["tokendrop/dropping/flops.py:47"],
        ("models", "dropping"): ["m.py:3"],
        ("models", "lab"): ["tokendrop/models/x.py:9"],
        ("cli", "lab"): ["tokendrop/cli.py:5"],
        ("newdir", "errors"): ["tokendrop/newdir/a.py:1"],
    }
    order = ("errors", "dropping", "models", "lab", "cli")
    assert layer_violations(edges, order) == [
        "dropping -> models (tokendrop/dropping/flops.py:47): models is not below "
        "dropping in LAYER_ORDER",
        "models -> lab (tokendrop/models/x.py:9): lab is not below models in LAYER_ORDER",
        "models -> lab (tokendrop/models/x.py:9): only lab/ and the command line import lab/",
        "newdir -> errors (tokendrop/newdir/a.py:1): newdir has no layer; add it to LAYER_ORDER",
    ]
    assert folder_cycles(edges) == [["dropping", "models"]]


def test_folder_edges_count_imports_inside_functions(tmp_path):
    pkg = tmp_path / "tokendrop"
    for d in ("low", "high"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("import os\n\n\ndef f():\n    from tokendrop.high import b\n")
    (pkg / "high" / "b.py").write_text("from ..low import a\n")
    assert folder_edges(tmp_path) == {
        ("low", "high"): ["tokendrop/low/a.py:5"],
        ("high", "low"): ["tokendrop/high/b.py:1"],
    }


def test_the_folders_form_a_layered_graph():
    """Every import between folders points down :data:`LAYER_ORDER` (so the folder graph has no
    cycle), and only lab/ and the command line import lab/."""
    edges = folder_edges()
    assert {"config", "runs", "models", "lab"} <= {a for a, _ in edges}  # the package was found
    bad = layer_violations(edges)
    cycles = folder_cycles(edges)
    assert not bad and not cycles, (
        "folder imports against the layers (docs/design.md §4.1; move the code to the "
        "layer that owns it, or what both sides need below both):\n"
        + "\n".join(bad)
        + "".join(f"\nfolder cycle: {' <-> '.join(c)}" for c in cycles)
    )


# --- the tests: only tests of lab/ import lab/ ------------------------------------------------

TESTS = SRC.parent / "tests"


def _names_lab(module: str | None) -> bool:
    return module is not None and (module == "tokendrop.lab" or module.startswith("tokendrop.lab."))


def lab_import_lines(source: str) -> list[int]:
    """The lines of ``source`` that import ``tokendrop.lab`` (or a module under it): ``import``,
    ``from ... import``, ``importlib.import_module`` / ``__import__`` with a constant name, and code
    in a string that one of these is run from (``python -c``, a script written for a subprocess)."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(_names_lab(a.name) for a in node.names):
                lines.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if _names_lab(node.module) or (
                node.module == "tokendrop" and any(a.name == "lab" for a in node.names)
            ):
                lines.add(node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            arg = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and _names_lab(arg.value)
            ):
                lines.add(node.lineno)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "tokendrop.lab" in node.value
        ):
            try:
                inner = lab_import_lines(textwrap.dedent(node.value))
            except SyntaxError:  # prose, not code
                continue
            if inner:
                lines.add(node.lineno)
    return sorted(lines)


def lab_imports_outside_lab_tests(tests: Path = TESTS) -> list[str]:
    """``file:line`` (relative to ``tests``) of every import of ``tokendrop.lab`` in a test file or
    fixture that is not under a folder named ``lab``."""
    out = []
    for p in sorted(tests.rglob("*.py")):
        rel = p.relative_to(tests)
        if "lab" in rel.parts[:-1]:
            continue
        out += [f"{rel.as_posix()}:{n}" for n in lab_import_lines(p.read_text(encoding="utf-8"))]
    return out


def test_the_lab_import_check_finds_every_form(tmp_path):
    lab = "tokendrop." + "lab"  # not an import of this file
    (tmp_path / "unit" / "lab").mkdir(parents=True)
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "unit" / "lab" / "test_ok.py").write_text(f"import {lab}.demo\n")
    (tmp_path / "unit" / "test_a.py").write_text(
        f"import os\nfrom {lab}.toydata import x\n\n\ndef f():\n    import {lab}.bench as b\n"
    )
    (tmp_path / "fixtures" / "helper.py").write_text(
        f"from tokendrop import lab\nimport importlib\nimportlib.import_module('{lab}.study')\n"
        f"CODE = 'import sys; from {lab}.fetch import FetchError'\n"
        f"NOTE = 'the {lab} package, not code'\nfrom tokendrop.labels import y\n"
    )
    assert lab_imports_outside_lab_tests(tmp_path) == [
        "fixtures/helper.py:1",
        "fixtures/helper.py:3",
        "fixtures/helper.py:4",
        "unit/test_a.py:2",
        "unit/test_a.py:6",
    ]


def test_only_lab_tests_import_lab():
    """A test of the library gets its data from tests/fixtures or from the library itself
    (``TaskSpec.write_examples``, ``tokendrop.finetuning.task_corpus``), never from lab/, so lab/
    may change with the harnesses without touching the library's tests.  Tests of lab/ code live in
    ``tests/unit/lab`` and ``tests/integration/lab``."""
    assert len(list(TESTS.rglob("test_*.py"))) > 50  # the tests were found
    bad = lab_imports_outside_lab_tests()
    assert not bad, (
        "test files outside a lab/ test folder that import tokendrop.lab (move a test of lab/ code "
        "into tests/unit/lab or tests/integration/lab; take data from tests/fixtures):\n"
        + "\n".join(bad)
    )


DESIGN = SRC.parent / "docs" / "design.md"
FOLDER_GRAPH_DOC = (
    "<!-- the folder graph: tests/unit/test_layering.py writes it (printed_folder_graph) -->"
)


def printed_folder_graph(
    edges: dict[tuple[str, str], list[str]], order: tuple[str, ...] = LAYER_ORDER
) -> str:
    """The folder graph as docs/design.md prints it: one line per folder, highest layer first, with
    the folders it imports (each line's imports are among the lines below it).  Edges against the
    order are left out: test_the_folders_form_a_layered_graph names them."""
    rank = {f: i for i, f in enumerate(order)}
    lines = []
    for f in reversed(order):
        deps = sorted(
            {b for a, b in edges if a == f and b in rank and rank[b] < rank[f]},
            key=rank.get,
            reverse=True,
        )
        lines.append(f"{f:<15} -> {' '.join(deps) if deps else '(nothing of the package)'}")
    return "\n".join(lines)


def test_design_md_prints_the_folder_graph():
    text = DESIGN.read_text(encoding="utf-8")
    assert FOLDER_GRAPH_DOC in text, f"docs/design.md §4.1 lost the line {FOLDER_GRAPH_DOC}"
    block = text.split(FOLDER_GRAPH_DOC, 1)[1].split("```", 2)[1].strip("\n")
    want = printed_folder_graph(folder_edges())
    assert block == want, (
        "docs/design.md §4.1's folder graph is not the package's; paste this in its place:\n" + want
    )


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_imports(src: Path = SRC) -> list[str]:
    """``from tokendrop.X import _name`` (or relative) anywhere in a module other than X itself."""
    modules = module_files(src)
    out = []
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        aliases = _module_aliases(path, modules)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not _inside(target, "tokendrop"):
                    continue
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and target != mod:
                        out.append(f"{mod}: from {target} import {a.name}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                if isinstance(node.value, ast.Name) and node.value.id in aliases:
                    out.append(f"{mod}: {node.value.id}.{node.attr}")
    return sorted(out)


def _module_aliases(path: Path, modules: dict[str, Path]) -> set[str]:
    """Local names bound to tokendrop modules by ``import`` / ``from tokendrop.x import module``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("tokendrop")
            or isinstance(node, ast.ImportFrom)
            and node.level
        ):
            base = node.module or ""
            if node.level:
                # a relative import: within the package
                base = ".".join(["tokendrop"] + ([base] if base else []))
            names |= {a.asname or a.name for a in node.names if f"{base}.{a.name}" in modules}
        elif isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.asname and a.name in modules}
    return names


def test_the_private_name_check_finds_private_imports(tmp_path):
    pkg = tmp_path / "tokendrop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ndef _f():\n    return _x\n")
    (pkg / "b.py").write_text("from .a import _x\nfrom tokendrop import a\ny = a._f()\n")
    assert private_imports(tmp_path) == [
        "tokendrop.b: a._f",
        "tokendrop.b: from tokendrop.a import _x",
    ]


def test_no_module_imports_another_modules_private_names():
    bad = private_imports()
    assert not bad, (
        "private names used outside their module (make the name public or move the code):\n"
        + "\n".join(bad)
    )


# An import inside a function hides a module's dependencies and, run once per call, the cost of a
# first import at an unpredictable moment; it is kept only for a dependency that is optional (an
# extra that may be missing) or slow to import and needed by few calls.  The command line defers
# everything (``import tokendrop.cli`` loads no torch: ``tokendrop --help`` answers at once).
DEFERRABLE = {
    # imported module (or package) -> why an import of it may sit inside a function
    "matplotlib": "the optional [lab] extra: figures and report plots",
    "pyarrow": "slow to import; only Parquet / Arrow / save_to_disk inputs need it",
    "zstandard": "only .zst inputs need it",
    "datasets": "the optional [online] extra: hf: corpora",
    "huggingface_hub": "optional (comes with transformers): fetching a Hub name",
    "transformers": "slow to import; the integration needs the optional "
    "[transformers] extra (>= 5)",
    "tokendrop.transformers": "imports transformers (the optional [transformers] extra, >= 5)",
    "torch.utils.tensorboard": "slow to import: TensorBoard, only when train.report_to has it",
    "wandb": "an optional tracker client ([wandb])",
    "mlflow": "an optional tracker client ([mlflow])",
    "torch.profiler": "the profiler: only --profile and the campaign's env part",
    "torch._dynamo": "dynamo: only compiled benchmarks",
    "torch.distributed.checkpoint": "distributed checkpointing: only sharded (FSDP) runs",
    "torch.distributed.fsdp": "FSDP: only sharded runs",
    "torch.distributed.tensor": "DTensor: only sharded runs",
    "torch.distributed.device_mesh": "the device mesh: only sharded runs",
}
DEFERRING_MODULES = {"tokendrop.cli"}  # the application: imports its commands when they run
# (module, imported module) -> why that one module defers it: what parsing a config
# (tests/unit/config/test_config_imports.py) and the command line's argument checks
# (tests/integration/cli/test_cli_help.py) read imports torch only where it computes
DEFERRED_HERE = {
    (
        "tokendrop.dropping.methods",
        "torch",
    ): "the method registry: config validation reads its rows",
    (
        "tokendrop.runs.files",
        "safetensors",
    ): "the one tensor writer: the command line's output-directory checks load no torch",
}


def deferred_imports(src: Path = SRC, allowed: dict[str, str] = DEFERRABLE) -> list[str]:
    """``module:line: import X`` for every import inside a function (a lambda, a method) of a module
    other than :data:`DEFERRING_MODULES` whose imported module is not in (or under) ``allowed``."""
    modules = module_files(src)
    out = []
    for mod, path in modules.items():
        if mod in DEFERRING_MODULES:
            continue
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        todo = [
            (n, False) for n in ast.iter_child_nodes(ast.parse(path.read_text(encoding="utf-8")))
        ]
        while todo:
            node, in_function = todo.pop()
            if in_function and isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.Import):
                    # (what is imported, what may allow it)
                    names = [(a.name, a.name) for a in node.names]
                else:
                    target = node.module or ""
                    if node.level:
                        base = package.split(".")
                        base = base[: len(base) - (node.level - 1)]
                        target = ".".join(base + ([node.module] if node.module else []))
                    # ``from pkg import sub``: the submodule ``pkg.sub`` when it is one (or allowed)
                    names = [(target, f"{target}.{a.name}") for a in node.names]
                    names = [
                        (sub if sub in modules or any(_inside(sub, k) for k in allowed) else t, sub)
                        for t, sub in names
                    ]
                here = [k for (m, k) in DEFERRED_HERE if m == mod and allowed is DEFERRABLE]
                out += sorted(
                    {
                        f"{mod}:{node.lineno}: import {t}"
                        for t, sub in names
                        if not any(_inside(t, k) or _inside(sub, k) for k in [*allowed, *here])
                    }
                )
            inner = in_function or isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            todo += [(n, inner) for n in ast.iter_child_nodes(node)]
    return sorted(out)


def test_the_deferred_import_check_finds_deferred_imports(tmp_path):
    pkg = tmp_path / "tokendrop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import json\n"
    )
    (pkg / "a.py").write_text(
        "import os\n\ndef f():\n    import json\n    import matplotlib.pyplot\n\nclass C:\n    def "
        "m(self):\n        from . import b\n        from torch.profiler import profile\n        "
        "from torch import profiler\n        g = lambda: __import__('json')\n"
    )
    (pkg / "b.py").write_text("try:\n    import pyarrow\nexcept ImportError:\n    pyarrow = None\n")
    (pkg / "cli.py").write_text("def main():\n    import json\n")
    assert deferred_imports(tmp_path) == [
        "tokendrop.a:4: import json",
        "tokendrop.a:9: import tokendrop.b",
    ]
    assert deferred_imports(tmp_path, {}) == [
        "tokendrop.a:10: import torch.profiler",
        "tokendrop.a:11: import torch",
        "tokendrop.a:4: import json",
        "tokendrop.a:5: import matplotlib.pyplot",
        "tokendrop.a:9: import tokendrop.b",
    ]


def test_imports_sit_at_the_top_of_their_modules():
    bad = deferred_imports()
    assert not bad, (
        "imports inside functions (move them to the top of the module; a cycle is resolved by "
        "moving what both sides need to the module it belongs to; an optional or slow dependency "
        "goes into DEFERRABLE with its reason):\n" + "\n".join(bad)
    )


def test_the_command_line_module_loads_no_torch():
    """``import tokendrop.cli`` (what ``tokendrop --help`` runs) imports neither torch nor the
    library."""
    code = (
        "import sys, tokendrop.cli; print(' '.join(sorted(m for m in sys.modules if m == 'torch' "
        "or m.startswith("
        "('tokendrop.config', 'tokendrop.data', 'tokendrop.train')))))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [], f"import tokendrop.cli loads {r.stdout.strip()}"
