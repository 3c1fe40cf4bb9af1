"""The README and the docs/ pages as a reader meets them on GitHub (issue 36): a README read in five
minutes with the callback line on its first screen, every relative link and anchor landing
somewhere, and the code citing the algorithms through a page of the repository (docs/design.md)
rather than documents outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
CALLBACK_LINE = 'callbacks: ["aisia_plugin.litellm.plugin"]'
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CITATION = re.compile(r"docs/([\w-]+\.md)(#[\w-]+)?")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (links and code marks dropped) in lower case, characters
    other than letters, digits, `_`, `-` and spaces removed, spaces made `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    """The Markdown headings of a file, outside fenced code."""
    found, fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a file's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        s = slug(h)
        out.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of each Markdown link outside fenced code."""
    found, fence = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            found += [(n, m.group(2)) for m in LINK.finditer(line)]
    return found


def test_the_readme_is_read_in_five_minutes_with_the_callback_line_on_its_first_screen():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    assert any(CALLBACK_LINE in line for line in lines[:60])


def test_the_anchor_of_a_heading_is_githubs():
    assert slug("`aisia stats`") == "aisia-stats"
    assert slug("Operating the router: metrics, dashboard, routing page, decision log") == \
        "operating-the-router-metrics-dashboard-routing-page-decision-log"
    assert slug("Hostile inputs: linear time ([a/b.md](a/b.md))") == "hostile-inputs-linear-time-abmd"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_exists(page):
    broken = []
    for n, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.name}:{n}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{page.name}:{n}: {target}: no heading with that anchor")
    assert broken == []


def _code_files():
    for folder in ("aisia_plugin", "policies", "schemas", "benchmarks", "tests"):
        for p in sorted((REPO / folder).rglob("*")):
            if p.suffix in (".py", ".lua", ".yaml", ".yml", ".json", ".toml") and p.name != "test_docs.py":
                yield p


def test_the_code_cites_pages_of_the_repository_that_exist():
    """A citation `docs/PAGE.md#anchor` in the code names a page and a heading that exist; and no
    citation points at the seed documents, which are not in the repository."""
    broken, outside, cited = [], [], 0
    for p in _code_files():
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            where = f"{p.relative_to(REPO)}:{n}"
            if re.search(r"seed sections?\b|\bsection \d|omniroute|seed-errata", line, re.I):
                outside.append(f"{where}: {line.strip()}")
            for m in CITATION.finditer(line):
                cited += 1
                page = REPO / "docs" / m.group(1)
                if not page.exists() or (m.group(2) and m.group(2)[1:] not in anchors(page)):
                    broken.append(f"{where}: {m.group(0)}")
    assert outside == []
    assert broken == []
    assert cited > 20  # the pattern finds the citations there are
