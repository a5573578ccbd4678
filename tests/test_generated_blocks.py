"""The generated blocks of the README and the docs pages hold what their commands render from the committed runs.

Every block that tools/blocks.py lists is compared, in every page it is committed to, with what it renders now from
artifacts/ (its links made relative to the page): a page edited by hand, or left behind by a change of the runs or of
how a block is rendered, fails here until `make blocks` (or the block's own command) is run. No page holds a marker
that no block renders. The findings block, one line per reference run, is checked against the runs' files read
independently, and rendered again from runs whose verdicts were judged otherwise, to show that its words follow them.
"""

from __future__ import annotations

import contextlib
import csv
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import blocks, findings_block
from tools.block_files import block_of, relative_links

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "artifacts" / "reference"
MARKER = re.compile(r"<!-- ([\w-]+):start -->")


@pytest.fixture(autouse=True)
def _from_the_root() -> Iterator[None]:
    with contextlib.chdir(ROOT):  # the blocks name their runs from the root
        yield


def pages() -> list[Path]:
    return [Path("README.md"), *sorted(path.relative_to(ROOT) for path in (ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("block", blocks.BLOCKS, ids=lambda block: MARKER.match(block.start).group(1))
def test_every_page_holds_what_its_block_renders(block: blocks.Block) -> None:
    rendered = block.render()
    for page in block.pages:
        committed = block_of(page.read_text(encoding="utf-8"), block.start, block.end, str(page))
        assert committed == relative_links(rendered, page), f"{page} is stale: run `make blocks` ({block.command})"


def test_no_page_holds_a_block_that_nothing_renders() -> None:
    registered = {(block.start, page) for block in blocks.BLOCKS for page in block.pages}
    for page in pages():
        for name in MARKER.findall(page.read_text(encoding="utf-8")):
            assert (f"<!-- {name}:start -->", page) in registered, f"{page}: block {name} is not in tools/blocks.py"


def test_the_readme_is_a_front_page() -> None:
    """At most 200 lines, the two commands, the findings and the reproduced table; the other blocks live in docs."""
    text = Path("README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert sorted(MARKER.findall(text)) == ["calibration-summary", "findings", "reproduced-table"]
    assert "\nmake run    # " in text and "\nmake test   # " in text


def _verdicts(path: Path) -> Counter:
    with path.open(encoding="utf-8") as file:
        return Counter(row["verdict"] for row in csv.DictReader(file))


def _line(block: str, run: str) -> str:
    (line,) = [line for line in block.splitlines() if line.startswith(f"- **[`{run}`]")]
    return line


def _tally(counts: Counter) -> str:
    """The verdicts in the rule's order, as '5 holds, 1 not supported'."""
    order = ["holds", "not supported", "contradicted", "undecided", "untested"]
    return ", ".join(f"{counts[verdict]} {verdict}" for verdict in order if counts[verdict])


def test_the_findings_count_the_runs_verdicts_as_their_files_have_them() -> None:
    block = findings_block.findings_block(Path("artifacts/reference"))
    assert [line.split("`")[1] for line in block.splitlines()] == list(findings_block.LINES)
    for run in ("paper", "paper-100", "paper-until-decided", "temporal"):
        counts = _verdicts(REFERENCE / run / "claims.csv")
        assert f"{sum(counts.values())} claims ({_tally(counts)}" in _line(block, run), run
    for run in ("scale", "overoptimization"):
        within, across = _verdicts(REFERENCE / run / "claims.csv"), _verdicts(REFERENCE / run / "across.csv")
        # Each tally closes its parenthesis, or goes on to say why some claims were untested.
        for counts in (within, across):
            assert re.search(rf"\({re.escape(_tally(counts))}[):]", _line(block, run)), run
    with (REFERENCE / "paper-100" / "attractors.csv").open(encoding="utf-8") as file:
        baseline = next(row for row in csv.DictReader(file) if row["condition"] == "baseline")
    assert f"{baseline['at_dominant']} of the baseline's {baseline['runs']} runs" in _line(block, "paper-100")
    with (REFERENCE / "paper-until-decided" / "claims.csv").open(encoding="utf-8") as file:
        still_open = sum(row["decided_at_look"] == "" for row in csv.DictReader(file))
    assert f"; {still_open} still open after the last look" in _line(block, "paper-until-decided")
    for run in findings_block.LINES:
        assert f"(artifacts/reference/{run}/report.md)" in _line(block, run)


def test_the_findings_follow_verdicts_judged_again(tmp_path: Path) -> None:
    """The same runs with every verdict turned to 'holds' (as a re-judging might): the counts and the quoted
    claims' verdicts follow; nothing else in the lines speaks of a verdict."""
    unread = shutil.ignore_patterns("blocks", "stages", "shapes", "figures")  # what no line reads
    for run in findings_block.LINES:
        shutil.copytree(REFERENCE / run, tmp_path / run, ignore=unread)
        for table in ("claims.csv", "across.csv"):
            path = tmp_path / run / table
            if path.is_file():
                with path.open(encoding="utf-8") as file:
                    rows = list(csv.DictReader(file))
                with path.open("w", encoding="utf-8", newline="") as file:
                    writer = csv.DictWriter(file, fieldnames=list(rows[0]))
                    writer.writeheader()
                    # the verdict, and the mean's own reading where a row has one
                    readings = {"mean_reading": "holds"} if "mean_reading" in rows[0] else {}
                    writer.writerows({**row, "verdict": "holds", **readings} for row in rows)
    before = findings_block.findings_block(REFERENCE)
    after = findings_block.findings_block(tmp_path)
    assert "undecided" in before and "undecided" not in after and "contradicted" not in after
    assert "17 claims (17 holds)" in _line(after, "paper-100")
    assert "“slower judge updates (every 10) end above the baseline”: holds," in _line(after, "paper-100")
    assert _line(after, "paper-100").endswith(": holds.")
    # Whatever does not count verdicts reads the same.
    counts = _verdicts(REFERENCE / "temporal" / "claims.csv")
    tallies = (f"({_tally(counts)})", f"({sum(counts.values())} holds)")
    assert tallies[0] in _line(before, "temporal") and tallies[1] in _line(after, "temporal")
    lines = (_line(before, "temporal").replace(tallies[0], ""), _line(after, "temporal").replace(tallies[1], ""))
    assert lines[0].replace(str(REFERENCE), "") == lines[1].replace(str(tmp_path), "")  # the links name the runs
