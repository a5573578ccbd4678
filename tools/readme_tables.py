"""The generated blocks of the README and the docs pages that show one run each, rendered from its files.

`python -m tools.readme_tables RUN_DIR PAGE... [--original ORIGINAL_DIR]` rewrites the reproduced end-state table
(between START and END) in each PAGE, with the grid's run under the original lab's streams beside ours and its
baseline seed by seed when ORIGINAL_DIR is given; with `--claims` the verdicts on the published claims (between
CLAIMS_START and CLAIMS_END) from the run's claims.csv; `--until-decided` a run grown until its claims were decided;
`--temporal` the follow-up mechanisms' end state, pair audits and claims (between TEMPORAL_START and TEMPORAL_END);
`--study` a study's shapes and its claims across them (tools/study_block.py); `--overoptimization` the
overoptimization study's verdicts, figure and fits (tools/overoptimization_block.py); and `--findings REFERENCE_DIR`
one line of findings per committed reference run (tools/findings_block.py). tools/blocks.py lists every block with
the pages it is written into; `python -m tools.blocks` rewrites them all from the committed runs. The numbers always
come from a run, not from typing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness import report
from harness.common.run_files import CLAIMS_FILE, MANIFEST_FILE, metrics_file
from harness.common.wording import plural
from harness.experiment.until_decided import LOOKS_FILE
from harness.grid.spec import GridSpec
from harness.inference.sequential import SPENDING_NAMES
from harness.mechanisms.pair_audit_report import pair_source
from harness.rendering.markdown import markdown_table
from harness.report.findings import p_text, seeds_needed_text
from tools.block_files import replace_block
from tools.findings_block import FINDINGS_END, FINDINGS_START, findings_block, verdict_tally
from tools.overoptimization_block import OVEROPTIMIZATION_END, OVEROPTIMIZATION_START, overoptimization_block
from tools.published import PUBLISHED, original_records, published_row
from tools.study_block import SCALE_END, SCALE_START, study_block

START, END = "<!-- reproduced-table:start -->", "<!-- reproduced-table:end -->"
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"
TEMPORAL_START, TEMPORAL_END = "<!-- temporal:start -->", "<!-- temporal:end -->"
UNTIL_DECIDED_START, UNTIL_DECIDED_END = "<!-- until-decided:start -->", "<!-- until-decided:end -->"


def _mean_std(row: pd.Series, metric: str) -> str:
    return f"{row[f'{metric}_mean']:.3f} ± {row[f'{metric}_std']:.3f}"


def comparison_table(metrics: pd.DataFrame, original: pd.DataFrame | None = None) -> pd.DataFrame:
    """Published end-state numbers beside ours (mean ± std over seeds at the last iteration): under our own
    streams (`metrics`) and, when given, under the original lab's (`original`, the same grid run with
    streams = "original"). A family's row is its best condition by final quality, chosen in each run."""
    runs = {"ours": report.summarize(metrics).set_index("condition")}
    if original is not None:
        runs = {"original streams": report.summarize(original).set_index("condition"), **runs}
    rows = []
    for label, match, quality, alignment in PUBLISHED:
        chosen = {name: published_row(summary, match) for name, summary in runs.items()}
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


def reproduced_block(run_dir: Path, original_dir: Path | None = None) -> str:
    """The reproduced table from a run of the published grid, and its run under the original's streams."""
    metrics = pd.read_csv(metrics_file(run_dir))
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    seeds = sorted(int(seed) for seed in metrics["seed"].unique())
    original = pd.read_csv(metrics_file(original_dir)) if original_dir else None
    sources = f"`{run_dir.as_posix()}`" + (f" and `{original_dir.as_posix()}`" if original_dir else "")
    block = (
        f"End state (iteration {metrics['iteration'].max()}), mean ± std over seeds {seeds}, from {sources} "
        f"(regenerate: `make reference`).\n\n{markdown(comparison_table(metrics, original))}\n\n"
        f"{wall_time_line(manifest)}"
    )
    if original is not None:
        block += (
            "\n\nThe baseline seed by seed: the original lab's own runs (`tests/data/original_lab/baseline`) beside "
            f"ours under its streams.\n\n{markdown(baseline_by_seed(original, original_records()))}"
        )
    return block


def rewrite_readme(run_dir: Path, page: Path, original_dir: Path | None = None) -> None:
    replace_block(page, START, END, reproduced_block(run_dir, original_dir))


def claims_block(run_dir: Path, regenerate: str = "make reference-100") -> str:
    """The verdicts of a run's claims.csv as a compact table, with where they come from and how to regenerate it."""
    verdicts = pd.read_csv(run_dir / CLAIMS_FILE)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    tally = verdict_tally(verdicts["verdict"])
    statements = [f"{row.statement}{' (spread)' if row.statistic == 'std' else ''}" for row in verdicts.itertuples()]
    rows = [
        [
            f"{statement} (vs {row.other_side})",
            f"{row.effect:+.3f} (no interval)"
            if pd.isna(row.ci_low)
            else f"{row.effect:+.3f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}]",
            f"{row.seeds_up}/{row.seeds_down}",
            f"{p_text(row.p_value)} ({p_text(row.p_adjusted)})",
            f"**{row.verdict}**",
        ]
        for statement, row in zip(statements, verdicts.itertuples(index=False), strict=True)
    ]
    # Five columns, so that a page of 1,400 px shows the verdict; the rest of each row below, folded.
    table = markdown_table(
        ["Claim (vs what)", "Δ [CI]", "Seeds ↑/↓", "p (adj.)", "Verdict"], rows, right=[False, True, True, True, False]
    )
    details = []
    for statement, row in zip(statements, verdicts.itertuples(index=False), strict=True):
        better = (
            "n/a"
            if pd.isna(row.p_improvement)
            else (f"{row.p_improvement:.2f} [{row.p_improvement_low:.2f}, {row.p_improvement_high:.2f}]")
        )
        needed = seeds_needed_text(row)
        more = "" if needed == "—" else f"; seeds it would need: {needed}"  # "—": decided
        # The statement quoted (its author's words, beside the verdict it got), as every block quotes a claim.
        details.append(
            f"- “{statement}” (vs {row.other_side}): **{row.verdict}**: {row.why}. P(better) {better}{more}."
        )
    folded = (
        '<details markdown="1"><summary>Why each verdict, P(better) [95% CI] and the seeds each claim would '
        "need</summary>\n\n" + "\n".join(details) + "\n\n</details>"
    )
    seeds = int(verdicts["seeds"].max())
    return (
        f"{plural(len(verdicts), 'claim')} over {plural(seeds, 'seed')} per condition: {tally}. "
        f"From `{run_dir.as_posix()}/report.md`, "
        "which states the rule: each CI at its claim's family-adjusted level, p raw (adjusted), seeds ↑/↓ the seeds "
        f"that changed end mode each way (regenerate: `{regenerate}`).\n\n{table.rstrip()}\n\n{folded}\n\n"
        + wall_time_line(manifest)
    )


def rewrite_claims(run_dir: Path, page: Path) -> None:
    replace_block(page, CLAIMS_START, CLAIMS_END, claims_block(run_dir))


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


def rewrite_until_decided(run_dir: Path, page: Path) -> None:
    replace_block(page, UNTIL_DECIDED_START, UNTIL_DECIDED_END, until_decided_block(run_dir))


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


def temporal_block(run_dir: Path) -> str:
    """The follow-up mechanisms' block: end state with pair audits, then the claims' verdicts."""
    metrics = pd.read_csv(metrics_file(run_dir))
    grid = report.read_run_grid(run_dir)
    if grid is None:
        raise SystemExit(f"{run_dir}: no grid.json")
    seeds = metrics["seed"].nunique()
    return (
        f"End state (iteration {metrics['iteration'].max()}), over {plural(seeds, 'seed')}, from "
        f"`{run_dir.as_posix()}` ([report]({run_dir.as_posix()}/report.md)); pair label error and q* gap are exact "
        f"over every pair the judge could train on.\n\n{markdown(temporal_table(metrics, grid))}\n\n"
        f"{claims_block(run_dir, 'make reference-temporal')}"
    )


def rewrite_temporal(run_dir: Path, page: Path) -> None:
    replace_block(page, TEMPORAL_START, TEMPORAL_END, temporal_block(run_dir))


def rewrite_study(run_dir: Path, page: Path) -> None:
    replace_block(page, SCALE_START, SCALE_END, study_block(run_dir))


def rewrite_overoptimization(run_dir: Path, page: Path) -> None:
    replace_block(page, OVEROPTIMIZATION_START, OVEROPTIMIZATION_END, overoptimization_block(run_dir))


def rewrite_findings(reference_dir: Path, page: Path) -> None:
    replace_block(page, FINDINGS_START, FINDINGS_END, findings_block(reference_dir))


# Each option: the block it rewrites in every page given, from RUN_DIR.
REWRITES = {
    "claims": rewrite_claims,
    "until_decided": rewrite_until_decided,
    "temporal": rewrite_temporal,
    "study": rewrite_study,
    "overoptimization": rewrite_overoptimization,
    "findings": rewrite_findings,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.readme_tables", description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dir",
        type=Path,
        help="a run of the published grid (with --claims, of paper-100; ...); with --findings, artifacts/reference",
    )
    parser.add_argument("pages", type=Path, nargs="+", help="the pages to rewrite the block in (README.md, docs/...)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--claims", action="store_true", help="rewrite the claims block instead")
    choice.add_argument(
        "--until-decided", action="store_true", help="rewrite the block of a run grown until its claims were decided"
    )
    choice.add_argument("--temporal", action="store_true", help="rewrite the follow-up mechanisms' block instead")
    choice.add_argument("--study", action="store_true", help="rewrite the scale study's block instead")
    choice.add_argument(
        "--overoptimization", action="store_true", help="rewrite the overoptimization study's block instead"
    )
    choice.add_argument(
        "--findings", action="store_true", help="rewrite the findings of every reference run under RUN_DIR instead"
    )
    parser.add_argument("--original", type=Path, help="the same grid run under the original lab's streams")
    args = parser.parse_args(argv)
    chosen = [rewrite for option, rewrite in REWRITES.items() if getattr(args, option)]
    for page in args.pages:
        if chosen:
            chosen[0](args.run_dir, page)
        else:
            rewrite_readme(args.run_dir, page, args.original)


if __name__ == "__main__":
    main()
