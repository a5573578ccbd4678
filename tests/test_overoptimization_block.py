"""The results page's overoptimization block (tools/overoptimization_block.py) from a study's files: what held in
every judge size, each claim's verdict per size, the across claims, Gao's fits; written between its markers only."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tools.overoptimization_block import OVEROPTIMIZATION_END, OVEROPTIMIZATION_START, what_held
from tools.readme_tables import main

SHAPES = ["small", "large"]


def _study(run_dir: Path) -> None:
    run_dir.mkdir()
    runs = pd.DataFrame({"shape": [s for s in SHAPES for _ in range(2)], "condition": "rl", "seed": [0, 1] * 2})
    runs.to_csv(run_dir / "runs.csv", index=False)
    within = pd.DataFrame(
        {
            "shape": SHAPES * 2,
            "claim": ["peaks", "peaks", "frontier", "frontier"],
            "statement": ["best-of-n peaks", "best-of-n peaks", "no lift", "no lift"],
            "effect": [0.5, 0.4, 0.6, float("nan")],
            "ci_low": [0.2, 0.1, 0.5, float("nan")],
            "ci_high": [0.8, 0.7, 0.7, float("nan")],
            "verdict": ["holds", "holds", "contradicted", "undecided"],
        }
    )
    within.to_csv(run_dir / "claims.csv", index=False)
    across = pd.DataFrame(
        {
            "statement": ["a larger judge peaks higher"],
            "kind": ["between"],
            "shape": ["large"],
            "than_shape": ["small"],
            "effect": [1.3],
            "ci_low": [0.7],
            "ci_high": [1.7],
            "p_value": [0.0002],
            "p_adjusted": [0.0012],
            "verdict": ["holds"],
        }
    )
    across.to_csv(run_dir / "across.csv", index=False)
    fits = pd.DataFrame(
        {
            "shape": SHAPES,
            "condition": "rl",
            "optimizer": ["best_of_n", "rl"],
            **{f"{c}{end}": [1.5, 2.5] for c in ("alpha", "beta") for end in ("", "_low", "_high")},
            "r2": [0.9, 0.8],
        }
    )
    fits.to_csv(run_dir / "gao_fits.csv", index=False)
    held = pd.DataFrame(
        {
            "shape": ["small", "small", "large", "large"],
            "condition": "rl",
            "optimizer": ["best_of_n", "best_of_n", "rl", "rl"],
            "form": ["best_of_n", "quadratic", "rl", "quadratic"],
            "held_out_mse": [0.25, 0.5, 0.125, 0.0625],
        }
    )
    held.to_csv(run_dir / "gao_held_out.csv", index=False)
    manifest = {
        "wall_seconds": {"invocation": 600.0},
        "machine": {"cores": 2, "cpu": "Test CPU"},
        "shape_seconds": {"small": 200.0, "large": 400.0},
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    report = (
        "# Study\n\n## Where this world departs from the literature\n\n- **a claim**: agrees.\n\n## Claims across\n"
    )
    (run_dir / "report.md").write_text(report)


def test_the_block_says_what_held_in_every_size_and_replaces_only_its_markers(tmp_path: Path) -> None:
    _study(tmp_path / "study")
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{OVEROPTIMIZATION_START}\nthe previous block\n{OVEROPTIMIZATION_END}\nafter\n")
    main(["--overoptimization", str(tmp_path / "study"), str(readme)])
    text = readme.read_text()
    assert text.startswith(f"before\n{OVEROPTIMIZATION_START}\n") and text.endswith(f"{OVEROPTIMIZATION_END}\nafter\n")
    assert "the previous block" not in text
    assert "Holds with every judge size: “best-of-n peaks”." in text
    assert "“no lift” (small: contradicted; large: undecided)" in text
    assert "+0.600 [+0.500, +0.700] **contradicted**" in text and "n/a" in text
    assert "| large vs small" in text and "0.0002 (0.0012)" in text
    assert "0.2500 / 0.5000" in text and "0.1250 / 0.0625" in text  # each form's held-out error beside the quadratic's
    assert "600 s in one command on 2 cores of an Test CPU (its shapes: small 200 s, large 400 s)" in text
    assert "figures/gao_rl.png" in text
    # The report's generated section, one heading level down, and nothing after it.
    assert "### Where this world departs from the literature\n\n- **a claim**: agrees." in text
    assert "Claims across" not in text


def test_what_held_sorts_claims_by_their_verdicts_in_every_size() -> None:
    within = pd.DataFrame(
        {
            "shape": SHAPES * 3,
            "claim": ["a", "a", "b", "b", "c", "c"],
            "statement": ["A", "A", "B", "B", "C", "C"],
            "verdict": ["holds", "holds", "contradicted", "contradicted", "holds", "undecided"],
        }
    )
    sentence = what_held(within, pd.DataFrame(columns=["statement", "verdict"]), SHAPES)
    assert sentence == (
        "Holds with every judge size: “A”. Contradicted with every judge size: “B”. Not the same with every judge "
        "size: “C” (small: holds; large: undecided)."
    )
