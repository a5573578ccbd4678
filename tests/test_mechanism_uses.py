"""`Mechanism.uses`: a mechanism's hooks, view and metrics cost nothing in a grid none of whose runs uses it.

A probe mechanism counts (at trace time) every call of its reward hook and its view; a grid that does not use it
traces neither, has none of its metrics, and gives the numbers of the same grid without the mechanism loaded; a grid
where one condition uses it calls them, and every shard of it does (`GridShape.used`, the union over shards).
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.metrics import Metric
from harness.grid import registry
from harness.grid.contract import DiagnosticsContext, Mechanism, PolicyBatch
from harness.grid.knobs import Knobs
from harness.grid.layout import layout_grid
from harness.grid.pretrain import PretrainResult
from harness.grid.sharding import deal_runs
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.trainer import GridTrainer
from tests.worlds import TWO_POSITIONS

NAME = "probe"
CALLS: list[str] = []


class ProbeKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    probe_bonus: float = Field(0.0, ge=0.0, description="added to every sample's reward")


def _shape_reward(rewards: jax.Array, batch: PolicyBatch, own: None) -> tuple[jax.Array, None]:
    CALLS.append("shape_reward")
    return rewards + batch.knobs.probe_bonus, own


def _view(context: DiagnosticsContext) -> jax.Array:
    CALLS.append("view")
    return context.knobs.probe_bonus


PROBE = Mechanism(
    name=NAME,
    summary="a reward bonus whose hook and view record their calls",
    knobs=ProbeKnobs,
    uses=lambda knobs: knobs.probe_bonus > 0,
    shape_reward=_shape_reward,
    view=_view,
    metrics=(Metric("probe_value", "probe", "", "the probe's bonus, as its view reads it", lambda run: run.of(NAME)),),
)
RUN = RunSettings(seeds=(0,), iterations=1, steps_per_iteration=5, batch_size=16)


@pytest.fixture(autouse=True)
def probe() -> Iterator[None]:
    with registry.restored_catalog():
        registry.register(PROBE)
        CALLS.clear()
        yield


def grid(*knobs: Knobs, loaded: bool = True) -> GridSpec:
    return GridSpec(
        name="uses",
        mechanisms=(MechanismSource(name=NAME, module="tests", digest=""),) if loaded else (),
        run=RUN,
        world=TWO_POSITIONS,
        conditions=tuple(Condition(name=f"c{i}", knobs=k) for i, k in enumerate(knobs)),
    )


def test_used_names_the_mechanisms_some_run_uses() -> None:
    # Every built-in mechanism but those whose `uses` says no run here uses them (judge_ema: no moving average;
    # kl_penalty: β = 0; entropy_regularization: τ = 0; gold_reward, noisy_gold_reward: no run rewarded by q* or by q*
    # plus noise; best_of_n: no condition records it).
    unused = ("judge_ema", "kl_penalty", "entropy_regularization", "gold_reward", "noisy_gold_reward", "best_of_n")
    built_in = [name for name, entry in registry.catalog().items() if entry.builtin and name not in unused]
    assert layout_grid(grid(Knobs(), Knobs(lr_policy=1e-3))).shape.used == tuple(built_in)
    used = layout_grid(grid(Knobs(), Knobs(probe_bonus=1.0))).shape
    assert used.used == (*built_in, NAME)
    assert [m.name for m in used.used_mechanisms] == [*built_in, NAME]


def test_every_shard_uses_what_any_shard_uses() -> None:
    # Two runs of one kind, one shard each: only the second shard's run uses the probe.
    layout = layout_grid(grid(Knobs(), Knobs(probe_bonus=1.0)))
    assert NAME not in layout_grid(grid(Knobs())).shape.used
    plan = deal_runs(layout, 2)
    assert plan.n_shards == 2
    assert all(NAME in shard.shape.used for shard in plan.shards)
    assert NAME in plan.shape.used


@pytest.fixture(scope="module")
def pretrained() -> PretrainResult:
    """The judges of seed 0, which every grid here shares."""
    return GridTrainer(grid(Knobs(), loaded=False)).pretrain()


def _metrics(spec: GridSpec, pretrained: PretrainResult) -> pd.DataFrame:
    trainer = GridTrainer(spec, max_shards=1)
    trainer.pretrained = pretrained
    return trainer.run()


def test_an_unused_mechanism_is_never_called_and_changes_nothing(pretrained: PretrainResult) -> None:
    unused = _metrics(grid(Knobs(), Knobs(lr_policy=1e-3)), pretrained)
    assert CALLS == []
    assert "probe_value" not in unused.columns
    without = _metrics(grid(Knobs(), Knobs(lr_policy=1e-3), loaded=False), pretrained)
    pd.testing.assert_frame_equal(unused, without, check_exact=True)


def test_a_used_mechanism_is_called_for_every_run(pretrained: PretrainResult) -> None:
    metrics = _metrics(grid(Knobs(), Knobs(probe_bonus=1.0)), pretrained)
    assert set(CALLS) == {"shape_reward", "view"}
    final = metrics[metrics["iteration"] == 1].set_index("condition")
    np.testing.assert_array_equal(final["probe_value"].to_numpy(), np.array([0.0, 1.0], np.float32))
    assert jnp.isfinite(final["policy_quality"].to_numpy()).all()
