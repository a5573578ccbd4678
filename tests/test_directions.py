"""Every direction word a committed page states comes from a claim's verdict: outside the claims' sections, no
report, summary or generated block says that one condition ends above or below another, or shows no difference.

The committed references are rendered by the report as it stands (`make rejudge` renders them again), so this reads
what a reader reads: report.md and summary.md of every reference run, shape and stage, and the README's and the
results page's generated blocks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.blocks import BLOCKS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "artifacts" / "reference"
# A statement that one condition ends above or below another, or does not differ from it.
DIRECTION = re.compile(r"\b(?:ends?|ended) (?:clearly )?(?:above|below)\b|\bno difference\b|\((?:above|below)\)")


def _outside_claims(text: str) -> str:
    """The page without its claims sections (a heading naming claims, up to the next heading of its level)."""
    kept, skipping = [], 0
    for line in text.splitlines():
        level = len(line) - len(line.lstrip("#")) if line.startswith("#") else 0
        if level and skipping and level <= skipping:
            skipping = 0
        if level and "claim" in line.lower():
            skipping = level
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


PAGES = sorted(p for name in ("report.md", "summary.md") for p in REFERENCE.rglob(name))


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REFERENCE).as_posix() for p in PAGES])
def test_no_report_states_a_direction_outside_its_claims(page: Path):
    found = DIRECTION.findall(_outside_claims(page.read_text(encoding="utf-8")))
    assert not found, f"{page.relative_to(ROOT)} states {found} outside its claims"


def test_no_generated_block_states_a_direction_but_a_claim_quoted_with_its_verdict():
    # A block may quote a claim's statement (its author's words, between “ and ”) beside the verdict claims.csv gives
    # it; outside such quotes and the claims' own tables, no block states a direction.
    for block in BLOCKS:
        text = re.sub(r"“[^”]*”", "", block.render())
        text = "\n".join(line for line in text.splitlines() if not line.startswith("| "))
        found = DIRECTION.findall(text)
        assert not found, f"block {block.start} states {found}"


def test_the_pattern_finds_what_it_forbids():
    assert DIRECTION.findall("9 end above the reference, 0 below and 4 show no difference; `x` -0.1 (below)") == [
        "end above",
        "no difference",
        "(below)",
    ]
    assert (
        _outside_claims("# r\n## Which claims hold\nX ends above Y\n## Attractors\nfine") == "# r\n## Attractors\nfine"
    )
