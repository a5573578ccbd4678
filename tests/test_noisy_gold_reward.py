"""The randomly-erring proxy (harness/mechanisms/noisy_gold_reward.py) of a grid run through the API, against numpy:
its table is q* plus the run's seed's own noise made orthogonal to q*, at exactly the Pearson alignment of the run's
pretrained judge; its reward hook reads that table; a run with the knob off is rewarded by its judge."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import harness
from harness.engine.architecture import DEFAULT_MODEL
from harness.engine.flat_params import judge_layout
from harness.engine.models import judge_score_table
from harness.engine.world import World, enumerate_outputs
from harness.grid import registry
from harness.grid.contract import PolicyBatch
from harness.grid.knobs import Knobs, stack_knobs
from harness.grid.spec import grid_metrics
from harness.mechanisms.noisy_gold_reward import NAME, NoisyProxy, noisy_gold_rewards
from tests.worlds import TWO_POSITIONS

K, L = TWO_POSITIONS["vocab_size"], TWO_POSITIONS["seq_len"]
GRID = {
    "world": TWO_POSITIONS,
    "run": {"seeds": 2, "iterations": 2, "steps_per_iteration": 20},
    "conditions": {
        "judged": {"freeze_judge": True},
        "noisy": {"freeze_judge": True, "reward_from_noisy_q_star": True},
        # Three judges: the proxy matches their reward table, the mean of their scores.
        "noisy-ensemble": {"freeze_judge": True, "reward_from_noisy_q_star": True, "n_judges": 3},
        # Future-guided pairs: the look-ahead copy of the policy is rewarded by the run's proxy too.
        "noisy-lookahead": {"reward_from_noisy_q_star": True, "chosen_from": "lookahead"},
    },
}
JUDGES = {"judged": 1, "noisy": 1, "noisy-ensemble": 3, "noisy-lookahead": 1}


ON = Knobs(reward_from_noisy_q_star=True)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64), np.asarray(b, np.float64))[0, 1])


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> harness.GridResult:
    return harness.run_grid(
        harness.grid_from_dict(GRID, name="noisy"), run_dir=tmp_path_factory.mktemp("noisy") / "run"
    )


def test_the_proxy_is_q_star_plus_the_seeds_noise_at_the_pretrained_judges_alignment(ran: harness.GridResult) -> None:
    state = ran.final_state
    assert state is not None
    q_star = np.asarray(World(ran.spec.world).q_star, np.float64)
    unravel = judge_layout(K, L, DEFAULT_MODEL.judge).unravel
    tables = np.asarray(state.runs.of(NAME).table, np.float64)
    made = np.asarray(state.runs.of(NAME).made)
    metrics = ran.metrics.set_index(["condition", "seed", "iteration"])["noisy_proxy_alignment"]
    first_slot = np.cumsum([0, *(JUDGES[condition] for condition, _ in ran.run_labels)])
    for run, (condition, seed) in enumerate(ran.run_labels):
        if condition == "judged":
            assert metrics.loc[condition, seed].isna().all()  # off: no proxy to measure
            continue
        assert made[run]
        table = tables[run]
        if condition != "noisy-lookahead":
            # Frozen, the run's judges are still its pretrained judges: their reward table (the mean of their
            # scores) is what the proxy matches.
            slots = state.slots.judge.params[first_slot[run] : first_slot[run + 1]]
            judges = np.mean([np.asarray(judge_score_table(unravel(row), K, L), np.float64) for row in slots], axis=0)
            np.testing.assert_allclose(pearson(table, q_star), pearson(judges, q_star), atol=2e-5)
        # The error is the seed's own standard-normal draw, centred and made orthogonal to q* (numpy, float64).
        draw = np.random.default_rng([0x0B0F, seed]).standard_normal(q_star.size)
        centred_q = q_star - q_star.mean()
        error = draw - draw.mean()
        error -= centred_q * (error @ centred_q) / (centred_q @ centred_q)
        residual = table - q_star
        cosine = residual @ error / np.linalg.norm(residual) / np.linalg.norm(error)
        assert cosine > 1 - 1e-5
        # The metric measures the same table at every iteration, iteration 0 (before the table is kept) included.
        np.testing.assert_allclose(metrics.loc[condition, seed].to_numpy(), pearson(table, q_star), atol=2e-5)
        if condition == "noisy":
            # Judge alignment reads the judges, not the proxy the policy is rewarded by: frozen, this run's equals
            # the frozen judged run's of its seed at every iteration (the same pretrained judges), and not the
            # proxy's own rank correlation with q*.
            alignment = ran.metrics.set_index(["condition", "seed", "iteration"])["judge_alignment"]
            np.testing.assert_array_equal(alignment.loc[condition, seed], alignment.loc["judged", seed])
            proxy_rank = scipy.stats.spearmanr(table, q_star).statistic
            assert np.all(np.abs(alignment.loc[condition, seed] - proxy_rank) > 1e-4)


def test_the_reward_hook_reads_the_runs_own_table_and_leaves_a_run_with_the_knob_off_alone() -> None:
    names = [m.name for m in registry.active()]
    tokens = enumerate_outputs(K, L)[jnp.array([5, 0, 63, 17])]
    table = jnp.linspace(-2.0, 2.0, K**L)
    batch = PolicyBatch(
        tokens,
        jnp.zeros(4),
        jnp.zeros(3),
        jnp.zeros(K**L),
        K,
        DEFAULT_MODEL,
        {NAME: NoisyProxy(table, jnp.array(True))},
    )
    rewards = jnp.array([0.1, 0.2, 0.3, 0.4])
    on, off = (jax.tree.map(lambda x: x[0], stack_knobs([knobs], names)) for knobs in (ON, Knobs()))
    proxy = batch.mechanisms[NAME]
    shaped, own = noisy_gold_rewards(rewards, batch.replace(knobs=on), proxy)
    np.testing.assert_array_equal(shaped, table[jnp.array([5, 0, 63, 17])])
    assert own is proxy  # read, never changed
    np.testing.assert_array_equal(noisy_gold_rewards(rewards, batch.replace(knobs=off), proxy)[0], rewards)


def test_only_a_grid_that_uses_the_proxy_has_its_metric() -> None:
    """Its metric is a column of a grid some run of which uses it, and only there (what reading a table back asks)."""
    without = harness.grid_from_dict({"world": TWO_POSITIONS, "conditions": {"judged": {"freeze_judge": True}}})
    with_proxy = harness.grid_from_dict(GRID)
    assert "noisy_proxy_alignment" not in [metric.name for metric in grid_metrics(without)]
    assert "noisy_proxy_alignment" in [metric.name for metric in grid_metrics(with_proxy)]


def test_a_claim_on_the_proxys_metric_in_a_grid_that_does_not_record_it_is_refused_on_loading() -> None:
    claim = {"statement": "aligned", "metric": "noisy_proxy_alignment", "condition": "judged", "direction": "above"}
    claim["than_value"] = 0.5
    document = {"world": TWO_POSITIONS, "conditions": {"judged": {}}, "claims": {"aligned": claim}}
    with pytest.raises(harness.ConditionFileError, match="noisy_proxy_alignment, a metric of mechanism"):
        harness.grid_from_dict(document)
    harness.grid_from_dict({**document, "conditions": {"judged": {"reward_from_noisy_q_star": True}}})
