"""The report's answers: verdicts on the grid's claims, attractors, and the overoptimization frontier.

Each part is written only where its inputs exist: verdicts where the grid states claims, the frontier where the
metrics table has kl_from_initial (runs older than that metric have none).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from harness.common.run_files import CLAIMS_FILE
from harness.common.wording import plural
from harness.inference.claims import Claim
from harness.inference.intervals import BOOTSTRAP_RESAMPLES, COVERAGE
from harness.inference.seeds_needed import LADDER_TOP, SIMULATED_DATASETS, TARGET
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
        "are mostly ties (identical end modes, float noise) and a few jumps between end modes, so a difference within "
        "the claim's resolution counts as 0 in every test and interval, and Δ is the mean of these resolved "
        "differences. *Seeds ↑/↓* counts the seeds that jumped each way, with an exact test on them: the sign test for "
        "a mean, McNemar's exact test on escapes from the dominant end mode for a spread. A mean claim (*above*, "
        "*below*) is a claim about the jumps: its p-value is that exact sign test (a permutation test of the mean "
        "would assume symmetric jumps, and end-mode jumps are not), and a verdict also needs |Δ| at least the "
        "resolution. A spread claim's p-value is a permutation test swapping the two values within seed pairs. No "
        "difference as large as the resolution (*not supported*; an *equal* claim's *holds*) is an exact TOST: a mean "
        "of at least r needs jumps up with chance at least r / (the metric's range), so exact binomial tests of the "
        "jumps up and down against that chance, doubled; it holds whatever the jumps' sizes (a sign-flip TOST does "
        "not: a mean at the margin made of rare large jumps looks like none whenever the sample misses them), and a "
        "metric without a known range never gets these verdicts. "
        "Permutation p-values are exact where the tied values allow, else drawn until no decision depends on the "
        f"Monte-Carlo error (each claim its own random stream). A condition file's claims are one family (unless a "
        f"claim names another): the p-values of every claim's hypotheses (its effect test and, for a mean, its TOST) "
        f"are adjusted together ({adjusted}; *p (adj.)* shows both). Each claim's CI is {MEAN_CI} of the resolved "
        f"differences at the level of the hypothesis that decided it (Holm: 1 − {alpha}/(m − k + 1) for the "
        f"hypothesis of rank k of m, the *level* shown); it describes the effect, the tests decide. {COVERAGE} A claim "
        f"**holds** when its adjusted p ≤ {alpha}, the seeds jump the claimed way and |Δ| reaches the resolution "
        "(*equal*: the TOST passes); it is **contradicted** when the same is true the other way (*equal*: a shifted "
        "test puts the mean beyond the margin); it is **not supported** when the TOST passes; otherwise it is "
        "**undecided**. *Seeds needed* estimates how many would decide an undecided claim with "
        f"{TARGET:.0%} probability: the observed seeds resampled with replacement at 1–{LADDER_TOP}× their number (a "
        f"√2 ladder, {SIMULATED_DATASETS} datasets a step that extend each other, the permutation tests inside drawn "
        "at least 10 / level times) through this rule at the claim's adjustment, a logistic curve fit to the decided "
        f'counts; "> N" when even {LADDER_TOP}× the seeds would not. A claim against several conditions (a pattern) '
        "must hold against every one of them (an intersection–union test, identical conditions counted once; a "
        "negative verdict against one must survive Bonferroni over them); the row shows the one that decided. With "
        f"fewer than {MIN_SEEDS} seeds (runs with a non-finite value left out and counted) a claim is **untested**: no "
        "verdict, numbers shown for orientation only. P(better) is the share of seeds on the claimed side by more "
        "than the resolution, ties counted half (*equal*: the share within the margin), with a "
        f"{confidence:.0%} interval: exact (Clopper–Pearson) for a plain share, a BCa bootstrap over seeds where ties "
        "count half. IQM: interquartile mean over seeds, robust to the few runs in rare modes."
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
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> list[str]:
    """Markdown lines of the claims, attractor and frontier sections (ranges: the metrics' ranges, for equivalence);
    writes claims.csv, attractors.csv,
    frontier.csv and their figures through `write` / into out_dir/figures (figures=False: neither draws nor links
    them). groups: the identical groups (identical.identical_groups), each counted once where the text counts
    conditions."""
    lines: list[str] = []
    ref = reference(prepared)
    if claims:
        verdicts = verdict_table(prepared, claims, confidence, ranges=ranges)
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
