"""Source that reads: no string is broken into a lone short fragment line, and no assignment wraps
its value in parentheses only to carry a trailing comment.

A fragment line is one piece of an implicit string concatenation (``"a " "b"`` over several lines)
that stands alone on its line, with at most a ``,`` or brackets beside it, and holds
``FRAGMENT`` characters or fewer: the concatenation is refilled to the line width instead.  A split
field is ``name: type = (`` / ``value  # comment`` / ``)``: the comment goes on the line above and
the field on one line."""

from __future__ import annotations

import io
import re
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("src", "scripts", "benchmarks", "tests", "examples")
FRAGMENT = 14
SPLIT_FIELD = re.compile(
    r"^[ \t]*[A-Za-z_][\w.]*(?:[ \t]*:[ \t]*[^=\n]+?)? = \(\n[ \t]+[^\n#]+?  # [^\n]*\n[ \t]*\)\n",
    re.M,
)


def _value_length(literal: str) -> int:
    """Characters between the quotes of one string literal (its source text)."""
    start = next(i for i, c in enumerate(literal) if c in "'\"")
    quote = 3 if literal[start : start + 3] in ('"""', "'''") else 1
    return len(literal) - start - 2 * quote


def fragment_lines(source: str) -> list[int]:
    """Line numbers of the lone short pieces of implicit string concatenations in ``source``."""
    lines = source.splitlines()
    out, group = [], []
    for tok in [*tokenize.generate_tokens(io.StringIO(source).readline), None]:
        if tok is not None and tok.type == tokenize.STRING:
            group.append(tok)
            continue
        if tok is not None and tok.type in (tokenize.NL, tokenize.COMMENT) and group:
            continue
        if len(group) > 1:
            for s in group:
                if s.start[0] != s.end[0] or _value_length(s.string) > FRAGMENT:
                    continue
                line = lines[s.start[0] - 1]
                rest = (line[: s.start[1]] + line[s.end[1] :]).strip()
                if not rest.strip(",()[]{} "):
                    out.append(s.start[0])
        group = []
    return out


def split_fields(source: str) -> list[int]:
    """Line numbers of the assignments whose value is parenthesised only for a trailing comment
    (outside string literals)."""
    in_strings = {
        n
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.STRING
        for n in range(tok.start[0], tok.end[0] + 1)
    }
    found = [source[: m.start()].count("\n") + 1 for m in SPLIT_FIELD.finditer(source)]
    return [n for n in found if n not in in_strings]


def _findings(files) -> list[str]:
    out = []
    for p in files:
        source = p.read_text(encoding="utf-8")
        where = p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else p.name
        out += [f"{where}:{n}: a lone string fragment" for n in fragment_lines(source)]
        out += [f"{where}:{n}: a field split for its comment" for n in split_fields(source)]
    return out


def test_the_checks_find_fragments_and_split_fields():
    source = textwrap.dedent(
        """\
        X = (
            "a concatenation that the wrap broke into a short "
            "tail, "
            "and more"
        )
        parts = [
            "list items are",
            "no fragments",
        ]
        help = ("a" "b")
        class C:
            drops: bool = (
                True  # keeps fewer than T tokens
            )
            # a comment above
            ok: bool = True
        """
    )
    assert fragment_lines(source) == [3, 4]
    assert split_fields(source) == [12]


def test_no_fragment_lines_or_split_fields():
    files = [p for top in TREES for p in sorted((ROOT / top).rglob("*.py"))]
    bad = _findings(files)
    assert not bad, (
        "refill these string concatenations to the line width, and put a field's comment on the "
        "line above it:\n" + "\n".join(bad)
    )
