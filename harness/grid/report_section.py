"""A mechanism's own part of a run's report: what it is given, and what it gives back.

The report (`harness.report.write_report`) calls the section of every mechanism the grid uses, in catalog order,
after the summary and the list of conditions with identical results. A section is written with the report's own
parts (`harness.rendering`: markdown tables, number formatting, figures), so a lab's mechanism gets the same as a
built-in one. Nothing here runs in the compiled program: a report section reads the metrics table the run wrote.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from harness.engine.world import WorldConfig
from harness.grid.knobs import Knobs

# Each condition's knobs by its name, in the grid's order (`GridSpec.condition_knobs`).
ConditionKnobs = Mapping[str, Knobs]


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What a mechanism's report section reads.

    table: the run's prepared metrics table (`harness.rendering.metrics_table.prepare`): one row per condition × seed
        × iteration with every metric the run recorded, conditions in the order they first appear (the grid's), a
        float metric's non-finite values NaN. A diverged run's rows stay, flagged in `diverged`: leave them out with
        `harness.rendering.metrics_table.live` (or `final_runs`, the live runs' last iteration).
    knobs: each condition's knobs by name, in the grid's order. world: the grid's world (its outputs).
    out_dir: the run directory; a section's figure is saved under out_dir/figures/ and linked by a path relative to
        out_dir.
    figures: whether figures are drawn and linked (False: text and tables only).
    """

    table: pd.DataFrame
    knobs: ConditionKnobs
    world: WorldConfig
    out_dir: Path
    figures: bool


@dataclasses.dataclass(frozen=True)
class MechanismReport:
    """A mechanism's part of the report; either function may be None.

    section: (`ReportInputs`) -> the lines of its report.md section, a `## ` heading first, or none where the run
        gives it nothing to report (no condition uses it, or the run did not record its metrics).
    why_identical: (table, condition, each condition's knobs or None where unknown) -> a phrase on why
        `condition` may produce the same metrics as a condition that differs from it in knobs (as far as the metrics
        show it: e.g. that the mechanism never acted there), or None where it has nothing to say. The report asks it
        of both conditions of every identical pair whose knobs differ, whether or not they use the mechanism, so it
        returns None for a condition that does not; its phrases follow the knobs the two differ in. The knobs are
        None only for a report without its grid, which asks the built-in mechanisms alone.
    """

    section: Callable[[ReportInputs], list[str]] | None = None
    why_identical: Callable[[pd.DataFrame, str, ConditionKnobs | None], str | None] | None = None
