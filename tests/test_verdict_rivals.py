"""'Strongest of N' claims: an intersection–union test against every rival, identical rivals counted once, the
worst case reported; and the tests that see end modes (sign test, McNemar) and P(better)'s interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from harness.inference.claims import Claim
from harness.inference.paired_tests import mode_counts
from harness.inference.verdicts import verdict_table


def _table(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.concat(
        [
            pd.DataFrame({"condition": name, "seed": range(len(values)), "iteration": 1, "policy_quality": values})
            for name, values in columns.items()
        ],
        ignore_index=True,
    )


def test_the_second_best_rival_decides() -> None:
    """The rival with the highest mean is beaten on every seed; the next one only on average, by a noisy margin.
    Testing the highest mean alone (the old rule) says "holds"; against every rival the claim is undecided, and
    the reported worst case is the noisy rival."""
    rng = np.random.default_rng(0)
    side = rng.normal(2.0, 0.1, size=30)
    close = side - 0.1 + rng.normal(0, 0.001, size=30)  # highest mean, beaten by 0.1 on every seed
    noise = rng.normal(0, 1.5, size=30)
    noisy = side - 0.3 + noise - noise.mean()  # lower mean (by exactly 0.3), but the difference is mostly noise
    metrics = _table({"champion": side, "close": close, "close-copy": close.copy(), "noisy": noisy})
    assert metrics.groupby("condition")["policy_quality"].mean().drop("champion").idxmax().startswith("close")
    claim = Claim(
        name="c", statement="s", metric="policy_quality", condition="champion", direction="above", than_condition="*"
    )
    row = verdict_table(metrics, [claim]).iloc[0]
    assert row["verdict"] == "undecided", row["why"]
    assert row["other_side"] == "noisy @ 1 (worst of 2 distinct rivals)"  # close and close-copy are one rival
    assert row["effect"] == pytest.approx(np.mean(side - noisy))
    alone = verdict_table(metrics, [claim.model_copy(update={"than_condition": "close"})]).iloc[0]
    assert alone["verdict"] == "holds"


def test_identical_rivals_are_named_together() -> None:
    rng = np.random.default_rng(1)
    side = rng.normal(2.0, 0.1, size=25)
    metrics = _table({"a": side, "b": side - 0.5, "c": side - 0.5})
    claim = Claim(
        name="c", statement="s", metric="policy_quality", condition="a", direction="above", than_condition="*"
    )
    row = verdict_table(metrics, [claim]).iloc[0]
    assert row["other_side"] == "b @ 1 (= c)" and row["verdict"] == "holds"


def test_mode_counts_and_exact_tests() -> None:
    differences = np.array([0.0] * 89 + [0.5] * 7 + [-0.25] * 3 + [0.004])
    up, down, test, p = mode_counts(differences, None, "mean", 0.01)
    assert (up, down, test) == (7, 3, "sign test")
    assert p == pytest.approx(scipy.stats.binomtest(7, 10).pvalue)
    # spread: the side escapes the dominant mode (1.75) on 3 seeds where the other does not, the reverse on 1
    side = np.array([1.75] * 20 + [1.0, 1.0, 2.0, 1.75, 1.0])
    other = np.array([1.75] * 20 + [1.75, 1.75, 1.75, 1.0, 1.0])
    up, down, test, p = mode_counts(side, other, "std", 0.01)
    assert (up, down, test) == (3, 1, "McNemar exact")
    assert p == pytest.approx(scipy.stats.binomtest(3, 4).pvalue)


def test_p_better_has_an_interval() -> None:
    rng = np.random.default_rng(5)
    other = rng.normal(1.7, 0.2, size=40)
    tied = other.copy()
    tied[:10] += 0.3  # 10 seeds better, 30 tied: a mean of scores 1 and ½, bootstrapped
    row = verdict_table(
        _table({"a": tied, "b": other}),
        [Claim(name="c", statement="s", metric="policy_quality", condition="a", direction="above", than_condition="b")],
    ).iloc[0]
    assert row["p_improvement"] == pytest.approx((10 + 15) / 40)
    assert row["p_improvement_low"] < row["p_improvement"] < row["p_improvement_high"]
    clear = verdict_table(
        _table({"a": other + 0.3, "b": other}),
        [Claim(name="c", statement="s", metric="policy_quality", condition="a", direction="above", than_condition="b")],
    ).iloc[0]
    exact = scipy.stats.binomtest(40, 40).proportion_ci(0.95, method="exact")  # a plain share: Clopper–Pearson
    assert (clear["p_improvement"], clear["p_improvement_low"], clear["p_improvement_high"]) == pytest.approx(
        (1.0, exact.low, exact.high)
    )
