"""The README fits on a screen and leads to the docs; every link of the README and the docs resolves."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path):
    """The anchors GitHub makes of a page's headings (outside code blocks)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_fits_on_a_screen_and_links_its_docs_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 12_000
    linked = {m for m in LINK.findall(readme) if m.startswith("docs/") and m.endswith(".md")}
    assert len(linked) >= 6 and all((ROOT / m).is_file() for m in linked)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_of_a_page_resolves(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # https:, file:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        assert where.exists(), f"{page.name}: {target}: no such file"
        if anchor and where.suffix == ".md":
            assert anchor in _anchors(where), f"{page.name}: {target}: no such heading"
