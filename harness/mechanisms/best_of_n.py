"""Best-of-n, exactly, for the grids that ask for it (`record_best_of_n = true` on a condition): for each run and outer
iteration, the gold (q*), proxy (the score best-of-n maximises) and exact KL of best-of-n sampling, for n on a log
grid from 1 to 10⁶ (`harness.engine.best_of_n`), four ways (the table's `base` and `scorer` columns):

- base π₀, scorer the run's judges as aggregated (what its policy is rewarded by): Gao et al.'s (2022) other optimizer
  against the pretrained judges at iteration 0, against the judges as the loop has left them later;
- base the run's current policy, scorer its judges: what sampling n and keeping the judges' best adds to the policy;
- base π₀, scorer q* itself: the perfect proxy, the baseline overoptimization is measured against (q* is bounded, so
  its gold curve bends over too, without any proxy error);
- base π₀, scorer q* plus noise at the judges' alignment: q* + s·e, e the run's fixed standard-normal draw per output
  (from its seed alone, so every condition of a seed shares it), made orthogonal to q* and scaled so that its Pearson
  correlation with q* over the outputs equals that of the run's reward table, exactly. A judge whose errors were
  random would look like this one; what it does beyond is the shape of its errors.

n reaches 10⁶ so that the curve is complete: at that n best-of-n from π₀ puts all but a vanishing share of its mass on
the scorer's top outputs, so a curve that has not turned down by then never does. Computed inside the compiled
program from what the diagnostics already hold (every run's log π over all outputs, π₀'s in the grid's constants,
every run's reward table), one sort of the outputs per curve and run, and written as the per-run table
`best_of_n.parquet` (`harness.common.run_tables`): condition, seed, iteration, base, scorer, n, gold, proxy, kl,
kl_bound, top_mass. A grid none of whose conditions asks for it does not use the mechanism: its program computes no
table and its run directory holds none. The table yields the measures of overoptimization claims read
(`harness.inference.frontier_measures`), joined to the metrics of a run directory that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.best_of_n import best_of_n, log_n_grid
from harness.grid.contract import DiagnosticsContext, HostRuns, Mechanism, RunTable
from harness.grid.knobs import HOST_ONLY, Knobs
from harness.inference.frontier_measures import FRONTIER_MEASURES, frontier_measures

# n from 1 to 10⁶, five points a decade, evenly spaced in log n: Gao's bound log n − (n − 1)/n passes 8.3 nats, the
# KL of a policy collapsed onto one of the 4,096 outputs of the published world, near n = 10⁴.
N_GRID = tuple(int(n) for n in log_n_grid(31, 1_000_000))
# (base, scorer) of each curve, in the table's row order.
CURVES = (("initial", "judges"), ("current", "judges"), ("initial", "q_star"), ("initial", "noisy_q_star"))
COLUMNS = {
    "gold": "E[q*] of best-of-n: the real quality of the output it keeps",
    "proxy": "E[scorer] of best-of-n: the score it maximises (the run's judges as aggregated, q*, or q* plus noise)",
    "kl": "KL(best-of-n ‖ base) in nats, exact",
    "kl_bound": "Gao et al.'s bound on that KL, log n − (n − 1)/n",
    "top_mass": "best-of-n's probability of the scorer's top-scored output (its top tie block)",
}
NAME = "best_of_n"
_NOISE_STREAM = 0x0B0F  # the noise's own stream, apart from every other draw of a seed


def seed_noise(host: HostRuns) -> dict[str, np.ndarray]:
    """Each run's standard-normal draw per output (R, N), from its seed alone (numpy's generator of (stream, seed))."""
    n_outputs = int(np.asarray(host.world.q_star).shape[0])
    draws = [np.random.default_rng([_NOISE_STREAM, int(seed)]).standard_normal(n_outputs) for seed in host.seeds]
    return {"noise": np.asarray(draws, np.float32).reshape(len(host.seeds), n_outputs)}


def alignment(q_star: jax.Array, table: jax.Array) -> jax.Array:
    """The Pearson correlation of a table over the outputs (N,) with q* (NaN where the table is constant)."""
    centred = q_star - jnp.mean(q_star)
    table_centred = table - jnp.mean(table)
    return jnp.mean(centred * table_centred) / (jnp.sqrt(jnp.mean(centred**2)) * jnp.sqrt(jnp.mean(table_centred**2)))


def noisy_q_star(q_star: jax.Array, reward: jax.Array, noise: jax.Array) -> jax.Array:
    """q* + s·e over the outputs (N,), e the noise made orthogonal to q* (both centred), s such that the result's
    Pearson correlation with q* equals the reward table's (floored at 0.01: an anti-aligned judge, or a constant table
    whose correlation is undefined, is matched by noise alone at that correlation)."""
    centred = q_star - jnp.mean(q_star)
    spread = jnp.sqrt(jnp.mean(centred**2))
    matched = alignment(q_star, reward)
    matched = jnp.clip(jnp.where(jnp.isfinite(matched), matched, 0.01), 0.01, 1.0)
    error = noise - jnp.mean(noise)
    error = error - centred * (jnp.mean(error * centred) / spread**2)
    scale = spread / jnp.sqrt(jnp.mean(error**2)) * jnp.sqrt(1.0 / matched**2 - 1.0)
    return q_star + scale * error


def best_of_n_table(context: DiagnosticsContext) -> Mapping[str, jax.Array]:
    """Every run's best-of-n curves (`CURVES`), (R, 4G) per column, curve-major."""
    grid = jnp.asarray(N_GRID, jnp.float32)
    q_star, initial = context.constants.q_star, context.constants.initial_log_pi
    per_run = jax.vmap(best_of_n, in_axes=(0, 0, None, None))
    noisy = jax.vmap(noisy_q_star, in_axes=(None, 0, 0))(q_star, context.reward, context.constants.of(NAME)["noise"])
    curves = (
        per_run(initial, context.reward, q_star, grid),
        per_run(context.log_pi, context.reward, q_star, grid),
        per_run(initial, jnp.broadcast_to(q_star, initial.shape), q_star, grid),
        per_run(initial, noisy, q_star, grid),
    )
    return {column: jnp.concatenate([getattr(curve, column) for curve in curves], axis=1) for column in COLUMNS}


class BestOfNKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    record_best_of_n: bool = Field(
        False,
        description="record exact best-of-n per run and iteration (best_of_n.parquet) for every run of the grid",
        json_schema_extra={HOST_ONLY: True},
    )


def _uses(knobs: Knobs) -> bool:
    return knobs.record_best_of_n


TABLE = RunTable(
    name=NAME,
    definition="best-of-n sampling from a base policy (π₀ or the run's current one), scored by the run's judges as "
    "aggregated, by q* or by q* plus noise at the judges' alignment, exactly, for n on a log grid",
    index={
        "base": tuple(base for base, _ in CURVES for _ in N_GRID),
        "scorer": tuple(scorer for _, scorer in CURVES for _ in N_GRID),
        "n": tuple(n for _ in CURVES for n in N_GRID),
    },
    columns=COLUMNS,
    compute=best_of_n_table,
    measures=FRONTIER_MEASURES,
    compute_measures=frontier_measures,
)

MECHANISM = Mechanism(
    name=NAME,
    summary="exact best-of-n from π₀ and from the current policy, per run and iteration (best_of_n.parquet)",
    knobs=BestOfNKnobs,
    uses=_uses,
    constants=seed_noise,
    tables=(TABLE,),
)
