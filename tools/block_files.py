"""Generated blocks in Markdown pages: the text between a start and an end marker (HTML comments), replaced whole.

A block is rendered with its links written from the repository's root (as the README reads them:
`artifacts/reference/temporal/report.md`). Written into a page further down (docs/results/index.md), its relative
links are rewritten to start from that page's folder, so that they resolve where the page is read as a file (on
GitHub, in an editor); the documentation site's build renders the blocks again and points those links at its own
pages (tools/docs_pages.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.common.run_files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
# A Markdown link's or image's target that is a path relative to the root: not a URL, an anchor or an absolute path.
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def relative_links(block: str, page: Path) -> str:
    """`block` with its relative links made relative to `page`'s folder when the page lies below the repository's
    root; a page at the root, or outside the repository (a scratch copy), gets the block as rendered."""
    folder = page.resolve().parent
    if folder == ROOT or not folder.is_relative_to(ROOT):
        return block
    up = Path(os.path.relpath(ROOT, folder)).as_posix()
    return RELATIVE_LINK.sub(lambda link: f"]({up}/{link.group(1)})", block)


def _split(text: str, start: str, end: str, where: str) -> tuple[str, str, str]:
    if start not in text or end not in text.split(start, 1)[1]:
        raise SystemExit(f"{where}: markers {start} / {end} not found")
    head, rest = text.split(start, 1)
    inside, tail = rest.split(end, 1)
    return head, inside, tail


def block_of(text: str, start: str, end: str, where: str = "the page") -> str:
    """What lies between the markers, without the newlines that `with_block` puts around it."""
    return _split(text, start, end, where)[1].removeprefix("\n").removesuffix("\n")


def with_block(text: str, start: str, end: str, block: str, where: str = "the page") -> str:
    """`text` with what lies between the markers replaced by `block`, each marker on a line of its own."""
    head, _, tail = _split(text, start, end, where)
    return head + start + "\n" + block + "\n" + end + tail


def replace_block(page: Path, start: str, end: str, block: str) -> None:
    """Replace what lies between the markers `start` and `end` in `page` with `block`, its links made relative to the
    page (exit if the markers are absent)."""
    text = page.read_text(encoding="utf-8")
    atomic_write_text(page, with_block(text, start, end, relative_links(block, page), where=str(page)))
