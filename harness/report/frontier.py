"""The overoptimization frontier, exactly: real and judge-perceived gains against how far the policy moved.

Gao, Schulman & Hilton (2022) found that at LLM scale the gold reward of an RL-optimised policy follows
R(d) = d (α − β ln d) in d = √KL(π ‖ π₀): it rises, peaks at d* = exp(α/β − 1) and falls as optimisation
overshoots. Here KL and q* are exact over all outputs (metric kl_from_initial), so the same curve can be fit per
condition with no sampling noise in either axis. R is each run's real-quality gain since iteration 0; the fit is
least squares over every run × iteration of the condition (`harness.inference.overoptimization.fit_form`, the RL
form), and its intervals resample seeds (a run's points along its path are not independent, so the fit's own
covariance would make them too narrow), shown only from MIN_SEEDS seeds, as every interval of a report.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.engine.metrics import metric
from harness.inference.overoptimization import fit_form
from harness.inference.overoptimization import rl_gold as gao_curve
from harness.inference.rule import MIN_SEEDS
from harness.rendering.figure_parts import new_figure, panels, save, wrap
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import QUALITY, GridFacts, conditions, live, num

KL = metric("kl_from_initial")
PERCEIVED = metric("judge_perceived_quality")
FIT_COLUMNS = [
    "condition",
    "points",
    "seeds",
    "alpha",
    "alpha_low",
    "alpha_high",
    "beta",
    "beta_low",
    "beta_high",
    "r2",
    "d_max",
    "d_peak",
    "kl_peak",
    "peak_gain",
]


def frontier_points(prepared: pd.DataFrame) -> pd.DataFrame:
    """Per run and iteration: d = √KL(π_t ‖ π₀) and the gains in real and judge-perceived quality since iteration 0."""
    data = live(prepared).dropna(subset=[KL.name, QUALITY.name, PERCEIVED.name]).copy()
    start = data[data["iteration"] == 0].set_index(["condition", "seed"])
    key = pd.MultiIndex.from_frame(data[["condition", "seed"]])
    data["d"] = np.sqrt(data[KL.name].clip(lower=0.0))
    data["quality_gain"] = data[QUALITY.name].to_numpy() - start[QUALITY.name].reindex(key).to_numpy()
    data["perceived_gain"] = data[PERCEIVED.name].to_numpy() - start[PERCEIVED.name].reindex(key).to_numpy()
    return data[["condition", "seed", "iteration", "d", "quality_gain", "perceived_gain"]].dropna()


def fit_frontier(points: pd.DataFrame) -> pd.DataFrame:
    """α, β with 95% intervals over seeds (bootstrap percentile, seeds resampled; NaN below MIN_SEEDS seeds), R², the
    largest distance reached (d_max) and the predicted peak (d*, KL* = d*², R(d*) = β d*) per condition.

    The peak exists only for β > 0 (the curve bends down); otherwise its columns are NaN. A peak beyond d_max is an
    extrapolation: no run of the condition went that far; one too far for a float (β ≈ 0⁺) is infinite.
    """
    fits = fit_form(points, "rl", y="quality_gain", min_seeds=MIN_SEEDS)
    return fits.assign(kl_peak=fits["d_peak"] ** 2)[FIT_COLUMNS]


def _interval(value: float, low: float, high: float) -> str:
    """A coefficient with its interval, or alone where it has none (fewer than MIN_SEEDS seeds)."""
    return num(value) if not np.isfinite(low) else f"{num(value)} [{num(low)}, {num(high)}]"


def _peak_distance(d_peak: float) -> str:
    """A fitted peak's √KL: fixed decimals, or powers of ten for the huge ones a nearly straight curve gives."""
    if math.isinf(d_peak):
        return "∞"
    return num(d_peak, 2) if not d_peak >= 1e4 else f"{d_peak:.1e}"


def fits_markdown(fits: pd.DataFrame) -> str:
    header = [
        "Condition",
        "α [95% CI over seeds]",
        "β [95% CI over seeds]",
        "R²",
        "largest √KL reached",
        "fitted peak at √KL",
        "fitted peak gain (q*)",
    ]
    rows = [
        [
            row.condition,
            _interval(row.alpha, row.alpha_low, row.alpha_high),
            _interval(row.beta, row.beta_low, row.beta_high),
            num(row.r2, 2),
            num(row.d_max, 2),
            _peak_distance(row.d_peak) + (" (beyond reach)" if row.d_peak > row.d_max else ""),
            "—" if row.d_peak > row.d_max else num(row.peak_gain),
        ]
        for row in fits.itertuples(index=False)
    ]
    return markdown_table(header, rows, right=[False, *[True] * 6])


def frontier_reading(fits: pd.DataFrame) -> str:
    """One sentence: do the fitted curves turn down within the distances the runs reached?"""
    fitted = fits.dropna(subset=["alpha"])
    if fitted.empty:
        return ""
    within = fitted[(fitted["beta"] > 0) & (fitted["d_peak"] <= fitted["d_max"])]
    if within.empty:
        return (
            f"In none of the {len(fitted)} conditions does the fitted curve peak within the distance its runs "
            "reached: real quality is still rising when the policy has run out of room to move, so the ceiling "
            "here is the collapse of the policy's distribution, not overoptimization against the judge."
        )
    names = ", ".join(f"`{name}`" for name in within["condition"])
    return f"The fitted curve peaks within reach (real quality turns down with more distance) for: {names}."


def frontier_figure(points: pd.DataFrame, fits: pd.DataFrame | None, path: Path, facts: GridFacts, gain: str) -> Path:
    """One panel per condition: every run's path (faint), the condition's mean path, and the fitted curve if given.

    gain: "quality_gain" (real, q*) or "perceived_gain" (judge score): one quantity per figure, shared axes.
    """
    order = conditions(points)
    fig = new_figure(13.0, 2.3 * math.ceil(len(order) / 6) + 0.8)
    axes = panels(fig, len(order), 6, sharex=True, sharey=True)
    fitted = fits.set_index("condition") if fits is not None else None
    grid_d = np.linspace(0.0, float(points["d"].max()) or 1.0, 200)
    for ax, condition in zip(axes, order, strict=False):
        own = points[points["condition"] == condition]
        faint = max(0.03, min(0.4, 4.0 / own["seed"].nunique()))  # many seeds: fainter, so density shows
        for _, run in own.groupby("seed"):
            ax.plot(run["d"], run[gain], color="#1f77b4", alpha=faint, lw=0.6)
        mean = own.groupby("iteration")[["d", gain]].mean()
        ax.plot(mean["d"], mean[gain], color="black", marker="o", ms=2.5, lw=1.2, label="mean over seeds")
        if fitted is not None and condition in fitted.index and np.isfinite(fitted.loc[condition, "alpha"]):
            alpha, beta = fitted.loc[condition, ["alpha", "beta"]]
            ax.plot(grid_d, gao_curve(grid_d, alpha, beta), color="#d62728", ls="--", lw=1.2, label="fit d(α − β ln d)")
        ax.axhline(0.0, color="0.7", lw=0.6)
        ax.set_title(wrap(condition, 34), fontsize=7.5)
        ax.tick_params(labelsize=7)
    what = "real quality gain (q*)" if gain == "quality_gain" else "judge-perceived gain (judge score)"
    fig.supxlabel("√KL(π_t ‖ π₀)  (√nats)", fontsize=9)
    fig.supylabel(f"{what} since iteration 0", fontsize=9)
    fig.suptitle(f"{what.capitalize()} against distance moved ({facts.seed_text}; every iteration)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper right", ncols=2, fontsize=8, frameon=False)
    return save(fig, path)
