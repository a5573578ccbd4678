"""The release's metadata agrees with the one version source, harness/common/version.py: `coevolab --version`, the
changelog's latest release and the citation file (version and date). The citation file is CFF 1.2.0 in the keys
this project uses (checked in full with `cffconvert --validate`, whose schema needs an older jsonschema than the
lock's, so it is not a test dependency)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.common.version import __version__

ROOT = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$", re.MULTILINE)


@pytest.fixture(scope="module")
def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def releases() -> list[tuple[str, str | None]]:
    return [(m["version"], m["date"]) for m in RELEASE.finditer((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))]


def test_version_is_the_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    import harness

    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__) and harness.__version__ == __version__
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"coevolab {__version__}\n"


def test_changelog_opens_with_unreleased_then_this_version() -> None:
    (unreleased, _), (latest, date), *_ = releases()
    assert unreleased == "Unreleased" and latest == __version__ and date is not None


def test_citation_names_this_release(citation: dict) -> None:
    _, (latest, date), *_ = releases()
    assert citation["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= citation.keys() and citation["type"] == "software"
    assert citation["version"] == __version__ == latest and citation["date-released"] == date
    assert citation["license"] == "Apache-2.0"


def test_citation_references_the_original_lab_and_the_papers(citation: dict) -> None:
    references = citation["references"]
    assert all({"type", "title", "authors"} <= reference.keys() and reference["authors"] for reference in references)
    repositories = {reference.get("repository-code") for reference in references}
    assert "https://github.com/jmamath/co-evolution-lab" in repositories
    arxiv = {identifier["value"] for reference in references for identifier in reference.get("identifiers", [])}
    # Self-Rewarding, Meta-Rewarding, EvoLM, Temporal Self-Rewarding, Gao et al., Coste et al.
    expected = {"2401.10020", "2407.19594", "2605.03871", "2508.06026", "2210.10760", "2310.02743"}
    assert {f"arXiv:{number}" for number in expected} <= arxiv
