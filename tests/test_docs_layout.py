"""The docs by audience (issue 55): docs/index.md maps every page, no user page is over 400 lines (the methods
are in docs/methods/), docs/ holds documentation only (the studies' records are in study/, so docs/ is under
2 MB), and nothing points to a file the repository does not have (DESIGN.md was such a pointer)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def test_the_index_links_every_page_and_only_pages_that_exist():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = {(DOCS / target).resolve() for target in re.findall(r"\]\(([^)#\s]+\.md)", index)}
    pages = {p.resolve() for p in DOCS.rglob("*.md")} - {(DOCS / "index.md").resolve()}
    assert pages - linked == set(), "pages the index does not name"
    assert all(p.is_file() for p in linked)


def test_no_user_page_is_over_400_lines_and_docs_is_under_2_mb():
    long = {
        p.relative_to(DOCS).as_posix(): n
        for p in DOCS.rglob("*.md")
        if "methods" not in p.relative_to(DOCS).parts and (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}
    assert sum(p.stat().st_size for p in DOCS.rglob("*") if p.is_file()) < 2 * 1024 * 1024


def test_nothing_points_to_a_design_md_the_repository_does_not_have():
    assert not (REPO / "DESIGN.md").exists()
    said = [
        p.relative_to(REPO).as_posix()
        for folder in ("safetyrepro", "analysis", "adapters", "crosspkg", "safetyrepro_tasks", "docs")
        for p in (REPO / folder).rglob("*")
        if p.suffix in {".py", ".md", ".yaml"} and "DESIGN.md" in p.read_text(encoding="utf-8")
    ]
    said += [name for name in ("pyproject.toml", "README.md") if "DESIGN.md" in (REPO / name).read_text("utf-8")]
    assert said == []
