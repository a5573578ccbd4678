"""The documentation site's pages made at build time by mkdocs-gen-files (mkdocs.yml runs this file).

From the committed reference runs: each report, with its figures, under results/, and the generated blocks of the
docs' own pages (tools/blocks.py), rendered again from the same runs; the quickstart notebook, as it is kept in
examples/. The reference pages generated from the code are committed under docs/reference/ (tools/reference_pages.py).

A page links to what the repository holds (a reference run's report.md, its figures, examples/quickstart.ipynb,
artifacts/bench/bench.md), so every link resolves on the repository; here each such link is pointed at the site
page that shows it (`site_links`), so it resolves on the site too. A link to a page that is gone fails the strict
build.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools.blocks, whatever directory mkdocs was started from

from tools import blocks  # noqa: E402
from tools.block_files import with_block  # noqa: E402
from tools.site_links import site_links  # noqa: E402

REFERENCE = Path("artifacts") / "reference"
DOCS = ROOT / "docs"


def copy_into_site(source: Path, destination: str) -> None:
    with mkdocs_gen_files.open(destination, "wb") as file:
        file.write(source.read_bytes())


def results_pages() -> None:
    """Each committed reference run's report, a study's shape reports, with the figures they show, and the committed
    benchmark measurements."""
    for report in sorted((ROOT / REFERENCE).glob("**/report.md")):
        run_dir = report.parent
        relative = run_dir.relative_to(ROOT / REFERENCE).as_posix()
        if "/stages/" in f"/{relative}/" or "/blocks/" in f"/{relative}/":
            continue  # a grown run's stages and a run's seed blocks: the run's own report covers them
        text = report.read_text(encoding="utf-8")
        for figure in sorted(set(re.findall(r"\]\((figures/[^)]+\.png)\)", text))):
            copy_into_site(run_dir / figure, f"results/{relative}/{figure}")
        with mkdocs_gen_files.open(f"results/{relative}/index.md", "w") as page:
            page.write(text.replace("/report.md)", "/index.md)"))
    bench = ROOT / "artifacts" / "bench"
    copy_into_site(bench / "scaling.png", "results/benchmarks/scaling.png")
    with mkdocs_gen_files.open("results/benchmarks/index.md", "w") as page:
        measured = (bench / "bench.md").read_text(encoding="utf-8").rstrip()
        page.write(f"{measured}\n\n![Cost per run-step against the number of runs](scaling.png)\n")


def filled_page(source: Path) -> str | None:
    """A docs page with its generated blocks rendered again from the committed runs (None if it has none): the
    page's committed blocks are the same text (tests/test_generated_blocks.py), with links that resolve from the
    page as a file; here their links to a reference report, and to its figures, point at its results page."""
    text = source.read_text(encoding="utf-8")
    present = [block for block in blocks.BLOCKS if block.start in text]
    if not present:
        return None
    with contextlib.chdir(ROOT):  # the blocks name their runs from the root
        for block in present:
            text = with_block(text, block.start, block.end, block.render(), where=str(source))
    depth = "../" * (len(source.relative_to(ROOT / "docs").parts) - 1)
    text = re.sub(r"\]\(artifacts/reference/([\w-]+)/report\.md\)", rf"]({depth}results/\1/index.md)", text)
    # A block's figure: the one its run's results page shows, copied there with the report (`results_pages`).
    return re.sub(r"\]\(artifacts/reference/([\w-]+)/figures/", rf"]({depth}results/\1/figures/", text)


def write_pages() -> None:
    copy_into_site(ROOT / "examples" / "quickstart.ipynb", "tutorials/quickstart.ipynb")
    results_pages()
    for source in sorted(DOCS.rglob("*.md")):
        original = source.read_text(encoding="utf-8")
        text = site_links(filled_page(source) or original, source)
        if text != original:
            with mkdocs_gen_files.open(source.relative_to(DOCS).as_posix(), "w") as page:
                page.write(text)


write_pages()
