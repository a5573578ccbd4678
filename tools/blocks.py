"""Every generated block of the README and the docs pages: its markers, the pages it is written into, how it is rendered
from the committed runs (artifacts/) and the command that regenerates it.

`python -m tools.blocks` rewrites every block in every page from the committed runs (seconds: nothing is trained),
as `make blocks` does; `make reference-*` reruns a reference run first and then rewrites its blocks (with their own
commands, listed here). tests/test_generated_blocks.py checks that every page holds exactly what its blocks render
now, and the documentation site's build renders them again (tools/docs_pages.py).

Paths here are relative to the repository's root, as the blocks name their sources: run this from the root.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from tools import calibration, findings_block, overoptimization_block, ray_projection, readme_tables, study_block
from tools.block_files import replace_block

REFERENCE = Path("artifacts") / "reference"
README = Path("README.md")
RESULTS = Path("docs") / "results" / "index.md"
RAY_PAGE = Path("docs") / "how-to" / "ray.md"
VERDICT_RULE = Path("docs") / "explanation" / "verdict-rule.md"


@dataclasses.dataclass(frozen=True)
class Block:
    """One generated block. render: its text from the committed runs, links written from the root; pages: where it
    is committed; command: what regenerates it there (the make target that reruns its run writes it the same way)."""

    start: str
    end: str
    render: Callable[[], str]
    pages: tuple[Path, ...]
    command: str


BLOCKS: tuple[Block, ...] = (
    Block(
        readme_tables.START,
        readme_tables.END,
        lambda: readme_tables.reproduced_block(REFERENCE / "paper", REFERENCE / "paper-original"),
        (README, RESULTS),
        "python -m tools.readme_tables artifacts/reference/paper README.md docs/results/index.md "
        "--original artifacts/reference/paper-original",
    ),
    Block(
        findings_block.FINDINGS_START,
        findings_block.FINDINGS_END,
        lambda: findings_block.findings_block(REFERENCE),
        (README, RESULTS),
        "python -m tools.readme_tables --findings artifacts/reference README.md docs/results/index.md",
    ),
    Block(
        readme_tables.CLAIMS_START,
        readme_tables.CLAIMS_END,
        lambda: readme_tables.claims_block(REFERENCE / "paper-100"),
        (RESULTS,),
        "python -m tools.readme_tables --claims artifacts/reference/paper-100 docs/results/index.md",
    ),
    Block(
        readme_tables.UNTIL_DECIDED_START,
        readme_tables.UNTIL_DECIDED_END,
        lambda: readme_tables.until_decided_block(REFERENCE / "paper-until-decided"),
        (RESULTS,),
        "python -m tools.readme_tables --until-decided artifacts/reference/paper-until-decided docs/results/index.md",
    ),
    Block(
        readme_tables.TEMPORAL_START,
        readme_tables.TEMPORAL_END,
        lambda: readme_tables.temporal_block(REFERENCE / "temporal"),
        (RESULTS,),
        "python -m tools.readme_tables --temporal artifacts/reference/temporal docs/results/index.md",
    ),
    Block(
        study_block.SCALE_START,
        study_block.SCALE_END,
        lambda: study_block.study_block(REFERENCE / "scale"),
        (RESULTS,),
        "python -m tools.readme_tables --study artifacts/reference/scale docs/results/index.md",
    ),
    Block(
        overoptimization_block.OVEROPTIMIZATION_START,
        overoptimization_block.OVEROPTIMIZATION_END,
        lambda: overoptimization_block.overoptimization_block(REFERENCE / "overoptimization"),
        (RESULTS,),
        "python -m tools.readme_tables --overoptimization artifacts/reference/overoptimization docs/results/index.md",
    ),
    Block(
        calibration.CALIBRATION_START,
        calibration.CALIBRATION_END,
        lambda: calibration.calibration_block(REFERENCE / "calibration"),
        (VERDICT_RULE,),
        "python -m tools.blocks (after python -m tools.calibration)",
    ),
    Block(
        calibration.SUMMARY_START,
        calibration.SUMMARY_END,
        lambda: calibration.summary_block(REFERENCE / "calibration"),
        (README,),
        "python -m tools.blocks (after python -m tools.calibration)",
    ),
    Block(
        ray_projection.RAY_START,
        ray_projection.RAY_END,
        lambda: ray_projection.projection_block(json.loads(ray_projection.BENCH_FILE.read_text(encoding="utf-8"))),
        (RAY_PAGE,),
        "python -m tools.ray_projection docs/how-to/ray.md",
    ),
)


def rewrite_all(blocks: tuple[Block, ...] = BLOCKS) -> list[Path]:
    """Every block rendered once and written into each of its pages; the pages written, in order."""
    written = []
    for block in blocks:
        text = block.render()
        for page in block.pages:
            replace_block(page, block.start, block.end, text)
            written.append(page)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.blocks", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    for page in dict.fromkeys(rewrite_all()):
        print(f"rewrote {page}")


if __name__ == "__main__":
    main()
