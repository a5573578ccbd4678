"""Links from the docs' pages to files of the repository, pointed at the site pages that show those files.

A docs page links to what the repository holds (a reference run's report.md and figures, artifacts/bench/bench.md,
examples/quickstart.ipynb), so that every link resolves where the page is read as a file; the site shows those files
as pages of their own (tools/docs_pages.py), and `site_links` points each such link there when the site is built.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def site_target(target: Path) -> Path | None:
    """The site file (under docs/) that shows a repository file, or None where the file is a page itself."""
    relative = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else ""
    shown = re.fullmatch(r"artifacts/reference/(.+)/(report\.md|figures/.+)", relative)
    if shown:
        run, file = shown.groups()
        return DOCS / "results" / run / ("index.md" if file == "report.md" else file)
    return {
        "artifacts/bench/bench.md": DOCS / "results" / "benchmarks" / "index.md",
        "examples/quickstart.ipynb": DOCS / "tutorials" / "quickstart.ipynb",
    }.get(relative)


def site_links(text: str, source: Path) -> str:
    """`text` of the docs page `source` with each link to a repository file that the site shows on a page of its own
    pointed at that page, relative to `source`."""

    def pointed(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        shown = site_target(Path(os.path.normpath(source.parent / target)))
        if shown is None:
            return match.group(0)
        return f"]({os.path.relpath(shown, source.parent)}{anchor})"

    return LINK.sub(pointed, text)
