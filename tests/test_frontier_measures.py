"""The measures of overoptimization claims read (harness/inference/frontier_measures.py), on hand-computed curves and
paths, and the study report's section that fits Gao's forms to every shape's best-of-n and RL points."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.common.run_tables import write_run_tables
from harness.grid.spec import Condition, GridSpec
from harness.grid.study import Shape, StudySpec
from harness.inference.claims import Claim
from harness.inference.frontier_measures import FRONTIER_MEASURES, frontier_measures, held_out_difference
from harness.inference.overoptimization import best_of_n_gold, rl_gold
from harness.inference.run_measures import measure_names
from harness.report import with_table_measures
from harness.report.overoptimization import FITS_FILE, HELD_OUT_FILE, overoptimization_section

N = (1, 2, 3, 4, 5)
BON_KL = (0.0, 0.2, 0.5, 0.9, 1.2)
BON_GOLD = (1.0, 2.0, 4.0, 3.0, 3.5)  # gains 0, 1, 3, 2, 2.5: a peak at n = 3, then a fall


TOP_MASS = (0.0, 0.1, 0.3, 0.6, 0.9)
CURVES = (("initial", "judges"), ("current", "judges"), ("initial", "q_star"), ("initial", "noisy_q_star"))


def _best_of_n(runs: dict[tuple[str, int], tuple[tuple, tuple]], iterations: int = 1) -> pd.DataFrame:
    """Every curve of each run at each iteration: the judges' (proxy 0.1·gold + 0.5·n, so its gain outruns the gold's),
    q*'s (gold 1 + the KL, proxy = gold) and the noisy one (gold 1 + 2·KL)."""
    rows = []
    for (condition, seed), (kl, gold) in runs.items():
        for iteration in range(iterations):
            for base, scorer in CURVES:
                for n, k, g, top in zip(N, kl, gold, TOP_MASS, strict=True):
                    g = {"judges": g, "q_star": 1.0 + k, "noisy_q_star": 1.0 + 2 * k}[scorer]
                    p = 0.1 * g + 0.5 * n if scorer == "judges" else g
                    rows.append((condition, seed, iteration, base, scorer, n, g, p, k, np.log(n) - (n - 1) / n, top))
    columns = ["condition", "seed", "iteration", "base", "scorer", "n", "gold", "proxy", "kl", "kl_bound", "top_mass"]
    return pd.DataFrame(rows, columns=columns)


def _beta(kl: tuple, gold: tuple) -> float:
    """β of d(α − β·d) by least squares, written out: gain = α·d − β·d², d = √KL."""
    d, gain = np.sqrt(np.asarray(kl)), np.asarray(gold) - gold[0]
    return float(-np.linalg.lstsq(np.stack([d, d * d], axis=1), gain, rcond=None)[0][1])


def _metrics(paths: dict[tuple[str, int], tuple[tuple, tuple]]) -> pd.DataFrame:
    rows = [
        (condition, seed, iteration, k, 0.5 + g, 0.2 + g)
        for (condition, seed), (kl, gain) in paths.items()
        for iteration, (k, g) in enumerate(zip(kl, gain, strict=True))
    ]
    columns = ["condition", "seed", "iteration", "kl_from_initial", "policy_quality", "judge_perceived_quality"]
    return pd.DataFrame(rows, columns=columns)


def test_best_of_n_peak_and_fall_and_rl_against_it() -> None:
    metrics = _metrics({("rl", 0): ((0.0, 0.7, 2.0), (0.0, 1.0, 2.0)), ("rl", 1): ((0.0, 0.5, 1.5), (0.0, 1.0, 2.0))})
    best = _best_of_n({("rl", 0): (BON_KL, BON_GOLD), ("rl", 1): (BON_KL, BON_GOLD)}, iterations=3)
    table = frontier_measures(metrics, best).set_index(["seed", "iteration"])
    assert list(table.columns) == ["condition", *FRONTIER_MEASURES]
    first = table.loc[(0, 0)]
    assert (first["bon_peak_gain"], first["bon_peak_kl"], first["bon_peak_n"]) == (3.0, 0.5, 3.0)
    assert first["bon_top_mass_at_peak"] == pytest.approx(0.3)
    # The other seed's curve peaks at n = 3 too: gold 3.5 at the largest n against 4 there.
    assert first["bon_gold_fall"] == pytest.approx(-0.5)
    # The judges' proxy gain at n = 5 is 0.1·2.5 + 0.5·4 = 2.25 against a gold gain of 2.5.
    assert first["bon_proxy_gap"] == pytest.approx(-0.25)
    beta, beta_q_star, beta_noisy = (
        _beta(BON_KL, BON_GOLD),
        _beta(BON_KL, 1.0 + np.array(BON_KL)),
        _beta(BON_KL, 1.0 + 2 * np.array(BON_KL)),
    )
    assert (first["bon_beta"], first["bon_beta_q_star"], first["bon_beta_noisy"]) == pytest.approx(
        (beta, beta_q_star, beta_noisy), abs=1e-9
    )
    assert first["bon_beta_excess"] == pytest.approx(beta - beta_q_star, abs=1e-9)
    assert first["bon_beta_excess_noisy"] == pytest.approx(beta - beta_noisy, abs=1e-9)
    # Within KL 0.7 best-of-n's best is its peak, 3 (the line from (0.5, 3) to (0.9, 2) is 2.5 at 0.7): 3 − 1.
    assert table.loc[(0, 1), "rl_gold_behind_bon"] == pytest.approx(2.0)
    # Beyond best-of-n's last KL (1.2) its best is still its peak: 3 − 2.
    assert table.loc[(0, 2), "rl_gold_behind_bon"] == pytest.approx(1.0)
    assert table.loc[(0, 0), "rl_gold_behind_bon"] == pytest.approx(0.0)
    # Seed 0 crosses KL 1 between 0.7 and 2.0, at gain 1 + 0.3/1.3; seed 1 between 0.5 and 1.5, at gain 1.5.
    assert np.isnan(table.loc[(0, 1), "gold_gain_at_kl_1"])
    assert table.loc[(0, 2), "gold_gain_at_kl_1"] == pytest.approx(1.0 + 0.3 / 1.3)
    assert np.isnan(table.loc[(1, 1), "gold_gain_at_kl_1"])
    assert table.loc[(1, 2), "gold_gain_at_kl_1"] == pytest.approx(1.5)
    # KL 0.5: seed 0 between 0 and 0.7 (gain 0.5/0.7); seed 1 exactly at iteration 1 (gain 1).
    assert table.loc[(0, 1), "gold_gain_at_kl_0.5"] == pytest.approx(0.5 / 0.7)
    assert table.loc[(1, 1), "gold_gain_at_kl_0.5"] == pytest.approx(1.0)
    assert np.isnan(table["bon_form_error_vs_quadratic"]).all()  # two seeds: nothing to hold out against


def test_the_fall_is_measured_at_the_other_seeds_peak_and_can_be_either_sign() -> None:
    """A seed still rising where the other seeds peak has a positive fall: a claim that best-of-n falls can fail."""
    falling, rising = (1.0, 2.0, 4.0, 3.0, 3.5), (1.0, 2.0, 3.0, 3.5, 4.5)
    runs = {("rl", 0): (BON_KL, falling), ("rl", 1): (BON_KL, falling), ("rl", 2): (BON_KL, rising)}
    metrics = _metrics({key: ((0.0,), (0.0,)) for key in runs})
    fall = frontier_measures(metrics, _best_of_n(runs)).set_index("seed")["bon_gold_fall"]
    # Seeds 0 and 1: the others' mean curve (one falling, one rising: 1, 2, 3.5, 3.25, 4) peaks at the largest n.
    assert fall[0] == pytest.approx(0.0) and fall[1] == pytest.approx(0.0)
    # Seed 2: the other two peak at n = 3, where it has 3 against 4.5 at the largest n.
    assert fall[2] == pytest.approx(1.5)
    one_seed = frontier_measures(metrics.iloc[:1], _best_of_n({("rl", 0): (BON_KL, falling)}))
    assert np.isnan(one_seed["bon_gold_fall"]).all()


def test_held_out_difference_against_a_hand_written_leave_one_seed_out() -> None:
    rng = np.random.default_rng(0)
    d = np.linspace(0.0, 2.5, 12)
    rows = [(seed, x, rl_gold(x, 1.0 + 0.1 * seed, 0.4) + 0.02 * rng.normal()) for seed in range(5) for x in d]
    points = pd.DataFrame(rows, columns=["seed", "d", "gold_gain"])
    got = held_out_difference(points, "rl")
    for seed in range(5):
        train, test = points[points["seed"] != seed], points[points["seed"] == seed]
        form = np.stack([train["d"], -train["d"] * np.log(np.where(train["d"] > 0, train["d"], 1.0))], axis=1)
        alpha, beta = np.linalg.lstsq(form, train["gold_gain"], rcond=None)[0]
        quadratic = np.polyfit(train["d"], train["gold_gain"], 2)
        own = test["gold_gain"].to_numpy()
        expected = np.mean((own - rl_gold(test["d"].to_numpy(), alpha, beta)) ** 2) - np.mean(
            (own - np.polyval(quadratic, test["d"].to_numpy())) ** 2
        )
        assert got[seed] == pytest.approx(expected, rel=1e-6, abs=1e-9)
    # Data of the best-of-n form: the quadratic contains it (a = 0), so without noise both predict every seed.
    exact = pd.DataFrame([(s, x, best_of_n_gold(x, 2.0, 0.5)) for s in range(4) for x in d], columns=points.columns)
    np.testing.assert_allclose(held_out_difference(exact, "best_of_n").to_numpy(), 0.0, atol=1e-12)


def test_the_measures_join_the_metrics_and_claims_read_them(tmp_path: Path) -> None:
    """A run directory's best-of-n table yields its measures (the table's `RunTable.measures`), joined on the metrics'
    rows in their order; a directory without the table leaves the metrics as they are."""
    metrics = _metrics({("rl", 0): ((0.0, 0.7), (0.0, 1.0)), ("rl", 1): ((0.0, 0.5), (0.0, 0.4))})
    assert with_table_measures(tmp_path, metrics) is metrics
    best = _best_of_n({k: (BON_KL, BON_GOLD) for k in [("rl", 0), ("rl", 1)]}, 2)
    write_run_tables(tmp_path, {"best_of_n": best})
    joined = with_table_measures(tmp_path, metrics.iloc[::-1])
    # (the key columns' string dtype may follow the table's, read back from Parquet: values and order are the point)
    pd.testing.assert_frame_equal(joined[metrics.columns], metrics.iloc[::-1], check_dtype=False)
    expected = frontier_measures(metrics, best).set_index(["condition", "seed", "iteration"])
    got = joined.set_index(["condition", "seed", "iteration"]).loc[expected.index, list(FRONTIER_MEASURES)]
    pd.testing.assert_frame_equal(got, expected, check_index_type=False)
    Claim(name="c", statement="s", metric="bon_peak_gain", condition="rl", direction="above", than_value=0.0)
    assert set(FRONTIER_MEASURES) <= set(measure_names())


def test_the_study_section_fits_each_optimizers_form_per_shape(tmp_path: Path) -> None:
    """Points drawn from Gao's forms with known coefficients come back in gao_fits.csv, per shape and optimizer."""
    d = np.sqrt(np.array((*BON_KL, 1.6, 2.2)))
    truth = {"small": (1.0, 0.5), "large": (2.0, 0.4)}
    for shape, (alpha, beta) in truth.items():
        runs = {("rl", seed): (tuple(d**2), tuple(1.0 + best_of_n_gold(d, alpha, beta))) for seed in range(3)}
        paths = {("rl", seed): (tuple(d**2), tuple(rl_gold(d, alpha, beta))) for seed in range(3)}
        directory = tmp_path / "shapes" / shape
        directory.mkdir(parents=True)
        _metrics(paths).to_csv(directory / "metrics.csv.gz", index=False)
        best = _best_of_n({}, 1)
        for key, (kl, gold) in runs.items():
            frame = pd.DataFrame(
                {
                    "condition": key[0],
                    "seed": key[1],
                    "iteration": 0,
                    "base": "initial",
                    "scorer": "judges",
                    "n": range(1, len(kl) + 1),
                }
            ).assign(gold=gold, proxy=0.1 * np.array(gold), kl=kl, kl_bound=0.0)
            best = pd.concat([best, frame], ignore_index=True)
        write_run_tables(directory, {"best_of_n": best})
    grid = GridSpec(conditions=(Condition(name="rl"),))
    study = StudySpec(name="s", shapes=tuple(Shape(name=name, grid=grid) for name in truth))
    written: dict[str, str] = {}
    lines = overoptimization_section(
        study,
        tmp_path,
        lambda shape: tmp_path / "shapes" / shape,
        {"small": 100, "large": 400},
        written.__setitem__,
        figures=False,
    )
    assert lines[0].startswith("## Overoptimization")
    fits = pd.read_csv(io.StringIO(written[FITS_FILE]))
    assert list(fits["shape"]) == ["small", "small", "large", "large"]
    for row in fits.itertuples(index=False):
        assert (row.alpha, row.beta) == pytest.approx(truth[row.shape], abs=1e-6)
    assert HELD_OUT_FILE in written
