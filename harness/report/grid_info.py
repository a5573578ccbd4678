"""What the report says about the grid itself, from the run's grid.json: the world's q* scale, the conditions'
mechanisms and the knobs they set.

Every function takes the resolved grid (`GridSpec`, as grid.json records it) and renders "How to read this" lines;
numbers are computed (q* from the world the grid names), descriptions are the condition file's and `Knobs`'s own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.common.wording import plural
from harness.engine.world import World
from harness.grid.knobs import Knobs, knob_fields, knob_unit
from harness.grid.spec import GridSpec
from harness.rendering.metrics_table import num

DEFAULTS = Knobs()


@dataclass(frozen=True)
class QStarScale:
    """Summary of q* over every output of a world."""

    n_outputs: int
    vocab_size: int
    seq_len: int
    low: float
    high: float
    mean: float
    std: float


def q_star_scale(grid: GridSpec) -> QStarScale:
    """q* over all outputs of the grid's world, computed from the world itself (no stored numbers)."""
    world = World(grid.world)
    q = np.asarray(world.q_star, dtype=np.float64)
    return QStarScale(
        n_outputs=world.n_outputs,
        vocab_size=grid.world.vocab_size,
        seq_len=grid.world.seq_len,
        low=float(q.min()),
        high=float(q.max()),
        mean=float(q.mean()),
        std=float(q.std()),
    )


def q_star_line(grid: GridSpec) -> str:
    """The "How to read this" line on q*'s scale and range."""
    s = q_star_scale(grid)
    return (
        f"- **q\\* scale**: q* is a fixed number per output; over the {s.n_outputs:,} outputs of this world "
        f"({s.vocab_size} tokens, length {s.seq_len}) it runs from {num(s.low)} to {num(s.high)}, mean {num(s.mean)} "
        f"(what a uniformly random policy scores), standard deviation {num(s.std)}."
    )


def family(name: str) -> str:
    """A condition's family: its name before the knob values in brackets ("slow-judge[k=2]" -> "slow-judge")."""
    return name.split("[", 1)[0]


def knob_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def set_knobs(grid: GridSpec, names: list[str]) -> dict[str, list[object]]:
    """Knobs that some of the named conditions set away from their defaults, each with the distinct values the named
    conditions take (defaults included: "1, 10, 200" where one condition leaves the knob at 1), in order."""
    knobs = [condition.knobs.model_dump() for condition in map(grid.condition, names)]
    names = list(dict.fromkeys(k for values in knobs for k in values))
    changed = [k for k in names if any(values.get(k, getattr(DEFAULTS, k)) != getattr(DEFAULTS, k) for values in knobs)]
    return {k: list(dict.fromkeys(values.get(k, getattr(DEFAULTS, k)) for values in knobs)) for k in changed}


def condition_lines(grid: GridSpec, role: dict[str, str]) -> list[str]:
    """One line per condition family in grid order: its role, its mechanism (the condition file's description) and
    the knob values its conditions set."""
    families: dict[str, list[str]] = {}
    for condition in grid.conditions:
        if condition.name in role:
            families.setdefault(family(condition.name), []).append(condition.name)
    lines = ["- **Conditions** (one line per family; brackets in a name give the knob values that set it apart):"]
    for name, members in families.items():
        first = grid.condition(members[0])
        label = f"`{name}[…]`" if len(members) > 1 or members[0] != name else f"`{name}`"
        roles = ", ".join(dict.fromkeys(role[c] for c in members))
        count = f", {plural(len(members), 'condition')}" if len(members) > 1 else ""
        knobs = set_knobs(grid, members)
        setting = "; ".join(f"`{k}` = {', '.join(knob_value(v) for v in vs)}" for k, vs in knobs.items())
        text = f"  - {label} ({roles}{count}): {first.description or 'no description'}"
        lines.append(text + (f" ({setting})." if setting else "."))
    return lines


def knob_lines(grid: GridSpec, names: list[str]) -> list[str]:
    """The knobs the grid sets: what the counting ones count, then each with its documentation from `Knobs`."""
    knobs = set_knobs(grid, names)
    if not knobs:
        return []
    units: dict[str, list[str]] = {}
    for knob in knobs:
        if unit := knob_unit(knob):
            units.setdefault(unit, []).append(f"`{knob}`")
    counts = "; ".join(
        f"{' and '.join(listed)} count{'s' if len(listed) == 1 else ''} {unit}" for unit, listed in units.items()
    )
    steps = plural(grid.run.steps_per_iteration, "inner policy step")
    lines = [
        "- **Knobs** this grid sets (the rest keep their defaults; documented in the mechanisms' modules, "
        f"`harness/mechanisms/`). An outer iteration is {steps}" + (f"; {counts}." if counts else ".")
    ]
    fields = knob_fields()
    lines += [f"  - `{knob}`: {fields[knob].description}." for knob in knobs]
    return lines
