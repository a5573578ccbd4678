"""The compiled grid program: pretrain judges, then train every run of a grid together.

`GridTrainer` owns the host side: it lays out the grid, pretrains the judges, builds
the initial state, and runs the grid's two compiled programs (`harness.grid.executables`)
once per outer iteration, training then diagnostics, the same executables every time, so
the host can report progress and checkpoint in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from harness.engine.flat_params import judge_layout, policy_layout, ravel_rows, unravel_rows
from harness.engine.models import Params, policy_log_prob_tables
from harness.engine.state import CoevolutionState
from harness.engine.state import initial_state as initial_run_states
from harness.engine.world import World
from harness.grid import registry
from harness.grid.contract import GridConstants, HostRuns, PretrainData
from harness.grid.diagnostics import Diagnostics
from harness.grid.executables import Executable, compile_diagnostics, compile_iteration
from harness.grid.knobs import RunKnobs
from harness.grid.layout import GridLayout, GridShape, layout_grid
from harness.grid.memory import check_fits
from harness.grid.origins import GridOrigins, grid_origins
from harness.grid.pretrain import PretrainResult, pretrain_judges
from harness.grid.sharding import ShardPlan, from_pieces, piece_work_for, plan_shards, to_pieces
from harness.grid.spec import GridSpec
from harness.grid.training_step import mechanism_states


class PretrainingFailed(RuntimeError):
    """Some judges never reached the target rank correlation."""


@dataclass
class PhaseTimes:
    """Seconds of a grid's phases: pretrain; compile, of both programs (the diagnostics', then the iteration's),
    compile_diagnostics the diagnostics program's part of it; train."""

    pretrain: float = 0.0
    compile: float = 0.0
    compile_diagnostics: float = 0.0
    train: float = 0.0


def rows_at(table: jax.Array, index: np.ndarray) -> jax.Array:
    """table[index] along the leading axis, picked on the host: a gather on the device would compile afresh for
    every grid's index shape (a few dozen small programs a grid), for no gain at these sizes."""
    return jnp.asarray(np.asarray(table)[index])


def grid_constants(
    layout: GridLayout, world: World, origins: GridOrigins, judges: Params, log_pi: jax.Array
) -> GridConstants:
    """The constants of a layout's runs: the pretrained judges (one per judge source of `origins`)
    placed in its slots as rows, the initial policies' log-probability tables log_pi (one per
    policy source, (V, N)) placed by run, work groups, and each mechanism's constants."""
    slot_run = jnp.asarray(layout.slot_run, jnp.int32)
    seeds = np.asarray(layout.seeds, np.int64)[layout.run_seed_index]
    host = HostRuns(layout.shape, layout.knobs, layout.spec.run.streams, world, seeds)
    return GridConstants(
        q_star=world.q_star,
        slot_run=slot_run,
        run_first_slot=jnp.asarray(np.searchsorted(layout.slot_run, np.arange(layout.shape.n_runs)), jnp.int32),
        run_judges=jnp.asarray(layout.run_judges, jnp.int32),
        run_member_draws=jnp.asarray(layout.run_member_draws, jnp.int32),
        groups=tuple(jax.tree.map(lambda ids: jnp.asarray(ids, jnp.int32), group) for group in layout.groups),
        pretrained_judges=rows_at(ravel_rows(judges), origins.slot_judge(layout)),
        initial_policies=rows_at(ravel_rows(origins.policy_params), origins.run_policy(layout)),
        initial_log_pi=rows_at(log_pi, origins.run_policy(layout)),
        mechanisms={m.name: m.constants(host) for m in layout.shape.mechanisms if m.constants is not None},
    )


@dataclass
class GridTrainer:
    """A grid ready to run. Call `pretrain()`, then `start()`, then `step()` per iteration (or `run()`); to measure
    states without training them, `initial_state()` and `diagnose()`.

    The state passed in and out is the whole grid's (runs and slots in layout order); inside `step()` the runs are
    split into `plan.n_shards` shards (see `harness.grid.sharding`): one per device side by side, on at most
    `max_shards` devices (default: every device), in `plan.pieces` turns.
    """

    spec: GridSpec
    max_shards: int | None = None
    pieces: int | None = None
    layout: GridLayout = field(init=False)
    world: World = field(init=False)
    times: PhaseTimes = field(default_factory=PhaseTimes)

    def __post_init__(self) -> None:
        self.layout = layout_grid(self.spec)
        local = jax.local_devices()
        devices = len(local)
        self.plan: ShardPlan = plan_shards(
            self.layout,
            min(self.max_shards or devices, devices),
            self.pieces,
            piece_work=piece_work_for(local[0].platform),
        )
        self.memory_estimate = check_fits(self.shape, len(self.spec.run.seeds))  # before any compile
        self.world = World(self.spec.world)
        self.origins: GridOrigins = grid_origins(self.spec)
        self.pretrained: PretrainResult | None = None
        self.constants: GridConstants | None = None
        self._executable: Executable | None = None
        self._diagnostics: Executable | None = None
        self._shard_constants: tuple[GridConstants, ...] | None = None
        self._shard_knobs: tuple[RunKnobs, ...] | None = None

    @property
    def shape(self) -> GridShape:
        """The whole grid's shape (its runs and slots, without shard padding)."""
        return self.layout.shape

    @property
    def _steps(self) -> jax.Array:
        """Inner steps per outer iteration, an argument of the iteration program (so any count shares it)."""
        return jnp.int32(self.spec.run.steps_per_iteration)

    @property
    def shard_shape(self) -> GridShape:
        """The shape of each shard: what selects the compiled iteration program."""
        return self.plan.shape

    def shard_state(self, state: CoevolutionState) -> tuple[CoevolutionState, ...]:
        """The grid's state -> the shards', one state per turn (`ShardPlan.piece`: leading axis of one shard per
        device, split over the devices)."""
        plan = self.plan
        runs = to_pieces(state.runs, plan.shard_runs, plan)
        slots = to_pieces(state.slots, plan.shard_slots, plan)
        steps = to_pieces(np.full((plan.n_shards,), np.asarray(state.step)), np.arange(plan.n_shards), plan)
        return tuple(map(CoevolutionState, runs, slots, steps))

    def unshard_state(self, pieces: tuple[CoevolutionState, ...]) -> CoevolutionState:
        """The shards' state (one per turn) -> the grid's, fillers dropped."""
        plan = self.plan
        return CoevolutionState(
            runs=from_pieces([piece.runs for piece in pieces], plan.run_at, plan),
            slots=from_pieces([piece.slots for piece in pieces], plan.slot_at, plan),
            step=jnp.asarray(np.asarray(pieces[0].step)[0]),
        )

    def policy_params(self, state: CoevolutionState) -> Params:
        """Every run's policy as a parameter pytree with a leading run axis (for inspection and tests)."""
        layout = policy_layout(self.shape.vocab_size, self.shape.seq_len, self.shape.model.policy)
        return unravel_rows(layout, state.runs.policy.params)

    def judge_params(self, rows: jax.Array) -> Params:
        """Judge rows (J, P) (e.g. `state.slots.judge.params`) as a parameter pytree with a leading slot axis."""
        return unravel_rows(judge_layout(self.shape.vocab_size, self.shape.seq_len, self.shape.model.judge), rows)

    def pretrain(self) -> PretrainResult:
        """Pretrain every judge source of the grid (`origins.judge_sources`), each once, by its own choices: to its
        target, or for its fixed steps, on fresh draws or its own dataset.

        Raises PretrainingFailed, naming each judge that missed its target and that target, if any did (a judge of
        fixed steps cannot miss).
        """
        start = time.perf_counter()
        origins = self.origins
        sources = origins.judge_sources
        result = pretrain_judges(
            origins.judge_init_keys,
            origins.judge_data_keys,
            self.world,
            self.spec.pretrain,
            max_shards=self.max_shards or len(jax.local_devices()),
            streams=self.spec.run.streams,
            targets=origins.judge_targets,
            network=self.spec.model.judge,
            examples=np.array([source.examples for source in sources], np.int32),
            corruption=np.array([source.corruption for source in sources], np.float32),
            fixed_steps=np.array([source.fixed_steps for source in sources], np.int32),
        )
        jax.block_until_ready(result)
        self.times.pretrain = time.perf_counter() - start
        failed = np.flatnonzero(~np.asarray(result.reached))
        if len(failed):
            names = ", ".join(
                f"{self._judge_name(u)} (target {origins.judge_sources[u].target:g}, "
                f"Spearman {float(result.spearman[u]):.3f})"
                for u in failed
            )
            raise PretrainingFailed(
                f"judges did not reach their Spearman target within {self.spec.pretrain.max_steps} steps: {names}"
            )
        self.pretrained = result
        return result

    def _judge_name(self, source: int) -> str:
        script, seed, member = self.origins.judge_sources[source][:3]
        return f"{script + ' script ' if script else ''}seed {seed} member {member}"

    def pretrain_table(self) -> pd.DataFrame:
        """Steps and final Spearman of each pretrained judge by (seed, member, target); by script too under original
        streams, and by examples, corruption and fixed_steps where some judge of the grid has one. One row per judge
        source, in `origins.judge_sources` order."""
        assert self.pretrained is not None, "call pretrain() first"
        sources = self.origins.judge_sources
        data = any(source.data != PretrainData() for source in sources)
        rows = [
            {
                **({"script": source.script} if source.script else {}),
                "seed": source.seed,
                "member": source.member,
                "target": source.target,
                **(source.data._asdict() if data else {}),
                "steps": int(self.pretrained.steps[u]),
                "spearman": float(self.pretrained.spearman[u]),
            }
            for u, source in enumerate(sources)
        ]
        return pd.DataFrame(rows)

    def initial_state(self, pretrained: PretrainResult | None = None) -> CoevolutionState:
        """Initial state of every run, with the grid's constants laid out for its shards; compiles no training.

        What `diagnose()` needs, for measuring states without training them; `start()` adds the iteration program.
        pretrained: judges from an earlier `pretrain()` (e.g. a checkpoint); pretrains if absent.
        """
        if pretrained is not None:
            self.pretrained = pretrained
        if self.pretrained is None:
            self.pretrain()
        assert self.pretrained is not None
        # Judges come in source order (a checkpoint's too): one per source of this grid.
        chex.assert_tree_shape_prefix(self.pretrained.params, (len(self.origins.judge_sources),))
        layout, world, origins = self.layout, self.world, self.origins
        vocab, seq_len = world.config.vocab_size, world.config.seq_len
        log_pi = policy_log_prob_tables(origins.policy_params, vocab, seq_len)
        judges = self.pretrained.params
        self.constants = grid_constants(layout, world, origins, judges, log_pi)
        shard_constants = [grid_constants(shard, world, origins, judges, log_pi) for shard in self.plan.shards]
        self._shard_constants = to_pieces(
            jax.tree.map(lambda *leaves: np.stack(leaves), *shard_constants), np.arange(self.plan.n_shards), self.plan
        )
        self._shard_knobs = to_pieces(self.layout.knobs, self.plan.shard_runs, self.plan)
        run_policy = origins.run_policy(layout)
        policies, judges_rows = self.constants.initial_policies, self.constants.pretrained_judges
        # Each mechanism's state sized by the shards' shape (its static sizes padded to the largest shard's).
        run_states, slot_states = mechanism_states(self.shard_shape, policies, judges_rows)
        state = initial_run_states(
            policies, judges_rows, rows_at(origins.stream_keys, run_policy), run_states, slot_states
        )
        chex.assert_tree_shape_prefix(state.runs, (self.shape.n_runs,))
        chex.assert_tree_shape_prefix(state.slots, (self.shape.n_slots,))
        return state

    def start(self, pretrained: PretrainResult | None = None) -> tuple[CoevolutionState, Diagnostics]:
        """Initial state of every run and its iteration-0 diagnostics; compiles the iteration program.

        pretrained: judges from an earlier `pretrain()` (e.g. a checkpoint); pretrains if absent.
        """
        state = self.initial_state(pretrained)
        # The diagnostics are a program of their own, over the same shards as the iteration program's (so memory
        # follows a shard, not the grid), compiled before they run on the initial state. The two compiles run one
        # after the other: side by side on two threads, a cold start of the published grid was no faster here (25-26 s
        # against 21-24 s on 2 cores), and JAX writing one program to its persistent cache while XLA compiled the
        # other crashed a test process once (a segmentation fault in the cache write).
        shards = self.shard_state(state)
        start = time.perf_counter()
        self._diagnostics = self._compile_diagnostics(shards)
        self.times.compile_diagnostics = time.perf_counter() - start
        args = (self._shard_constants[0], self._shard_knobs[0], shards[0], jnp.int32(0), self._steps)
        self._executable = compile_iteration(self.shard_shape, self.plan.devices, args)
        self.times.compile = time.perf_counter() - start
        return state, jax.block_until_ready(self._diagnose_shards(shards))

    def _diagnose_shards(self, shards: tuple[CoevolutionState, ...]) -> Diagnostics:
        """Every metric of every run of a state laid out in shards (`shard_state`'s layout)."""
        assert self._shard_constants is not None and self._shard_knobs is not None, "call start() or initial_state()"
        if self._diagnostics is None:  # measured before start() compiled the programs
            self._diagnostics = self._compile_diagnostics(shards)
        diagnose = self._diagnostics
        turns = [diagnose(*turn) for turn in zip(self._shard_constants, self._shard_knobs, shards, strict=True)]
        return from_pieces(turns, self.plan.run_at, self.plan)

    def _compile_diagnostics(self, shards: tuple[CoevolutionState, ...]) -> Executable:
        """The diagnostics program of this grid's shards, compiled for `shards` (`shard_state`'s layout)."""
        assert self._shard_constants is not None and self._shard_knobs is not None, "call start() or initial_state()"
        args = (self._shard_constants[0], self._shard_knobs[0], shards[0])
        return compile_diagnostics(self.shard_shape, self.plan.devices, args)

    def diagnose(self, state: CoevolutionState) -> Diagnostics:
        """Every metric of every run of `state`: what `step` measures after its iteration."""
        return self._diagnose_shards(self.shard_state(state))

    def step(self, state: CoevolutionState, iteration: int) -> tuple[CoevolutionState, Diagnostics]:
        """Train outer iteration `iteration` (0-based) of every run; returns the new state and its diagnostics."""
        assert self._executable is not None, "call start() first"
        start = time.perf_counter()
        assert self._shard_constants is not None and self._shard_knobs is not None
        # One call per turn, dispatched in order without waiting for the previous turn's results.
        iterate, turn = self._executable, (jnp.int32(iteration), self._steps)
        shards = tuple(
            iterate(constants, knobs, piece, *turn)
            for constants, knobs, piece in zip(
                self._shard_constants, self._shard_knobs, self.shard_state(state), strict=True
            )
        )
        state, diagnostics = self.unshard_state(shards), self._diagnose_shards(shards)
        self.times.train += time.perf_counter() - start
        return state, diagnostics

    def run(self, on_iteration: Callable[[int], None] | None = None) -> pd.DataFrame:
        """Pretrain, compile and train every iteration; returns the tidy metrics table."""
        state, diagnostics = self.start()
        records = [diagnostics]
        for iteration in range(self.spec.run.iterations):
            state, diagnostics = self.step(state, iteration)
            records.append(diagnostics)
            if on_iteration:
                on_iteration(iteration)
        self.final_state = state
        return self.metrics_table(records)

    @property
    def record_names(self) -> tuple[str, ...]:
        """Every array of a record (`Diagnostics`): the metrics, then each per-run table's value columns."""
        tables = registry.tables(self.shape.used_mechanisms)
        return (*self.metric_names, *(table.key(column) for table in tables for column in table.columns))

    def run_tables(self, records: list[Diagnostics]) -> dict[str, pd.DataFrame]:
        """Each per-run table of the grid (`contract.RunTable`) by name: one row per condition × seed × iteration
        (record k = after iteration k) × index entry, in the grid's condition order, then seed, iteration and the
        index's own order; columns condition, seed, iteration, the index columns, the value columns."""
        labels = self.layout.run_labels()
        order = {c.name: i for i, c in enumerate(self.spec.conditions)}
        tables = {}
        for table in registry.tables(self.shape.used_mechanisms):
            size = table.size
            frames = [
                pd.DataFrame(
                    {
                        "condition": np.repeat([name for name, _ in labels], size),
                        "seed": np.repeat([seed for _, seed in labels], size),
                        "iteration": iteration,
                        **{name: np.tile(np.asarray(values), len(labels)) for name, values in table.index.items()},
                        "entry": np.tile(np.arange(size), len(labels)),
                        **{column: np.asarray(record[table.key(column)]).reshape(-1) for column in table.columns},
                    }
                )
                for iteration, record in enumerate(records)
            ]
            joined = pd.concat(frames, ignore_index=True)
            keys = joined[["condition", "seed", "iteration", "entry"]].assign(condition=joined["condition"].map(order))
            joined = joined.loc[keys.sort_values(["condition", "seed", "iteration", "entry"]).index]
            tables[table.name] = joined.drop(columns="entry").reset_index(drop=True)
        return tables

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The grid's metrics (those of the mechanisms its runs use), in metrics.csv.gz's column order."""
        return tuple(metric.name for metric in registry.metric_columns(self.shape.used_mechanisms))

    def metrics_table(self, records: list[Diagnostics]) -> pd.DataFrame:
        """Tidy metrics: one row per condition × seed × iteration (record k = after iteration k; 0 = start)."""
        labels = self.layout.run_labels()
        frames = []
        for iteration, record in enumerate(records):
            columns = {name: np.asarray(record[name]) for name in self.metric_names}
            frame = pd.DataFrame(columns)
            frame.insert(0, "iteration", iteration)
            frame.insert(0, "seed", [seed for _, seed in labels])
            frame.insert(0, "condition", [name for name, _ in labels])
            frame["mode_sequence"] = [self.world.render(int(i)) for i in columns["mode_index"]]
            frames.append(frame)
        order = {c.name: i for i, c in enumerate(self.spec.conditions)}
        table = pd.concat(frames, ignore_index=True).sort_values(
            ["condition", "seed", "iteration"], key=lambda col: col.map(order) if col.name == "condition" else col
        )
        boundary = {c.name: c.boundary for c in self.spec.conditions}
        table["boundary"] = table["condition"].map(boundary)
        table["diverged"] = ~table.groupby(["condition", "seed"])["finite"].cummin().astype(bool)
        return table.reset_index(drop=True)
