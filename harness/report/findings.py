"""The report's answers: verdicts on the grid's claims, attractors, and the overoptimization frontier.

Each part is written only where its inputs exist: verdicts where the grid states claims, the frontier where the
metrics table has kl_from_initial (runs older than that metric have none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from harness.common.run_files import CLAIMS_FILE
from harness.common.wording import plural
from harness.inference.claims import Claim
from harness.inference.verdicts import MIN_SEEDS, VERDICTS, verdict_table
from harness.report.attractors import attractor_figure, attractor_reading, escape_markdown, escape_table
from harness.report.frontier import KL, fit_frontier, fits_markdown, frontier_figure, frontier_points, frontier_reading
from harness.report.markdown import markdown_table
from harness.report.metrics_table import CSV_FLOAT_FORMAT, GridFacts, conditions, num, reference
from harness.report.tables import PAIRED_CI

Writer = Callable[[str, str | bytes], None]

VERDICT_RULE = (
    "Δ is the claimed side minus the other side: a mean of seed-paired differences (or of the difference from a "
    "fixed value), or for *spread* claims the difference of standard deviations over seeds. Its 95% CI is "
    f"{PAIRED_CI}, as for the summary table's Δ. A claim **holds** when the CI "
    "excludes 0 on the claimed side and |Δ| is at least the claim's resolution; it is **contradicted** when the same "
    "is true on the opposite side (for *equal* claims: when a difference of at least the margin is established); "
    "otherwise it is **not supported**, and the last column says why (no difference: the CI lies within "
    f"± the resolution; or more seeds needed). With fewer than {MIN_SEEDS} seeds a claim is **untested**: no "
    "verdict, effect and CI shown for orientation only. P(better) is the "
    "share of seeds on the claimed side by more than the resolution, ties counted half (for *equal* claims: the "
    "share within the margin). IQM: interquartile mean over seeds, robust to the few runs in rare modes."
)


def verdicts_markdown(verdicts: pd.DataFrame) -> str:
    header = [
        "Claim",
        "Compared with",
        "Claimed side: mean (IQM)",
        "Other side: mean (IQM)",
        "Δ [95% CI]",
        "P(better)",
        "Verdict",
        "Why",
    ]
    rows = []
    for row in verdicts.itertuples(index=False):
        spread = " (spread)" if row.statistic == "std" else ""
        rows.append(
            [
                f"{row.statement}{spread} [{row.side}]",
                row.other_side,
                f"{num(row.side_mean)} ({num(row.side_iqm)})",
                f"{num(row.other_mean)} ({num(row.other_iqm)})",
                f"{num(row.effect, signed=True)} [{num(row.ci_low, signed=True)}, {num(row.ci_high, signed=True)}]",
                num(row.p_improvement, 2),
                f"**{row.verdict}**",
                row.why,
            ]
        )
    return markdown_table(header, rows, right=[False, False, True, True, True, True, False, False])


def findings_sections(
    prepared: pd.DataFrame,
    shares: pd.DataFrame,
    out_dir: Path,
    facts: GridFacts,
    claims: Sequence[Claim],
    groups: list[tuple[str, ...]],
    write: Writer,
    confidence: float = 0.95,
) -> list[str]:
    """Markdown lines of the claims, attractor and frontier sections; writes claims.csv, attractors.csv,
    frontier.csv and their figures through `write` / into out_dir/figures. groups: the identical groups
    (identical.identical_groups), each counted once where the text counts conditions."""
    lines: list[str] = []
    ref = reference(prepared)
    if claims:
        verdicts = verdict_table(prepared, claims, confidence)
        write(CLAIMS_FILE, verdicts.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        counts = verdicts["verdict"].value_counts()
        tally = ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0) or v != "untested")
        lines += [
            "## Which claims hold",
            "",
            f"{facts.heading()} {plural(len(verdicts), 'claim')} stated in the condition file: {tally}. {VERDICT_RULE}",
            "",
            verdicts_markdown(verdicts),
        ]
    if not shares.empty:
        escapes = escape_table(shares, ref, confidence)
        write("attractors.csv", escapes.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        figure = attractor_figure(shares, out_dir / "figures" / "attractors.png", facts)
        lines += [
            "## Attractors",
            "",
            f"{facts.heading()} {attractor_reading(escapes, shares, ref, groups)}",
            "",
            escape_markdown(escapes, conditions(prepared)),
            f"![End modes per condition]({figure.relative_to(out_dir).as_posix()})",
            "",
        ]
    if KL.name in prepared.columns:
        points = frontier_points(prepared)
        fits = fit_frontier(points)
        write("frontier.csv", fits.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
        figures = out_dir / "figures"
        quality = frontier_figure(points, fits, figures / "frontier_quality.png", facts, "quality_gain")
        perceived = frontier_figure(points, None, figures / "frontier_perceived.png", facts, "perceived_gain")
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
            f"![Real quality against distance]({quality.relative_to(out_dir).as_posix()})",
            "",
            f"![Judge-perceived quality against distance]({perceived.relative_to(out_dir).as_posix()})",
            "",
        ]
    return lines
