"""The README is the front door and docs/ holds the depth: every link between them leads somewhere, every
anchor names a heading that exists, and the README stays short enough to read (issue 23: at most about
400 lines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    slugs = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_leads_to_a_file_and_every_anchor_to_a_heading(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto: (no network here: not followed)
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], broken


def test_the_readme_is_a_front_door_that_reaches_every_page_of_the_docs():
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 400
    reached = {(ROOT / target.partition("#")[0]).resolve() for target in links(readme)}
    pages = {page.resolve() for page in PAGES if page.parent.name == "docs" and page.name != "README.md"}
    assert pages - reached == set(), "every docs page is one hop from the README"


def test_the_docs_index_lists_every_page_of_the_docs():
    # docs/README.md is the index a reader lands on from any page's "docs" link: it names every page (issue 38.5:
    # transfer.md was missing)
    index = ROOT / "docs" / "README.md"
    listed = {(index.parent / target.partition("#")[0]).resolve() for target in links(index)}
    pages = {page.resolve() for page in PAGES if page.parent.name == "docs" and page.name != "README.md"}
    assert sorted(p.name for p in pages - listed) == []


def test_the_anchor_rule_is_githubs():
    # a heading with code and punctuation, as GitHub renders its anchor
    page = ROOT / "docs" / "api.md"
    assert "field-level-changes-patch" in anchors(page)
    assert "change-requests" in anchors(page)


def test_a_broken_link_would_be_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[here](#title) [gone](missing.md) [nowhere](#no-such-heading)\n")
    assert links(page) == ["#title", "missing.md", "#no-such-heading"]
    assert anchors(page) == {"title"}
