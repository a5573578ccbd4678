"""Per-run measures of overoptimization that claims read, from a run directory's best-of-n table and metrics.csv.gz.

Claims compare metrics (`harness.inference.claims`), and a study's across claims per-run measures
(`harness.inference.run_measures`); the statements of the overoptimization literature need a few more, each a number
per run and outer iteration (condition, seed, iteration), joined onto the metrics table's rows (the best-of-n table's
`RunTable.measures`, `harness.report.with_table_measures`) so that both read them as they read a metric. Best-of-n's
curves are those from π₀ (the best-of-n table's base "initial"): "the judges' curve" scored by the run's judges as
aggregated, "q*'s" by q* itself (the perfect proxy), "the noisy curve" by q* plus noise at the judges' alignment
(`harness.mechanisms.best_of_n`). A gain is measured from the curve's start (n = 1 for best-of-n, iteration 0 for the
run), and d = √KL. Every measure can take either sign, so a claim on it can fail:

- bon_peak_gain, bon_peak_kl, bon_peak_n: the largest gold gain of the judges' curve over the grid of n, the KL where
  it is reached, and that n (the first, where several n share it).
- bon_top_mass_at_peak: best-of-n's probability of the judges' single top output at that n: how few outputs the peak
  rests on.
- bon_gold_fall: the judges' curve's gold at the largest n less its gold at the n where the mean curve of the other
  seeds (same condition and iteration) peaks. Negative: this seed falls after the peak the others show; positive: it
  is still rising there. The n is chosen without this seed, so its own noise cannot make its fall (the fall from a
  seed's own maximum is never positive, and a claim on it could not fail); missing with one seed.
- bon_beta, bon_beta_q_star, bon_beta_noisy: β of Gao's best-of-n form d(α − β·d) fitted by least squares to the
  run's judges' curve, q*'s curve and the noisy curve: how fast each bends over. q* is bounded, so even the perfect
  proxy's curve bends: β > 0 alone is not overoptimization.
- bon_beta_excess, bon_beta_excess_noisy: bon_beta less bon_beta_q_star, and less bon_beta_noisy: how much more the
  judges' curve bends than the perfect proxy's, and than that of a proxy as aligned as the judges whose errors are
  random.
- bon_proxy_gap: the judges' curve's proxy gain less its gold gain at the largest n (both since n = 1): positive where
  the judges' score overstates what best-of-n gains in q*, as Gao et al.'s proxy curves do.
- rl_gold_behind_bon: the most gold gain the judges' curve (iteration 0's, linear in KL between its points) reaches
  within the KL the run has spent by that iteration, less the run's own gain. Positive: best-of-n gets more than the
  run's gold for no more KL; the run has spent more KL than best-of-n for the same gold.
- gold_gain_at_kl_0.5, gold_gain_at_kl_1: the run's real-quality gain where its path first reaches KL(π ‖ π₀) = 0.5
  and 1 nat (linear between the iterations around it); missing until it does. Runs compared at one KL: a lever that
  lifts the gold-vs-KL frontier raises it; one that only moves where runs end on it does not.
- bon_form_error_vs_quadratic, rl_form_error_vs_quadratic: held-out mean squared error of Gao's form less that of
  the quadratic a + b·d + c·d² on the run's own points, each fitted to the other seeds of its condition (leave one
  seed out; `harness.inference.overoptimization`); best-of-n's points are iteration 0's judges' curve, the run's its
  path over every iteration. Negative: Gao's form predicts an unseen seed better. The same value at every iteration
  of the run (it reads the whole path and the other seeds); missing with fewer than 3 seeds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from harness.common.run_tables import MEASURE_KEYS
from harness.inference.overoptimization import FORMS

ROW_KEYS = MEASURE_KEYS  # the measures' rows are those the report joins them on
RUN_KEYS = ROW_KEYS[:2]
KL_LEVELS = {"gold_gain_at_kl_0.5": 0.5, "gold_gain_at_kl_1": 1.0}
FRONTIER_MEASURES = {
    "bon_peak_gain": "largest gold gain of best-of-n from π₀ against the judges, over n (q*)",
    "bon_peak_kl": "KL(best-of-n ‖ π₀) at best-of-n's gold peak (nats)",
    "bon_peak_n": "the n of best-of-n's gold peak",
    "bon_top_mass_at_peak": "best-of-n's probability of the judges' top output, at its gold peak",
    "bon_gold_fall": "best-of-n's gold at the largest n less at the other seeds' peak n (q*; negative: it falls)",
    "bon_beta": "β of d(α − β·d) fitted to the run's best-of-n curve against its judges",
    "bon_beta_q_star": "β of d(α − β·d) fitted to the run's best-of-n curve against q* (the perfect proxy)",
    "bon_beta_noisy": "β of d(α − β·d) fitted to the run's best-of-n curve against q* plus noise of the judges' "
    "alignment",
    "bon_beta_excess": "bon_beta less bon_beta_q_star: bending beyond the perfect proxy's",
    "bon_beta_excess_noisy": "bon_beta less bon_beta_noisy: bending beyond a randomly-erring proxy of equal alignment",
    "bon_proxy_gap": "best-of-n's proxy gain less its gold gain at the largest n (the judges' units against q*'s)",
    "rl_gold_behind_bon": "the most gold gain best-of-n from π₀ reaches within the run's KL, less the run's gain (q*)",
    "gold_gain_at_kl_0.5": "the run's real-quality gain where its KL to π₀ first reaches 0.5 nat (q*)",
    "gold_gain_at_kl_1": "the run's real-quality gain where its KL to π₀ first reaches 1 nat (q*)",
    "bon_form_error_vs_quadratic": "held-out MSE of d(α − β·d) less the quadratic's on best-of-n's curve (q*²)",
    "rl_form_error_vs_quadratic": "held-out MSE of d(α − β·ln d) less the quadratic's on the run's path (q*²)",
}
# The curves' scorers (`harness.mechanisms.best_of_n`) and the suffix of the β measure each gives.
SCORER_BETAS = {"judges": "bon_beta", "q_star": "bon_beta_q_star", "noisy_q_star": "bon_beta_noisy"}


def best_of_n_curves(best_of_n: pd.DataFrame, scorer: str = "judges") -> pd.DataFrame:
    """The best-of-n table's curves from π₀ scored by `scorer` ("judges", "q_star" or "noisy_q_star"), sorted by
    run, iteration and n, with d = √KL and the gold and proxy gains since n = 1 (gold_gain, proxy_gain)."""
    own = best_of_n["base"] == "initial"
    if "scorer" in best_of_n:
        own &= best_of_n["scorer"] == scorer
    elif scorer != "judges":  # a table written before the perfect-proxy curves: the judges' only
        own &= False
    curves = best_of_n[own].sort_values([*ROW_KEYS, "n"], kind="stable").copy()
    curves["d"] = np.sqrt(curves["kl"].clip(lower=0.0))
    for value in ("gold", "proxy"):
        curves[f"{value}_gain"] = curves[value] - curves.groupby(ROW_KEYS, sort=False)[value].transform("first")
    return curves.reset_index(drop=True)


def curve_arrays(curves: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The curves as (C, G) arrays, one row per curve: (their ROW_KEYS, column -> array). Every curve of a
    best-of-n table has the same grid of n, so its rows reshape without padding."""
    keys = curves[ROW_KEYS].drop_duplicates().reset_index(drop=True)
    points = len(curves) // max(len(keys), 1)
    if len(keys) * points != len(curves):
        raise ValueError("best-of-n curves of unequal length: every curve needs the same grid of n")
    return keys, {column: curves[column].to_numpy(float).reshape(len(keys), points) for column in columns}


def fitted_beta(d: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """β of d(α − β·d) fitted by least squares to each row's points, (C, G) -> (C,)."""
    basis = np.stack([d, -d * d], axis=-1)
    gram, moment = np.einsum("cgi,cgj->cij", basis, basis), np.einsum("cgi,cg->ci", basis, gain)
    return np.einsum("cij,cj->ci", np.linalg.pinv(gram), moment)[:, 1]


def fall_after_others_peak(keys: pd.DataFrame, gold: np.ndarray) -> np.ndarray:
    """Per curve: gold at the largest n less gold at the n where the mean curve of the other seeds of its condition
    and iteration peaks (NaN for a condition and iteration with one seed)."""
    fall = np.full(len(keys), np.nan)
    for rows in keys.groupby(["condition", "iteration"], sort=False).indices.values():
        if len(rows) < 2:
            continue
        others = (gold[rows].sum(axis=0) - gold[rows]) / (len(rows) - 1)
        peak_at = np.argmax(others, axis=1)
        fall[rows] = gold[rows, -1] - gold[rows, peak_at]
    return fall


def scored_curves(best_of_n: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The best-of-n table's curves from π₀ (`best_of_n_curves`), by scorer (SCORER_BETAS' order)."""
    return {scorer: best_of_n_curves(best_of_n, scorer) for scorer in SCORER_BETAS}


def peak_measures(curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (condition, seed, iteration) with a best-of-n curve: every measure of best-of-n's curves alone.
    curves: `scored_curves` of the best-of-n table (or of its rows at some iterations)."""
    judged_curves = curves["judges"]
    columns = ["n", "kl", "d", "gold", "gold_gain", "proxy_gain"]
    columns += ["top_mass"] if "top_mass" in judged_curves else []
    keys, judged = curve_arrays(judged_curves, columns)
    rows = np.arange(len(keys))
    top = np.argmax(judged["gold"], axis=1) if len(keys) else np.zeros(0, int)
    table = keys.assign(
        bon_peak_gain=judged["gold_gain"][rows, top],
        bon_peak_kl=judged["kl"][rows, top],
        bon_peak_n=judged["n"][rows, top],
        bon_top_mass_at_peak=judged["top_mass"][rows, top] if "top_mass" in judged else np.nan,
        bon_gold_fall=fall_after_others_peak(keys, judged["gold"]),
        bon_proxy_gap=judged["proxy_gain"][:, -1] - judged["gold_gain"][:, -1] if len(keys) else [],
    )
    for scorer, column in SCORER_BETAS.items():
        if curves[scorer].empty:
            table[column] = np.nan
            continue
        own_keys, own = curve_arrays(curves[scorer], ["d", "gold_gain"])
        table = table.merge(own_keys.assign(**{column: fitted_beta(own["d"], own["gold_gain"])}), how="left")
    table["bon_beta_excess"] = table["bon_beta"] - table["bon_beta_q_star"]
    table["bon_beta_excess_noisy"] = table["bon_beta"] - table["bon_beta_noisy"]
    return table


def run_paths(metrics: pd.DataFrame) -> pd.DataFrame:
    """Each run's path over its iterations: KL, d = √KL and the real-quality gain since iteration 0."""
    paths = metrics[[*ROW_KEYS, "kl_from_initial", "policy_quality"]].sort_values(ROW_KEYS, kind="stable").copy()
    paths["d"] = np.sqrt(paths["kl_from_initial"].clip(lower=0.0))
    start = paths.groupby(RUN_KEYS, sort=False)["policy_quality"].transform("first")
    paths["gold_gain"] = paths["policy_quality"] - start
    return paths.reset_index(drop=True)


def best_within(kl: np.ndarray, gain: np.ndarray, budget: float) -> float:
    """The largest gain of a curve (points in increasing KL, linear between them) at KL ≤ budget."""
    inside = gain[kl <= budget]
    reached = np.interp(budget, kl, gain) if budget <= kl[-1] else -np.inf
    return float(max(inside.max(initial=-np.inf), reached))


def first_reaching(kl: np.ndarray, gain: np.ndarray, level: float) -> np.ndarray:
    """Per iteration: the gain where the path up to it first reached KL = level (linear between iterations)."""
    out = np.full(len(kl), np.nan)
    crossed = np.flatnonzero(kl >= level)
    if len(crossed) and crossed[0] > 0:
        i = crossed[0]
        share = (level - kl[i - 1]) / (kl[i] - kl[i - 1])
        out[i:] = gain[i - 1] + share * (gain[i] - gain[i - 1])
    elif len(crossed):
        out[crossed[0] :] = gain[crossed[0]]
    return out


def held_out_difference(points: pd.DataFrame, form: str) -> pd.Series:
    """Per seed of one condition's points (seed, d, gold_gain): held-out MSE of `form` less the quadratic's, each
    fitted by least squares to every other seed's points."""
    seeds = points["seed"].unique()
    if len(seeds) < 3:
        return pd.Series(np.nan, index=seeds)
    out = {}
    for seed in seeds:
        train, test = points[points["seed"] != seed], points[points["seed"] == seed]
        errors = []
        for name in (form, "quadratic"):
            basis = FORMS[name].basis(train["d"].to_numpy())
            coefficients = np.linalg.lstsq(basis, train["gold_gain"].to_numpy(), rcond=None)[0]
            residual = test["gold_gain"].to_numpy() - FORMS[name].basis(test["d"].to_numpy()) @ coefficients
            errors.append(float(np.mean(residual**2)))
        out[seed] = errors[0] - errors[1]
    return pd.Series(out)


def frontier_measures(metrics: pd.DataFrame, best_of_n: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, seed, iteration) of `metrics` with every FRONTIER_MEASURES column (float64).

    Args:
      metrics: metrics.csv.gz's rows (condition, seed, iteration, kl_from_initial, policy_quality at least).
      best_of_n: the best-of-n table's rows of the same runs (the per-run table of `harness.mechanisms.best_of_n`).
    """
    curves, paths = scored_curves(best_of_n), run_paths(metrics)
    table = paths[ROW_KEYS].merge(peak_measures(curves), how="left")
    judged = curves["judges"]
    start = judged[judged["iteration"] == judged.groupby(RUN_KEYS)["iteration"].transform("min")]
    behind = np.full(len(paths), np.nan)
    at_level = {column: np.full(len(paths), np.nan) for column in KL_LEVELS}
    rows_of = paths.groupby(RUN_KEYS, sort=False).indices
    curve_of = start.groupby(RUN_KEYS, sort=False)
    for key, rows in rows_of.items():
        kl, gain = paths["kl_from_initial"].to_numpy()[rows], paths["gold_gain"].to_numpy()[rows]
        for column, level in KL_LEVELS.items():
            at_level[column][rows] = first_reaching(kl, gain, level)
        if key in curve_of.groups:
            curve = curve_of.get_group(key)
            bon_kl, bon_gain = curve["kl"].to_numpy(), curve["gold_gain"].to_numpy()
            behind[rows] = [best_within(bon_kl, bon_gain, budget) - own for budget, own in zip(kl, gain, strict=True)]
    table["rl_gold_behind_bon"] = behind
    for column, values in at_level.items():
        table[column] = values
    for column, points, form in (
        ("bon_form_error_vs_quadratic", start, "best_of_n"),
        ("rl_form_error_vs_quadratic", paths, "rl"),
    ):
        per_seed = {
            (condition, seed): value
            for condition, own in points.groupby("condition", sort=False)
            for seed, value in held_out_difference(own, form).items()
        }
        table[column] = [per_seed.get((c, s), np.nan) for c, s in zip(table["condition"], table["seed"], strict=True)]
    return table[[*ROW_KEYS, *FRONTIER_MEASURES]].astype({name: "float64" for name in FRONTIER_MEASURES})
