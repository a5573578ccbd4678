"""Conditions whose runs came out the same: detected from the metrics, explained from the metrics and the grid.

Two conditions are identical when they have the same seeds and iterations, the same diverged flags and end modes,
and every registered metric that both record agrees to IDENTICAL_TOLERANCE at every seed and iteration. A metric that
one of them never records (held-out accuracy without meta-correction) is left out of the comparison. Why two
conditions coincide is read from the knobs they differ in and from each mechanism's own word on it
(`MechanismReport.why_identical`: e.g. that it never acted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.common.wording import plural
from harness.engine import metrics as registry
from harness.grid import registry as mechanism_registry
from harness.grid.contract import Mechanism
from harness.grid.spec import GridSpec
from harness.rendering.metrics_table import conditions, power_of_ten
from harness.report.grid_info import knob_value

# Relative and absolute: the same computation at another position of a batched program may round differently in
# float32 (about 1e-7 relative); anything a mechanism changes moves far more than this.
IDENTICAL_TOLERANCE = 1e-5


def _columns(prepared: pd.DataFrame) -> list[str]:
    return [x.name for x in registry.all_metrics() if x.name in prepared.columns] + [
        c for c in ("mode_sequence", "diverged") if c in prepared.columns
    ]


def _same(a: pd.Series, b: pd.Series) -> bool:
    """Equal to IDENTICAL_TOLERANCE where both are recorded; a column one side never records does not count."""
    if a.dtype.kind in "fi" and b.dtype.kind in "fi":
        x, y = a.to_numpy(float), b.to_numpy(float)
        if np.isnan(x).all() or np.isnan(y).all():
            return True
        return bool(np.all(np.isclose(x, y, rtol=IDENTICAL_TOLERANCE, atol=IDENTICAL_TOLERANCE, equal_nan=True)))
    return bool((a.astype(str).to_numpy() == b.astype(str).to_numpy()).all())


def identical_groups(prepared: pd.DataFrame) -> list[tuple[str, ...]]:
    """Groups (of two or more) of identical conditions, each in grid order, groups ordered by their first member.

    prepared: the prepared metrics table (`prepare`).
    """
    columns = _columns(prepared)
    tables = {
        c: prepared[prepared["condition"] == c].set_index(["seed", "iteration"]).sort_index()[columns]
        for c in conditions(prepared)
    }
    names = list(tables)
    group_of = {c: c for c in names}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if group_of[b] != b or not tables[a].index.equals(tables[b].index):
                continue
            if all(_same(tables[a][col], tables[b][col]) for col in columns):
                group_of[b] = group_of[a]
    groups: dict[str, list[str]] = {}
    for c in names:
        groups.setdefault(group_of[c], []).append(c)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def distinct(names: list[str], groups: list[tuple[str, ...]]) -> list[str]:
    """names with all but the first of each identical group's members among them left out: one entry per result,
    for counting. A group's first member among names (grid order) stands for the members among names."""
    later = {c for group in groups for c in [member for member in group if member in names][1:]}
    return [c for c in names if c not in later]


def counted_once(names: list[str], groups: list[tuple[str, ...]]) -> str:
    """The clause a count over names adds when some of them are one result: "" when none are, else e.g.
    "`a` = `b` counted once". Only the groups with two or more members among names are named."""
    inside = [g for group in groups if len(g := tuple(c for c in group if c in names)) > 1]
    if not inside:
        return ""
    listed = ["` = `".join(g) for g in inside]
    return "`" + "`, `".join(listed) + "` counted once"


def _mechanisms(grid: GridSpec | None) -> tuple[Mechanism, ...]:
    """The mechanisms whose word on identical conditions counts: the grid's, or the built-in ones without a grid."""
    return grid.active_mechanisms if grid is not None else mechanism_registry.active()


def _why(prepared: pd.DataFrame, condition: str, grid: GridSpec | None) -> list[str]:
    """Each mechanism's phrase on why `condition` may match another (`MechanismReport.why_identical`), in catalog
    order; none where no mechanism has one."""
    explainers = [m.report.why_identical for m in _mechanisms(grid) if m.report and m.report.why_identical]
    knobs = grid.condition_knobs if grid is not None else None
    return [reason for explain in explainers if (reason := explain(prepared, condition, knobs))]


def _knob_difference(grid: GridSpec, a: str, b: str) -> str:
    first, second = grid.condition(a).knobs, grid.condition(b).knobs
    names = dict.fromkeys([*first.model_dump(), *second.model_dump()])
    changed = [k for k in names if getattr(first, k) != getattr(second, k)]
    if not changed:
        return "same knobs: one configuration under two names"
    listed = [f"`{k}` ({knob_value(getattr(first, k))} vs {knob_value(getattr(second, k))})" for k in changed]
    return "they differ only in " + (", ".join(listed[:-1]) + " and " if len(listed) > 1 else "") + listed[-1]


def explain(prepared: pd.DataFrame, group: tuple[str, ...], grid: GridSpec | None) -> str:
    """One line naming the group and, as far as the knobs (grid) and the metrics show it, why its results coincide."""
    first, rest = group[0], group[1:]
    reasons = []
    for other in rest:
        parts = [_knob_difference(grid, first, other)] if grid else []
        if not grid or grid.condition(first).knobs != grid.condition(other).knobs:
            said = [reason for c in (first, other) for reason in _why(prepared, c, grid)]
            parts += said or ["the metrics do not show why"]
        reasons.append(f"`{other}`: " + "; ".join(parts) if len(rest) > 1 else "; ".join(parts))
    names = " = ".join(f"`{c}`" for c in group)
    return f"- {names}: " + " / ".join(reasons) + "."


def identical_section(prepared: pd.DataFrame, grid: GridSpec | None, groups: list[tuple[str, ...]]) -> list[str]:
    """The report's lines on identical conditions (none when there are none); groups: identical_groups(prepared)."""
    if not groups:
        return []
    return [
        f"{plural(len(groups), 'group')} of conditions produced the same metrics at every seed and iteration "
        f"(every metric both record agrees within {power_of_ten(IDENTICAL_TOLERANCE)}, relative or absolute); the "
        "tables list each condition, but each group is one result:",
        "",
        *(explain(prepared, g, grid) for g in groups),
        "",
    ]
