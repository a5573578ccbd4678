"""Pages render as written: no star of a name such as q* read by Markdown as the start of italics, in any page of the
documentation, the README or a committed report (the documentation site shows the reports as pages)."""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest

from harness.rendering.markdown import literal_stars

ROOT = Path(__file__).resolve().parents[1]
# The site's Markdown extensions that change how emphasis and blocks parse (mkdocs.yml).
EXTENSIONS = ["tables", "attr_list", "md_in_html", "admonition", "footnotes", "pymdownx.superfences"]
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "artifacts" / "reference").rglob("report.md"),
        *(ROOT / "artifacts" / "reference").rglob("summary.md"),
    ]
)
# Emphasis that opens right after a letter or digit: a literal star taken for markup ("q*, so … q*").
GLUED_EMPHASIS = re.compile(r"\w<(em|strong)>")


def render(text: str) -> str:
    return markdown.markdown(text, extensions=EXTENSIONS)


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_literal_star_renders_as_emphasis(page: Path) -> None:
    found = [match.group(0) for match in GLUED_EMPHASIS.finditer(render(page.read_text(encoding="utf-8")))]
    assert not found, f"{page}: a star read as emphasis after a word ({len(found)}×)"


def test_literal_stars_escapes_q_star_outside_code_only() -> None:
    text = "regression on q*, so both gains start in q* (`q*` in code)\n```\nq* = x\n```\n"
    escaped = literal_stars(text)
    assert escaped == "regression on q\\*, so both gains start in q\\* (`q*` in code)\n```\nq* = x\n```\n"
    assert literal_stars(escaped) == escaped
    assert "<em>" in render(text) and "<em>" not in render(escaped)
    assert "q*, so both gains start in q*" in render(escaped)
