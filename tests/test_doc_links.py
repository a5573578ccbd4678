"""Every link of the README and the docs resolves on the repository (the site build, `mkdocs build --strict` in
tests/test_docs.py, checks the same links on the site, where tools/docs_pages.py points links to reference runs'
files at the pages that show them), and the committed reference pages are what the code generates now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import reference_pages
from tools.site_links import site_links

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def links(page: Path) -> list[str]:
    """The relative link targets of a page (outside code), anchors dropped."""
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(text) if "://" not in target and not target.startswith("mailto:")]


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_resolves_on_the_repository(page: Path) -> None:
    dead = [target for target in links(page) if not (page.parent / target).exists()]
    assert not dead, f"{page.relative_to(ROOT)}: {len(dead)} links to nothing in the repository: {dead[:5]}"


def test_the_committed_reference_pages_are_the_codes() -> None:
    """docs/reference/ holds what `python -m tools.reference_pages` writes from the code now (`make blocks`)."""
    stale = [
        relative
        for relative, text in reference_pages.pages().items()
        if (ROOT / "docs" / relative).read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale reference pages (python -m tools.reference_pages): {stale}"


def test_links_to_the_repository_point_at_the_site_pages_that_show_them() -> None:
    studies = ROOT / "docs" / "how-to" / "studies.md"
    text = "[the report](../../artifacts/reference/scale/report.md#claims) and [code](../../harness/api.py)"
    assert (
        site_links(text, studies) == "[the report](../results/scale/index.md#claims) and [code](../../harness/api.py)"
    )
    results = ROOT / "docs" / "results" / "index.md"
    figure = "![headline](../../artifacts/reference/paper/figures/headline.png)"
    assert site_links(figure, results) == "![headline](paper/figures/headline.png)"
    index = ROOT / "docs" / "index.md"
    assert site_links("[nb](../examples/quickstart.ipynb)", index) == "[nb](tutorials/quickstart.ipynb)"
    assert site_links("[b](../../artifacts/bench/bench.md)", results) == "[b](benchmarks/index.md)"
