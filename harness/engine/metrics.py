"""The metric registry: every diagnostic of a run, declared once.

Each `Metric` says what a column of metrics.csv.gz is called, how people should read it
(label, unit, one-line definition) and how it is computed from one run's exact view of
the world (`RunView`). The loop's own metrics are declared here; a mechanism declares its
metrics in its own module (`harness.grid.contract.Mechanism.metrics`), and registering the
mechanism registers them (`register_metrics`). The compiled program evaluates every metric
of a grid's mechanisms for every run; metrics.csv.gz, the golden file, the report's tables and
figures all iterate over the registry, so a new diagnostic is one entry.

Columns come in a fixed order (`columns`): the loop's measures, then each mechanism's measures
(float metrics, in the order the mechanisms are registered), the end mode, each mechanism's
counts (int and bool metrics), and whether the run stayed finite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
import jax.scipy.special

from harness.engine.rank_stats import spearman


@flax.struct.dataclass
class RunView:
    """Everything a metric may read about one run after an outer iteration (no leading axis).

    q_star (N,): ground truth; log_pi (N,): log π(x) of the policy over every output;
    reward (N,): the run's reward table, its judges' scores aggregated as the policy sees
    them; log_pi_initial (N,): log π₀(x) of the run's initial policy; finite: every parameter
    of the run is finite; mechanisms: mechanism name -> what that mechanism's view computed for
    this run (`harness.grid.contract.Mechanism.view`), for the mechanisms that declare a view.
    """

    q_star: jax.Array
    log_pi: jax.Array
    log_pi_initial: jax.Array
    reward: jax.Array
    finite: jax.Array
    mechanisms: dict[str, Any]

    @property
    def pi(self) -> jax.Array:
        return jnp.exp(self.log_pi)

    @property
    def mode(self) -> jax.Array:
        return jnp.argmax(self.log_pi).astype(jnp.int32)

    def of(self, mechanism: str) -> Any:
        """What `mechanism`'s view computed for this run."""
        return self.mechanisms[mechanism]


@dataclasses.dataclass(frozen=True)
class ValidValues:
    """The values a metric can take in a run whose parameters are all finite (what reading metrics.csv.gz back checks).

    low, high: inclusive bounds (a float metric is allowed float32 rounding past them); undefined: the value may be
    NaN or infinite there too (a quantity undefined for the run: meta-correction off, a ratio of 0 to 0).
    """

    low: float = -math.inf
    high: float = math.inf
    undefined: bool = False


SPEARMAN = ValidValues(-1.0, 1.0, undefined=True)  # NaN where either side is constant
PROBABILITY = ValidValues(0.0, 1.0)
NON_NEGATIVE = ValidValues(0.0)


@dataclasses.dataclass(frozen=True)
class Metric:
    """One diagnostic: a column of metrics.csv.gz.

    label: short name for tables and axes; unit: what its values are measured in;
    definition: one line a reader needs to interpret it; kind: the column's type;
    headline: one of the core curves every report shows per iteration; judge_scale: its values are on the run's own
    judges' score scale, which differs from judge to judge, so one condition's value is no reference line for
    another's; valid: the values it can take in a run that has not diverged; set_by_end_mode: its end value is fixed
    by the run's end mode up to a small drift (how concentrated the policy is), so two runs' end values differ by a
    jump only where their end modes differ (what a claim's verdict counts, `harness.inference.rule`).
    """

    name: str
    label: str
    unit: str
    definition: str
    compute: Callable[[RunView], jax.Array]
    kind: Literal["float", "int", "bool"] = "float"
    headline: bool = False
    judge_scale: bool = False
    valid: ValidValues = ValidValues()
    set_by_end_mode: bool = False

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


def _entropy(run: RunView) -> jax.Array:
    return jnp.sum(jax.scipy.special.entr(run.pi))


def _kl_from_initial(run: RunView) -> jax.Array:
    # rel_entr gives 0 where π(x) = 0, so outputs the policy has abandoned add nothing.
    return jnp.sum(jax.scipy.special.rel_entr(run.pi, jnp.exp(run.log_pi_initial)))


# The loop's own measures, first among the columns.
LOOP_MEASURES: tuple[Metric, ...] = (
    Metric(
        "policy_quality",
        "real quality",
        "q*",
        "expected ground-truth quality of the policy's output, Σₓ π(x) q*(x), exact over all outputs",
        lambda run: run.pi @ run.q_star,
        headline=True,
        set_by_end_mode=True,
    ),
    Metric(
        "judge_alignment",
        "judge alignment",
        "Spearman ρ",
        "rank correlation between the judges' reward and q*, over all outputs (the reward before any per-sample "
        "shaping a mechanism adds: what the policy trains on where none does)",
        lambda run: spearman(run.reward, run.q_star),
        headline=True,
        valid=SPEARMAN,
    ),
    Metric(
        "policy_entropy",
        "policy entropy",
        "nats",
        "entropy of the policy's distribution over all outputs, -Σₓ π(x) log π(x)",
        _entropy,
        headline=True,
        valid=NON_NEGATIVE,
    ),
    Metric(
        "judge_perceived_quality",
        "judge-perceived quality",
        "judge score",
        "expected reward of the policy's output as the judges see it, Σₓ π(x) J(x), before any per-sample shaping a "
        "mechanism adds: what the loop believes where none does",
        lambda run: run.pi @ run.reward,
        headline=True,
        judge_scale=True,
    ),
    Metric(
        "kl_from_initial",
        "KL from π₀",
        "nats",
        "how far the policy has moved from its initial self, KL(π_t ‖ π₀) = Σₓ π(x) log(π(x)/π₀(x)), exact",
        _kl_from_initial,
        valid=NON_NEGATIVE,
    ),
)

# The end mode, after every mechanism's measures.
END_MODE: tuple[Metric, ...] = (
    Metric(
        "mode_index",
        "end mode",
        "output index",
        "the policy's most probable output, as its index in enumeration order",
        lambda run: run.mode,
        kind="int",
        valid=NON_NEGATIVE,
    ),
    Metric(
        "mode_quality",
        "mode quality",
        "q*",
        "ground-truth quality of the policy's most probable output",
        lambda run: run.q_star[run.mode],
        set_by_end_mode=True,
    ),
)

# Whether the run stayed finite: the last column.
HEALTH: tuple[Metric, ...] = (
    Metric(
        "finite",
        "finite",
        "",
        "every parameter of the run's policy and judges is finite",
        lambda run: run.finite,
        kind="bool",
    ),
)

# The smallest paired difference in real quality (q* units) the report calls a difference; the one resolution of
# every table, reading, figure and claim. Runs that end at the same output have the same q* up to float32 noise (about
# 1e-5), so a mean difference of that size, even with a confidence interval that excludes zero, is the same end
# state. 0.01 is three orders of magnitude above that noise and well below any effect worth a sentence (the report
# states q*'s range across outputs beside it).
QUALITY_RESOLUTION = 0.01

# Metrics that mechanisms declared, by mechanism, in the order the mechanisms were registered. Registering a mechanism
# registers its metrics first (`harness.grid.registry.register`), even none, so the built-ins' names here also say,
# for the knob registry and the catalog too, whether the built-in mechanisms are in.
_MECHANISM_METRICS: dict[str, tuple[Metric, ...]] = {}
_BUILT_IN_OWNERS: set[str] = set()
# Measures a mechanism's per-run table yields after a run, on the host (`harness.grid.contract.RunTable.measures`),
# claimable as float metrics are: by owner mechanism, measure name -> (its table's name, its one-line definition).
_TABLE_MEASURES: dict[str, dict[str, tuple[str, str]]] = {}


class BuiltInMechanismsMissing(RuntimeError):
    """The registries were read before the built-in mechanisms registered themselves (importing `harness.mechanisms`
    registers them; the API, the command line, the report package and the experiment's runner import it)."""

    def __init__(self) -> None:
        super().__init__(
            "the built-in mechanisms are not registered: import harness.mechanisms first (harness.api, the command "
            "line, harness.report and harness.experiment.runner import it)"
        )


def built_ins_registered() -> bool:
    """Whether the built-in mechanisms have registered themselves (importing `harness.mechanisms` does)."""
    return bool(_BUILT_IN_OWNERS)


def require_built_ins() -> None:
    """Raise `BuiltInMechanismsMissing` unless the built-in mechanisms have registered themselves."""
    if not built_ins_registered():
        raise BuiltInMechanismsMissing


def register_metrics(mechanism: str, metrics: tuple[Metric, ...], builtin: bool = False) -> None:
    """Add `mechanism`'s metrics to the registry (as registering the mechanism does). Raises ValueError naming the
    clash if one of their names is taken by another metric."""
    taken = _taken_names(mechanism)
    for candidate in metrics:
        if candidate.name in taken:
            raise ValueError(
                f"metric '{candidate.name}' of mechanism '{mechanism}' is taken by {taken[candidate.name]}"
            )
    names = [candidate.name for candidate in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"mechanism '{mechanism}' declares a metric twice: {names}")
    _MECHANISM_METRICS[mechanism] = metrics
    if builtin:
        _BUILT_IN_OWNERS.add(mechanism)


def _taken_names(mechanism: str) -> dict[str, str]:
    """Every metric and table measure name registered by others than `mechanism`, -> who declared it, in words."""
    taken = {metric.name: owner for owner, own in _MECHANISM_METRICS.items() for metric in own if owner != mechanism}
    taken |= {name: owner for owner, own in _TABLE_MEASURES.items() for name in own if owner != mechanism}
    return taken | {metric.name: "the loop" for metric in (*LOOP_MEASURES, *END_MODE, *HEALTH)}


def register_table_measures(mechanism: str, table: str, definitions: dict[str, str]) -> None:
    """Add the measures `mechanism`'s per-run table `table` yields (name -> definition) to the registry, beside its
    metrics. Raises ValueError naming the clash if a name is another metric's or measure's, or its own metric's."""
    taken = _taken_names(mechanism) | {metric.name: mechanism for metric in _MECHANISM_METRICS.get(mechanism, ())}
    taken |= {name: f"table '{other}'" for name, (other, _) in _TABLE_MEASURES.get(mechanism, {}).items()}
    for name in definitions:
        if name in taken:
            raise ValueError(
                f"measure '{name}' of table '{table}' of mechanism '{mechanism}' is taken by {taken[name]}"
            )
    own = _TABLE_MEASURES.setdefault(mechanism, {})
    own |= {name: (table, definition) for name, definition in definitions.items()}


def unregister_metrics(mechanism: str) -> None:
    """Remove `mechanism`'s metrics and table measures from the registry (a mechanism unregistered, e.g. by a test)."""
    _MECHANISM_METRICS.pop(mechanism, None)
    _TABLE_MEASURES.pop(mechanism, None)


def table_measures() -> dict[str, tuple[str, str]]:
    """Every registered table measure: name -> (the per-run table it is read from, its definition), in registration
    order."""
    require_built_ins()
    return {name: source for own in _TABLE_MEASURES.values() for name, source in own.items()}


def columns(mechanisms: Sequence[str] | None = None) -> tuple[Metric, ...]:
    """The metrics of a grid whose mechanisms are `mechanisms` (registered names; None: every registered one), in
    metrics.csv.gz's column order: the loop's measures, each mechanism's measures (float metrics), the end mode, each
    mechanism's counts (int and bool metrics), whether the run stayed finite."""
    chosen = [own for name, own in _MECHANISM_METRICS.items() if mechanisms is None or name in mechanisms]
    measures = tuple(metric for own in chosen for metric in own if metric.kind == "float")
    counts = tuple(metric for own in chosen for metric in own if metric.kind != "float")
    return (*LOOP_MEASURES, *measures, *END_MODE, *counts, *HEALTH)


def all_metrics() -> tuple[Metric, ...]:
    """Every registered metric, in column order (the metrics of a grid of every registered mechanism)."""
    require_built_ins()
    return columns()


def headline_metrics() -> tuple[Metric, ...]:
    """The core curves every report shows per iteration."""
    return tuple(metric for metric in all_metrics() if metric.headline)


def loop_headline_metrics() -> tuple[Metric, ...]:
    """The loop's own headline curves: every grid's metrics table has them, whatever mechanisms it used (a
    mechanism's headline metric is in the tables of the grids that use it only)."""
    return tuple(metric for metric in LOOP_MEASURES if metric.headline)


def loop_metric(name: str) -> Metric:
    """The loop's own metric called `name` (every grid records it): readable before any mechanism registers."""
    for candidate in LOOP_MEASURES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no metric {name!r} of the loop's own; they are: {', '.join(m.name for m in LOOP_MEASURES)}")


def metric(name: str) -> Metric:
    """The registered metric called `name`."""
    registered = all_metrics()
    for candidate in registered:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no metric {name!r}; registered: {', '.join(m.name for m in registered)}")


class MechanismShapeError(ValueError):
    """A mechanism's metric or table computes an array of another shape than its contract's, found while the program
    is traced (before it compiles)."""


def owner(metric_name: str) -> str:
    """The name of the mechanism that registered a metric ("the loop" for the loop's own)."""
    return next(
        (name for name, own in _MECHANISM_METRICS.items() if any(m.name == metric_name for m in own)), "the loop"
    )


def evaluate(run: RunView, metrics: Sequence[Metric]) -> dict[str, jax.Array]:
    """Every metric of `metrics` of one run (vmap over runs for a grid).

    Raises:
        MechanismShapeError: a metric is not one number per run (checked on the traced shapes, before compiling).
    """
    values = {}
    for m in metrics:
        values[m.name] = value = m.compute(run)
        if jnp.shape(value) != ():
            raise MechanismShapeError(
                f"metric '{m.name}' of mechanism '{owner(m.name)}' computes shape {jnp.shape(value)} for one run, "
                "not one number: its compute must reduce the run's view to a scalar"
            )
    return values
