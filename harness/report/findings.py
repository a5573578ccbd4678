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
from harness.inference.intervals import BOOTSTRAP_RESAMPLES
from harness.inference.seeds_needed import LADDER_TOP, SIMULATED_DATASETS, TARGET
from harness.inference.verdicts import DECISIONS, MIN_SEEDS, VERDICTS, verdict_table
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import CSV_FLOAT_FORMAT, GridFacts, conditions, num, reference
from harness.report.attractors import attractor_figure, attractor_reading, escape_markdown, escape_table
from harness.report.frontier import KL, fit_frontier, fits_markdown, frontier_figure, frontier_points, frontier_reading

MEAN_CI = f"a BCa bootstrap over seeds (scipy.stats.bootstrap, {BOOTSTRAP_RESAMPLES:,} paired resamples)"

Writer = Callable[[str, str | bytes], None]


def verdict_rule(verdicts: pd.DataFrame, confidence: float = 0.95) -> str:
    """The method paragraph of the claims section: the rule as the table applies it (its families' adjustments)."""
    alpha = f"{1 - confidence:g}"
    adjustments = sorted(set(verdicts["adjustment"]) - {"none (untested)"}) or ["Holm"]
    adjusted = " or ".join(f"{name}'s" if name == "Holm" else name for name in adjustments)
    return (
        "A verdict is about **jumps**, and its text says which rule made a seed one. Where the metric is set by the "
        "end mode (real quality, mode quality) and both sides are end states, a jump is a seed whose two runs end in "
        "different end modes and differ by more than the claim's resolution r; a seed whose two runs share their end "
        "mode yet differ by more than r is a *drift*, counted apart (*Drifts*) and never a jump. Elsewhere (other "
        "metrics, an earlier iteration, a fixed value) a jump is a seed whose difference exceeds r. An *above*, "
        "*below* or *equal* claim is tested by the exact sign test on the jumps (as many up as down); *holds* (and "
        "*contradicted*, the other way) needs that test to reject and the jumps to add up to a mean of at least r "
        "on that side. A spread claim is tested by a permutation test swapping the two values within seed pairs. *Not "
        "supported*, and an *equal* claim's *holds*, is an exact TOST on the jump counts: a mean difference of at "
        "least r needs jumps one way with chance at least r / (the metric's range); where even seeds with no jump at "
        "all could not pass it at this seed count, the hypothesis stays out of the family and the verdict says how "
        f"many seeds it would need. A condition file's claims are one family (unless a claim names another), every "
        f"hypothesis adjusted together ({adjusted}; *p (adj.)*); a verdict needs p (adj.) ≤ {alpha}. **No verdict is "
        "a test of the mean**: a rare large jump against frequent small ones moves the mean and not the counts. The "
        "mean itself stands beside it: *Mean Δ* is the mean of the per-seed differences as measured (drifts "
        "included), with a betting confidence interval (Waudby-Smith & Ramdas 2024) valid for any distribution within "
        f"the metric's range, at 1 − {alpha}/(m R) for the m tested claims of the family and a claim's R distinct "
        "rivals (Bonferroni, one interval per rival); *The mean* reads those intervals alone: *holds* where they lie "
        "beyond r on the claimed side against every rival (*equal*: within ±r), *contradicted* beyond r on the other "
        "side against some rival, *within ±r* inside the margin, else *undecided*; a metric without a known range "
        "gets *no interval*. A spread claim's Δ is the difference of standard deviations over seeds, with "
        f"{MEAN_CI} at the level of its Holm step. *Seeds needed* estimates how many seeds would decide an undecided "
        f"claim with {TARGET:.0%} probability: the observed seeds resampled at 1–{LADDER_TOP}× their number "
        f"({SIMULATED_DATASETS} datasets a step) through this rule at the claim's adjustment, then the share of each "
        f"verdict among {SIMULATED_DATASETS} datasets of that many seeds (which way it would be decided, each share "
        f'±{0.5 / SIMULATED_DATASETS**0.5:.3f} at most); "> N" when even {LADDER_TOP}× would not. '
        "A claim against several conditions (a pattern) must hold against each one "
        "(intersection–union; a negative verdict against one survives Bonferroni over them); the row shows the one "
        f"that decided. With fewer than {MIN_SEEDS} seeds a claim is **untested**: no verdict, numbers shown for "
        "orientation only. claims.csv holds every count, p-value and interval."
    )


def seeds_needed_text(row: object) -> str:
    """A verdicts row's seeds_needed as the report writes it: "—" (decided), "> N" (beyond the ladder) or a count
    with the chance of each verdict there ("303: 80% contradicted, 20% undecided")."""
    needed, seeds = getattr(row, "seeds_needed"), getattr(row, "seeds")  # noqa: B009
    if pd.isna(needed):
        return "—"
    if math.isinf(needed):
        return f"> {LADDER_TOP * int(seeds)}"
    chances = [(verdict, getattr(row, f"chance_{verdict.replace(' ', '_')}", math.nan)) for verdict in DECISIONS]
    shown = ", ".join(f"{share:.0%} {verdict}" for verdict, share in chances if pd.notna(share) and share > 0)
    return f"{int(needed)}: {shown}" if shown else f"{int(needed)}"


def _drifts_text(row: object) -> str:
    """A verdicts row's drifts: "·" where none (or jumps are not end-mode changes), else how many and their mean."""
    if getattr(row, "jump_rule", "") != "end mode":  # a claims table of an earlier version has no drifts
        return "n/a"
    count = int(getattr(row, "seeds_drift"))  # noqa: B009
    return "·" if count == 0 else f"{count}: {num(getattr(row, 'drift_mean'), signed=True)} (mean)"  # noqa: B009


def verdicts_markdown(verdicts: pd.DataFrame) -> str:
    header = [
        "Claim",
        "Compared with",
        "Verdict",
        "What was tested",
        "Means (claimed / other)",
        "Mean Δ [CI] (level)",
        "The mean",
        "Drifts",
        "Seeds needed",
    ]
    rows = []
    for row in verdicts.itertuples(index=False):
        spread = " (spread)" if row.statistic == "std" else ""
        level = f" ({row.ci_level:.1%})" if pd.notna(row.ci_level) else ""
        interval = f" [{num(row.ci_low, signed=True)}, {num(row.ci_high, signed=True)}]" if pd.notna(row.ci_low) else ""
        rows.append(
            [
                f"{row.statement}{spread} [{row.side}]",
                row.other_side,
                f"**{row.verdict}**",
                row.why,
                f"{num(row.side_mean)} / {num(row.other_mean)}",
                f"{num(row.effect, signed=True)}{interval}{level if interval else ''}",
                getattr(row, "mean_reading", "n/a"),
                _drifts_text(row),
                seeds_needed_text(row),
            ]
        )
    return markdown_table(header, rows, right=[False, False, False, False, True, True, False, True, True])


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
