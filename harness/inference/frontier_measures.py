"""Per-run measures of overoptimization that claims read, from a run directory's best-of-n table and metrics.csv.

Claims compare metrics (`harness.inference.claims`), and a study's across claims per-run measures
(`harness.inference.run_measures`); the statements of the overoptimization literature need a few more, each a number
per run and outer iteration (condition, seed, iteration), joined onto the metrics table's rows
(`with_frontier_measures`) so that both read them as they read a metric. Best-of-n's curve is the one from π₀
(the best-of-n table's base "initial"), a gain is measured from the curve's start (n = 1 for best-of-n, iteration 0
for the run), and d = √KL:

- bon_peak_gain, bon_peak_kl, bon_peak_n: the largest gold gain of best-of-n from π₀ over the grid of n, scored by
  the run's judges at that iteration (at iteration 0, the pretrained judges), the KL where it is reached, and that n
  (the first, where several n share it).
- bon_gold_drop: the gold at that peak less the gold at the largest n: how far best-of-n falls after its peak (0
  where it peaks at the largest n).
- rl_gold_behind_bon: the most gold gain best-of-n from π₀ with the pretrained judges (iteration 0's curve, linear
  in KL between its points) reaches within the KL the run has spent by that iteration, less the run's own gain. A
  positive value is best-of-n getting at least the run's gold for no more KL: the run has spent more KL than
  best-of-n for the same gold.
- gold_gain_at_kl_1: the run's real-quality gain where its path first reaches KL(π ‖ π₀) = 1 nat (linear between
  the iterations around it); missing until it does. Runs compared at one KL: a lever that lifts the gold-vs-KL
  frontier raises it; one that only moves where runs end on it does not.
- bon_form_error_vs_quadratic, rl_form_error_vs_quadratic: held-out mean squared error of Gao's form less that of
  the quadratic a + b·d + c·d² on the run's own points, each fitted to the other seeds of its condition (leave one
  seed out; `harness.inference.overoptimization`); best-of-n's points are iteration 0's curve, the run's its path
  over every iteration. Negative: Gao's form predicts an unseen seed better. The same value at every iteration of
  the run (it reads the whole path and the other seeds); missing with fewer than 3 seeds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.inference.overoptimization import FORMS

# The per-run table these measures read (`harness.mechanisms.best_of_n`, `harness.common.run_tables`).
BEST_OF_N_TABLE = "best_of_n"
RUN_KEYS = ["condition", "seed"]
ROW_KEYS = [*RUN_KEYS, "iteration"]
KL_LEVEL = 1.0
FRONTIER_MEASURES = {
    "bon_peak_gain": "largest gold gain of best-of-n from π₀ over n (q*)",
    "bon_peak_kl": "KL(best-of-n ‖ π₀) at best-of-n's gold peak (nats)",
    "bon_peak_n": "the n of best-of-n's gold peak",
    "bon_gold_drop": "best-of-n's gold at its peak less its gold at the largest n (q*)",
    "rl_gold_behind_bon": "the most gold gain best-of-n from π₀ reaches within the run's KL, less the run's gain (q*)",
    "gold_gain_at_kl_1": "the run's real-quality gain where its KL to π₀ first reaches 1 nat (q*)",
    "bon_form_error_vs_quadratic": "held-out MSE of d(α − β·d) less the quadratic's on best-of-n's curve (q*²)",
    "rl_form_error_vs_quadratic": "held-out MSE of d(α − β·ln d) less the quadratic's on the run's path (q*²)",
}


def best_of_n_curves(best_of_n: pd.DataFrame) -> pd.DataFrame:
    """The best-of-n table's curves from π₀, sorted by run, iteration and n, with d = √KL and the gain since n = 1."""
    curves = best_of_n[best_of_n["base"] == "initial"].sort_values([*ROW_KEYS, "n"], kind="stable").copy()
    curves["d"] = np.sqrt(curves["kl"].clip(lower=0.0))
    curves["gold_gain"] = curves["gold"] - curves.groupby(ROW_KEYS, sort=False)["gold"].transform("first")
    return curves.reset_index(drop=True)


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
      metrics: metrics.csv's rows (condition, seed, iteration, kl_from_initial, policy_quality at least).
      best_of_n: the best-of-n table's rows of the same runs (the per-run table of `harness.mechanisms.best_of_n`).
    """
    curves, paths = best_of_n_curves(best_of_n), run_paths(metrics)
    peaks = []
    for (condition, seed, iteration), curve in curves.groupby(ROW_KEYS, sort=False):
        gold, top = curve["gold"].to_numpy(), int(np.argmax(curve["gold"].to_numpy()))
        peaks.append(
            {
                "condition": condition,
                "seed": seed,
                "iteration": iteration,
                "bon_peak_gain": curve["gold_gain"].iloc[top],
                "bon_peak_kl": curve["kl"].iloc[top],
                "bon_peak_n": float(curve["n"].iloc[top]),
                "bon_gold_drop": gold[top] - gold[-1],
            }
        )
    table = paths[ROW_KEYS].merge(pd.DataFrame(peaks, columns=[*ROW_KEYS, *list(FRONTIER_MEASURES)[:4]]), how="left")
    start = curves[curves["iteration"] == curves.groupby(RUN_KEYS)["iteration"].transform("min")]
    behind, at_level = np.full(len(paths), np.nan), np.full(len(paths), np.nan)
    rows_of = paths.groupby(RUN_KEYS, sort=False).indices
    curve_of = start.groupby(RUN_KEYS, sort=False)
    for key, rows in rows_of.items():
        kl, gain = paths["kl_from_initial"].to_numpy()[rows], paths["gold_gain"].to_numpy()[rows]
        at_level[rows] = first_reaching(kl, gain, KL_LEVEL)
        if key in curve_of.groups:
            curve = curve_of.get_group(key)
            bon_kl, bon_gain = curve["kl"].to_numpy(), curve["gold_gain"].to_numpy()
            behind[rows] = [best_within(bon_kl, bon_gain, budget) - own for budget, own in zip(kl, gain, strict=True)]
    table["rl_gold_behind_bon"], table["gold_gain_at_kl_1"] = behind, at_level
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


def with_frontier_measures(metrics: pd.DataFrame, best_of_n: pd.DataFrame | None) -> pd.DataFrame:
    """`metrics` with the FRONTIER_MEASURES columns joined on (condition, seed, iteration), rows in their order;
    `metrics` itself where there is no best-of-n table (a run directory written before it)."""
    if best_of_n is None or best_of_n.empty:
        return metrics
    measures = frontier_measures(metrics, best_of_n)
    joined = metrics.merge(measures, on=ROW_KEYS, how="left", validate="one_to_one")
    joined.index = metrics.index
    return joined
