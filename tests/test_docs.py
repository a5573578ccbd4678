"""The documentation site builds strictly, as `make docs` builds it, and its generated reference covers the code. A
strict build fails on any warning: a link to a missing page or anchor, a page left out of the navigation, a name the
API reference cannot resolve, a docstring naming a parameter its function does not have. The generated pages
(tools/reference_pages.py, committed; tools/docs_pages.py, at build time) are read back from the built site: every
knob, metric, subcommand, built-in grid and reference run is there. A small site with the same settings holds the
strictness itself to account: a broken link and a stale name each fail it.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli.arguments import builtin_grids
from harness.engine.metrics import all_metrics
from harness.grid.knobs import knob_fields

ROOT = Path(__file__).resolve().parents[1]
# The notices mkdocs-material and mkdocs-gen-files print at every build, silenced as the Makefile does.
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict`, as `make docs` runs it, into `site`."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=300,
    )


def page_text(site: Path, page: str) -> str:
    """A built page's text, tags dropped."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr[-5000:]
    return site


def test_the_knob_reference_has_every_knob_with_its_doc(site: Path) -> None:
    text = page_text(site, "reference/knobs")
    for name, field in knob_fields().items():
        assert name in text and field.description is not None
        assert " ".join(field.description.split()[:6]) in text, name


def test_the_metric_reference_has_every_metric(site: Path) -> None:
    text = page_text(site, "reference/metrics")
    assert all(metric.name in text and metric.definition[:40] in text for metric in all_metrics())


def test_the_command_line_reference_is_its_parser(site: Path) -> None:
    text = page_text(site, "reference/cli")
    for command in ("run", "merge", "report", "list"):
        assert f"usage: coevolab {command}" in text
    assert "--until-decided" in text and "--no-figures" in text and str(Path.home()) not in text
    grids = page_text(site, "reference/condition-files")
    assert all(f"\n{name}\n" in grids for name in builtin_grids())


def test_every_reference_run_has_its_report_and_figures(site: Path) -> None:
    runs = [path.parent for path in (ROOT / "artifacts" / "reference").glob("*/report.md")]
    assert len(runs) >= 6
    for run in runs:
        assert (site / "results" / run.name / "index.html").is_file(), run.name
        for figure in re.findall(r"\]\((figures/[^)]+\.png)\)", (run / "report.md").read_text(encoding="utf-8")):
            assert (site / "results" / run.name / figure).is_file(), (run.name, figure)
    # The generated blocks of the results page, rendered again from the same runs: the findings, one line per run,
    # link to the runs' results pages.
    results = page_text(site, "results")
    assert "claims over 100 seeds per condition" in results and "Looks planned at" in results
    assert "the published grid under the original lab's random streams" in results
    html_page = (site / "results" / "index.html").read_text(encoding="utf-8")
    hrefs = re.findall(r'href="([^"]*)"', html_page)
    assert "paper-100/" in hrefs and not any("artifacts/reference" in href for href in hrefs)


def test_the_api_reference_and_the_notebook_are_built(site: Path) -> None:
    assert "grid_from_dict" in page_text(site, "reference/api/harness")
    assert "Knobs" in page_text(site, "reference/api/grid")
    assert "judge_cadence" in page_text(site, "reference/api/mechanisms")
    assert "run_grid" in page_text(site, "tutorials/quickstart")
    # Shown with its outputs: the run's progress, the summary's conditions and the headline figure as an image.
    notebook = (site / "tutorials" / "quickstart" / "index.html").read_text(encoding="utf-8")
    assert re.search(r"iteration (\d+)/\1\b", notebook) and "slow-meta" in page_text(site, "tutorials/quickstart")
    assert re.search(r'<img[^>]+src="data:image/png;base64,', notebook)


def test_the_python_api_page_shows_the_readme_example() -> None:
    """The tutorial's example is the README's, which tests/test_api.py runs as written."""

    def first_python_block(text: str) -> str:
        return re.search(r"```python\n(.*?)```", text, re.S).group(1)

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "\n## Python API\n" not in readme:
        pytest.skip("the README has no Python API section")
    section = readme.split("\n## Python API\n", 1)[1]
    page = (ROOT / "docs" / "tutorials" / "python-api.md").read_text(encoding="utf-8")
    assert first_python_block(page) == first_python_block(section)


def test_a_broken_link_and_a_stale_name_fail_the_build(tmp_path: Path) -> None:
    """A site with this one's settings (validation, Markdown extensions, the API handler) and one page that links
    to a page that does not exist and to a name the package does not have."""
    settings = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# A page\n\nSee [a page that is gone](gone.md) and [`Knobs`][harness.grid.knobs.NoSuchKnobs].\n"
    )
    plugins = [plugin for plugin in settings["plugins"] if isinstance(plugin, dict) and "mkdocstrings" in plugin]
    config = {
        "site_name": "broken",
        "docs_dir": str(tmp_path / "docs"),
        "markdown_extensions": settings["markdown_extensions"],
        "validation": settings["validation"],
        "plugins": plugins,
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    built = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "gone.md" in built.stderr and "harness.grid.knobs.NoSuchKnobs" in built.stderr
