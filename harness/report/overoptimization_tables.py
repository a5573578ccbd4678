"""The overoptimization section's tables in markdown (`harness.report.overoptimization` computes what they show):
Gao's fits per scorer, held-out and extrapolation errors, and RL at equal KL."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.inference.frontier_measures import KL_LEVELS
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import num
from harness.report.figures.overoptimization import OPTIMIZER_NAMES


def interval(row: pd.Series | None, name: str) -> str:
    if row is None or not np.isfinite(row[name]):
        return "—"
    return f"{num(row[name])} [{num(row[name + '_low'])}, {num(row[name + '_high'])}]"


def fit_row(fits: pd.DataFrame, shape: str, condition: str, optimizer: str, scorer: str) -> pd.Series | None:
    own = fits[
        (fits["shape"] == shape)
        & (fits["condition"] == condition)
        & (fits["optimizer"] == optimizer)
        & (fits["scorer"] == scorer)
    ]
    return own.iloc[0] if len(own) else None


def fitted_peak(row: pd.Series | None) -> str:
    if row is None or not np.isfinite(row["d_peak"]) or row["d_peak"] > row["d_max"]:
        return "—"
    return f"{num(row['d_peak'], 2)} ({num(row['peak_gain'])})"


def best_of_n_markdown(fits: pd.DataFrame, peaks: pd.DataFrame) -> str:
    rows = []
    for (shape, condition), _ in fits.groupby(["shape", "condition"], sort=False):
        judged = fit_row(fits, shape, condition, "best_of_n", "judges")
        own = peaks[(peaks["shape"] == shape) & (peaks["condition"] == condition)]
        rows.append(
            [
                shape,
                condition,
                interval(judged, "alpha"),
                interval(judged, "beta"),
                interval(fit_row(fits, shape, condition, "best_of_n", "q_star"), "beta"),
                interval(fit_row(fits, shape, condition, "best_of_n", "noisy_q_star"), "beta"),
                fitted_peak(judged),
                num(own["bon_top_mass_at_peak"].mean(), 2) if len(own) else "—",
                f"{int(own['at_largest_n'].sum())} of {len(own)}" if len(own) else "—",
            ]
        )
    header = ["Shape", "Condition", "α, judges [95% CI]", "β, judges", "β, q*", "β, q* + noise"]
    header += ["Fitted peak: √KL (gain)", "Top output's mass at the peak", "Seeds peaking at the largest n"]
    return markdown_table(header, rows, right=[False, False] + [True] * 7)


def rl_markdown(fits: pd.DataFrame) -> str:
    rows = [
        [
            row["shape"],
            row["condition"],
            interval(row, "alpha"),
            interval(row, "beta"),
            num(row["r2"], 2),
            num(row["d_max"], 2),
            fitted_peak(row),
        ]
        for _, row in fits[fits["optimizer"] == "rl"].iterrows()
    ]
    header = ["Shape", "Condition", "α [95% CI]", "β [95% CI]", "R²", "Largest √KL", "Fitted peak: √KL (gain)"]
    return markdown_table(header, rows, right=[False, False] + [True] * 5)


def held_out_markdown(held: pd.DataFrame) -> str:
    wide = held.pivot_table(
        index=["shape", "condition", "optimizer"], columns="form", values="held_out_mse", sort=False
    )
    rows = []
    for (shape, condition, optimizer), row in wide.iterrows():
        gao, quadratic = row[optimizer], row["quadratic"]
        better = "Gao's form" if gao < quadratic else "the quadratic"
        rows.append([shape, condition, OPTIMIZER_NAMES[optimizer], num(gao, 4), num(quadratic, 4), better])
    header = ["Shape", "Condition", "Optimizer", "Gao's form: held-out MSE", "Quadratic: held-out MSE", "Lower"]
    return markdown_table(header, rows, right=[False, False, False, True, True, False])


def extrapolation_markdown(table: pd.DataFrame) -> str:
    rows = []
    for (shape, condition, optimizer), own in table.groupby(["shape", "condition", "optimizer"], sort=False):
        gao, quadratic = own[own["form"] == optimizer].iloc[0], own[own["form"] == "quadratic"].iloc[0]
        if not np.isfinite(gao.get("rmse_beyond", np.nan)):
            continue
        closer = "Gao's form" if gao["rmse_beyond"] < quadratic["rmse_beyond"] else "the quadratic"
        rows.append(
            [
                shape,
                condition,
                OPTIMIZER_NAMES[optimizer],
                gao["fitted_to"],
                num(gao["actual_end"]),
                num(gao["predicted_end"]),
                num(quadratic["predicted_end"]),
                num(gao["rmse_beyond"], 3),
                num(quadratic["rmse_beyond"], 3),
                closer,
            ]
        )
    header = ["Shape", "Condition", "Optimizer", "Fitted to", "Gold gain at the end", "Gao's form predicts"]
    header += ["Quadratic predicts", "Gao's form: RMSE beyond", "Quadratic: RMSE beyond", "Closer beyond the fit"]
    return markdown_table(header, rows, right=[False] * 4 + [True] * 5 + [False])


def kl_levels_markdown(measures: pd.DataFrame) -> str:
    """Every RL condition of one shape at equal KL: where its runs end (KL to π₀, mean over seeds) and its gold gain
    where the path first reaches 0.5 and 1 nat (mean over the seeds that reach it, with their count).
    measures: one row per run of the shape, its measures at the final iteration (`run_measures`: kl_from_initial and
    the frontier measures)."""
    rows = []
    for condition, own in measures.groupby("condition", sort=False):
        row = [condition, str(len(own)), num(own["kl_from_initial"].mean(), 2)]
        for column in KL_LEVELS:
            reached = own[column].dropna()
            row.append(f"{num(reached.mean())} ({len(reached)})" if len(reached) else "— (0)")
        rows.append(row)
    header = ["Condition", "Seeds", "KL at the end (nats)"]
    header += [f"Gold gain at KL = {level:g} nat (seeds reaching it)" for level in KL_LEVELS.values()]
    return markdown_table(header, rows, right=[False] + [True] * (2 + len(KL_LEVELS)))
