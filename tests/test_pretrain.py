"""Judge pretraining stops at its first check that meets the target, judged by scipy's Spearman.

The stopping rule is checked by re-running the same judges with the step cap set one check before each
judge's reported stop: that judge must then fail (reached=False, Spearman below target), and
GridTrainer.pretrain() must raise PretrainingFailed naming exactly the judges that failed.
"""

from __future__ import annotations

import chex
import jax
import numpy as np
import pytest
import scipy.stats

from harness.engine.models import judge_score_table
from harness.engine.world import World, WorldConfig
from harness.grid import trainer
from harness.grid.knobs import Knobs
from harness.grid.pretrain import PRETRAIN_LADDER_LIMIT, PretrainResult, judges_per_shard, pretrain_judges
from harness.grid.spec import Condition, GridSpec, PretrainSettings, RunSettings
from harness.grid.trainer import GridTrainer, PretrainingFailed
from tests.jax_logs import compile_log
from tests.worlds import TWO_POSITIONS

SEED = 3  # its judges 0 and 1 stop at different checks under SETTINGS, so the cuts below differ in who fails
SETTINGS = PretrainSettings(target_spearman=0.6, check_every=25, max_steps=1000, batch_size=32)
score_tables = jax.jit(jax.vmap(judge_score_table, (0, None, None)), static_argnums=(1, 2))


def _grid(settings: PretrainSettings) -> GridTrainer:
    return GridTrainer(
        GridSpec(
            run=RunSettings(seeds=(SEED,), iterations=1, steps_per_iteration=1, batch_size=4),
            pretrain=settings,
            conditions=(Condition(name="pair", knobs=Knobs(n_judges=2)),),
        )
    )


def _scipy_spearman(params: chex.ArrayTree, q_star: jax.Array) -> np.ndarray:
    """Spearman of every judge's full score table with q*, by scipy. params: leading axis P."""
    tables = np.asarray(score_tables(params, 8, 4))
    return np.array([scipy.stats.spearmanr(t, np.asarray(q_star)).statistic for t in tables])


def _member(tree: chex.ArrayTree, member: int) -> chex.ArrayTree:
    return jax.tree.map(lambda x: x[0, member], tree)


@pytest.fixture(scope="module")
def first_run() -> tuple[GridTrainer, PretrainResult]:
    grid = _grid(SETTINGS)
    # One judge source per (seed, member), seed-major: viewed here as (seed, member).
    return grid, jax.tree.map(lambda x: x.reshape((1, 2, *x.shape[1:])), grid.pretrain())


def test_reported_steps_meet_target(first_run: tuple[GridTrainer, PretrainResult]) -> None:
    grid, result = first_run
    chex.assert_shape([result.steps, result.spearman, result.reached], (1, 2))
    steps = np.asarray(result.steps)[0]
    assert np.all(steps % SETTINGS.check_every == 0)
    assert np.all((steps > 0) & (steps <= SETTINGS.max_steps))
    assert np.all(np.asarray(result.reached))
    rho = _scipy_spearman(jax.tree.map(lambda x: x[0], result.params), grid.world.q_star)
    assert np.all(rho >= SETTINGS.target_spearman)
    np.testing.assert_allclose(np.asarray(result.spearman)[0], rho, rtol=0, atol=1e-5)
    chex.assert_tree_all_finite(result.params)
    table = grid.pretrain_table()
    assert table[["seed", "member", "steps"]].values.tolist() == [[SEED, 0, steps[0]], [SEED, 1, steps[1]]]


def test_stops_at_first_check_meeting_target(
    first_run: tuple[GridTrainer, PretrainResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    grid, full = first_run
    steps = np.asarray(full.steps)[0]
    cuts = sorted({int(s) - SETTINGS.check_every for s in steps if s > SETTINGS.check_every})
    assert len(cuts) == 2, f"pick a seed whose two judges stop at different checks (steps {steps})"

    recorded: list[PretrainResult] = []

    def recording_pretrain(*args, **kwargs) -> PretrainResult:
        recorded.append(pretrain_judges(*args, **kwargs))
        return recorded[-1]

    monkeypatch.setattr(trainer, "pretrain_judges", recording_pretrain)
    checked = set()
    for cut in cuts:
        capped = _grid(SETTINGS.model_copy(update={"max_steps": cut}))
        with pytest.raises(PretrainingFailed) as failure:
            capped.pretrain()
        assert capped.pretrained is None
        message = str(failure.value)
        assert f"within {cut} steps" in message
        result = jax.tree.map(lambda x: x.reshape((1, 2, *x.shape[1:])), recorded[-1])
        rho = _scipy_spearman(jax.tree.map(lambda x: x[0], result.params), grid.world.q_star)
        for member, full_steps in enumerate(steps):
            named = f"seed {SEED} member {member}" in message
            if full_steps > cut:
                # Not yet at its stopping check: it ran to the cap and was below target there.
                assert named
                assert int(result.steps[0, member]) == cut
                assert not bool(result.reached[0, member])
                assert rho[member] < SETTINGS.target_spearman
                assert float(result.spearman[0, member]) == pytest.approx(rho[member], abs=1e-5)
                if full_steps == cut + SETTINGS.check_every:
                    checked.add(member)
            else:
                # Stopped before the cap: the same judge as without it, and not named as failed.
                assert not named
                assert int(result.steps[0, member]) == full_steps
                assert bool(result.reached[0, member])
                chex.assert_trees_all_close(
                    _member(result.params, member), _member(full.params, member), rtol=0, atol=1e-6
                )
    assert checked == {0, 1}


def test_the_judges_per_shard_are_a_power_of_two_up_to_the_limit_and_exact_beyond() -> None:
    # judges -> judges per shard, on two shards
    ladder = {1: 1, 2: 1, 3: 2, 5: 4, 8: 4, 9: 8, 17: 16, 30: 16, 33: 32, 64: 32}
    assert {count: judges_per_shard(count, 2) for count in ladder} == ladder
    assert judges_per_shard(2 * PRETRAIN_LADDER_LIMIT + 2, 2) == PRETRAIN_LADDER_LIMIT + 1
    assert judges_per_shard(101, 2) == 51
    with pytest.raises(ValueError, match="a judge and a shard"):
        judges_per_shard(0, 2)


def test_grids_of_other_judge_counts_on_one_rung_share_the_pretraining_program() -> None:
    # 5 and 7 judges fall on one rung on one or two devices (8 or 4 judges per device): the second pretraining
    # compiles nothing, and each of its first five judges is bit for bit that judge of the first.
    world, devices = World(WorldConfig(**TWO_POSITIONS)), min(2, len(jax.local_devices()))
    keys = jax.random.split(jax.random.PRNGKey(SEED), 14)
    init_keys, data_keys = keys[:7], keys[7:]
    five = pretrain_judges(init_keys[:5], data_keys[:5], world, SETTINGS, max_shards=devices)
    with compile_log() as messages:
        seven = pretrain_judges(init_keys, data_keys, world, SETTINGS, max_shards=devices)
    assert not any("pretrain_shard" in message for message in messages)
    for got, want in zip(jax.tree.leaves(seven), jax.tree.leaves(five), strict=True):
        np.testing.assert_array_equal(np.asarray(got)[:5], np.asarray(want))
    assert np.asarray(seven.reached).all()


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        PretrainSettings(target_spearman=1.01)
    with pytest.raises(ValueError):
        PretrainSettings(check_every=0)
