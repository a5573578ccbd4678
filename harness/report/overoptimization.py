"""The overoptimization section of a study's report: best-of-n from π₀ and RL on one frontier per judge, measured
against the perfect proxy; Gao's forms fitted per shape, condition and scorer with bootstrap intervals over seeds,
compared with a quadratic by held-out error and by extrapolation; α and β against the judge's size and data; every
RL condition's gold-vs-KL path beside best-of-n's; and where runs end.

Each shape's run directory holds its metrics.csv.gz and best-of-n table: the per-run table that declares the frontier's
measures (`frontier_table_name`, found through the registry, so that this module names no mechanism). Best-of-n's
points are iteration 0's curves from π₀ (n = 1 … 10⁶), scored by the pretrained judges, by q* (the perfect proxy) and
by q* plus noise at the judges' alignment; a run's RL points are its path over the iterations;
both as gains since their start against d = √KL(· ‖ π₀) (`harness.inference.frontier_measures`). The fits are
`harness.inference.overoptimization.fit_gao` (each optimizer its own form), written as gao_fits.csv, the held-out
comparison gao_held_out.csv, the extrapolation gao_extrapolation.csv, beside the study's report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from harness.common.run_files import metrics_file
from harness.common.run_tables import read_run_table
from harness.grid import registry
from harness.grid.study import StudySpec
from harness.inference.frontier_measures import (
    FRONTIER_MEASURES,
    ROW_KEYS,
    peak_measures,
    run_paths,
    scored_curves,
)
from harness.inference.overoptimization import FORMS, fit_gao, held_out_errors
from harness.rendering.bands import performance_profile
from harness.rendering.metrics_table import CSV_FLOAT_FORMAT
from harness.report.figures.overoptimization import (
    fig_gao_frontier,
    fig_kl_paths,
    fig_performance_profile,
    fig_scaling,
)
from harness.report.gao_departures import departures_section, perfect_proxy_baselines
from harness.report.overoptimization_tables import (
    best_of_n_markdown,
    extrapolation_markdown,
    held_out_markdown,
    kl_levels_markdown,
    rl_markdown,
)
from harness.report.study_roles import StudyRoles, pretraining_examples, study_roles

FITS_FILE, HELD_OUT_FILE, EXTRAPOLATION_FILE = "gao_fits.csv", "gao_held_out.csv", "gao_extrapolation.csv"
PANEL = "judge_parameters"
# Best-of-n's forms are fitted on n ≤ this and asked for the rest; RL's on the first half of the iterations.
FIT_ON_N = 1000
POINT_COLUMNS = ["condition", "seed", "optimizer", "scorer", "step", "kl", "d", "gold_gain", "proxy_gain"]


def frontier_points(metrics: pd.DataFrame, curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One grid's points on the frontier (POINT_COLUMNS): best-of-n's curves from π₀ at iteration 0 (step = n), one
    per scorer (curves: `scored_curves` of the table's iteration-0 rows); each RL run's path (step = iteration;
    scorer "judges", its proxy the judge-perceived quality). Gains are since the curve's start, d = √KL."""
    frames = [own.assign(optimizer="best_of_n", scorer=scorer, step=own["n"]) for scorer, own in curves.items()]
    paths = run_paths(metrics).merge(metrics[[*ROW_KEYS, "judge_perceived_quality"]], on=ROW_KEYS)
    perceived = paths.groupby(["condition", "seed"], sort=False)["judge_perceived_quality"].transform("first")
    frames.append(
        paths.assign(
            optimizer="rl",
            scorer="judges",
            step=paths["iteration"],
            kl=paths["kl_from_initial"],
            proxy_gain=paths["judge_perceived_quality"] - perceived,
        )
    )
    return pd.concat([frame[POINT_COLUMNS] for frame in frames if len(frame)], ignore_index=True)


def frontier_table_name() -> str | None:
    """The per-run table whose rows yield the frontier's measures (`FRONTIER_MEASURES`): the one registered table that
    declares them (measure names are one namespace, so no two can), or None where none does."""
    names = [table.name for table in registry.measured_tables() if set(FRONTIER_MEASURES) <= set(table.measures)]
    return names[0] if names else None


def study_frontier(
    study: StudySpec, shape_dirs: Callable[[str], Path], parameters: dict[str, int]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every shape's frontier points (`frontier_points`) with its name, its judge's parameter count and each
    condition's pretraining examples, and every shape's best-of-n peak measures at iteration 0
    (`frontier_measures.peak_measures`, with the shape's name and at_largest_n: whether the peak is at the largest
    n); both empty where no shape has a best-of-n table."""
    frames, peaks, table = [], [], frontier_table_name()
    for shape in study.shapes:
        directory = shape_dirs(shape.name)
        best_of_n = None if table is None else read_run_table(directory, table)
        if best_of_n is None:
            continue
        curves = scored_curves(best_of_n[best_of_n["iteration"] == best_of_n["iteration"].min()])
        points = frontier_points(pd.read_csv(metrics_file(directory)), curves)
        examples = {c.name: pretraining_examples(shape.grid, c.name) for c in shape.grid.conditions}
        points = points.assign(shape=shape.name, **{PANEL: parameters[shape.name]})
        frames.append(points.assign(judge_examples=points["condition"].map(examples)))
        start = peak_measures(curves)
        peaks.append(start.assign(shape=shape.name, at_largest_n=start["bon_peak_n"] >= best_of_n["n"].max()))
    if not frames:
        return pd.DataFrame(), pd.DataFrame()
    return pd.concat(frames, ignore_index=True), pd.concat(peaks, ignore_index=True)


def held_out_table(points: pd.DataFrame) -> pd.DataFrame:
    """Held-out MSE (leave one seed out) of each optimizer's Gao form and of the quadratic, per shape and condition,
    on the judges' curves."""
    judged = points[points["scorer"] == "judges"]
    tables = [
        held_out_errors(own, forms=(optimizer, "quadratic"), by=["shape", "condition"]).assign(optimizer=optimizer)
        for optimizer, own in judged.groupby("optimizer", sort=False)
    ]
    return pd.concat(tables, ignore_index=True)[
        ["shape", "condition", "optimizer", "form", "coefficients", "folds", "held_out_mse", "in_sample_mse", "rank"]
    ]


def extrapolation_table(points: pd.DataFrame) -> pd.DataFrame:
    """Each form fitted on the early part of every judges' curve and asked for the rest, per shape, condition and
    optimizer: best-of-n on n ≤ FIT_ON_N, RL on the first half of the iterations (all seeds pooled, least squares).
    Columns: fitted_to, points_fitted, points_asked, rmse_beyond (over the points asked), predicted_end and
    actual_end (the mean gold gain over seeds at the last step, predicted at the seeds' mean d there)."""
    rows = []
    judged = points[points["scorer"] == "judges"]
    for (shape, condition, optimizer), own in judged.groupby(["shape", "condition", "optimizer"], sort=False):
        own = own.dropna(subset=["d", "gold_gain"])
        cut = FIT_ON_N if optimizer == "best_of_n" else own["step"].max() // 2
        early, late = own[own["step"] <= cut], own[own["step"] > cut]
        last = own[own["step"] == own["step"].max()]
        for form in (optimizer, "quadratic"):
            row = {"shape": shape, "condition": condition, "optimizer": optimizer, "form": form}
            row |= {"fitted_to": f"{'n' if optimizer == 'best_of_n' else 'iteration'} ≤ {int(cut):,}"}
            row |= {"points_fitted": len(early), "points_asked": len(late)}
            if len(early) < len(FORMS[form].coefficients) or late.empty:
                rows.append(row)
                continue
            basis = FORMS[form].basis
            coefficients = np.linalg.lstsq(basis(early["d"].to_numpy()), early["gold_gain"].to_numpy(), rcond=None)[0]
            residual = late["gold_gain"].to_numpy() - basis(late["d"].to_numpy()) @ coefficients
            predicted_end = float((basis(np.array([last["d"].mean()])) @ coefficients)[0])
            row |= {"rmse_beyond": float(np.sqrt(np.mean(residual**2))), "predicted_end": predicted_end}
            row |= {"actual_end": float(last["gold_gain"].mean())}
            rows.append(row)
    return pd.DataFrame(rows)


def in_study_order(table: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Rows by shape and condition in the order they first appear among the points (the study's), stably."""
    rank = {key: i for i, key in enumerate(dict.fromkeys(zip(points["shape"], points["condition"], strict=True)))}
    position = [rank[key] for key in zip(table["shape"], table["condition"], strict=True)]
    return table.iloc[np.argsort(position, kind="stable")].reset_index(drop=True)


def scaling_series(fits: pd.DataFrame, points: pd.DataFrame, roles: StudyRoles) -> pd.DataFrame:
    """The judges' fits laid out for `fig_scaling`: against judge parameters (the base condition in every shape), and
    against pretraining examples (the reference shape's data conditions)."""
    judged = fits[fits["scorer"] == "judges"]
    keys = points[["shape", "condition", PANEL, "judge_examples"]].drop_duplicates()
    laid = judged.merge(keys, on=["shape", "condition"])
    by_size = laid[laid["condition"] == roles.base].assign(axis="judge parameters", x=lambda t: t[PANEL])
    data = laid[(laid["shape"] == roles.reference) & (laid["condition"].isin(roles.data))]
    by_data = data.assign(axis="judge pretraining examples", x=data["judge_examples"])
    return pd.concat([by_size, by_data if len(roles.data) > 1 else by_data.iloc[:0]], ignore_index=True)


def perfect_proxy_fits(fits: pd.DataFrame, roles: StudyRoles) -> pd.DataFrame:
    """The baselines' fits in the reference shape, each row's `baseline` "q_star" (the perfect proxy) or
    "noisy_q_star" (q* plus random errors at the judges' alignment): best-of-n against each (the base condition's
    curves), RL rewarded by each (the condition that is, where the study has one)."""
    own = fits[fits["shape"] == roles.reference]
    rows = []
    for baseline, condition in (("q_star", roles.perfect_proxy), ("noisy_q_star", roles.noisy_proxy)):
        best = own[(own["condition"] == roles.base) & (own["scorer"] == baseline) & (own["optimizer"] == "best_of_n")]
        rl = own[(own["condition"] == condition) & (own["optimizer"] == "rl")]
        rows += [best.assign(baseline=baseline), rl.assign(baseline=baseline)]
    return pd.concat(rows, ignore_index=True)[["optimizer", "baseline", "alpha", "beta"]]


def overoptimization_section(
    study: StudySpec,
    run_dir: Path,
    shape_dirs: Callable[[str], Path],
    parameters: dict[str, int],
    write: Callable[[str, str], None],
    figures: bool = True,
    verdicts: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None,
) -> list[str]:
    """Markdown lines of the section (none where no shape has a best-of-n table); writes gao_fits.csv,
    gao_held_out.csv and gao_extrapolation.csv through `write`, and its figures under run_dir/figures (figures=False:
    neither drawn nor linked). parameters: each shape's judge parameter count; verdicts: the study's (within-shape
    claims, across claims, per-run measures at the final iteration), for RL at equal KL and the section on where
    this world departs from the literature (`harness.report.gao_departures`); both left out where None."""
    points, peaks = study_frontier(study, shape_dirs, parameters)
    if points.empty:
        return []
    fits = in_study_order(fit_gao(points, by=["shape", "condition", "scorer"]), points)
    held = in_study_order(held_out_table(points), points)
    extrapolation = in_study_order(extrapolation_table(points), points)
    write(FITS_FILE, fits.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    write(HELD_OUT_FILE, held.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    write(EXTRAPOLATION_FILE, extrapolation.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    largest_n = int(points[points["optimizer"] == "best_of_n"]["step"].max())
    lines = [
        "## Overoptimization: best-of-n and RL against each judge, and against the perfect proxy",
        "",
        "Gold (q*) and proxy gained since the start against d = √KL(· ‖ π₀): best-of-n from π₀, exactly, for "
        f"n = 1 … {largest_n:,} (iteration 0 of each run's best-of-n table), scored by the pretrained judges, by q* "
        "itself (the perfect proxy) and by q* plus random noise as aligned with q* as the judges (Pearson over the "
        "outputs); and each RL run's path over its iterations. q* is bounded, so even the perfect proxy's "
        "best-of-n curve bends over: a judge's overoptimization is what its curve does beyond the perfect proxy's, "
        "not β > 0 alone. Each optimizer's form of Gao et al. (2022) is fitted per shape, condition and scorer by "
        "least squares over every seed's points, with 95% percentile bootstrap intervals resampling seeds "
        "(`gao_fits.csv`); a peak beyond the largest √KL reached is an extrapolation and not shown.",
        "",
        "### Best-of-n from π₀: d(α − β·d)",
        "",
        best_of_n_markdown(fits[fits["optimizer"] == "best_of_n"], peaks),
        "",
        "The top output's mass is best-of-n's probability of the judges' single top-scored output at each seed's "
        "gold peak, averaged over seeds: where it is near 1 the peak, and any fall after it, rest on a few outputs. "
        "Conditions whose judges are pretrained alike (they differ only in how RL uses them) have the same rows.",
        "",
        "### RL: d(α − β·ln d)",
        "",
        rl_markdown(fits[fits["scorer"] == "judges"]),
        "",
        "### Each form against a quadratic",
        "",
        "Held-out error, leaving one seed out at a time (`gao_held_out.csv`):",
        "",
        held_out_markdown(held),
        "",
        f"Extrapolation: each form fitted to the early part of the curves (best-of-n: n ≤ {FIT_ON_N:,}; RL: the first "
        "half of the iterations, every seed pooled) and asked for the rest (`gao_extrapolation.csv`):",
        "",
        extrapolation_markdown(extrapolation),
        "",
    ]
    roles = study_roles(study)
    if verdicts is not None:
        within, across, per_run = verdicts
        ends = per_run[per_run["shape"] == roles.reference]
        lines += [
            f"### RL at equal KL ({roles.reference})",
            "",
            "A lever that lifts the gold-vs-KL frontier raises the gold gained at a given KL; one that only moves "
            "where runs end on it (as Gao et al. find of the KL penalty) does not:",
            "",
            kl_levels_markdown(ends),
            "",
        ]
    if figures:
        lines += _figure_lines(study, run_dir, shape_dirs, points, fits, roles)
    if verdicts is not None:
        baselines = perfect_proxy_baselines(points, fits, per_run, roles)
        lines += departures_section(study, within, across, baselines, extrapolation, roles.base)
    return lines


def _figure_lines(
    study: StudySpec,
    run_dir: Path,
    shape_dirs: Callable[[str], Path],
    points: pd.DataFrame,
    fits: pd.DataFrame,
    roles: StudyRoles,
) -> list[str]:
    figures, lines, reference = run_dir / "figures", [], roles.reference
    series = scaling_series(fits, points, roles)
    if len(series):
        path = fig_scaling(series, perfect_proxy_fits(fits, roles), figures / "gao_scaling.png")
        lines += [f"![α and β against the judge's size and data]({path.relative_to(run_dir).as_posix()})", ""]
    own = points[points["shape"] == reference]
    bon = own[(own["optimizer"] == "best_of_n") & (own["condition"] == roles.base)]
    rl = own[own["optimizer"] == "rl"]
    against = {"judges": "the judge", "q_star": "q*", "noisy_q_star": "q* + random errors at the judge's alignment"}
    paths = pd.concat(
        [
            bon.assign(label="best-of-n against " + bon["scorer"].map(against)),
            rl.assign(label="RL: " + rl["condition"]),
        ],
        ignore_index=True,
    )
    title = f"Gold against KL along the whole path, {reference}: best-of-n from π₀ and every condition's RL"
    path = fig_kl_paths(paths, title, figures / "kl_paths.png")
    lines += [f"![Gold against KL along the path]({path.relative_to(run_dir).as_posix()})", ""]
    counts = points.groupby("condition", sort=False)["shape"].nunique()
    for condition in counts[counts > 1].index:
        own = points[points["condition"] == condition]
        path = fig_gao_frontier(own, figures / f"gao_{condition}.png", panel=PANEL)
        lines += [f"![Gold and proxy against √KL, {condition}]({path.relative_to(run_dir).as_posix()})", ""]
    single = points[(points["shape"] == reference) & points["condition"].isin(counts[counts == 1].index)]
    if len(single):
        path = fig_gao_frontier(single, figures / f"gao_{reference}_conditions.png", panel="condition")
        lines += [f"![Gold and proxy against √KL, {reference}'s conditions]({path.relative_to(run_dir).as_posix()})"]
        lines += ["", *_proxy_note(roles)]
    profile = fig_performance_profile(_profile(study, shape_dirs), figures / "performance_profile.png")
    lines += [f"![Where runs end: performance profile]({profile.relative_to(run_dir).as_posix()})", ""]
    return lines


def _proxy_note(roles: StudyRoles) -> list[str]:
    """Where a condition's RL is rewarded by q* (or by q* plus noise), what its panel's dashed RL line is."""
    lines = []
    if roles.perfect_proxy is not None:
        lines += [
            f"In the panel of {roles.perfect_proxy}, RL is rewarded by q* itself: its dashed line is still its "
            "judges' score of the policy (what they would have rewarded), not the reward it climbed, which is its "
            "gold.",
            "",
        ]
    if roles.noisy_proxy is not None:
        lines += [
            f"In the panel of {roles.noisy_proxy}, RL is rewarded by q* plus a fixed random error per output, as "
            "aligned with q* (Pearson) as each run's pretrained judge: its dashed line too is its judges' score, not "
            "the reward it climbed.",
            "",
        ]
    return lines


def _profile(study: StudySpec, shape_dirs: Callable[[str], Path]) -> pd.DataFrame:
    """Every run's real quality at its final iteration, labelled "shape: condition"."""
    frames = []
    for shape in study.shapes:
        metrics = pd.read_csv(metrics_file(shape_dirs(shape.name)))
        final = metrics[metrics["iteration"] == metrics["iteration"].max()]
        frames.append(final.assign(condition=shape.name + ": " + final["condition"])[["condition", "policy_quality"]])
    return performance_profile(pd.concat(frames, ignore_index=True), "policy_quality")
