"""The scale study's block (between SCALE_START and SCALE_END), from a study's run directory: its shapes (the
baseline's per-run measures and the within-shape claim) and its claims across shapes. `python -m tools.readme_tables
--study RUN_DIR PAGE...` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.common.run_files import CLAIMS_FILE, MANIFEST_FILE
from harness.common.wording import plural
from harness.rendering.markdown import markdown_table
from harness.report.findings import p_text

SCALE_START, SCALE_END = "<!-- scale:start -->", "<!-- scale:end -->"


def _interval(effect: float, low: float, high: float) -> str:
    return f"{effect:+.3f}" if pd.isna(low) else f"{effect:+.3f} [{low:+.3f}, {high:+.3f}]"


def conditions_per_shape(runs: pd.DataFrame, per: str = "shape") -> str:
    """How many conditions a study's shapes ran (runs.csv's rows): "4 conditions" where every shape ran as many,
    "4–13 conditions per <per>" where they differ."""
    counts = runs.groupby("shape", sort=False)["condition"].nunique()
    if counts.nunique() == 1:
        return plural(int(counts.iloc[0]), "condition")
    return f"{counts.min()}–{counts.max()} conditions per {per}"


def study_block(run_dir: Path, regenerate: str = "make reference-scale") -> str:
    """A study's shapes (baseline's per-run measures, the within-shape claim) and its claims across shapes."""
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    runs = pd.read_csv(run_dir / "runs.csv")
    within = pd.read_csv(run_dir / CLAIMS_FILE) if (run_dir / CLAIMS_FILE).is_file() else pd.DataFrame()
    across = pd.read_csv(run_dir / "across.csv")
    baseline = runs[runs["condition"] == "baseline"].groupby("shape", sort=False)
    first = runs.groupby("shape", sort=False).first()
    rows = []
    for shape, own in baseline:
        facts = first.loc[shape]
        q_star = facts["q_star"] if facts["q_star"] == "separable" else f"rugged (N = {facts['interaction_order']})"
        own_claims = within[within["shape"] == shape] if not within.empty else within
        claim = next(own_claims.itertuples(index=False), None)
        rows.append(
            [
                str(shape),
                f"{facts['outputs']:,}",
                q_star,
                f"{facts['policy_family']} {facts['policy_parameters']:,} / {facts['judge_family']} "
                f"{facts['judge_parameters']:,}",
                f"{own['share_of_q_star_range'].mean():.3f}",
                f"{own['ceiling_iteration'].mean():.2f}",
                f"{own['entropy_collapse_iteration'].mean():.2f}",
                f"{own['at_dominant_mode'].mean():.2f}",
                f"{own['judge_alignment'].mean():.3f}",
                "n/a" if claim is None else f"{_interval(claim.effect, claim.ci_low, claim.ci_high)} {claim.verdict}",
            ]
        )
    header = ["Shape", "Outputs", "q*", "Policy / judge (parameters)", "Share of q*'s range", "Ceiling iteration"]
    header += ["Entropy < 1 nat at", "At dominant mode", "Judge alignment", "Slow judge − baseline [CI]"]
    shapes = markdown_table(header, rows, right=[False, True, False, False, True, True, True, True, True, True])
    claim_rows = [
        [
            row.statement,
            f"{row.shape} vs {row.than_shape}" if row.kind == "between" else f"all {len(row.shape.split(', '))} shapes",
            _interval(row.effect, row.ci_low, row.ci_high),
            f"{p_text(row.p_value)} ({p_text(row.p_adjusted)})",
            f"**{row.verdict}**",
            row.why,
        ]
        for row in across.itertuples(index=False)
    ]
    claims = markdown_table(
        ["Claim (stated before the run)", "Compared", "Δ [CI]", "p (adj.)", "Verdict", "Why"],
        claim_rows,
        right=[False, False, True, True, False, False],
    )
    seeds = int(runs["seed"].nunique())
    quoted = f"“{within['statement'].iloc[0]}”" if not within.empty else "(none)"
    seconds, machine = manifest["wall_seconds"]["invocation"], manifest["machine"]
    return (
        f"{plural(len(rows), 'shape')} × {plural(runs['condition'].nunique(), 'condition')} × "
        f"{plural(seeds, 'seed')} ({len(runs):,} runs), from `{run_dir.as_posix()}` "
        f"([report]({run_dir.as_posix()}/report.md)); regenerate: `{regenerate}`. The baseline's runs per shape "
        f"(means over seeds), and the within-shape claim {quoted} (seed-paired: the mean Δ of real quality with its "
        f"interval, and the verdict on its jumps):\n\n{shapes.rstrip()}\n\nThe claims across shapes (one Holm family; "
        "between two shapes the runs are independent samples: Δ of means with a BCa interval at the claim's "
        f"adjusted level and a permutation p):\n\n{claims.rstrip()}\n\n"
        f"That study took {seconds:.0f} s in one command on {machine['cores']} cores of an {machine['cpu']}, at a "
        f"peak resident memory of {manifest['peak_resident_bytes'] / 2**30:.1f} GiB (its shapes: "
        + ", ".join(f"{name} {value:.0f} s" for name, value in manifest["shape_seconds"].items())
        + ")."
    )
