"""Where every run starts: its pretrained judges, initial policy and stream key.

Under the harness's streams (`harness.engine.keys`) a run's origin depends only on its seed: every
condition of a seed starts from the same policy and judges (paired comparisons). Under
the original lab's (`harness.original.streams`) it depends on the entry script that ran
the condition, and the policy and stream key also on the ensemble size, as in the original.

The distinct judges and policies a grid needs are its *sources*; runs and judge slots
point into them, so each is initialised (and each judge pretrained) once. A judge source
also names every pretraining choice of its condition: the Spearman target it is pretrained to
(`GridSpec.judge_target`) and what it is pretrained on and for how long (`GridSpec.judge_data`).
Conditions with different choices get different judges from the same keys (the same
initialisation and data stream: another target stops at another check, another dataset or
corruption trains on other examples); conditions with equal choices share them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from harness.engine import keys
from harness.engine.models import init_policies
from harness.grid.contract import PretrainData
from harness.grid.layout import GridLayout
from harness.grid.spec import Condition, GridSpec, judges_per_run
from harness.original import streams as original_streams


class JudgeSource(NamedTuple):
    """A pretrained judge: its keys' (script, seed, member) and its pretraining choices: target, and examples,
    corruption, fixed_steps (`harness.grid.contract.PretrainData`; a judge of fixed steps is not stopped by its target).

    The harness's streams do not use the script: it is None there.
    """

    script: str | None
    seed: int
    member: int
    target: float
    examples: int = 0
    corruption: float = 0.0
    fixed_steps: int = 0

    @property
    def data(self) -> PretrainData:
        return PretrainData(self.examples, self.corruption, self.fixed_steps)


# A policy source: (script, seed, n_judges); the harness's streams use neither the script
# nor the ensemble size: both are None there.
PolicySource = tuple[str | None, int, int | None]


@dataclasses.dataclass(frozen=True)
class GridOrigins:
    """The sources of a grid: judges (pretrained once each) and policies, in a fixed order.

    judge_sources[u] names judge u; judge_init_keys, judge_data_keys (U, 2) are its
    pretraining keys and judge_targets float32 (U,) its target. policy_sources[v] names
    policy v; policy_params (V, ...) and stream_keys (V, 2) are its initial parameters and its runs' first stream key.
    """

    spec: GridSpec
    judge_sources: tuple[JudgeSource, ...]
    judge_init_keys: jax.Array
    judge_data_keys: jax.Array
    judge_targets: jax.Array
    policy_sources: tuple[PolicySource, ...]
    policy_params: object
    stream_keys: jax.Array

    def _run_script(self, layout: GridLayout) -> list[str | None]:
        if self.spec.run.streams == "coevolab":
            return [None] * layout.shape.n_runs
        return [self.spec.conditions[c].original_script for c in layout.run_condition]

    def run_policy(self, layout: GridLayout) -> np.ndarray:
        """Each run's policy source, int (R,)."""
        index = {source: v for v, source in enumerate(self.policy_sources)}
        seeds = np.asarray(layout.seeds)[layout.run_seed_index]
        n_judges = layout.run_judges
        original = self.spec.run.streams == "original"
        return np.array(
            [
                index[(script, int(seed), int(members) if original else None)]
                for script, seed, members in zip(self._run_script(layout), seeds, n_judges, strict=True)
            ]
        )

    def slot_judge(self, layout: GridLayout) -> np.ndarray:
        """Each judge slot's judge source, int (J,): its run's script and seed, its member, its condition's
        pretraining choices."""
        index = {source: u for u, source in enumerate(self.judge_sources)}
        scripts, seeds = self._run_script(layout), np.asarray(layout.seeds)[layout.run_seed_index]
        choices = [_choices(self.spec, self.spec.conditions[c]) for c in layout.run_condition]
        return np.array(
            [
                index[JudgeSource(scripts[run], int(seeds[run]), int(member), *choices[run])]
                for run, member in zip(layout.slot_run, layout.slot_member, strict=True)
            ]
        )


def _script_index(script: str | None) -> int:
    return -1 if script is None else original_streams.SCRIPTS.index(script)


def _order(source: tuple) -> tuple:
    """Original-stream policy sources by script (in `SCRIPTS` order), then seed, then ensemble size."""
    script, seed, number = source
    return _script_index(script), seed, number


def _judge_order(source: JudgeSource) -> tuple:
    """Judge sources by script (in `SCRIPTS` order), then pretraining choices, then seed and member: with one choice,
    the order of sources before targets were per condition (so checkpoints written then still line up)."""
    return _script_index(source.script), source.target, *source.data, source.seed, source.member


Choices = tuple[float, int, float, int]


def _choices(spec: GridSpec, condition: Condition) -> Choices:
    """Every pretraining choice of a condition's judges, in `JudgeSource` order: target, examples, corruption,
    fixed_steps."""
    return (spec.judge_target(condition), *spec.judge_data(condition))


def grid_origins(spec: GridSpec) -> GridOrigins:
    """Every judge and policy source the grid `spec` needs, with their keys and initial policies.

    Each target's judges are those of its conditions: under the harness's streams, every seed's
    members up to the largest ensemble of a condition with that target.
    """
    vocab, seq_len = spec.world.vocab_size, spec.world.seq_len
    seeds, mechanisms = spec.run.seeds, spec.active_mechanisms
    if spec.run.streams == "coevolab":
        members_of: dict[Choices, int] = {}
        for condition in spec.conditions:
            choices = _choices(spec, condition)
            members_of[choices] = max(members_of.get(choices, 0), judges_per_run(condition.knobs, mechanisms))
        judges = tuple(
            sorted(
                (
                    JudgeSource(None, seed, member, *choices)
                    for choices, count in members_of.items()
                    for seed in seeds
                    for member in range(count)
                ),
                key=_judge_order,
            )
        )
        seed_ids = np.asarray([s.seed for s in judges], np.int32)
        members = np.asarray([s.member for s in judges], np.int32)
        init_keys, data_keys = in_buckets(keys.judge_keys_batch, seed_ids, members)
        policies = tuple((None, seed, None) for seed in seeds)
        seed_array = np.asarray(seeds, np.int32)
        policy_keys = in_buckets(jax.vmap(keys.policy_init_key), seed_array)
        policy_params = in_buckets(lambda k: init_policies(k, vocab, seq_len, spec.model.policy), policy_keys)
        stream_keys = in_buckets(jax.vmap(keys.training_key), seed_array)
        return GridOrigins(spec, judges, init_keys, data_keys, _targets(judges), policies, policy_params, stream_keys)

    conditions = [(c.original_script, judges_per_run(c.knobs, mechanisms), _choices(spec, c)) for c in spec.conditions]
    runs = sorted({(script, seed, n_judges) for script, n_judges, _ in conditions for seed in seeds}, key=_order)
    # The choices each (script, ensemble size) is pretrained with: its seeds' members, once per choice.
    targets_of: dict[tuple[str, int], set[Choices]] = {}
    for script, n_judges, choices in conditions:
        targets_of.setdefault((script, n_judges), set()).add(choices)
    judge_keys: dict[JudgeSource, tuple[jax.Array, jax.Array]] = {}
    policy_keys, stream_keys = [], []
    for script, seed, n_judges in runs:
        seed_keys = original_streams.seed_keys(script, seed, n_judges)
        for member in range(n_judges):
            for choices in targets_of[(script, n_judges)]:
                source = JudgeSource(script, seed, member, *choices)
                judge_keys[source] = (seed_keys.judge_init[member], seed_keys.judge_pretrain[member])
        policy_keys.append(seed_keys.policy_init)
        stream_keys.append(seed_keys.loop)
    judges = tuple(sorted(judge_keys, key=_judge_order))
    return GridOrigins(
        spec,
        judges,
        jnp.stack([judge_keys[s][0] for s in judges]),
        jnp.stack([judge_keys[s][1] for s in judges]),
        _targets(judges),
        tuple(runs),
        in_buckets(lambda k: original_streams.init_original_policies(k, vocab, seq_len), jnp.stack(policy_keys)),
        jnp.stack(stream_keys),
    )


def in_buckets(function: Callable[..., chex.ArrayTree], *rows: chex.Array) -> chex.ArrayTree:
    """`function` of arrays with a leading axis of n rows, called on them padded to the next power of two rows (copies
    of the last) and its outputs cut back to n: one program serves grids of any seed count up to the bucket.

    Only for functions that compute each row alone (key derivations, `lax.map` initialisations), so padding changes
    no bit; a vmapped network would round differently at another batch width.
    """
    n = rows[0].shape[0]
    index = np.minimum(np.arange(1 << max(0, (n - 1).bit_length())), n - 1)
    padded = function(*(np.asarray(row)[index] for row in rows))
    return jax.tree.map(lambda leaf: jnp.asarray(np.asarray(leaf)[:n]), padded)


def _targets(judges: tuple[JudgeSource, ...]) -> jax.Array:
    return jnp.asarray([source.target for source in judges], jnp.float32)
