"""The README's generated blocks, rendered from real runs' files.

`python -m tools.readme_tables RUN_DIR README.md [--original ORIGINAL_DIR]` rewrites the
reproduced end-state table (between START and END), with the grid's run under the original
lab's streams beside ours and its baseline seed by seed when ORIGINAL_DIR is given;
`python -m tools.readme_tables --claims RUN_DIR README.md`
rewrites the verdicts on the published claims (between CLAIMS_START and CLAIMS_END) from
the run's claims.csv; `--temporal RUN_DIR README.md` the follow-up mechanisms' end state,
pair audits and claims (between TEMPORAL_START and TEMPORAL_END); `--study RUN_DIR README.md` a study's shapes
and its claims across them (between SCALE_START and SCALE_END); `--overoptimization RUN_DIR README.md` the
overoptimization study's verdicts, figure and fits (tools/overoptimization_block.py). The README's numbers
always come from a run, not from typing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness import report
from harness.common.run_files import CLAIMS_FILE, MANIFEST_FILE, METRICS_FILE, atomic_write_text
from harness.common.wording import plural
from harness.experiment.until_decided import LOOKS_FILE
from harness.grid.layout import GridSpec
from harness.inference.sequential import SPENDING_NAMES
from harness.inference.verdicts import VERDICTS
from harness.report.findings import p_text, seeds_needed_text
from harness.report.markdown import markdown_table
from harness.report.pairs import pair_source
from tools.overoptimization_block import OVEROPTIMIZATION_END, OVEROPTIMIZATION_START, overoptimization_block

START, END = "<!-- reproduced-table:start -->", "<!-- reproduced-table:end -->"
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"
TEMPORAL_START, TEMPORAL_END = "<!-- temporal:start -->", "<!-- temporal:end -->"
UNTIL_DECIDED_START, UNTIL_DECIDED_END = "<!-- until-decided:start -->", "<!-- until-decided:end -->"
SCALE_START, SCALE_END = "<!-- scale:start -->", "<!-- scale:end -->"
# The original lab's own per-iteration records of its published baseline (see its README there).
ORIGINAL_BASELINE = Path(__file__).resolve().parents[1] / "tests" / "data" / "original_lab" / "baseline"

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


def _mean_std(row: pd.Series, metric: str) -> str:
    return f"{row[f'{metric}_mean']:.3f} ± {row[f'{metric}_std']:.3f}"


def _published_row(summary: pd.DataFrame, match: str) -> pd.Series | None:
    """The condition a published row corresponds to (the best by final quality for a family); None if absent."""
    candidates = (
        summary[summary.index == match] if not match.endswith("[") else summary[summary.index.str.startswith(match)]
    )
    if candidates.empty:
        return None
    return candidates.loc[candidates["policy_quality_mean"].idxmax()]


def comparison_table(metrics: pd.DataFrame, original: pd.DataFrame | None = None) -> pd.DataFrame:
    """Published end-state numbers beside ours (mean ± std over seeds at the last iteration): under our own
    streams (`metrics`) and, when given, under the original lab's (`original`, the same grid run with
    streams = "original"). A family's row is its best condition by final quality, chosen in each run."""
    runs = {"ours": report.summarize(metrics).set_index("condition")}
    if original is not None:
        runs = {"original streams": report.summarize(original).set_index("condition"), **runs}
    rows = []
    for label, match, quality, alignment in PUBLISHED:
        chosen = {name: _published_row(summary, match) for name, summary in runs.items()}
        if any(row is None for row in chosen.values()):
            continue
        names = {run: str(found.name) for run, found in chosen.items()}
        condition = names["ours"]
        if names.get("original streams", condition) != condition:  # a family's best can differ between the runs
            condition = f"{names['original streams']} (ours: {condition})"
        row = {"published row": label, "condition": condition, "published quality": quality}
        row |= {f"quality, {name}": _mean_std(found, "policy_quality") for name, found in chosen.items()}
        row["published alignment"] = alignment
        row |= {f"alignment, {name}": _mean_std(found, "judge_alignment") for name, found in chosen.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def baseline_by_seed(original: pd.DataFrame, theirs: pd.DataFrame) -> pd.DataFrame:
    """The original's own baseline runs beside ours under its streams, seed by seed, at the last iteration.

    original: our metrics table of a grid run with the original's streams; theirs: the original's records
    (columns seed, iteration, policy_quality, judge_alignment; its iteration t is our t + 1).
    """
    last = int(original["iteration"].max())
    ours = original[(original["condition"] == "baseline") & (original["iteration"] == last)].set_index("seed")
    theirs = theirs[theirs["iteration"] == last - 1].set_index("seed")
    rows = []
    for seed in sorted(set(ours.index) & set(theirs.index)):
        rows.append(
            {
                "seed": int(seed),
                "original's quality": float(theirs.loc[seed, "policy_quality"]),
                "our quality": float(ours.loc[seed, "policy_quality"]),
                "original's alignment": float(theirs.loc[seed, "judge_alignment"]),
                "our alignment": float(ours.loc[seed, "judge_alignment"]),
                "our end mode": f"{ours.loc[seed, 'mode_sequence']} (q* {ours.loc[seed, 'mode_quality']:.3f})",
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
    shards, devices = manifest.get("shards"), manifest.get("devices", manifest.get("shards"))
    if shards is None:  # a run of several programs (an until-decided run's stages): each block says its own split
        split = ""
    elif shards == 1:
        split = ", as one shard"
    elif shards == devices:
        split = f", as {shards} shards side by side"
    else:
        split = f", as {shards} shards, {shards // devices} after one another on each of {devices} devices"
    compiled = "" if manifest.get("compile_cache") is None else " (compile cache on)"
    how_run = manifest.get("execution", {}).get("line")  # a grid run as seed blocks says how
    return (
        f"That run took {sum(seconds.values()):.0f} s ({phases}){compiled} on {machine['cores']} cores of an "
        f"{machine['cpu']}{split}." + (f" {how_run}" if how_run else "")
    )


def replace_block(readme: Path, start: str, end: str, block: str) -> None:
    """Replace what lies between the markers `start` and `end` in `readme` with `block` (exit if they are absent)."""
    text = readme.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"{readme}: markers {start} / {end} not found")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    atomic_write_text(readme, head + start + "\n" + block + "\n" + end + tail)


def rewrite_readme(run_dir: Path, readme: Path, original_dir: Path | None = None) -> None:
    """Rewrite the reproduced table from a run of the published grid, and its run under the original's streams."""
    metrics = pd.read_csv(run_dir / METRICS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    seeds = sorted(int(seed) for seed in metrics["seed"].unique())
    original = pd.read_csv(original_dir / METRICS_FILE) if original_dir else None
    sources = f"`{run_dir.as_posix()}`" + (f" and `{original_dir.as_posix()}`" if original_dir else "")
    block = (
        f"End state (iteration {metrics['iteration'].max()}), mean ± std over seeds {seeds}, from {sources} "
        f"(regenerate: `make reference`).\n\n{markdown(comparison_table(metrics, original))}\n\n"
        f"{wall_time_line(manifest)}"
    )
    if original is not None:
        theirs = pd.concat(pd.read_json(path, lines=True) for path in sorted(ORIGINAL_BASELINE.glob("seed_*.jsonl")))
        block += (
            "\n\nThe baseline seed by seed: the original lab's own runs (`tests/data/original_lab/baseline`) beside "
            f"ours under its streams.\n\n{markdown(baseline_by_seed(original, theirs))}"
        )
    replace_block(readme, START, END, block)


def claims_block(run_dir: Path, regenerate: str = "make reference-100") -> str:
    """The verdicts of a run's claims.csv as a compact table, with where they come from and how to regenerate it."""
    verdicts = pd.read_csv(run_dir / CLAIMS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    counts = verdicts["verdict"].value_counts()
    tally = ", ".join(
        f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0) or v not in ("untested", "undecided")
    )
    rows = [
        [
            f"{row.statement}{' (spread)' if row.statistic == 'std' else ''}",
            row.other_side,
            f"{row.effect:+.3f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}]",
            f"{row.seeds_up}/{row.seeds_down}",
            f"{p_text(row.p_value)} ({p_text(row.p_adjusted)})",
            "n/a"
            if pd.isna(row.p_improvement)
            else f"{row.p_improvement:.2f} [{row.p_improvement_low:.2f}, {row.p_improvement_high:.2f}]",
            f"**{row.verdict}**",
            row.why,
            seeds_needed_text(row),
        ]
        for row in verdicts.itertuples(index=False)
    ]
    table = markdown_table(
        [
            "Claim",
            "Compared with",
            "Δ [CI]",
            "Seeds ↑/↓",
            "p (adj.)",
            "P(better) [95% CI]",
            "Verdict",
            "Why",
            "Seeds needed",
        ],
        rows,
        right=[False, False, True, True, True, True, False, False, True],
    )
    seeds = int(verdicts["seeds"].max())
    return (
        f"{plural(len(verdicts), 'claim')} over {plural(seeds, 'seed')} per condition: {tally}. "
        f"From `{run_dir.as_posix()}/report.md`, "
        "which states the rule: each CI at its claim's family-adjusted level, p raw (adjusted), seeds ↑/↓ the seeds "
        f"that changed end mode each way (regenerate: `{regenerate}`).\n\n{table.rstrip()}\n\n"
        + wall_time_line(manifest)
    )


def rewrite_claims(run_dir: Path, readme: Path) -> None:
    replace_block(readme, CLAIMS_START, CLAIMS_END, claims_block(run_dir))


def until_decided_block(run_dir: Path) -> str:
    """A run grown until its claims were decided: its looks, their levels and seeds, what each look decided, what is
    still open, then its claims table (each claim's row from the look that decided it, else from the last look)."""
    verdicts, looks = pd.read_csv(run_dir / CLAIMS_FILE), pd.read_csv(run_dir / LOOKS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    plan = manifest["sequential"]
    planned = ", ".join(
        f"{seeds} seeds (α {level:.4f})" for seeds, level in zip(plan["looks"], plan["levels"], strict=True)
    )
    decided = []
    for look, seeds in enumerate(looks["seeds"], start=1):
        rows = verdicts[verdicts["decided_at_look"] == look]
        claims = ", ".join(f"{row.claim} ({row.verdict})" for row in rows.itertuples()) or "none"
        decided.append(f"look {look} ({seeds} seeds) decided {claims}")
    still_open = verdicts[verdicts["decided_at_look"].isna()]
    first = plan.get("first_seed", 0)  # a plan written before the first seed was recorded started at 0
    lead = (
        f"Looks planned at {planned} on seeds {first}–{first + plan['looks'][-1] - 1}: "
        f"{SPENDING_NAMES[plan['spending']]} spending of α = {plan['alpha']:g}. "
        f"{plural(len(looks), 'look')} taken: "
        f"{'; '.join(decided)}. {plural(len(still_open), 'claim')} still open after the last look"
        + (f": {', '.join(still_open['claim'])}." if len(still_open) else ".")
    )
    return lead + "\n\n" + claims_block(run_dir, regenerate="make reference-until-decided")


def rewrite_until_decided(run_dir: Path, readme: Path) -> None:
    replace_block(readme, UNTIL_DECIDED_START, UNTIL_DECIDED_END, until_decided_block(run_dir))


def temporal_table(metrics: pd.DataFrame, grid: GridSpec) -> pd.DataFrame:
    """Per condition at the final iteration: its pair source, real quality and alignment (mean ± std over seeds),
    and the exact label error (all pairs, and pairs of two different outputs) and q* gap of its judge's training
    pairs (means over seeds)."""
    final = metrics[metrics["iteration"] == metrics["iteration"].max()]
    rows = []
    for condition in grid.conditions:
        runs = final[final["condition"] == condition.name]
        rows.append(
            {
                "condition": condition.name,
                "judge's pairs": pair_source(condition.knobs),
                "quality": f"{runs['policy_quality'].mean():.3f} ± {runs['policy_quality'].std():.3f}",
                "alignment": f"{runs['judge_alignment'].mean():.3f} ± {runs['judge_alignment'].std():.3f}",
                "pair label error": runs["pair_label_error"].mean(),
                "label error, a ≠ b": runs["pair_label_error_distinct"].mean(),
                "pair q* gap": runs["pair_quality_gap"].mean(),
            }
        )
    return pd.DataFrame(rows)


def rewrite_temporal(run_dir: Path, readme: Path) -> None:
    """The follow-up mechanisms' block: end state with pair audits, then the claims' verdicts."""
    metrics = pd.read_csv(run_dir / METRICS_FILE)
    grid = report.read_run_grid(run_dir)
    if grid is None:
        raise SystemExit(f"{run_dir}: no grid.json")
    seeds = metrics["seed"].nunique()
    block = (
        f"End state (iteration {metrics['iteration'].max()}), over {plural(seeds, 'seed')}, from "
        f"`{run_dir.as_posix()}` ([report]({run_dir.as_posix()}/report.md)); pair label error and q* gap are exact "
        f"over every pair the judge could train on.\n\n{markdown(temporal_table(metrics, grid))}\n\n"
        f"{claims_block(run_dir, 'make reference-temporal')}"
    )
    replace_block(readme, TEMPORAL_START, TEMPORAL_END, block)


def _interval(effect: float, low: float, high: float) -> str:
    return f"{effect:+.3f}" if pd.isna(low) else f"{effect:+.3f} [{low:+.3f}, {high:+.3f}]"


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
    seconds, machine = manifest["wall_seconds"]["invocation"], manifest["machine"]
    return (
        f"{plural(len(rows), 'shape')} × {plural(runs['condition'].nunique(), 'condition')} × "
        f"{plural(seeds, 'seed')} ({len(runs):,} runs), from `{run_dir.as_posix()}` "
        f"([report]({run_dir.as_posix()}/report.md)); regenerate: `{regenerate}`. The baseline's runs per shape "
        "(means over seeds), and the within-shape claim that slower judge updates (every 10) end above the baseline "
        f"(seed-paired, Δ real quality):\n\n{shapes.rstrip()}\n\nThe claims across shapes (one Holm family; "
        "between two shapes the runs are independent samples: Δ of means with a BCa interval at the claim's "
        f"adjusted level and a permutation p):\n\n{claims.rstrip()}\n\n"
        f"That study took {seconds:.0f} s in one command on {machine['cores']} cores of an {machine['cpu']}, at a "
        f"peak resident memory of {manifest['peak_resident_bytes'] / 2**30:.1f} GiB (its shapes: "
        + ", ".join(f"{name} {value:.0f} s" for name, value in manifest["shape_seconds"].items())
        + ")."
    )


def rewrite_study(run_dir: Path, readme: Path) -> None:
    replace_block(readme, SCALE_START, SCALE_END, study_block(run_dir))


def rewrite_overoptimization(run_dir: Path, readme: Path) -> None:
    replace_block(readme, OVEROPTIMIZATION_START, OVEROPTIMIZATION_END, overoptimization_block(run_dir))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.readme_tables", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run of the published grid (or, with --claims, of paper-100)")
    parser.add_argument("readme", type=Path)
    parser.add_argument("--claims", action="store_true", help="rewrite the claims block instead")
    parser.add_argument("--temporal", action="store_true", help="rewrite the follow-up mechanisms' block instead")
    parser.add_argument("--study", action="store_true", help="rewrite the scale study's block instead")
    parser.add_argument(
        "--overoptimization", action="store_true", help="rewrite the overoptimization study's block instead"
    )
    parser.add_argument(
        "--until-decided", action="store_true", help="rewrite the block of a run grown until its claims were decided"
    )
    parser.add_argument("--original", type=Path, help="the same grid run under the original lab's streams")
    args = parser.parse_args(argv)
    if args.study:
        rewrite_study(args.run_dir, args.readme)
    elif args.overoptimization:
        rewrite_overoptimization(args.run_dir, args.readme)
    elif args.until_decided:
        rewrite_until_decided(args.run_dir, args.readme)
    elif args.claims:
        rewrite_claims(args.run_dir, args.readme)
    elif args.temporal:
        rewrite_temporal(args.run_dir, args.readme)
    else:
        rewrite_readme(args.run_dir, args.readme, args.original)


if __name__ == "__main__":
    main()
