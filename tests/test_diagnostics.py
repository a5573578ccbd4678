"""Exact diagnostics (harness.grid.diagnostics.diagnose) against numpy/scipy recomputations from flax's modules.

The grids here start from random (not pretrained) judges, so no pretraining runs; their shapes match
grids of tests/test_grid_program.py, so a joint session compiles each iteration program once.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats

from harness.engine.flat_params import policy_layout, ravel_rows, unravel_rows
from harness.engine.models import Judge, Policy
from harness.engine.state import CoevolutionState
from harness.grid.diagnostics import Diagnostics
from harness.grid.knobs import Knobs
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer
from tests.networks import init_judges, init_policy, perturbed

K, L = 8, 4
RUN = RunSettings(seeds=(0, 1), iterations=2, steps_per_iteration=20, batch_size=32)
flax_policy_logits = jax.jit(Policy(K).apply)
flax_judge_scores = jax.jit(Judge(K).apply)


def _random_judges(seed: int) -> chex.ArrayTree:
    """Random judges (seed, member) = (2, 3), every leaf perturbed so scores vary noticeably."""
    params = perturbed(init_judges(jax.random.split(jax.random.PRNGKey(seed), 6), K, L), seed, 0.3)
    return jax.tree.map(lambda x: x.reshape((2, 3, *x.shape[1:])), params)


def _fake_pretrained(max_members: int) -> PretrainResult:
    # One judge source per (seed, member), seed-major, as `harness.grid.origins` orders them.
    params = jax.tree.map(lambda x: x[:, :max_members].reshape(-1, *x.shape[2:]), _random_judges(11))
    shape = (2 * max_members,)
    return PretrainResult(params, jnp.zeros(shape, jnp.int32), jnp.zeros(shape), jnp.ones(shape, bool))


def _started(knobs: Knobs) -> tuple[GridTrainer, CoevolutionState]:
    program = GridTrainer(GridSpec(run=RUN, conditions=(Condition(name="c", knobs=knobs),)))
    return program, program.initial_state(pretrained=_fake_pretrained(knobs.n_judges))


def _with_policies(state: CoevolutionState) -> CoevolutionState:
    """Run 0: uniform policy (head kernel and bias zero). Run 1: a peaky random policy."""
    peaky = jax.tree.map(lambda x: 3.0 * x, init_policy(jax.random.PRNGKey(3), K, L))

    def put(leaf: jax.Array, peaky_leaf: jax.Array) -> jax.Array:
        return leaf.at[1].set(peaky_leaf)

    policy = jax.tree.map(put, unravel_rows(policy_layout(K), state.runs.policy.params), peaky)
    head = policy["params"]["head"]
    head = {"kernel": head["kernel"].at[0].set(0.0), "bias": head["bias"].at[0].set(0.0)}
    policy = {"params": {**policy["params"], "head": head}}
    return _with_policy_rows(state, ravel_rows(policy))


def _with_policy_rows(state: CoevolutionState, rows: jax.Array) -> CoevolutionState:
    return state.replace(runs=state.runs.replace(policy=state.runs.policy.replace(params=rows)))


def _with_judge_rows(state: CoevolutionState, rows: jax.Array) -> CoevolutionState:
    return state.replace(slots=state.slots.replace(judge=state.slots.judge.replace(params=rows)))


def _reference(program: GridTrainer, state: CoevolutionState) -> dict[str, np.ndarray]:
    """Per run, in float64 numpy: π from flax's Policy on every output, J̄ from flax's Judge."""
    outputs = program.world.outputs
    q = np.asarray(program.world.q_star, np.float64)
    layout = program.layout
    rows: dict[str, list] = {k: [] for k in ("pi", "mean_judge", "slot_tables")}
    for run in range(program.shape.n_runs):
        params = jax.tree.map(lambda x, r=run: x[r], program.policy_params(state))
        logits = np.asarray(flax_policy_logits(params, outputs), np.float64)
        log_probs = logits - scipy.special.logsumexp(logits, axis=-1, keepdims=True)
        log_pi = np.take_along_axis(log_probs, np.asarray(outputs)[..., None], axis=-1)[..., 0].sum(axis=1)
        slots = np.flatnonzero(layout.slot_run == run)
        judges = program.judge_params(state.slots.judge.params)
        tables = [
            np.asarray(flax_judge_scores(jax.tree.map(lambda x, s=s: x[s], judges), outputs), np.float64) for s in slots
        ]
        rows["pi"].append(np.exp(log_pi))
        rows["mean_judge"].append(np.mean(tables, axis=0))
        rows["slot_tables"].append(np.stack(tables))
    return {"q": q, **{k: np.array(v) for k, v in rows.items()}}


@pytest.fixture(scope="module")
def ensemble() -> tuple[GridTrainer, CoevolutionState, Diagnostics, dict[str, np.ndarray]]:
    program, initial = _started(Knobs(n_judges=3))
    state = _with_policies(initial)
    diagnostics = program.diagnose(state)
    return program, state, diagnostics, {**_reference(program, state), "pi_initial": _reference(program, initial)["pi"]}


@pytest.fixture(scope="module")
def meta() -> tuple[GridTrainer, CoevolutionState, Diagnostics, dict[str, np.ndarray]]:
    program, state = _started(Knobs(meta_holdout_fraction=0.05))
    diagnostics = program.diagnose(state)
    return program, state, diagnostics, _reference(program, state)


def test_uniform_policy_entropy(ensemble) -> None:
    _, _, diagnostics, reference = ensemble
    np.testing.assert_allclose(reference["pi"][0], 1 / 4096, rtol=1e-6)  # the construction really is uniform
    assert float(diagnostics["policy_entropy"][0]) == pytest.approx(4 * np.log(8), abs=1e-4)


def test_entropy_quality_and_perceived_quality(ensemble) -> None:
    _, _, diagnostics, reference = ensemble
    pi, q, mean_judge = reference["pi"], reference["q"], reference["mean_judge"]
    entropy = -np.sum(pi * np.log(pi), axis=1)
    assert 1.0 < entropy[1] < 7.0  # the second run is far from uniform
    np.testing.assert_allclose(np.asarray(diagnostics["policy_entropy"]), entropy, rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(diagnostics["policy_quality"]), pi @ q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(diagnostics["judge_perceived_quality"]), np.sum(pi * mean_judge, axis=1), rtol=0, atol=1e-4
    )
    mode = np.argmax(pi, axis=1)
    np.testing.assert_array_equal(np.asarray(diagnostics["mode_index"][1:]), mode[1:])  # run 0 has no unique mode
    np.testing.assert_allclose(np.asarray(diagnostics["mode_quality"][1:]), q[mode[1:]], atol=1e-6)


def test_kl_from_initial_policy_matches_scipy(ensemble, meta) -> None:
    _, _, at_start, _ = meta
    np.testing.assert_allclose(np.asarray(at_start["kl_from_initial"]), 0.0, atol=1e-6)  # KL(π ‖ π) = 0
    _, _, diagnostics, reference = ensemble
    expected = [scipy.stats.entropy(pi, pi0) for pi, pi0 in zip(reference["pi"], reference["pi_initial"], strict=True)]
    assert min(expected) > 0.01  # both runs really moved away from their initial policy
    np.testing.assert_allclose(np.asarray(diagnostics["kl_from_initial"]), expected, rtol=1e-4, atol=1e-5)


def test_judge_alignment_is_spearman_of_mean_judge(ensemble) -> None:
    _, _, diagnostics, reference = ensemble
    expected = [scipy.stats.spearmanr(j, reference["q"]).statistic for j in reference["mean_judge"]]
    single = [scipy.stats.spearmanr(t[0], reference["q"]).statistic for t in reference["slot_tables"]]
    assert not np.allclose(expected, single, atol=1e-3)  # the mean over 3 judges is not member 0 alone
    np.testing.assert_allclose(np.asarray(diagnostics["judge_alignment"]), expected, rtol=0, atol=1e-4)


def test_counters_and_meta_off(ensemble) -> None:
    _, _, diagnostics, _ = ensemble
    np.testing.assert_array_equal(np.asarray(diagnostics["judge_updates"]), [0, 0])
    np.testing.assert_array_equal(np.asarray(diagnostics["meta_corrections"]), [0, 0])
    assert np.all(np.isnan(np.asarray(diagnostics["meta_accuracy"])))
    np.testing.assert_array_equal(np.asarray(diagnostics["finite"]), [True, True])


def test_meta_accuracy_is_held_out_pairwise_accuracy(meta) -> None:
    program, _, diagnostics, reference = meta
    n_pairs = int(np.floor(4096 * 0.05))
    pairs = np.asarray(program.constants.of("meta_correction").pairs)[0]  # every run draws the default set
    assert pairs.shape[0] >= n_pairs
    pairs = pairs[:n_pairs]
    assert np.all(pairs[:, 0] != pairs[:, 1])
    assert pairs.min() >= 0
    assert pairs.max() < 4096
    q = reference["q"]
    truth = q[pairs[:, 0]] > q[pairs[:, 1]]
    expected = [
        np.mean((tables[0][pairs[:, 0]] > tables[0][pairs[:, 1]]) == truth) for tables in reference["slot_tables"]
    ]
    np.testing.assert_allclose(np.asarray(diagnostics["meta_accuracy"]), expected, rtol=0, atol=1e-6)
    expected_alignment = [scipy.stats.spearmanr(t[0], q).statistic for t in reference["slot_tables"]]
    np.testing.assert_allclose(np.asarray(diagnostics["judge_alignment"]), expected_alignment, rtol=0, atol=1e-4)


def test_non_finite_parameters_are_flagged(ensemble) -> None:
    program, state, _, _ = ensemble
    # A NaN in the last judge slot (run 1's member 2) and nowhere else.
    judges = state.slots.judge.params.at[-1, -1].set(jnp.nan)
    bad = program.diagnose(_with_judge_rows(state, judges))
    np.testing.assert_array_equal(np.asarray(bad["finite"]), [True, False])
    # And in run 0's policy.
    policies = state.runs.policy.params.at[0, 0].set(jnp.inf)
    bad = program.diagnose(_with_policy_rows(state, policies))
    np.testing.assert_array_equal(np.asarray(bad["finite"]), [False, True])
