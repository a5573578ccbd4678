"""Best-of-n, exactly, for the grids that ask for it (`record_best_of_n = true` on a condition): for each run and outer
iteration, the gold (q*), proxy (the run's judges as aggregated, what its policy is rewarded by) and exact KL of
best-of-n sampling from two base policies, π₀ and the run's current policy, for n on a log grid from 1 to 10⁴
(`harness.engine.best_of_n`).

Computed inside the compiled program from what the diagnostics already hold (every run's log π over all outputs, π₀'s
in the grid's constants, every run's reward table), one sort of the outputs per base and run, and written as the
per-run table `best_of_n.parquet` (`harness.common.run_tables`): condition, seed, iteration, base, n, gold, proxy, kl,
kl_bound. A grid none of whose conditions asks for it does not use the mechanism: its program computes no table and
its run directory holds none (the claims on best-of-n's measures, `harness.inference.frontier_measures`, need it).
Best-of-n from π₀ at iteration 0 is the other optimizer of Gao et al. (2022) against the pretrained judges; at later
iterations it reads the judges as the loop has left them, and from the current policy it is what sampling n and keeping
the judges' best would add to the policy's own.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.best_of_n import best_of_n, log_n_grid
from harness.grid.contract import DiagnosticsContext, Mechanism, RunTable
from harness.grid.knobs import HOST_ONLY, Knobs
from harness.inference.frontier_measures import BEST_OF_N_TABLE

# n from 1 to 10⁴, evenly spaced in log n: Gao's bound log n − (n − 1)/n reaches 8.2 nats at the top, about the KL
# of a policy collapsed onto one of the 4,096 outputs of the published world.
N_GRID = tuple(int(n) for n in log_n_grid(20, 10_000))
BASES = ("initial", "current")
COLUMNS = {
    "gold": "E[q*] of best-of-n: the real quality of the output it keeps",
    "proxy": "E[J] of best-of-n, J the run's judges as aggregated (the score it maximises)",
    "kl": "KL(best-of-n ‖ base) in nats, exact",
    "kl_bound": "Gao et al.'s bound on that KL, log n − (n − 1)/n",
}


def best_of_n_table(context: DiagnosticsContext) -> Mapping[str, jax.Array]:
    """Every run's best-of-n from π₀ then from its current policy, (R, 2G) per column, base-major."""
    grid = jnp.asarray(N_GRID, jnp.float32)
    per_run = jax.vmap(best_of_n, in_axes=(0, 0, None, None))
    initial = per_run(context.constants.initial_log_pi, context.reward, context.constants.q_star, grid)
    current = per_run(context.log_pi, context.reward, context.constants.q_star, grid)
    return {column: jnp.concatenate([getattr(initial, column), getattr(current, column)], axis=1) for column in COLUMNS}


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
    name=BEST_OF_N_TABLE,
    definition="best-of-n sampling from a base policy (π₀ or the run's current one), scored by the run's judges as "
    "aggregated, exactly, for n on a log grid",
    index={
        "base": tuple(base for base in BASES for _ in N_GRID),
        "n": tuple(n for _ in BASES for n in N_GRID),
    },
    columns=COLUMNS,
    compute=best_of_n_table,
)

MECHANISM = Mechanism(
    name="best_of_n",
    summary="exact best-of-n from π₀ and from the current policy, per run and iteration (best_of_n.parquet)",
    knobs=BestOfNKnobs,
    uses=_uses,
    tables=(TABLE,),
)
