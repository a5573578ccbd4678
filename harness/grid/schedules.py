"""Which runs each scheduled mechanism applies to, declared once per mechanism.

A schedule maps a run's knobs to its work group for that mechanism: None where the
mechanism never acts on the run, else a cadence class. Runs due on every inner step are
kept apart from runs on a slower cadence, because the grid skips a group's work (behind
a `lax.cond`) on steps where none of its runs is due: grouping decides cost, never
results, since every group still masks by its runs' own due flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from harness.engine.knobs import Knobs, holdout_pair_count

Cadence = Literal["every_step", "slower"]
CADENCES: tuple[Cadence, ...] = ("every_step", "slower")


def _cadence(every: int) -> Cadence:
    return "every_step" if every == 1 else "slower"


def _judge_cadence(knobs: Knobs) -> Cadence:
    # A frozen judge is never due; it shares the slower group, so freezing a run on a
    # cadence (or thawing a frozen one) keeps the grid's shape and its compiled program.
    return "slower" if knobs.freeze_judge else _cadence(knobs.judge_update_every)


def judge_update_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Self-labelled judge updates: every run."""
    del n_outputs
    return _judge_cadence(knobs)


def anchor_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """The oracle anchor rides on the judge update: runs with anchor pairs, on their judge's cadence."""
    del n_outputs
    return None if knobs.anchor_fraction == 0 else _judge_cadence(knobs)


def meta_correction_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Meta-correction: runs with at least one held-out pair."""
    if int(holdout_pair_count(knobs.meta_holdout_fraction, n_outputs)) == 0:
        return None
    return _cadence(knobs.meta_update_every)


def rejected_side_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """A rejected side other than the policy (past or initial) rides on the judge update, on its cadence."""
    del n_outputs
    return None if knobs.rejected_from == "policy" else _judge_cadence(knobs)


def lookahead_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """The look-ahead copy that draws the chosen side is trained for each judge update of runs that use it."""
    del n_outputs
    return None if knobs.chosen_from != "lookahead" else _judge_cadence(knobs)


def referee_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Meta-judging rides on the judge update: runs with a referee margin, on their judge's cadence."""
    del n_outputs
    return None if knobs.referee_margin == 0 else _judge_cadence(knobs)


def judge_ema_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """A judge's moving average follows its updates: runs with a decay, on their judge's cadence."""
    del n_outputs
    return None if knobs.judge_ema == 0 else _judge_cadence(knobs)


SCHEDULES: dict[str, Callable[[Knobs, int], Cadence | None]] = {
    "judge_update": judge_update_schedule,
    "anchor": anchor_schedule,
    "meta_correction": meta_correction_schedule,
    "rejected_side": rejected_side_schedule,
    "lookahead": lookahead_schedule,
    "referee": referee_schedule,
    "judge_ema": judge_ema_schedule,
}
