"""Each built-in mechanism's function of one network (harness/mechanisms/) against a hand-written reference.

The references use flax's own modules (Policy.apply, Judge.apply) on parameter trees, optax's Adam on
trees, and numpy; none of them touches the grid, flat rows or the fused GRU of harness.engine.models.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from harness.engine import learning
from harness.engine.architecture import DEFAULT_MODEL
from harness.engine.flat_params import judge_layout, policy_layout, ravel_rows
from harness.engine.keys import distinct_pairs
from harness.engine.models import Judge, Policy
from harness.engine.state import Network, fresh_network, fresh_networks
from harness.engine.streams import sampling_noise
from harness.engine.world import enumerate_outputs
from harness.grid import registry
from harness.grid.batching import apply_where_due
from harness.grid.contract import Mechanism, MemberScores
from harness.grid.knobs import Knobs, choices, stack_knobs
from harness.grid.reward import aggregated, run_policy_step
from harness.mechanisms import anchor, judge_ema, judge_update, meta_correction, pair_sources, referee
from tests.networks import idle_run_states, init_judge, init_policy, perturbed
from tests.worlds import TWO_POSITIONS

K, L, B = TWO_POSITIONS["vocab_size"], TWO_POSITIONS["seq_len"], 16
LR = 1e-2
OUTPUTS = enumerate_outputs(K, L)
Q_STAR = jax.random.normal(jax.random.PRNGKey(99), (K**L,))


@pytest.fixture(scope="module")
def judge_tree() -> chex.ArrayTree:
    return perturbed(init_judge(jax.random.PRNGKey(1), K, L), 2)


@pytest.fixture(scope="module")
def policy_tree() -> chex.ArrayTree:
    return perturbed(init_policy(jax.random.PRNGKey(3), K, L), 4)


def _row(tree: chex.ArrayTree) -> jax.Array:
    return ravel_rows(jax.tree.map(lambda x: x[None], tree))[0]


def _adam_reference(tree: chex.ArrayTree, loss: object, lr: float = LR) -> chex.ArrayTree:
    """One tree-shaped optax Adam step from a fresh state on `loss(tree)`."""
    optimizer = optax.adam(lr)

    def step(tree: chex.ArrayTree) -> chex.ArrayTree:
        updates, _ = optimizer.update(jax.grad(loss)(tree), optimizer.init(tree), tree)
        return optax.apply_updates(tree, updates)

    # Compiled as one program: op by op, every primitive of the gradient would compile on its own.
    return jax.jit(step)(tree)


BUILT_IN = registry.active()
BUILT_IN_NAMES = [m.name for m in BUILT_IN]
POLICY_STEP = functools.partial(run_policy_step, vocab=K, model=DEFAULT_MODEL, mechanisms=BUILT_IN)


def _one_run(knobs: Knobs):
    """The program knobs of one run with these knobs (scalars, as a function of one run sees them)."""
    return jax.tree.map(lambda x: x[0], stack_knobs([knobs], BUILT_IN_NAMES))


def _unbiased_scores(tree: chex.ArrayTree, tokens: jax.Array) -> jax.Array:
    """flax's judge score without the head's bias (pairwise losses leave it out, see models.judge_scores)."""
    return Judge(K).apply(tree, tokens) - tree["params"]["head"]["bias"][0]


def _bce(margin: jax.Array, labels: jax.Array) -> jax.Array:
    """Binary cross-entropy with logits, written out."""
    return jnp.maximum(margin, 0) - margin * labels + jnp.log1p(jnp.exp(-jnp.abs(margin)))


# Adam's first step moves each parameter by about ±LR whatever its gradient's size, so a parameter whose gradient
# is at rounding level (~1e-8) can land 1e-5 apart between two correct implementations; a wrong gradient moves it
# by ~LR. LR / 100 separates the two.
STEP_TOLERANCE = LR / 100


def _assert_row(network: Network, tree: chex.ArrayTree) -> None:
    np.testing.assert_allclose(np.asarray(network.params), np.asarray(_row(tree)), rtol=0, atol=STEP_TOLERANCE)


def test_policy_step_is_reinforce_with_a_mean_baseline(policy_tree, judge_tree) -> None:
    key = jax.random.PRNGKey(5)
    knobs = jax.tree.map(lambda x: x[0], stack_knobs([Knobs(lr_policy=LR, entropy_bonus=0.05)], BUILT_IN_NAMES))
    noise = sampling_noise("coevolab", key, B, K, L)
    step = jax.jit(POLICY_STEP)
    initial = _row(policy_tree)
    judges, members, states = _row(judge_tree)[None], jnp.array([True]), idle_run_states(K**L)
    after = step(fresh_network(_row(policy_tree)), judges, members, noise, knobs, initial, Q_STAR, states, key)

    tokens, _ = learning.sample(_row(policy_tree), noise, K)
    rewards = Judge(K).apply(judge_tree, tokens)

    def loss(tree: chex.ArrayTree) -> jax.Array:
        log_probs = jax.nn.log_softmax(Policy(K).apply(tree, tokens), axis=-1)
        log_pi = jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(axis=1)
        advantage = rewards - rewards.mean()
        return -jnp.mean(advantage * log_pi) + 0.05 * jnp.mean(log_pi)

    _assert_row(after, _adam_reference(policy_tree, loss))
    assert int(after.adam[0].count) == 1


@pytest.mark.parametrize("ordered", [False, True])
def test_judge_pair_update_labels_by_the_judge_or_chosen_first(judge_tree, ordered: bool) -> None:
    first, second = OUTPUTS[:B], OUTPUTS[B : 2 * B]
    update = jax.jit(functools.partial(judge_update.judge_pair_update, vocab=K))
    after = update(fresh_network(_row(judge_tree)), first, second, jnp.bool_(ordered), jnp.float32(LR))

    own = (_unbiased_scores(judge_tree, first) > _unbiased_scores(judge_tree, second)).astype(jnp.float32)
    labels = jnp.ones(B) if ordered else own
    assert not np.all(np.asarray(own) == 1.0)  # the two labellings differ on this batch

    def loss(tree: chex.ArrayTree) -> jax.Array:
        return jnp.mean(_bce(_unbiased_scores(tree, first) - _unbiased_scores(tree, second), labels))

    _assert_row(after, _adam_reference(judge_tree, loss))


def test_referee_update_steps_toward_the_referee_on_the_uncertain_pairs_only(judge_tree) -> None:
    first, second = OUTPUTS[:B], OUTPUTS[B : 2 * B].at[:3].set(OUTPUTS[:3])  # 3 pairs of one output
    referee_tree = perturbed(judge_tree, 11)
    margins = np.asarray(_unbiased_scores(judge_tree, first) - _unbiased_scores(judge_tree, second))
    ordered = np.sort(np.abs(margins[3:]))
    margin = float(ordered[5:7].mean())  # 6 of the other 13 pairs are re-judged; no margin sits at the threshold
    uncertain = (np.abs(margins) < margin) & (np.arange(B) >= 3)  # a pair of one output is never re-judged
    referee_labels = np.asarray(
        _unbiased_scores(referee_tree, first) > _unbiased_scores(referee_tree, second), np.float32
    )
    update = jax.jit(functools.partial(referee.referee_update, vocab=K))
    args = (first, second, _row(referee_tree))
    after = update(fresh_network(_row(judge_tree)), *args, jnp.float32(margin), jnp.float32(LR))

    def loss(tree: chex.ArrayTree) -> jax.Array:
        bce = _bce(_unbiased_scores(tree, first) - _unbiased_scores(tree, second), jnp.asarray(referee_labels))
        return jnp.sum(jnp.where(uncertain, bce, 0.0)) / uncertain.sum()

    _assert_row(after, _adam_reference(judge_tree, loss))
    untouched = update(fresh_network(_row(judge_tree)), *args, jnp.float32(0.0), jnp.float32(LR))
    chex.assert_trees_all_equal(untouched, fresh_network(_row(judge_tree)))  # no pair that uncertain: no step


def test_rejected_side_picks_the_policy_a_checkpoint_or_the_initial_row() -> None:
    current, initial = jnp.full(3, 1.0), jnp.full(3, -1.0)
    history = jnp.stack([jnp.full(3, 10.0), jnp.full(3, 20.0)])  # latest first
    code = {name: jnp.int32(i) for i, name in enumerate(choices("rejected_from"))}
    side = jax.jit(pair_sources.rejected_side)
    np.testing.assert_array_equal(side(current, history, initial, code["policy"], jnp.int32(2)), current)
    np.testing.assert_array_equal(side(current, history, initial, code["initial"], jnp.int32(2)), initial)
    for gap, expected in [(0, current), (1, history[0]), (2, history[1])]:
        np.testing.assert_array_equal(side(current, history, initial, code["past"], jnp.int32(gap)), expected)


def test_lookahead_side_is_that_many_policy_steps_and_leaves_the_policy_alone(policy_tree, judge_tree) -> None:
    knobs = jax.tree.map(lambda x: x[0], stack_knobs([Knobs(lr_policy=LR)], BUILT_IN_NAMES))
    keys = jax.random.split(jax.random.PRNGKey(21), 4)
    noise = jnp.stack([sampling_noise("coevolab", key, B, K, L) for key in keys])  # room for 4 steps
    policy, judges, members = fresh_network(_row(policy_tree)), _row(judge_tree)[None], jnp.array([True])
    lookahead = jax.jit(functools.partial(pair_sources.lookahead_side, vocab=K, mechanisms=BUILT_IN))
    initial = _row(policy_tree)
    states = idle_run_states(K**L)
    steps = jnp.int32(2)
    row = lookahead(policy, judges, members, noise, keys, steps, knobs, initial, Q_STAR, states)

    step = jax.jit(POLICY_STEP)
    once = step(policy, judges, members, noise[0], knobs, initial, Q_STAR, states, keys[0])
    expected = step(once, judges, members, noise[1], knobs, initial, Q_STAR, states, keys[1])
    np.testing.assert_allclose(np.asarray(row), np.asarray(expected.params), rtol=0, atol=1e-6)
    assert np.max(np.abs(np.asarray(row) - np.asarray(policy.params))) > LR / 2  # it did train
    np.testing.assert_array_equal(np.asarray(policy.params), np.asarray(_row(policy_tree)))


@pytest.mark.parametrize("count", [1, 5, 16])
def test_anchor_update_uses_the_first_count_ground_truth_pairs(judge_tree, count: int) -> None:
    all_pairs = distinct_pairs(jax.random.PRNGKey(7), 16, K**L)  # 16 drawn; the run's count are used
    update = jax.jit(functools.partial(anchor.anchor_update, q_star=Q_STAR, vocab=K, seq_len=L))
    after = update(fresh_network(_row(judge_tree)), all_pairs, jnp.int32(count), jnp.float32(LR))

    pairs = np.asarray(all_pairs)[:count]
    q = np.asarray(Q_STAR)
    labels = jnp.asarray(q[pairs[:, 0]] > q[pairs[:, 1]], jnp.float32)

    def loss(tree: chex.ArrayTree) -> jax.Array:
        margin = _unbiased_scores(tree, OUTPUTS[pairs[:, 0]]) - _unbiased_scores(tree, OUTPUTS[pairs[:, 1]])
        return jnp.mean(_bce(margin, labels))

    _assert_row(after, _adam_reference(judge_tree, loss))


def test_holdout_correction_and_its_accuracy(judge_tree) -> None:
    pairs = np.asarray(distinct_pairs(jax.random.PRNGKey(8), 40, K**L))
    q = np.asarray(Q_STAR)
    labels = jnp.asarray(q[pairs[:, 0]] > q[pairs[:, 1]], jnp.float32)
    mask = (np.arange(40) < 30).astype(np.float32)  # the last 10 are padding
    correct = jax.jit(functools.partial(meta_correction.holdout_correction, vocab=K, seq_len=L))
    after = correct(fresh_network(_row(judge_tree)), jnp.asarray(pairs), labels, jnp.asarray(mask), jnp.float32(LR))

    def margin(tree: chex.ArrayTree) -> jax.Array:
        return _unbiased_scores(tree, OUTPUTS[pairs[:30, 0]]) - _unbiased_scores(tree, OUTPUTS[pairs[:30, 1]])

    _assert_row(after, _adam_reference(judge_tree, lambda tree: jnp.mean(_bce(margin(tree), labels[:30]))))
    _, accuracy = jax.jit(learning.pair_bce, static_argnums=(4, 5))(
        _row(judge_tree), jnp.asarray(pairs), labels, jnp.asarray(mask), K, L
    )
    expected = np.mean((np.asarray(margin(judge_tree)) > 0) == (np.asarray(labels[:30]) > 0.5))
    assert float(accuracy) == pytest.approx(expected, abs=1e-6)


def test_a_fresh_network_is_the_pretrained_row_with_fresh_adam(judge_tree) -> None:
    """What a reset returns a judge to (`harness.grid.training_step.reset_judges`)."""
    pretrained = _row(judge_tree)
    after = fresh_network(pretrained)
    np.testing.assert_array_equal(np.asarray(after.params), np.asarray(pretrained))
    assert int(after.adam[0].count) == 0
    assert not np.any(np.asarray(after.adam[0].mu)) and not np.any(np.asarray(after.adam[0].nu))


@pytest.mark.parametrize("rule", choices("ensemble_aggregation"))
def test_aggregate_scores_against_numpy(rule: str) -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(5, 7)).astype(np.float32)
    members = np.array([True, True, True, False, False])  # an ensemble of 3, padded to 5
    knobs = _one_run(Knobs(ensemble_aggregation=rule, ensemble_std_weight=0.5, ensemble_variance_weight=1.5))
    reward = aggregated(BUILT_IN, jnp.asarray(scores), jnp.asarray(members), knobs)  # the mean, then the rule
    real = scores[:3]
    expected = {
        "mean": real.mean(axis=0),
        "min": real.min(axis=0),
        "mean_minus_std": real.mean(axis=0) - 0.5 * real.std(axis=0),
        "mean_minus_variance": real.mean(axis=0) - 1.5 * real.var(axis=0),
    }[rule]
    np.testing.assert_allclose(np.asarray(reward), expected, rtol=0, atol=1e-6)


def test_one_judge_aggregates_to_itself_under_every_rule() -> None:
    scores = jnp.asarray(np.random.default_rng(1).normal(size=(1, 9)), jnp.float32)
    for rule in choices("ensemble_aggregation"):
        knobs = _one_run(Knobs(ensemble_aggregation=rule, ensemble_std_weight=2.0, ensemble_variance_weight=2.0))
        reward = aggregated(BUILT_IN, scores, jnp.array([True]), knobs)
        np.testing.assert_array_equal(np.asarray(reward), np.asarray(scores[0]))


def _pessimist(reward: jax.Array, judges: MemberScores) -> jax.Array:
    """Takes one off the reward the mechanisms before it left, wherever the run has more than one judge."""
    return reward - (jnp.sum(judges.members) > 1)


@pytest.mark.parametrize(("order", "expected"), [({}, "rule - 1"), ({"before": ("ensemble",)}, "rule")])
def test_aggregate_hooks_pass_the_reward_on_in_mechanism_order(order: dict, expected: str) -> None:
    """After `ensemble` a loaded hook changes the rule's reward (here its minimum, less one); placed before it, the
    ensemble's rule replaces what it left."""
    scores = jnp.asarray(np.random.default_rng(2).normal(size=(3, 4)), jnp.float32)
    knobs = _one_run(Knobs(ensemble_aggregation="min"))
    mechanisms = (*BUILT_IN, Mechanism("pessimist", "one off an ensemble's reward", aggregate=_pessimist, **order))
    reward = np.asarray(aggregated(mechanisms, scores, jnp.ones(3, bool), knobs))
    minimum = np.asarray(scores).min(axis=0)
    np.testing.assert_array_equal(reward, minimum - 1 if expected == "rule - 1" else minimum)


def test_apply_where_due_touches_exactly_the_due_members() -> None:
    rows = jnp.arange(6 * 3, dtype=jnp.float32).reshape(6, 3)
    networks = fresh_networks(rows)
    ids, due = jnp.array([4, 1, 2]), jnp.array([True, False, True])
    amounts = jnp.array([10.0, 20.0, 30.0])

    def shift(network: Network, index: jax.Array) -> Network:
        return network.replace(params=network.params + amounts[index])

    after = jax.jit(lambda n: apply_where_due(shift, n, ids, due))(networks)
    expected = np.asarray(rows).copy()
    expected[4] += 10.0
    expected[2] += 30.0
    np.testing.assert_array_equal(np.asarray(after.params), expected)
    chex.assert_trees_all_equal(after.adam, networks.adam)

    nothing_due = apply_where_due(shift, networks, ids, jnp.zeros(3, bool))
    np.testing.assert_array_equal(np.asarray(nothing_due.params), np.asarray(rows))


def test_apply_where_due_writes_back_only_the_leaves_a_function_returns_anew() -> None:
    """A leaf returned as given is neither selected nor scattered: the program writes one leaf of the four, and
    the untouched ones come out as the very arrays that went in."""
    networks = fresh_networks(jnp.ones((5, 3), jnp.float32))
    ids, due = jnp.array([0, 3]), jnp.array([True, True])

    def shift(network: Network, index: jax.Array) -> Network:
        return network.replace(params=network.params * 2.0)

    program = jax.make_jaxpr(lambda n: apply_where_due(shift, n, ids, due))(networks)
    (cond,) = [equation for equation in program.eqns if equation.primitive.name == "cond"]
    scatters = [e for e in cond.params["branches"][1].jaxpr.eqns if e.primitive.name.startswith("scatter")]
    assert len(jax.tree.leaves(networks)) == 4 and len(scatters) == 1 and len(cond.outvars) == 1
    assert program.jaxpr.outvars[1:] == program.jaxpr.invars[1:]  # Adam's state: the arrays that went in


def test_layouts_match_the_networks() -> None:
    assert policy_layout(K).width == _row(init_policy(jax.random.PRNGKey(0), K, L)).shape[0]
    assert judge_layout(K).width == _row(init_judge(jax.random.PRNGKey(0), K, L)).shape[0]


def test_ema_update_is_an_exponential_moving_average(judge_tree) -> None:
    """Five updates of a judge's average against numpy's recurrence, from the pretrained row; decay 0 follows the
    judge exactly (the average is then the judge), and each judge of a group keeps its own average."""
    rows = np.stack([np.asarray(_row(perturbed(judge_tree, seed))) for seed in range(5)])  # the judge over time
    pretrained = np.asarray(_row(judge_tree))
    update = jax.jit(judge_ema.ema_update)
    for decay in (np.float32(0.0), np.float32(0.5), np.float32(0.9)):
        average, reference = jnp.asarray(pretrained), pretrained
        for judge in rows:
            average = update(average, jnp.asarray(judge), jnp.float32(decay))
            reference = decay * reference + (np.float32(1.0) - decay) * judge
        np.testing.assert_allclose(np.asarray(average), reference, rtol=1e-6, atol=1e-7)
        assert np.max(np.abs(reference - pretrained)) > 1e-3
    np.testing.assert_array_equal(np.asarray(update(jnp.asarray(pretrained), rows[0], jnp.float32(0.0))), rows[0])
    # Batched over a group's judges with one decay each, as the step applies it.
    decays = jnp.asarray([0.0, 0.5, 0.9], jnp.float32)
    batched = np.asarray(jax.vmap(judge_ema.ema_update)(jnp.asarray(rows[:3]), jnp.asarray(rows[2:5]), decays))
    for member, decay in enumerate(np.asarray(decays)):
        expected = decay * rows[member] + (np.float32(1.0) - decay) * rows[2 + member]
        np.testing.assert_allclose(batched[member], expected, rtol=1e-6, atol=1e-7)
