"""The generated blocks of one run each (tools/readme_tables.py): the published-vs-ours table and the wall-time line,
the claims, a run grown until decided and the follow-up mechanisms come from a run's files, written between their
markers only, into every page given, with the links of a page below the root made relative to it.

Each run directory here is written by hand (metrics.csv.gz, manifest.json, and what else a block reads), with numbers
chosen so that every expected cell is worked out by hand: nothing is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.common.run_files import CLAIMS_FILE, GRID_FILE, METRICS_FILE
from harness.experiment.until_decided import LOOKS_FILE
from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec
from harness.inference.claims import Claim
from harness.inference.verdicts import verdict_table
from tools.block_files import ROOT, relative_links
from tools.published import ORIGINAL_BASELINE
from tools.readme_tables import (
    CLAIMS_END,
    CLAIMS_START,
    END,
    START,
    TEMPORAL_END,
    TEMPORAL_START,
    UNTIL_DECIDED_END,
    UNTIL_DECIDED_START,
    rewrite_claims,
    rewrite_readme,
    rewrite_temporal,
    rewrite_until_decided,
    wall_time_line,
)
from tools.readme_tables import main as readme_tables

MANIFEST = {
    "wall_seconds": {"pretrain": 8.04, "compile": 18.46, "train": 95.0, "report": 3.5},
    "machine": {"cpu": "Test CPU", "cores": 2},
    "shards": 2,
    "compile_cache": None,
}


def test_wall_time_line_sums_the_phases() -> None:
    assert wall_time_line(MANIFEST) == (
        "That run took 125 s (pretrain 8.0 s, compile 18.5 s, train 95.0 s, report 3.5 s) "
        "on 2 cores of an Test CPU, as 2 shards side by side."
    )
    cached = wall_time_line({**MANIFEST, "shards": 1, "compile_cache": "/cache"})
    assert cached.endswith("(compile cache on) on 2 cores of an Test CPU, as one shard.")
    pieces = wall_time_line({**MANIFEST, "shards": 6, "devices": 2})
    assert pieces.endswith("as 6 shards, 3 after one another on each of 2 devices.")
    blocks = wall_time_line({**MANIFEST, "execution": {"line": "Run as 5 seed blocks (20 seeds each), in-process."}})
    assert blocks.endswith("as 2 shards side by side. Run as 5 seed blocks (20 seeds each), in-process.")


def hand_built_metrics(shift: float = 0.0) -> pd.DataFrame:
    """A metrics table of a grid run: baseline and frozen, seeds 0–2, iterations 0–2.

    At the last iteration (2) the baseline's quality is 1.5, 1.6, 1.7 by seed (+ shift): 1.600 ± 0.100 (mean ±
    sample std), frozen's 0.2 higher; alignment 0.4, 0.5, 0.6 in both: 0.500 ± 0.100.
    """
    rows = [
        {
            "condition": condition,
            "seed": seed,
            "iteration": iteration,
            "boundary": condition == "frozen",
            "diverged": False,
            "policy_quality": 1.0 + 0.25 * iteration + 0.1 * seed + offset + shift,
            "judge_alignment": 0.8 - 0.2 * iteration + 0.1 * seed,
            "policy_entropy": 8.0 - 3.0 * iteration,
            "judge_perceived_quality": 1.0 + 0.5 * iteration,
            "mode_sequence": "3 1 4 1",
            "mode_quality": 1.5 + 0.1 * seed,
        }
        for condition, offset in (("baseline", 0.0), ("frozen", 0.2))
        for seed in range(3)
        for iteration in range(3)
    ]
    return pd.DataFrame(rows)


def _cells(block: str, first: str) -> list[str]:
    row = next(line for line in block.splitlines() if line.startswith(f"| {first}"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_rewrite_replaces_only_the_marked_block(tmp_path: Path) -> None:
    hand_built_metrics().to_csv(tmp_path / "metrics.csv.gz", index=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{START}\nold table\n{END}\nafter\n", encoding="utf-8")

    rewrite_readme(tmp_path, readme)

    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text
    block = text.split(START)[1].split(END)[0]
    assert block.lstrip().startswith("End state (iteration 2), mean ± std over seeds [0, 1, 2], from ")
    # The published numbers beside ours: quality, then alignment.
    assert _cells(block, "Baseline ") == ["Baseline", "baseline", "1.594", "1.600 ± 0.100", "0.449", "0.500 ± 0.100"]
    assert _cells(block, "Frozen judge ") == [
        "Frozen judge",
        "frozen",
        "1.610",
        "1.800 ± 0.100",
        "0.718",
        "0.500 ± 0.100",
    ]
    # Published rows of conditions the run lacks are left out.
    assert "Anchor 10%" not in block
    assert wall_time_line(MANIFEST) in block


def test_original_streams_sit_beside_ours_with_the_baseline_seed_by_seed(tmp_path: Path) -> None:
    ours, original = tmp_path / "ours", tmp_path / "original"
    for run, shift in ((ours, 0.0), (original, 0.5)):
        run.mkdir()
        hand_built_metrics(shift).to_csv(run / "metrics.csv.gz", index=False)
        (run / "manifest.json").write_text(json.dumps(MANIFEST))
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\n{END}\n", encoding="utf-8")

    rewrite_readme(ours, readme, original)

    block = readme.read_text(encoding="utf-8").split(START)[1].split(END)[0]
    # The original's streams first (0.5 higher), then ours.
    assert _cells(block, "Baseline ")[2:5] == ["1.594", "2.100 ± 0.100", "1.600 ± 0.100"]
    # Seed by seed: the original lab's records at its iteration 1 (our last, 2, less one) beside our seed 0 under
    # its streams (1.5 + 0.5), its alignment (0.4) and end mode.
    theirs = pd.read_json(ORIGINAL_BASELINE / "seed_0.jsonl", lines=True).set_index("iteration")
    seed_row = next(line for line in block.splitlines() if line.startswith("|    0 ") or line.startswith("| 0 "))
    seed_cells = [cell.strip() for cell in seed_row.strip("|").split("|")]
    assert seed_cells[1] == f"{theirs.loc[1, 'policy_quality']:.3f}"
    assert seed_cells[2:] == ["2.000", f"{theirs.loc[1, 'judge_alignment']:.3f}", "0.400", "3 1 4 1 (q* 1.500)"]


def test_claims_block_comes_from_the_runs_verdicts(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(1.7, 0.2, size=30)
    metrics = pd.concat(
        [
            pd.DataFrame({"condition": name, "seed": range(30), "iteration": 1, "policy_quality": values})
            for name, values in (("a", base + 0.3), ("b", base))
        ]
    )
    claim = Claim(
        name="c", statement="a beats b", metric="policy_quality", condition="a", direction="above", than_condition="b"
    )
    verdict_table(metrics, [claim]).to_csv(tmp_path / CLAIMS_FILE, index=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{CLAIMS_START}\nstale\n{CLAIMS_END}\nrest\n", encoding="utf-8")

    rewrite_claims(tmp_path, readme)

    block = readme.read_text(encoding="utf-8").split(CLAIMS_START)[1].split(CLAIMS_END)[0]
    assert "stale" not in block
    assert block.lstrip().startswith("1 claim over 30 seeds per condition: 1 holds, 0 not supported, 0 contradicted.")
    squeezed = block
    while "  " in squeezed:
        squeezed = squeezed.replace("  ", " ")
    assert "| a beats b (vs b @ 1) | +0.300 " in squeezed
    # The table has five columns (the verdict stays in view); the reasons are folded below it.
    assert (
        squeezed.count("|", 0, squeezed.index("\n", squeezed.index("| a beats b")))
        - squeezed.count("|", 0, squeezed.index("| a beats b"))
        == 6
    )
    assert '<details markdown="1"><summary>Why each verdict' in block
    assert "- “a beats b” (vs b @ 1): **holds**: of the " in block


def test_until_decided_block_says_what_each_look_decided_and_what_is_open(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(1.7, 0.2, size=40)
    metrics = pd.concat(
        [
            pd.DataFrame({"condition": name, "seed": range(40), "iteration": 1, "policy_quality": values})
            for name, values in (("a", base + 0.3), ("b", base), ("c", base + rng.normal(0, 0.05, size=40)))
        ]
    )
    clear, unclear = (
        Claim(
            name=name,
            statement=f"{side} beats b",
            metric="policy_quality",
            condition=side,
            direction="above",
            than_condition="b",
        )
        for name, side in (("clear", "a"), ("unclear", "c"))
    )
    # As the loop writes them: the clear claim's row from look 1, the open one's from look 2 (the last).
    first, second = verdict_table(metrics[metrics["seed"] < 20], [clear]), verdict_table(metrics, [unclear])
    claims = pd.concat([first.assign(decided_at_look=1.0, look_level=0.03), second.assign(look_level=0.02)])
    assert claims["verdict"].tolist() == ["holds", "undecided"]
    claims.to_csv(tmp_path / CLAIMS_FILE, index=False)
    pd.DataFrame({"look": [1, 2], "seeds": [20, 40], "runs": [60, 40]}).to_csv(tmp_path / LOOKS_FILE, index=False)
    sequential = {"spending": "pocock", "alpha": 0.05, "looks": [20, 40], "levels": [0.03, 0.02]}
    (tmp_path / "manifest.json").write_text(json.dumps({**MANIFEST, "sequential": sequential}))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{UNTIL_DECIDED_START}\nstale\n{UNTIL_DECIDED_END}\nrest\n", encoding="utf-8")

    rewrite_until_decided(tmp_path, readme)

    text = readme.read_text(encoding="utf-8")
    block = text.split(UNTIL_DECIDED_START)[1].split(UNTIL_DECIDED_END)[0]
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "stale" not in block
    assert block.lstrip().startswith(
        "Looks planned at 20 seeds (α 0.0300), 40 seeds (α 0.0200) on seeds 0–39: Pocock-type spending of α = 0.05. "
        "2 looks taken: "
        "look 1 (20 seeds) decided clear (holds); look 2 (40 seeds) decided none. "
        "1 claim still open after the last look: unclear."
    )
    assert "2 claims over 40 seeds per condition: 1 holds" in block
    assert "(regenerate: `make reference-until-decided`)" in block
    # A plan from a later first seed (the manifest of a plan older than first_seed, above, started at 0).
    sequential["first_seed"] = 1000
    (tmp_path / "manifest.json").write_text(json.dumps({**MANIFEST, "sequential": sequential}))
    rewrite_until_decided(tmp_path, readme)
    assert "40 seeds (α 0.0200) on seeds 1000–1039: Pocock-type" in readme.read_text(encoding="utf-8")


def test_temporal_block_comes_from_the_runs_metrics_grid_and_verdicts(tmp_path: Path) -> None:
    conditions = {"baseline": Knobs(), "anchored": Knobs(rejected_from="initial")}
    grid = GridSpec(name="t", conditions=tuple(Condition(name=n, knobs=k) for n, k in conditions.items()))
    metrics = pd.DataFrame(
        [
            {
                "condition": name,
                "seed": seed,
                "iteration": 2,
                "policy_quality": 1.0 + shift + 0.1 * seed,
                "judge_alignment": 0.5,
                "pair_label_error": 0.2 + shift,
                "pair_label_error_distinct": 0.4 + shift,
                "pair_quality_gap": 1.5 - shift,
            }
            for name, shift in (("baseline", 0.0), ("anchored", 0.25))
            for seed in range(3)
        ]
    )
    metrics.to_csv(tmp_path / METRICS_FILE, index=False)
    (tmp_path / GRID_FILE).write_text(grid.model_dump_json())
    claim = Claim(
        name="c",
        statement="anchored wins",
        metric="policy_quality",
        condition="anchored",
        direction="above",
        than_condition="baseline",
    )
    verdict_table(metrics, [claim]).to_csv(tmp_path / CLAIMS_FILE, index=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{TEMPORAL_START}\nstale\n{TEMPORAL_END}\nrest\n", encoding="utf-8")

    rewrite_temporal(tmp_path, readme)

    text = readme.read_text(encoding="utf-8")
    block = text.split(TEMPORAL_START)[1].split(TEMPORAL_END)[0]
    assert "stale" not in block and text.endswith(f"{TEMPORAL_END}\nrest\n")
    rows = {line.split("|")[1].strip(): line for line in block.splitlines() if line.startswith("| ")}
    assert "policy > π₀" in rows["anchored"] and "1.350 ± 0.100" in rows["anchored"]
    assert rows["anchored"].replace(" ", "").endswith("|0.450|0.650|1.250|")
    assert "policy vs policy, judge-labelled" in rows["baseline"]
    assert "1 claim over 3 seeds per condition" in block and "make reference-temporal" in block


def test_the_command_writes_the_block_into_every_page_given(tmp_path: Path) -> None:
    hand_built_metrics().to_csv(tmp_path / "metrics.csv.gz", index=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    pages = [tmp_path / "README.md", tmp_path / "results.md"]
    for page in pages:
        page.write_text(f"{page.name}\n{START}\nstale\n{END}\n", encoding="utf-8")

    readme_tables([str(tmp_path), *map(str, pages)])

    blocks = [page.read_text(encoding="utf-8").split(START)[1] for page in pages]
    assert blocks[0] == blocks[1] and "stale" not in blocks[0] and "| Baseline " in blocks[0]
    assert pages[1].read_text(encoding="utf-8").startswith("results.md\n")


def test_links_are_made_relative_to_a_page_below_the_root() -> None:
    block = (
        "[report](artifacts/reference/temporal/report.md), ![figure](artifacts/reference/x/figures/a.png), "
        "[a site](https://example.org/a.md), [a section](#words) and `artifacts/reference/temporal` in code"
    )
    results = relative_links(block, ROOT / "docs" / "results" / "index.md")
    assert results == (
        "[report](../../artifacts/reference/temporal/report.md), ![figure](../../artifacts/reference/x/figures/a.png), "
        "[a site](https://example.org/a.md), [a section](#words) and `artifacts/reference/temporal` in code"
    )
    assert relative_links(block, ROOT / "README.md") == block  # the root: as rendered
    assert relative_links(block, Path("/nonexistent/elsewhere/page.md")) == block  # outside the repository
