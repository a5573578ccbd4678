"""The README's generated blocks, rendered from real runs' files.

`python -m harness.readme_tables RUN_DIR README.md` rewrites the reproduced end-state
table (between START and END); `python -m harness.readme_tables --claims RUN_DIR README.md`
rewrites the verdicts on the published claims (between CLAIMS_START and CLAIMS_END) from
the run's claims.csv. The README's numbers always come from a run, not from typing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from harness import report
from harness.artifacts import CLAIMS_FILE, MANIFEST_FILE, METRICS_FILE, atomic_write_text
from harness.report.markdown import markdown_table
from harness.verdicts import VERDICTS
from harness.wording import plural

START, END = "<!-- reproduced-table:start -->", "<!-- reproduced-table:end -->"
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"

# End-state means over seeds 0–4 reported by the original lab (quality, alignment), and
# the condition (or family, of which the best is reported) each row corresponds to here.
PUBLISHED: list[tuple[str, str, float, float]] = [
    ("Baseline", "baseline", 1.594, 0.449),
    ("Frozen judge", "frozen", 1.610, 0.718),
    ("Slower judge updates (every 10)", "slow-judge[judge_update_every=10]", 1.912, 0.674),
    ("Slower updates + meta (every 10, 5%)", "slow-meta[judge_update_every=10,meta_update_every=10]", 1.977, 0.715),
    ("Judge ensemble (best of 3, 5)", "ensemble[", 1.747, 0.480),
    ("Periodic reset (best of 3, 5)", "reset[", 1.770, 0.718),
    ("Anchor 10% (oracle)", "anchor[anchor_fraction=0.1]", 2.214, 0.993),
]


def _mean_std_ci(row: pd.Series, metric: str) -> str:
    return (
        f"{row[f'{metric}_mean']:.3f} ± {row[f'{metric}_std']:.3f} "
        f"[{row[f'{metric}_ci_low']:.3f}, {row[f'{metric}_ci_high']:.3f}]"
    )


def comparison_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Published end-state numbers beside ours (mean, std, 95% CI over seeds at the last iteration)."""
    summary = report.summarize(metrics).set_index("condition")
    rows = []
    for label, match, quality, alignment in PUBLISHED:
        candidates = (
            summary[summary.index == match] if not match.endswith("[") else summary[summary.index.str.startswith(match)]
        )
        if candidates.empty:
            continue
        best = candidates["policy_quality_mean"].idxmax()
        row = candidates.loc[best]
        rows.append(
            {
                "published row": label,
                "our condition": best,
                "published quality": quality,
                "our quality": _mean_std_ci(row, "policy_quality"),
                "published alignment": alignment,
                "our alignment": _mean_std_ci(row, "judge_alignment"),
            }
        )
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The comparison table in the project's one markdown-table layout (numbers right-aligned, 3 decimals)."""
    rows = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row] for row in table.itertuples(index=False)]
    right = [table[c].dtype.kind == "f" for c in table.columns]
    return markdown_table(list(table.columns), rows, right=right).rstrip("\n")


def wall_time_line(manifest: dict) -> str:
    """How long the run took and where, from its manifest."""
    seconds, machine = manifest["wall_seconds"], manifest["machine"]
    phases = ", ".join(f"{phase} {value:.1f} s" for phase, value in seconds.items())
    shards = manifest.get("shards", 1)
    split = f"{shards} shards side by side" if shards > 1 else "one shard"
    compiled = "" if manifest.get("compile_cache") is None else " (compile cache on)"
    return (
        f"That run took {sum(seconds.values()):.0f} s ({phases}){compiled} on {machine['cores']} cores of an "
        f"{machine['cpu']}, as {split}."
    )


def _replace_block(readme: Path, start: str, end: str, block: str) -> None:
    text = readme.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"{readme}: markers {start} / {end} not found")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    atomic_write_text(readme, head + start + "\n" + block + "\n" + end + tail)


def rewrite_readme(run_dir: Path, readme: Path) -> None:
    metrics = pd.read_csv(run_dir / METRICS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    seeds = sorted(int(seed) for seed in metrics["seed"].unique())
    block = (
        f"End state (iteration {metrics['iteration'].max()}), mean ± std [95% CI] over seeds {seeds}, "
        f"from `{run_dir.as_posix()}` (regenerate: `make reference`).\n\n{markdown(comparison_table(metrics))}\n\n"
        f"{wall_time_line(manifest)}"
    )
    _replace_block(readme, START, END, block)


def claims_block(run_dir: Path) -> str:
    """The verdicts of a run's claims.csv as a compact table, with where they come from."""
    verdicts = pd.read_csv(run_dir / CLAIMS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    counts = verdicts["verdict"].value_counts()
    tally = ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0) or v != "untested")
    rows = [
        [
            f"{row.statement}{' (spread)' if row.statistic == 'std' else ''}",
            row.other_side,
            f"{row.effect:+.3f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}]",
            "n/a" if pd.isna(row.p_improvement) else f"{row.p_improvement:.2f}",
            f"**{row.verdict}**",
            row.why,
        ]
        for row in verdicts.itertuples(index=False)
    ]
    table = markdown_table(
        ["Claim", "Compared with", "Δ [95% CI]", "P(better)", "Verdict", "Why"],
        rows,
        right=[False, False, True, True, False, False],
    )
    seeds = int(verdicts["seeds"].max())
    return (
        f"{plural(len(verdicts), 'claim')} over {plural(seeds, 'seed')} per condition: {tally}. "
        f"From `{run_dir.as_posix()}/report.md`, "
        f"which states the rule (regenerate: `make reference-100`).\n\n{table.rstrip()}\n\n{wall_time_line(manifest)}"
    )


def rewrite_claims(run_dir: Path, readme: Path) -> None:
    _replace_block(readme, CLAIMS_START, CLAIMS_END, claims_block(run_dir))


if __name__ == "__main__":
    if sys.argv[1] == "--claims":
        rewrite_claims(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        rewrite_readme(Path(sys.argv[1]), Path(sys.argv[2]))
