"""The overoptimization section of a study's report: best-of-n from π₀ and RL on one frontier per judge, Gao's forms
fitted per shape and condition with bootstrap intervals over seeds, compared with a quadratic by held-out error, the
Gao-style figure per condition (one panel per judge) and a performance profile of where runs end.

Each shape's run directory holds its metrics.csv and best-of-n table (best_of_n.parquet). Best-of-n's points are
iteration 0's curve from π₀ (the pretrained judges, n = 1 … 10⁴), a run's RL points its path over the iterations;
both as gains since their start against d = √KL(· ‖ π₀) (`harness.inference.frontier_measures`). The fits are
`harness.inference.overoptimization.fit_gao` (each optimizer its own form), the held-out comparison its
`held_out_errors` (leave one seed out), written as gao_fits.csv and gao_held_out.csv beside the study's report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from harness.common.run_files import METRICS_FILE
from harness.common.run_tables import read_run_table
from harness.grid.study import StudySpec
from harness.inference.frontier_measures import BEST_OF_N_TABLE, ROW_KEYS, best_of_n_curves, run_paths
from harness.inference.overoptimization import FORMS, fit_gao, held_out_errors
from harness.report.figures.bands import performance_profile
from harness.report.figures.overoptimization import OPTIMIZER_NAMES, fig_gao_frontier, fig_performance_profile
from harness.report.markdown import markdown_table
from harness.report.metrics_table import CSV_FLOAT_FORMAT, num

FITS_FILE, HELD_OUT_FILE = "gao_fits.csv", "gao_held_out.csv"
PANEL = "judge_parameters"


def frontier_points(metrics: pd.DataFrame, best_of_n: pd.DataFrame) -> pd.DataFrame:
    """One grid's points on the frontier: condition, seed, optimizer ("best_of_n": iteration 0's curve from π₀,
    step = n; "rl": the run's path, step = iteration), d = √KL, gold_gain and proxy_gain (the judges' score) since
    the start."""
    curves = best_of_n_curves(best_of_n)
    curves = curves[curves["iteration"] == curves["iteration"].min()]
    proxy_start = curves.groupby(ROW_KEYS, sort=False)["proxy"].transform("first")
    bon = curves.assign(optimizer="best_of_n", step=curves["n"], proxy_gain=curves["proxy"] - proxy_start)
    paths = run_paths(metrics).merge(metrics[[*ROW_KEYS, "judge_perceived_quality"]], on=ROW_KEYS)
    perceived = paths.groupby(["condition", "seed"], sort=False)["judge_perceived_quality"].transform("first")
    rl = paths.assign(optimizer="rl", step=paths["iteration"], proxy_gain=paths["judge_perceived_quality"] - perceived)
    columns = ["condition", "seed", "optimizer", "step", "d", "gold_gain", "proxy_gain"]
    return pd.concat([bon[columns], rl[columns]], ignore_index=True)


def study_frontier(study: StudySpec, shape_dirs: Callable[[str], Path], parameters: dict[str, int]) -> pd.DataFrame:
    """Every shape's frontier points (`frontier_points`) with its name and its judge's parameter count; empty where
    no shape has a best-of-n table."""
    frames = []
    for shape in study.shapes:
        directory = shape_dirs(shape.name)
        best_of_n = read_run_table(directory, BEST_OF_N_TABLE)
        if best_of_n is None:
            continue
        points = frontier_points(pd.read_csv(directory / METRICS_FILE), best_of_n)
        frames.append(points.assign(shape=shape.name, **{PANEL: parameters[shape.name]}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def held_out_table(points: pd.DataFrame) -> pd.DataFrame:
    """Held-out MSE (leave one seed out) of each optimizer's Gao form and of the quadratic, per shape and condition."""
    tables = [
        held_out_errors(own, forms=(optimizer, "quadratic"), by=["shape", "condition"]).assign(optimizer=optimizer)
        for optimizer, own in points.groupby("optimizer", sort=False)
    ]
    return pd.concat(tables, ignore_index=True)[
        ["shape", "condition", "optimizer", "form", "coefficients", "folds", "held_out_mse", "in_sample_mse", "rank"]
    ]


def in_study_order(table: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Rows by shape and condition in the order they first appear among the points (the study's), stably."""
    rank = {key: i for i, key in enumerate(dict.fromkeys(zip(points["shape"], points["condition"], strict=True)))}
    position = [rank[key] for key in zip(table["shape"], table["condition"], strict=True)]
    return table.iloc[np.argsort(position, kind="stable")].reset_index(drop=True)


def _interval(row: pd.Series, name: str) -> str:
    return f"{num(row[name])} [{num(row[name + '_low'])}, {num(row[name + '_high'])}]"


def _fits_markdown(fits: pd.DataFrame) -> str:
    rows = [
        [
            row["shape"],
            row["condition"],
            OPTIMIZER_NAMES[row["optimizer"]],
            FORMS[row["optimizer"]].formula,
            _interval(row, "alpha"),
            _interval(row, "beta"),
            num(row["r2"], 2),
            num(row["d_max"], 2),
            "—" if not np.isfinite(row["d_peak"]) or row["d_peak"] > row["d_max"] else num(row["d_peak"], 2),
            "—" if not np.isfinite(row["d_peak"]) or row["d_peak"] > row["d_max"] else num(row["peak_gain"]),
        ]
        for _, row in fits.iterrows()
    ]
    header = ["Shape", "Condition", "Optimizer", "Form", "α [95% CI]", "β [95% CI]", "R²", "Largest √KL"]
    header += ["Peak at √KL", "Peak gain (q*)"]
    return markdown_table(header, rows, right=[False] * 4 + [True] * 6)


def _held_out_markdown(held: pd.DataFrame) -> str:
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


def _profile(study: StudySpec, shape_dirs: Callable[[str], Path]) -> pd.DataFrame:
    """Every run's real quality at its final iteration, labelled "shape: condition"."""
    frames = []
    for shape in study.shapes:
        metrics = pd.read_csv(shape_dirs(shape.name) / METRICS_FILE)
        final = metrics[metrics["iteration"] == metrics["iteration"].max()]
        frames.append(final.assign(condition=shape.name + ": " + final["condition"])[["condition", "policy_quality"]])
    return performance_profile(pd.concat(frames, ignore_index=True), "policy_quality")


def overoptimization_section(
    study: StudySpec,
    run_dir: Path,
    shape_dirs: Callable[[str], Path],
    parameters: dict[str, int],
    write: Callable[[str, str], None],
    figures: bool = True,
) -> list[str]:
    """Markdown lines of the section (none where no shape has a best-of-n table); writes gao_fits.csv and
    gao_held_out.csv through `write`, and its figures under run_dir/figures (figures=False: neither drawn nor
    linked). parameters: each shape's judge parameter count, the figure's panels."""
    points = study_frontier(study, shape_dirs, parameters)
    if points.empty:
        return []
    fits = in_study_order(fit_gao(points, by=["shape", "condition"]), points)
    held = in_study_order(held_out_table(points), points)
    write(FITS_FILE, fits.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    write(HELD_OUT_FILE, held.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    lines = [
        "## Overoptimization: best-of-n and RL against each judge",
        "",
        "Gold (q*) and proxy (the judges' score) gained since the start against d = √KL(· ‖ π₀): best-of-n from π₀ "
        "with the pretrained judges, exactly, for n = 1 … 10⁴ (iteration 0 of each run's best-of-n table), and each "
        "RL run's path over its iterations. Each optimizer's form of Gao et al. (2022) is fitted per shape and "
        "condition by least squares over every seed's points, with 95% percentile bootstrap intervals resampling "
        "seeds (`gao_fits.csv`); a peak beyond the largest √KL reached is an extrapolation and not shown. Each form "
        "is compared with the quadratic a + b·d + c·d² by held-out error, leaving one seed out at a time "
        "(`gao_held_out.csv`).",
        "",
        _fits_markdown(fits),
        "",
        _held_out_markdown(held),
        "",
    ]
    if figures:
        for condition in dict.fromkeys(points["condition"]):
            own = points[points["condition"] == condition]
            path = fig_gao_frontier(own, run_dir / "figures" / f"gao_{condition}.png", panel=PANEL)
            lines += [f"![Gold and proxy against √KL, {condition}]({path.relative_to(run_dir).as_posix()})", ""]
        profile = fig_performance_profile(_profile(study, shape_dirs), run_dir / "figures" / "performance_profile.png")
        lines += [f"![Where runs end: performance profile]({profile.relative_to(run_dir).as_posix()})", ""]
    return lines
