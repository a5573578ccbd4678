"""Claims as data and their verdicts: the rule on synthetic metrics with known effects, the bootstrap's coverage,
and claims in condition files (validation, `extends`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.grid.conditions import ConditionFileError, load_grid
from harness.inference.claims import Claim
from harness.inference.monte_carlo import MonteCarloP
from harness.inference.paired_tests import (
    equivalence_seeds,
    equivalence_test,
    jump_share_test,
    resolved,
    resolved_pairs,
)
from harness.inference.rule import ClaimData, RivalTest, judge
from harness.inference.verdicts import MIN_SEEDS, judge_family, paired_bootstrap_ci, verdict_table

ROOT = Path(__file__).resolve().parents[1]


def _metrics(side: np.ndarray, other: np.ndarray) -> pd.DataFrame:
    """A tidy table: conditions 'a' and 'b', one seed per entry, final iteration 1 holding the given qualities."""
    seeds = np.arange(len(side))
    frames = [
        pd.DataFrame({"condition": name, "seed": seeds, "iteration": 1, "policy_quality": values, "diverged": False})
        for name, values in (("a", side), ("b", other))
    ]
    start = [frame.assign(iteration=0, policy_quality=1.0) for frame in frames]
    return pd.concat([*start, *frames], ignore_index=True)


def _claim(**fields: object) -> Claim:
    base = {"name": "c", "statement": "a vs b", "metric": "policy_quality", "condition": "a", "than_condition": "b"}
    return Claim(**(base | fields))


@pytest.mark.parametrize(
    ("shift", "direction", "expected"),
    [
        (0.3, "above", "holds"),  # a clear effect
        (0.0, "above", "not supported"),  # none
        (-0.3, "above", "contradicted"),  # reversed
        (-0.3, "below", "holds"),
        (0.3, "below", "contradicted"),
        (0.0, "equal", "holds"),
        (0.3, "equal", "contradicted"),
    ],
)
def test_verdicts_on_known_effects(shift: float, direction: str, expected: str) -> None:
    rng = np.random.default_rng(1)
    other = rng.uniform(1.6, 1.8, size=100)
    side = other + shift + rng.normal(0.0, 0.005, size=100)  # paired: small per-seed noise on the effect
    ranges = {"policy_quality": (1.2, 2.2)}  # what equivalence needs: a difference is at most 1 (margin 5%)
    row = verdict_table(_metrics(side, other), [_claim(direction=direction, resolution=0.05)], ranges=ranges).iloc[0]
    assert row["verdict"] == expected, row["why"]
    assert row["jump_rule"] == "resolution"
    if expected in ("holds", "contradicted") and direction != "equal":  # the sign test's counts, by the jump rule
        assert "seeds that differ by more than 0.05" in row["why"]
    # the mean itself, as measured, inside its interval, and the counts are those of the differences beyond 0.05
    assert row["ci_low"] <= row["effect"] <= row["ci_high"]
    assert row["effect"] == pytest.approx(np.mean(side - other))
    jumps = resolved(side - other, 0.05)
    assert (row["seeds_up"], row["seeds_down"]) == (np.sum(jumps > 0), np.sum(jumps < 0))
    # a 0.3 shift on every seed is measured by the mean's interval too (range 1, 100 seeds), and no shift is
    # within the margin
    reading = {"holds": "holds", "contradicted": "contradicted"}.get(expected, "within ±0.05")
    assert row["mean_reading"] == ("holds" if expected == "holds" and direction == "equal" else reading)


def test_float_noise_is_no_difference_never_a_finding() -> None:
    other = np.full(100, 1.747339)
    side = other - 1e-5 + np.random.default_rng(2).normal(0, 1e-7, 100)  # CI excludes 0, but at 1e-5
    ranges = {"policy_quality": (1.7, 1.8)}
    row = verdict_table(_metrics(side, other), [_claim(direction="above")], ranges=ranges).iloc[0]
    assert row["verdict"] == "not supported"
    assert "each way's share of all 100 seeds that jump lies below" in row["why"] and "0 up and 0 down" in row["why"]
    assert row["seeds_up"] == row["seeds_down"] == 0 and row["effect"] == pytest.approx(-1e-5, abs=1e-6)
    # without the metric's range a rare jump as large as anything cannot be excluded: no verdict
    assert verdict_table(_metrics(side, other), [_claim(direction="above")]).iloc[0]["verdict"] == "undecided"


def test_too_few_seeds_never_give_a_verdict() -> None:
    rng = np.random.default_rng(3)
    other = rng.normal(1.7, 0.2, size=MIN_SEEDS - 1)
    row = verdict_table(_metrics(other + 1.0, other), [_claim(direction="above")]).iloc[0]
    assert row["verdict"] == "untested"
    assert "too few seeds" in row["why"]


def _rival(effect: float, p: float, favours: bool, equivalence: float = 1.0) -> RivalTest:
    return RivalTest(effect, favours, MonteCarloP.exact(p), "sign test", MonteCarloP.exact(equivalence))


def _verdict(direction: str, rival: RivalTest, effect_p: float, equivalence_p: float = 1.0) -> str:
    claim = _claim(direction=direction, resolution=0.01)
    return judge(claim, [rival], effect_p, equivalence_p, 0.05).verdict


def test_judge_is_symmetric_in_direction() -> None:
    assert _verdict("above", _rival(0.2, 0.001, True), 0.001) == "holds"
    assert _verdict("below", _rival(-0.2, 0.001, True), 0.001) == "holds"
    assert _verdict("above", _rival(-0.2, 0.001, False), 0.001) == "contradicted"
    assert _verdict("below", _rival(0.2, 0.001, False), 0.001) == "contradicted"
    assert _verdict("above", _rival(0.0, 1.0, False), 1.0, equivalence_p=0.001) == "not supported"


def test_a_finding_needs_the_test_and_an_effect_as_large_as_the_resolution() -> None:
    # the seeds jump the claimed way (significantly) but the mean resolved difference is below the resolution
    assert _verdict("above", _rival(0.005, 0.001, True), 0.001) == "undecided"
    assert _verdict("above", _rival(0.2, 0.2, True), 0.2) == "undecided"  # an effect the test does not find
    # an unsettled Monte-Carlo p never decides, whichever side of α it shows
    claim = _claim(direction="above", resolution=0.01)
    unsettled = judge(claim, [_rival(0.2, 0.001, True)], 0.001, 1.0, 0.05, determined=(False, True))
    assert unsettled.verdict == "undecided" and "Monte-Carlo" in unsettled.why


def test_equivalence_verdicts() -> None:
    assert _verdict("above", _rival(0.0, 1.0, False), 1.0, 0.001) == "not supported"
    assert _verdict("equal", _rival(0.0, 1.0, True), 1.0, 0.001) == "holds"
    assert _verdict("equal", _rival(0.3, 0.001, False), 0.001) == "contradicted"
    assert _verdict("equal", _rival(-0.3, 0.001, False), 0.001) == "contradicted"


def test_the_equivalence_test_is_exact_by_hand() -> None:
    """Margin 0.05 of a metric whose differences lie within ±1: a mean of 0.05 needs jumps up with chance ≥ 0.05.
    100 seeds, 1 up and 0 down: P(Binomial(100, 0.05) ≤ 1) = 0.95^100 + 100 · 0.05 · 0.95^99 = 0.037081, doubled."""
    differences = np.array([0.3] + [0.0] * 99)
    assert equivalence_test(differences, 0.05, 1.0).p == pytest.approx(2 * (0.95**100 + 100 * 0.05 * 0.95**99))
    assert equivalence_test(differences, 0.05, np.inf).p == 1.0  # no range: nothing can be excluded
    # a mean at the margin made of rare large jumps (the worst case for a sign-flip TOST) errs at most α / 2
    rng = np.random.default_rng(0)
    wrong = [equivalence_test(np.where(rng.random(100) < 0.05, 1.0, 0.0), 0.05, 1.0).p <= 0.05 for _ in range(2000)]
    assert np.mean(wrong) <= 0.025


def test_comparison_with_a_value_and_of_spreads() -> None:
    rng = np.random.default_rng(4)
    calm, noisy = rng.normal(1.7, 0.05, size=200), rng.normal(1.7, 0.4, size=200)
    table = verdict_table(
        _metrics(calm, noisy),
        [
            _claim(name="spread", direction="below", statistic="std"),
            _claim(name="value", direction="above", than_condition=None, than_value=1.5),
        ],
    ).set_index("claim")
    assert table.loc["spread", "verdict"] == "holds"
    calm_pairs, noisy_pairs = resolved_pairs(calm, noisy, 0.01)  # seeds within the resolution count as equal
    assert table.loc["spread", "effect"] == pytest.approx(np.std(calm_pairs, ddof=1) - np.std(noisy_pairs, ddof=1))
    assert np.isnan(table.loc["spread", "p_improvement"])
    assert table.loc["value", "verdict"] == "holds"
    assert table.loc["value", "effect"] == pytest.approx(np.mean(calm) - 1.5)


def test_paired_bootstrap_ci_covers_the_true_difference_at_the_nominal_rate() -> None:
    """400 simulated experiments of 100 paired seeds (skewed, bimodal differences like end modes).

    At a true 95% rate the count of covering intervals is Binomial(400, 0.95): mean 380, sd 4.4; accept 368..395
    (coverage 0.92..0.99; the percentile interval this replaced needed 360).
    """
    rng = np.random.default_rng(5)
    true_difference = 0.2 * 0.3  # a 30% chance per seed of escaping to a mode 0.2 higher
    covered = 0
    for _ in range(400):
        other = rng.normal(1.75, 0.01, size=100)
        side = other + 0.2 * (rng.random(100) < 0.3) + rng.normal(0, 0.01, size=100)
        _, low, high = paired_bootstrap_ci(side, other, "mean", 0.95, resamples=2000)
        covered += low <= true_difference <= high
    assert 368 <= covered <= 395, covered


def test_every_rival_of_a_pattern_is_tested_and_the_worst_reported() -> None:
    rng = np.random.default_rng(6)
    base = rng.normal(1.7, 0.1, size=30)
    frames = []
    for name, values in (("anchor", base + 0.5), ("weak", base), ("strong", base + 0.3), ("anchor-small", base + 0.6)):
        frames.append(pd.DataFrame({"condition": name, "seed": range(30), "iteration": 1, "policy_quality": values}))
    metrics = pd.concat(frames, ignore_index=True)
    claim = _claim(condition="anchor", than_condition="*", excluding=("anchor*",), direction="above")
    row = verdict_table(metrics, [claim]).iloc[0]
    assert row["other_side"] == "strong @ 1 (worst of 2 distinct rivals)"
    assert row["effect"] == pytest.approx(0.2)
    assert row["verdict"] == "holds" and "intersection–union" in row["test"]


def test_claim_validation() -> None:
    with pytest.raises(ValueError, match="exactly one kind"):
        Claim(name="c", statement="s", metric="policy_quality", condition="a", direction="above")
    with pytest.raises(ValueError, match="metric must be one of"):
        _claim(metric="mode_index", direction="above")


def test_claims_in_condition_files(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text(
        "[run]\nseeds = 2\niterations = 3\n[conditions.a]\n[conditions.b]\nfreeze_judge = true\n"
        '[claims.a-above-b]\nstatement = "a ends above b"\nmetric = "policy_quality"\ncondition = "a"\n'
        'direction = "above"\nthan_condition = "b"\n',
        encoding="utf-8",
    )
    wider = tmp_path / "wider.toml"
    wider.write_text('extends = "base.toml"\n[run]\nseeds = 7\n[conditions.c]\nn_judges = 3\n', encoding="utf-8")
    spec = load_grid(wider)
    assert spec.run.seeds == tuple(range(7)) and spec.run.iterations == 3  # merged key by key
    assert [c.name for c in spec.conditions] == ["a", "b", "c"]
    assert [c.name for c in spec.claims] == ["a-above-b"]
    assert [c.name for c in spec.only(["a", "c"]).claims] == []  # a claim on a dropped condition goes with it

    bad = tmp_path / "bad.toml"
    bad.write_text(
        'extends = "base.toml"\n[claims.x]\nstatement = "s"\nmetric = "policy_quality"\n'
        'condition = "nope"\ndirection = "above"\nthan_value = 1.0\n',
        encoding="utf-8",
    )
    with pytest.raises(ConditionFileError, match=r"key 'claims\.x': claim 'x': no condition 'nope'"):
        load_grid(bad)
    loop = tmp_path / "loop.toml"
    loop.write_text('extends = "loop.toml"\n', encoding="utf-8")
    with pytest.raises(ConditionFileError, match="cycle"):
        load_grid(loop)


def test_published_claims_parse_at_both_seed_counts() -> None:
    five, hundred = load_grid(ROOT / "conditions" / "paper.toml"), load_grid(ROOT / "conditions" / "paper-100.toml")
    assert five.claims == hundred.claims and len(five.claims) >= 15
    assert five.conditions == hundred.conditions
    assert len(hundred.run.seeds) == 100


def _mode_metrics(side: np.ndarray, other: np.ndarray, side_modes: np.ndarray, other_modes: np.ndarray) -> pd.DataFrame:
    """_metrics with each run's end mode recorded (mode_index), as a grid's metrics.csv.gz has it."""
    metrics = _metrics(side, other)
    last = metrics["iteration"] == 1
    metrics["mode_index"] = 0
    metrics.loc[last & (metrics["condition"] == "a"), "mode_index"] = side_modes
    metrics.loc[last & (metrics["condition"] == "b"), "mode_index"] = other_modes
    return metrics


def test_drifts_within_an_end_mode_are_never_jumps():
    # 100 seeds, every rival run at end mode 0 (q* 1.747); the claimed side stays there on 85 seeds but 0.02 lower
    # (a policy less concentrated on the same output), jumps to a better mode on 10 and a worse one on 5. Counted by
    # the resolution alone, 90 of 100 seeds are lower and the sign test rejects; counted by end mode, 10 go up and
    # 5 down, and the 85 same-mode seeds are drifts, reported apart.
    other = np.full(100, 1.747)
    side = np.concatenate([np.full(85, 1.727), np.full(10, 2.1), np.full(5, 1.5)])
    side_modes = np.concatenate([np.zeros(85), np.ones(10), np.full(5, 2)]).astype(int)
    metrics = _mode_metrics(side, other, side_modes, np.zeros(100, dtype=int))
    ranges = {"policy_quality": (-3.7, 3.7)}
    row = verdict_table(metrics, [_claim(direction="below")], ranges=ranges).iloc[0]
    assert row["jump_rule"] == "end mode"
    assert (row["seeds_up"], row["seeds_down"], row["seeds_drift"]) == (10, 5, 85)
    assert row["drift_mean"] == pytest.approx(-0.02)
    assert row["verdict"] == "undecided"
    assert "of the 15 seeds whose end modes differ, 10 end higher and 5 lower" in row["why"]
    assert row["effect"] == pytest.approx(np.mean(side - other))  # the mean itself, drifts included
    # The same data without the end modes: the resolution rule, which the verdict names
    plain = verdict_table(_metrics(side, other), [_claim(direction="below")], ranges=ranges).iloc[0]
    assert plain["jump_rule"] == "resolution" and (plain["seeds_up"], plain["seeds_down"]) == (10, 90)
    assert plain["p_value"] < 1e-15 and "seeds that differ by more than 0.01" in plain["why"]


def test_an_earlier_iteration_is_compared_by_the_resolution_not_the_end_mode():
    # A run's mode at an earlier iteration is not an end mode: the same policy concentrating on its mode is a change.
    other = np.full(30, 1.0)
    metrics = _mode_metrics(np.full(30, 1.5), other, np.zeros(30, dtype=int), np.zeros(30, dtype=int))
    claim = _claim(than_condition=None, than_iteration=0, direction="above")
    row = verdict_table(metrics, [claim], ranges={"policy_quality": (-3.7, 3.7)}).iloc[0]
    assert row["jump_rule"] == "resolution" and row["seeds_up"] == 30 and row["verdict"] == "holds"


def test_an_equivalence_no_data_could_show_leaves_the_family_and_says_so():
    # margin 0.01 of a range of 7.4: a TOST needs 2,728 seeds with no jump at all; at 30 it cannot reject
    other = np.full(30, 1.747)
    metrics = _mode_metrics(other.copy(), other, np.zeros(30, dtype=int), np.zeros(30, dtype=int))
    row = verdict_table(metrics, [_claim(direction="equal")], ranges={"policy_quality": (-3.7, 3.7)}).iloc[0]
    assert np.isnan(row["equivalence_p"]) and row["verdict"] == "undecided"
    assert "cannot be shown at 30 seeds (that needs at least 2,728" in row["why"]


def test_the_jump_share_test_is_the_exact_binomial_by_hand():
    differences = np.array([0.0] * 95 + [0.5] * 3 + [-0.25] * 2)  # 5 of 100 seeds jump
    at_most = jump_share_test(differences, 0.1, "at most").p
    assert at_most == pytest.approx(sum(math.comb(100, k) * 0.1**k * 0.9 ** (100 - k) for k in range(6)))
    more = jump_share_test(differences, 0.01, "more than").p
    assert more == pytest.approx(1 - sum(math.comb(100, k) * 0.01**k * 0.99 ** (100 - k) for k in range(5)))
    # no range needed, and the smallest p with no jump is (1 − p₀)^n: reachable at far fewer seeds than the TOST
    assert equivalence_test(np.zeros(30), 0.01, np.inf, jump_share=0.1).p == pytest.approx(0.9**30)
    assert equivalence_seeds(0.01, 7.4, 0.05, jump_share=0.1) == 29
    assert equivalence_seeds(0.01, 7.4, 0.05) == 2728


def test_a_claim_with_a_jump_share_is_equal_when_few_seeds_change_end_mode():
    # The margin 0.01 against a range of 7.4 cannot be shown at 40 seeds; "at most 10% of seeds change end mode"
    # can, on the same data: no seed changes mode (one drifts within its mode, which is not a jump).
    other = np.full(40, 1.747)
    side = other.copy()
    side[0] = 1.70
    metrics = _mode_metrics(side, other, np.zeros(40, dtype=int), np.zeros(40, dtype=int))
    ranges = {"policy_quality": (-3.7, 3.7)}
    row = verdict_table(metrics, [_claim(direction="equal", jump_share=0.1)], ranges=ranges).iloc[0]
    assert row["verdict"] == "holds" and row["equivalence_p"] == pytest.approx(0.9**40)
    assert "at most 0.1 of the seeds jump (seeds whose end modes differ): 0 of all 40 seeds do" in row["why"]
    # half the seeds change end mode: more than 10% jump, contradicted by the binomial test, whatever the mean
    side_modes = np.where(np.arange(40) % 2 == 0, 1, 0)
    jumped = np.where(side_modes == 1, np.where(np.arange(40) % 4 == 0, 2.0, 1.5), other)
    metrics = _mode_metrics(jumped, other, side_modes, np.zeros(40, dtype=int))
    row = verdict_table(metrics, [_claim(direction="equal", jump_share=0.1)], ranges=ranges).iloc[0]
    assert row["verdict"] == "contradicted" and "more than 0.1 of the seeds jump (20 of 40)" in row["why"]
    # without a range the jump share still decides; without it nothing can be shown equal
    row = verdict_table(
        _mode_metrics(side, other, np.zeros(40, int), np.zeros(40, int)), [_claim(direction="equal", jump_share=0.1)]
    ).iloc[0]
    assert row["verdict"] == "holds"
    with pytest.raises(ValueError, match="jump_share"):
        _claim(direction="above", statistic="std", jump_share=0.1)


def test_the_jump_share_rule_errs_at_most_alpha_with_the_truth_at_p0():
    # the truth exactly at p₀ = 0.1: each seed jumps with chance 0.1; "equal: holds" (at most p₀) is wrong
    rng = np.random.default_rng(7)
    claim = _claim(direction="equal", jump_share=0.1, than_condition=None, than_value=0.0)
    wrong = []
    for _ in range(400):
        jumps = np.where(rng.random(100) < 0.1, rng.choice([-0.5, 0.5], size=100), 0.0)
        data = ClaimData(jumps, (None,), ("0",), bound=7.4)
        wrong.append(judge_family([claim], [data], 0.05)[0].outcome.verdict == "holds")
    assert np.mean(wrong) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)
