"""The report's answers: verdicts on the grid's claims, attractors, and the overoptimization frontier.

Each part is written only where its inputs exist: verdicts where the grid states claims, the frontier where the
metrics table has kl_from_initial (runs older than that metric have none).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from harness.common.run_files import CLAIMS_FILE
from harness.common.wording import plural
from harness.inference.claims import Claim
from harness.inference.intervals import BOOTSTRAP_RESAMPLES, COVERAGE
from harness.inference.paired_tests import PERMUTATIONS
from harness.inference.seeds_needed import LADDER_TOP, SIMULATED_DATASETS, SIMULATION_RESAMPLES, TARGET
from harness.inference.verdicts import MIN_SEEDS, VERDICTS, verdict_table
from harness.report.attractors import attractor_figure, attractor_reading, escape_markdown, escape_table
from harness.report.frontier import KL, fit_frontier, fits_markdown, frontier_figure, frontier_points, frontier_reading
from harness.report.markdown import markdown_table
from harness.report.metrics_table import CSV_FLOAT_FORMAT, GridFacts, conditions, num, reference

MEAN_CI = f"a BCa bootstrap over seeds (scipy.stats.bootstrap, {BOOTSTRAP_RESAMPLES:,} paired resamples)"
EXACT_NAMES = {"sign test": "sign", "McNemar exact": "McNemar"}

Writer = Callable[[str, str | bytes], None]


def verdict_rule(verdicts: pd.DataFrame, confidence: float = 0.95) -> str:
    """The method paragraph of the claims section: the rule as the table applies it (its families' adjustments)."""
    alpha = f"{1 - confidence:g}"
    adjustments = sorted(set(verdicts["adjustment"]) - {"none (untested)"}) or ["Holm"]
    adjusted = " or ".join(f"{name}'s" if name == "Holm" else name for name in adjustments)
    return (
        "Δ is the claimed side minus the other side: a mean of seed-paired differences (or of the difference from a "
        "fixed value), or for *spread* claims the difference of standard deviations over seeds. Per-seed differences "
        "are mostly ties (identical end modes, float noise) and a few jumps between end modes, so *Seeds ↑/↓* counts "
        "the seeds that differ by more than the resolution each way, with an exact test on them: the sign test for a "
        "mean, McNemar's exact test on escapes from the dominant end mode for a spread. The p-value a verdict uses is "
        f"a permutation test over seeds (scipy.stats.permutation_test, {PERMUTATIONS:,} resamples): random sign flips "
        "of the paired differences for a mean, swaps within seed pairs for a spread; for *equal* claims two one-sided "
        "sign-flip tests shifted by the margin (TOST), doubled so that each side is tested at α/2. A condition file's "
        f"claims are one family (unless a claim names another), their p-values adjusted together ({adjusted}; "
        f"*p (adj.)* shows both). Each claim's CI is {MEAN_CI} at the level of its adjusted test (Holm: "
        f"1 − {alpha}/(m − k + 1) for the claim of rank k of m, the *level* shown), so interval and test agree as far "
        f"as they can. {COVERAGE} A claim **holds** when its adjusted p ≤ {alpha} and its CI excludes 0 on the "
        "claimed side with |Δ| at least the resolution (*equal*: the CI lies within ± the margin); it is "
        "**contradicted** when the same is true on the opposite side (*equal*: the CI lies wholly beyond ± the "
        "margin); it is **not supported** when the CI lies within ± the resolution (no effect as large as claimed) "
        "or both tests find an effect smaller than it; otherwise it is **undecided**: the interval and the "
        "permutation test disagree, or more seeds are needed. *Seeds needed* estimates how many would decide an "
        f"undecided claim with {TARGET:.0%} probability: the observed seeds resampled with replacement at "
        f"1–{LADDER_TOP}× their number (a √2 ladder, {SIMULATED_DATASETS} datasets a step, {SIMULATION_RESAMPLES} "
        "resamples inside) through this rule at the claim's level, a logistic curve fit to the share decided; "
        f'"> N" when even {LADDER_TOP}× the seeds would not. A claim against several conditions (a pattern) must '
        "hold against every one of them (an intersection–union test, identical conditions counted once; a negative "
        "verdict against one must survive Bonferroni over them); the row shows the worst case. With fewer than "
        f"{MIN_SEEDS} seeds a claim is **untested**: no verdict, numbers shown for orientation only. P(better) is the "
        "share of seeds on the claimed side by more than the resolution, ties counted half (*equal*: the share within "
        f"the margin), with a {confidence:.0%} interval: exact (Clopper–Pearson) for a plain share, a BCa bootstrap "
        "over seeds where ties count half. IQM: interquartile mean over seeds, robust to the few runs in rare modes."
    )


def seeds_needed_text(row: object) -> str:
    """A verdicts row's seeds_needed as the report writes it: "—" (decided), "> N" (beyond the ladder) or a count."""
    needed, seeds = getattr(row, "seeds_needed"), getattr(row, "seeds")  # noqa: B009
    if pd.isna(needed):
        return "—"
    return f"> {LADDER_TOP * int(seeds)}" if math.isinf(needed) else f"{int(needed)}"


def verdicts_markdown(verdicts: pd.DataFrame) -> str:
    header = [
        "Claim",
        "Compared with",
        "Claimed side: mean (IQM)",
        "Other side: mean (IQM)",
        "Δ [CI] (level)",
        "Seeds ↑/↓ (exact p)",
        "p (adj.)",
        "P(better) [95% CI]",
        "Verdict",
        "Why",
        "Seeds needed",
    ]
    rows = []
    for row in verdicts.itertuples(index=False):
        spread = " (spread)" if row.statistic == "std" else ""
        level = f" ({row.ci_level:.1%})" if pd.notna(row.ci_level) else ""
        better = num(row.p_improvement, 2)
        if pd.notna(row.p_improvement_low):
            better += f" [{num(row.p_improvement_low, 2)}, {num(row.p_improvement_high, 2)}]"
        rows.append(
            [
                f"{row.statement}{spread} [{row.side}]",
                row.other_side,
                f"{num(row.side_mean)} ({num(row.side_iqm)})",
                f"{num(row.other_mean)} ({num(row.other_iqm)})",
                f"{num(row.effect, signed=True)} [{num(row.ci_low, signed=True)}, {num(row.ci_high, signed=True)}]"
                + level,
                f"{row.seeds_up}/{row.seeds_down} ({EXACT_NAMES.get(row.exact_test, row.exact_test)} "
                f"p = {p_text(row.exact_p)})",
                f"{p_text(row.p_value)} ({p_text(row.p_adjusted)})",
                better,
                f"**{row.verdict}**",
                row.why,
                seeds_needed_text(row),
            ]
        )
    return markdown_table(header, rows, right=[False, False, True, True, True, True, True, True, False, False, True])


def p_text(value: object) -> str:
    """A p-value in two significant digits ("n/a" when missing)."""
    return "n/a" if pd.isna(value) else f"{float(value):.2g}"  # type: ignore[arg-type]


def findings_sections(
    prepared: pd.DataFrame,
    shares: pd.DataFrame,
    out_dir: Path,
    facts: GridFacts,
    claims: Sequence[Claim],
    groups: list[tuple[str, ...]],
    write: Writer,
    figures: bool = True,
    confidence: float = 0.95,
) -> list[str]:
    """Markdown lines of the claims, attractor and frontier sections; writes claims.csv, attractors.csv,
    frontier.csv and their figures through `write` / into out_dir/figures (figures=False: neither draws nor links
    them). groups: the identical groups (identical.identical_groups), each counted once where the text counts
    conditions."""
    lines: list[str] = []
    ref = reference(prepared)
    if claims:
        verdicts = verdict_table(prepared, claims, confidence)
        write(CLAIMS_FILE, verdicts.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        counts = verdicts["verdict"].value_counts()
        tally = ", ".join(
            f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0) or v not in ("untested", "undecided")
        )
        lines += [
            "## Which claims hold",
            "",
            f"{facts.heading()} {plural(len(verdicts), 'claim')} stated in the condition file: {tally}. "
            f"{verdict_rule(verdicts, confidence)}",
            "",
            verdicts_markdown(verdicts),
        ]
    if not shares.empty:
        escapes = escape_table(shares, ref, confidence)
        write("attractors.csv", escapes.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        lines += [
            "## Attractors",
            "",
            f"{facts.heading()} {attractor_reading(escapes, shares, ref, groups)}",
            "",
            escape_markdown(escapes, conditions(prepared)),
        ]
        if figures:
            figure = attractor_figure(shares, out_dir / "figures" / "attractors.png", facts)
            lines += [f"![End modes per condition]({figure.relative_to(out_dir).as_posix()})", ""]
    if KL.name in prepared.columns:
        points = frontier_points(prepared)
        fits = fit_frontier(points)
        write("frontier.csv", fits.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        lines += [
            "## The overoptimization frontier",
            "",
            f"{facts.grid_text}; every iteration. Real-quality gain since iteration 0 against √KL(π_t ‖ π₀), exact "
            "over all outputs, with the form Gao, Schulman & Hilton (2022) fit at LLM scale, R(d) = d(α − β ln d), "
            "fit per condition by least squares over every run and iteration. β > 0 means the gain bends down "
            "with distance; the peak (√KL = exp(α/β − 1)) is where that curve predicts more optimisation stops "
            "paying. KL(π ‖ π₀) can be no larger than the largest −ln π₀(x) (a little above the log of the number of "
            "outputs, since π₀ is near but not exactly uniform): a policy collapsed onto one output is as far as any "
            "policy gets. A fitted peak beyond the largest √KL reached is an extrapolation, so its gain is not "
            f"shown. {frontier_reading(fits)} Judge-perceived gain is "
            "drawn on its own figure: judge scores start in q* units (pretraining regresses them on q*), but "
            "self-labelled updates rescale them freely, so its size is not comparable with the real gain.",
            "",
            fits_markdown(fits),
        ]
        if figures:
            quality = frontier_figure(points, fits, out_dir / "figures" / "frontier_quality.png", facts, "quality_gain")
            perceived = frontier_figure(
                points, None, out_dir / "figures" / "frontier_perceived.png", facts, "perceived_gain"
            )
            lines += [
                f"![Real quality against distance]({quality.relative_to(out_dir).as_posix()})",
                "",
                f"![Judge-perceived quality against distance]({perceived.relative_to(out_dir).as_posix()})",
                "",
            ]
    return lines
