"""The README's generated block: the published-vs-ours table and the wall-time line come from a run's files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.readme_tables import END, START, rewrite_readme, wall_time_line

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


def test_rewrite_replaces_only_the_marked_block(tmp_path: Path, smoke_metrics: pd.DataFrame) -> None:
    smoke_metrics.to_csv(tmp_path / "metrics.csv", index=False)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{START}\nold table\n{END}\nafter\n", encoding="utf-8")

    rewrite_readme(tmp_path, readme)

    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text
    block = text.split(START)[1].split(END)[0]
    last = smoke_metrics[smoke_metrics["iteration"] == smoke_metrics["iteration"].max()]
    baseline = last[last["condition"] == "baseline"]
    row = next(line for line in block.splitlines() if line.startswith("| Baseline "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    quality = baseline["policy_quality"]
    assert cells[3].startswith(f"{quality.mean():.3f} ± {quality.std(ddof=1):.3f} [")
    assert cells[2] == "1.594" and cells[4] == "0.449"  # the published numbers beside ours
    assert wall_time_line(MANIFEST) in block
