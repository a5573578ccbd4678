"""Claim families: Holm and Benjamini–Hochberg adjustments, the levels intervals are built at, and families and
adjustments stated in condition files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from harness.grid.conditions import ConditionFileError, load_grid
from harness.inference.claims import Claim
from harness.inference.multiplicity import adjust, holm, levels
from harness.inference.verdicts import verdict_table


def test_holm_by_hand() -> None:
    # sorted: 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; then the running maximum
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm(np.array([0.5, 0.9])) == pytest.approx([1.0, 1.0])  # capped at 1


def test_holm_and_bh_against_scipy() -> None:
    p = np.random.default_rng(0).uniform(0, 0.2, size=17)
    assert adjust(p, "bh") == pytest.approx(scipy.stats.false_discovery_control(p, method="bh"))
    # Holm rejects exactly what the step-down procedure rejects, at every α
    for alpha in (0.01, 0.05, 0.1):
        ordered = np.sort(p)
        passed = ordered <= alpha / (len(p) - np.arange(len(p)))
        steps = len(p) if passed.all() else int(np.argmin(passed))
        assert int(np.sum(holm(p) <= alpha)) == steps
    # Holm is uniformly more conservative than Benjamini–Hochberg, never below the raw p-values
    assert np.all(adjust(p, "holm") >= adjust(p, "bh") - 1e-12)
    assert np.all(adjust(p, "bh") >= p)


def test_untested_claims_are_left_out_of_the_family() -> None:
    adjusted = adjust(np.array([0.01, np.nan, 0.02]), "holm")
    assert np.isnan(adjusted[1])
    assert adjusted[[0, 2]] == pytest.approx([0.02, 0.02])


def test_levels_match_the_adjusted_tests() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert levels(p, "holm", 0.05) == pytest.approx([0.05 / 3, 0.05, 0.05 / 2, 0.05 / 4])
    # raw p below its Holm level where Holm rejects; the last (0.04 ≤ 0.05) too, but the step-down stopped before it
    assert list(holm(p) <= 0.05) == [True, False, False, True]
    assert list(p <= levels(p, "holm", 0.05)) == [True, True, False, True]
    # BH: false-coverage-rate intervals at α R / m, R = 4 rejections here
    assert levels(p, "bh", 0.05) == pytest.approx([0.05] * 4)
    assert levels(np.array([0.5, 0.9]), "bh", 0.05) == pytest.approx([0.025, 0.025])  # R = 0 counts as 1


CLAIM = 'metric = "policy_quality"\ncondition = "a"\ndirection = "above"\nthan_condition = "b"\nstatement = "s"\n'


def test_families_and_adjustment_in_condition_files(tmp_path: Path) -> None:
    file = tmp_path / "grid.toml"
    file.write_text(
        "[run]\nseeds = 2\niterations = 3\n[conditions.a]\n[conditions.b]\nfreeze_judge = true\n"
        f'[claims]\nadjustment = "bh"\n[claims.one]\n{CLAIM}[claims.two]\n{CLAIM}family = "spreads"\n',
        encoding="utf-8",
    )
    claims = {c.name: c for c in load_grid(file).claims}
    assert set(claims) == {"one", "two"}
    assert claims["one"].family is None and claims["two"].family == "spreads"
    assert {c.adjustment for c in claims.values()} == {"bh"}

    default = tmp_path / "default.toml"
    default.write_text(file.read_text().replace('adjustment = "bh"\n', ""), encoding="utf-8")
    assert {c.adjustment for c in load_grid(default).claims} == {"holm"}

    bad = tmp_path / "bad.toml"
    bad.write_text(file.read_text().replace('"bh"', '"bonferroni"'), encoding="utf-8")
    with pytest.raises(ConditionFileError, match="adjustment"):
        load_grid(bad)


def _two_claim_table(families: tuple[str | None, str | None], adjustments: tuple[str, str]) -> pd.DataFrame:
    rng = np.random.default_rng(6)
    base = rng.normal(1.7, 0.1, size=40)
    metrics = pd.concat(
        [
            pd.DataFrame({"condition": name, "seed": range(40), "iteration": 1, "policy_quality": values})
            for name, values in (("a", base + rng.normal(0.05, 0.1, size=40)), ("b", base))
        ],
        ignore_index=True,
    )
    claims = [
        Claim(
            name=f"c{i}",
            statement="a above b",
            metric="policy_quality",
            condition="a",
            direction="above",
            than_condition="b",
            family=family,
            adjustment=adjustment,
        )
        for i, (family, adjustment) in enumerate(zip(families, adjustments, strict=True))
    ]
    return verdict_table(metrics, claims, estimate_seeds=False)


def test_the_table_adjusts_within_families() -> None:
    # Two copies of one mean claim, each with one hypothesis (its effect test: without the metric's range its TOST
    # could never reject, so it stays out of the family): in one family Holm multiplies the smaller effect p by 2
    # (and the tied second by max(2p, p)); in two families each has its own (p). The mean's interval is at
    # 1 − α/m for the m claims of its family.
    together = _two_claim_table((None, None), ("holm", "holm"))
    apart = _two_claim_table(("x", "y"), ("holm", "holm"))
    assert together["p_value"].tolist() == apart["p_value"].tolist()
    assert together["equivalence_p"].isna().all()
    assert together["p_adjusted"].tolist() == pytest.approx(np.minimum(1, 2 * together["p_value"]).tolist())
    assert apart["p_adjusted"].tolist() == pytest.approx(apart["p_value"].tolist())
    assert together["ci_level"].tolist() == pytest.approx([1 - 0.05 / 2] * 2)
    assert apart["ci_level"].tolist() == pytest.approx([1 - 0.05] * 2)
    assert list(together["family"]) == ["condition file"] * 2 and list(apart["family"]) == ["x", "y"]
    assert set(together["adjustment"]) == {"Holm"}
    with pytest.raises(ValueError, match="different adjustments"):
        _two_claim_table((None, None), ("holm", "bh"))
