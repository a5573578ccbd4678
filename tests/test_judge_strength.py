"""Judge strength as a condition knob: `judge_pretrain_target` picks how far a condition's judges are pretrained.

Judges from the same keys with different targets follow one trajectory and stop at different checks; a grid
gives each condition the judges of its target (shared between conditions of equal targets), and the default
reproduces the grid-wide [pretrain] target.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from harness.engine import keys
from harness.engine.models import init_judges, judge_score_table, policy_log_prob_tables
from harness.engine.world import World, WorldConfig
from harness.grid import trainer as program_module
from harness.grid.conditions import duplicate_conditions, parse_grid
from harness.grid.knobs import Knobs, program_knobs
from harness.grid.layout import layout_grid
from harness.grid.origins import JudgeSource, grid_origins
from harness.grid.pretrain import PretrainResult, pretrain_judges
from harness.grid.spec import Condition, GridSpec, PretrainSettings, RunSettings
from harness.grid.trainer import GridTrainer, PretrainingFailed, grid_constants

VOCAB, SEQ_LEN = 8, 4
SETTINGS = PretrainSettings(check_every=25, max_steps=2000, batch_size=32)
WEAK, STRONG = 0.5, 0.8
score_tables = jax.jit(jax.vmap(judge_score_table, (0, None, None)), static_argnums=(1, 2))


def _scipy_spearman(params: chex.ArrayTree, world: World) -> np.ndarray:
    """Spearman of every judge's full score table with q*, by scipy. params: leading axis P."""
    tables = np.asarray(score_tables(params, world.config.vocab_size, world.config.seq_len))
    return np.array([scipy.stats.spearmanr(t, np.asarray(world.q_star)).statistic for t in tables])


def _pretrain(settings: PretrainSettings, targets: list[float], world: World) -> PretrainResult:
    """Judges of seed 0 member 0 (the same keys for each target), pretrained under `settings`."""
    init_key, data_key = keys.judge_keys(jnp.int32(0), jnp.int32(0))
    count = len(targets)
    init_keys, data_keys = jnp.stack([init_key] * count), jnp.stack([data_key] * count)
    return pretrain_judges(init_keys, data_keys, world, settings, targets=jnp.asarray(targets))


def test_weaker_target_stops_earlier_on_the_same_trajectory() -> None:
    world = World(WorldConfig(vocab_size=4, seq_len=3))  # small: pretraining compiles four times here
    result = _pretrain(SETTINGS, [WEAK, STRONG], world)
    steps = np.asarray(result.steps)
    assert np.all(np.asarray(result.reached))
    assert np.all(steps % SETTINGS.check_every == 0)
    assert steps[0] <= steps[1]
    rho = _scipy_spearman(result.params, world)
    assert rho[0] >= WEAK and rho[1] >= STRONG
    np.testing.assert_allclose(np.asarray(result.spearman), rho, rtol=0, atol=1e-5)

    # Each stopped at its first check meeting its target: capped one check earlier, neither reaches it.
    assert steps[0] > SETTINGS.check_every, "pick keys whose weak judge needs more than one check"
    for judge, target in enumerate((WEAK, STRONG)):
        capped = SETTINGS.model_copy(update={"max_steps": int(steps[judge]) - SETTINGS.check_every})
        early = _pretrain(capped, [target], world)
        assert not bool(early.reached[0])
        assert float(early.spearman[0]) < target

    # The weak judge is the strong judge's trajectory at the weak one's stop: an unreachable target, capped there.
    # Two judges, as above: batches of other sizes may round differently (see test_pretrain), these exactly alike.
    along = _pretrain(SETTINGS.model_copy(update={"max_steps": int(steps[0])}), [1.0, 1.0], world)
    assert int(along.steps[0]) == steps[0] and not bool(along.reached[0])
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[0], along.params), jax.tree.map(lambda x: x[0], result.params))


def _spec(streams: str) -> GridSpec:
    conditions = {
        "default": Knobs(),
        "explicit-default": Knobs(judge_pretrain_target=0.7, lr_judge=1e-3),  # the grid's target: shares judges
        "weak-pair": Knobs(judge_pretrain_target=WEAK, n_judges=2),
        "weak": Knobs(judge_pretrain_target=WEAK),
        "strong": Knobs(judge_pretrain_target=STRONG),
    }
    return GridSpec(
        run=RunSettings(seeds=(0, 1), iterations=1, steps_per_iteration=1, batch_size=4, streams=streams),
        pretrain=SETTINGS,
        conditions=tuple(Condition(name=name, knobs=knobs) for name, knobs in conditions.items()),
    )


@pytest.mark.parametrize("streams", ["coevolab", "original"])
def test_slots_get_the_judges_of_their_conditions_target(streams: str) -> None:
    program = GridTrainer(_spec(streams))
    spec, layout, origins = program.spec, program.layout, program.origins
    # One source per (seed, member) and target: 0.7 and 0.8 need one member, 0.5 two.
    targets = [source.target for source in origins.judge_sources]
    assert {t: targets.count(t) for t in set(targets)} == {0.7: 2, WEAK: 4, STRONG: 2}
    assert len(set(origins.judge_sources)) == len(origins.judge_sources)

    result = program.pretrain()
    table = program.pretrain_table()
    assert table["target"].tolist() == targets
    assert np.all(table["spearman"] >= table["target"])

    log_pi = policy_log_prob_tables(origins.policy_params, VOCAB, SEQ_LEN)
    constants = grid_constants(layout, program.world, origins, result.params, log_pi)
    rows = np.asarray(constants.pretrained_judges)
    rho = _scipy_spearman(program.judge_params(constants.pretrained_judges), program.world)
    slot_source = origins.slot_judge(layout)
    labels = layout.run_labels()
    by_key: dict[tuple[float, int, int], int] = {}
    for slot, (run, member) in enumerate(zip(layout.slot_run, layout.slot_member, strict=True)):
        name, seed = labels[run]
        target = spec.judge_target(spec.condition(name))
        source = origins.judge_sources[slot_source[slot]]
        assert (source.seed, source.member, source.target) == (seed, member, target)
        assert rho[slot] >= target
        # Equal targets share one judge: every slot of (target, seed, member) holds the same row.
        first = by_key.setdefault((target, seed, int(member)), slot)
        np.testing.assert_array_equal(rows[slot], rows[first])

    # Same keys, different targets: different judges, the weaker no further trained.
    for seed in (0, 1):
        weak, strong = (by_key[(t, seed, 0)] for t in (WEAK, STRONG))
        assert not np.array_equal(rows[weak], rows[strong])
        steps = {s.target: int(result.steps[u]) for u, s in enumerate(origins.judge_sources) if s[1:3] == (seed, 0)}
        assert steps[WEAK] <= steps[0.7] <= steps[STRONG]


def test_default_target_is_the_grids() -> None:
    """Without the knob a grid has the judges it had before targets were per condition: the same sources, in the
    same (seed-major) order, each at the grid's target (the golden metrics check that they train the same)."""
    spec = GridSpec(
        run=RunSettings(seeds=(0, 1), iterations=1, steps_per_iteration=1, batch_size=4),
        pretrain=SETTINGS.model_copy(update={"target_spearman": 0.6}),
        conditions=(Condition(name="pair", knobs=Knobs(n_judges=2)), Condition(name="one")),
    )
    origins = grid_origins(spec)
    assert origins.judge_sources == tuple(JudgeSource(None, seed, member, 0.6) for seed in (0, 1) for member in (0, 1))
    chex.assert_trees_all_equal(origins.judge_targets, jnp.full(4, 0.6, jnp.float32))
    seeds, members = jnp.asarray([0, 0, 1, 1]), jnp.asarray([0, 1, 0, 1])
    init_keys, data_keys = jax.vmap(keys.judge_keys)(seeds, members)
    chex.assert_trees_all_equal((origins.judge_init_keys, origins.judge_data_keys), (init_keys, data_keys))
    # The knob set to the grid's own target names the same judges.
    explicit = Knobs(judge_pretrain_target=0.6)
    same = spec.model_copy(
        update={"conditions": tuple(c.model_copy(update={"knobs": explicit}) for c in spec.conditions)}
    )
    assert grid_origins(same).judge_sources == tuple(s for s in origins.judge_sources if s.member == 0)
    # ... and so repeats a condition that leaves it unset.
    repeated = spec.model_copy(update={"conditions": (Condition(name="unset"), Condition(name="set", knobs=explicit))})
    assert duplicate_conditions(repeated) == [("set", "unset")]


def test_the_knob_stays_on_the_host() -> None:
    with pytest.raises(ValueError):
        Knobs(judge_pretrain_target=1.01)
    with pytest.raises(ValueError):
        Knobs(judge_pretrain_target=-1.0)
    assert "judge_pretrain_target" not in program_knobs()
    strengths = parse_grid({"conditions": {"s": {"judge_pretrain_target": [0.5, 0.9]}}}, "strength.toml")
    assert [c.name for c in strengths.conditions] == ["s[judge_pretrain_target=0.5]", "s[judge_pretrain_target=0.9]"]
    plain = strengths.model_copy(update={"conditions": (Condition(name="a"), Condition(name="b"))})
    # Targets select judges, not programs: the same shape and knob arrays as a grid without them.
    assert layout_grid(strengths).shape == layout_grid(plain).shape
    chex.assert_trees_all_equal(layout_grid(strengths).knobs, layout_grid(plain).knobs)


def test_failures_name_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    program = GridTrainer(_spec("coevolab").only(["default", "strong"]))
    count = len(program.origins.judge_sources)
    reached = np.array([source.target != STRONG for source in program.origins.judge_sources])

    def pretrain_judges(init_keys: jax.Array, *args: object, **kwargs: object) -> PretrainResult:
        params = init_judges(init_keys, VOCAB, SEQ_LEN)  # no training needed: only `reached` matters here
        return PretrainResult(params, np.zeros(count, int), np.full(count, 0.25), reached)

    monkeypatch.setattr(program_module, "pretrain_judges", pretrain_judges)
    with pytest.raises(PretrainingFailed) as failure:
        program.pretrain()
    message = str(failure.value)
    assert "seed 0 member 0 (target 0.8, Spearman 0.250)" in message
    assert "seed 1 member 0 (target 0.8, Spearman 0.250)" in message
    assert "target 0.7" not in message
