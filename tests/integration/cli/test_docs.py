"""The user-facing text: links that resolve, no tracker references, the README's first screen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    missing = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_no_issue_numbers_in_user_facing_text():
    """Users cannot see this project's tracker: 'issue 13' means nothing to them."""
    pattern = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    hits = []
    for top in ("README.md", "docs", "src", "scripts", "benchmarks", "configs", "tests"):
        base = ROOT / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for f in files:
            if (
                f.suffix not in {".md", ".py", ".toml", ".sh", ".txt"}
                or "egg-info" in str(f)
                or f == Path(__file__)
            ):
                continue
            for n, line in enumerate(
                f.read_text(encoding="utf-8", errors="replace").splitlines(), 1
            ):
                if pattern.search(line):
                    hits.append(f"{f.relative_to(ROOT)}:{n}")
    assert not hits, hits


def test_readme_first_screen_has_what_setup_and_a_table():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40]
    text = "\n".join(lines)
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    assert "token dropping" in text.lower() and "on CPU" in text
    assert sum(1 for x in lines if x.startswith("|")) >= 4  # a headline table
