"""The pair audit's part of a run's report (`REPORT`): the judge's training pairs, audited exactly, how often their
labels are wrong, and how far apart their sides are.

Each condition's pairs come from its pair source (`Knobs.chosen_from`, `Knobs.rejected_from`): two policy samples
labelled by the judge, or a contrast (a past checkpoint, π₀ or a look-ahead copy against the policy) labelled
chosen > rejected. The audits (`harness.engine.pair_audits`) are exact sums over every pair, so the section reads
them as means over seeds with bootstrap CIs, and answers the follow-up work's questions in numbers: how often "newer is
better" is wrong as training proceeds, whether anchored rejection keeps the chosen–rejected gap open, and whether
any pair source beats slower judge updates.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.engine.metrics import metric
from harness.grid.knobs import Knobs
from harness.grid.report_section import ConditionKnobs, MechanismReport, ReportInputs
from harness.inference.verdicts import MIN_SEEDS, paired_bootstrap_ci
from harness.rendering.figure_parts import integer_x, mean_band, new_figure, panels, save, wrap
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import conditions, mean_std_ci, num, reference

PAIR_METRICS = ("pair_label_error", "pair_label_error_distinct", "pair_quality_gap", "pair_identical")
FIGURE = "figures/pair_audits.png"


def pair_source(knobs: Knobs) -> str:
    """A condition's pair source in words."""
    chosen = "look-ahead copy" if knobs.chosen_from == "lookahead" else "policy"
    past = f"checkpoint {knobs.temporal_gap} back" if knobs.temporal_gap else "live policy (gap 0)"
    rejected = {"policy": "policy", "initial": "π₀", "past": past}
    if knobs.chosen_from == "policy" and knobs.rejected_from == "policy":
        words = "policy vs policy, judge-labelled"
    else:
        words = f"{chosen} > {rejected[knobs.rejected_from]}"
        if knobs.contrast_mix < 1:
            words += f" on {knobs.contrast_mix:g} of updates"
    words += f"; referee margin {knobs.referee_margin:g}" if knobs.referee_margin > 0 else ""
    return words + (" (frozen: never trains on them)" if knobs.freeze_judge else "")


def _mean_ci(values: pd.Series) -> str:
    """Mean over seeds with its 95% Student-t CI from MIN_SEEDS seeds on, as every mean of the report."""
    n, mean, _, low, high = mean_std_ci(values, 0.95)
    if n == 0:
        return "·"
    return num(mean) if n < MIN_SEEDS else f"{num(mean)} [{num(low)}, {num(high)}]"


DISTINCT_ERROR = "pair_label_error_distinct"


def _at(prepared: pd.DataFrame, condition: str, iteration: int, column: str) -> pd.Series:
    """One column of a condition's runs at an iteration, by seed."""
    rows = prepared[(prepared["condition"] == condition) & (prepared["iteration"] == iteration)]
    return rows.set_index("seed")[column]


def _paired(prepared: pd.DataFrame, side: str, other: str, iteration: int, column: str) -> str:
    """The mean paired difference side − other over shared seeds, with its 95% bootstrap interval from MIN_SEEDS
    paired seeds on (as every interval of the report's descriptive numbers)."""
    a, b = _at(prepared, side, iteration, column), _at(prepared, other, iteration, column)
    seeds = a.index.intersection(b.index)
    effect, low, high = paired_bootstrap_ci(a[seeds].to_numpy(float), b[seeds].to_numpy(float), "mean", 0.95)
    if len(seeds) < MIN_SEEDS:
        return num(effect, signed=True)
    return f"{num(effect, signed=True)} [{num(low, signed=True)}, {num(high, signed=True)}]"


def _slow_judge(knobs: ConditionKnobs) -> str | None:
    """The grid's plain slower-judge condition (only judge_update_every set), the slowest if several."""
    defaults = Knobs()
    plain = [
        name
        for name, own in knobs.items()
        if own.judge_update_every > 1
        and own == defaults.model_copy(update={"judge_update_every": own.judge_update_every})
    ]
    return max(plain, key=lambda name: knobs[name].judge_update_every) if plain else None


def _same_end_modes(prepared: pd.DataFrame, knobs: ConditionKnobs) -> list[list[str]]:
    """Groups of two or more conditions with a contrast pair source whose runs end at the same output seed by seed."""
    last = int(prepared["iteration"].max())
    final = prepared[prepared["iteration"] == last].pivot_table(index="condition", columns="seed", values="mode_index")
    groups: dict[tuple, list[str]] = {}
    for name in conditions(prepared):
        own = knobs[name]
        if name in final.index and (own.rejected_from != "policy" or own.chosen_from != "policy"):
            groups.setdefault(tuple(final.loc[name]), []).append(name)
    return [group for group in groups.values() if len(group) > 1]


def pair_table(prepared: pd.DataFrame, knobs: ConditionKnobs) -> pd.DataFrame:
    """Per condition: its pair source and the audits at iteration 1 and the last (mean [95% Student-t CI])."""
    last = int(prepared["iteration"].max())
    rows = []
    for name in conditions(prepared):
        row = {"condition": name, "pairs": pair_source(knobs[name])}
        row["label error, a ≠ b @1"] = _mean_ci(_at(prepared, name, 1, DISTINCT_ERROR))
        row[f"label error, a ≠ b @{last}"] = _mean_ci(_at(prepared, name, last, DISTINCT_ERROR))
        row[f"label error @{last}"] = _mean_ci(_at(prepared, name, last, "pair_label_error"))
        row["q* gap @1"] = _mean_ci(_at(prepared, name, 1, "pair_quality_gap"))
        row[f"q* gap @{last}"] = _mean_ci(_at(prepared, name, last, "pair_quality_gap"))
        row[f"identical @{last}"] = _mean_ci(_at(prepared, name, last, "pair_identical"))
        if knobs[name].referee_margin > 0:
            row[f"re-judged @{last}"] = _mean_ci(_at(prepared, name, last, "referee_share"))
            row[f"referee error @{last}"] = _mean_ci(_at(prepared, name, last, "referee_label_error"))
        rows.append(row)
    return pd.DataFrame(rows).fillna("·")


def _readings(prepared: pd.DataFrame, knobs: ConditionKnobs) -> list[str]:
    last, ref = int(prepared["iteration"].max()), reference(prepared)
    lines = []
    for name in conditions(prepared):
        own = knobs[name]
        if own.rejected_from == "past" and own.chosen_from == "policy" and own.contrast_mix == 1:
            by_iteration = prepared[prepared["condition"] == name].groupby("iteration")[DISTINCT_ERROR].mean()
            worst = int(by_iteration.iloc[1:].idxmax())
            peak = f"{num(by_iteration.loc[worst])} at its worst (iteration {worst}), " if worst != last else ""
            lines.append(
                f"- **Is newer better?** `{name}`: among pairs of two different outputs, the label 'newer > older' "
                f"is wrong on {_mean_ci(_at(prepared, name, 1, DISTINCT_ERROR))} after iteration 1, {peak}and "
                f"{_mean_ci(_at(prepared, name, last, DISTINCT_ERROR))} at iteration {last} (0.5 is a coin; the "
                f"reference's own labels: {_mean_ci(_at(prepared, ref, last, DISTINCT_ERROR))}). Counting the pairs of "
                f"one output, {_mean_ci(_at(prepared, name, last, 'pair_identical'))} of all pairs at the end and "
                f"never wrong, the label error is {_mean_ci(_at(prepared, name, last, 'pair_label_error'))}."
            )
        if own.rejected_from == "initial" and name != ref:
            gap = _paired(prepared, name, ref, last, "pair_quality_gap")
            quality = _paired(prepared, name, ref, last, "policy_quality")
            lines.append(
                f"- **Does anchored rejection keep the gap open?** `{name}`: E|q*(chosen) − q*(rejected)| at iteration "
                f"{last} is {_mean_ci(_at(prepared, name, last, 'pair_quality_gap'))} against the reference's "
                f"{_mean_ci(_at(prepared, ref, last, 'pair_quality_gap'))} (paired Δ {gap}); its final real quality "
                f"differs from the reference's by {quality} (descriptive)."
            )
    slow = _slow_judge(knobs)
    if slow is not None and slow in conditions(prepared):
        roles = (
            prepared.groupby("condition")["boundary"].first()
            if "boundary" in prepared.columns
            else pd.Series(dtype=bool)
        )
        others = [n for n in conditions(prepared) if n not in (slow, ref) and not bool(roles.get(n, False))]
        rows = []
        for name in others:
            rows.append(f"`{name}` {_paired(prepared, name, slow, last, 'policy_quality')}")
        if rows:
            lines.append(
                f"- **Does any beat slower judge updates?** Each condition's final real quality minus `{slow}`'s, "
                f"paired over seeds, with a 95% bootstrap CI per comparison from {MIN_SEEDS} paired seeds on "
                "(descriptive: a claim in the condition file gets a verdict): " + "; ".join(rows) + "."
            )
    first_modes = _same_end_modes(prepared, knobs)
    if first_modes:
        lines.append(
            "- **Same ends.** "
            + "; ".join(
                f"{', '.join(f'`{n}`' for n in group)} end at the same output on every seed" for group in first_modes
            )
            + ". Before the first checkpoint every past side is π₀, so temporal and anchored pairs coincide during "
            "the first iteration, and the policy has mostly chosen its end mode by then."
        )
    return lines


def _figure(prepared: pd.DataFrame, out_dir: Path) -> Path:
    """Label error among pairs of two different outputs (those with a signal) and q* gap of the training pairs over
    training, one panel per condition, the reference in grey."""
    names, ref = conditions(prepared), reference(prepared)
    fig = new_figure(2.6 * min(len(names), 4), 2.3 * 2 * -(-len(names) // 4))
    sub = fig.subfigures(2, 1)
    for subfigure, column in zip(sub, (DISTINCT_ERROR, "pair_quality_gap"), strict=True):
        audit = metric(column)
        axes = panels(subfigure, len(names), 4, sharex=True, sharey=True)
        for ax, name in zip(axes, names, strict=True):
            if name != ref:
                mean_band(ax, prepared[prepared["condition"] == ref], column, "0.6", lw=1.2)
            mean_band(ax, prepared[prepared["condition"] == name], column, "#1f77b4")
            ax.set_title(wrap(name, 28), fontsize=8)
            integer_x(ax)
        subfigure.suptitle(
            f"{audit.label} ({audit.unit}) over outer iterations: mean over seeds, 95% bootstrap band; grey: {ref}",
            fontsize=10,
        )
    return save(fig, out_dir / FIGURE)


def pair_section(inputs: ReportInputs) -> list[str]:
    """report.md lines for the pair audits (none where the table predates them); writes the figure into the run
    directory (where inputs.figures: else it is neither drawn nor linked)."""
    prepared, knobs, out_dir = inputs.table, inputs.knobs, inputs.out_dir
    if any(column not in prepared.columns for column in PAIR_METRICS):
        return []
    last = int(prepared["iteration"].max())
    link: list[str] = []
    if inputs.figures:
        path = Path(_figure(prepared, out_dir)).relative_to(out_dir).as_posix()
        link = [f"![The judge's training pairs over training]({path})", ""]
    table = pair_table(prepared, knobs)
    return [
        "## The judge's training pairs, audited exactly",
        "",
        "Each judge update trains on a batch of pairs with labels. Every number here is an exact sum over all "
        f"{inputs.world.n_outputs:,}² pairs of outputs under the distribution the condition's judge draws its pairs "
        "from, as it stands at the end of the iteration: **label error** is the probability that a pair's label "
        "prefers the side of lower q*, **q* gap** is E|q*(a) − q*(b)| (the signal the pair carries; the Temporal "
        "Self-Rewarding note's 'gap narrows'), **identical** the probability that both sides are one output (such a "
        "pair is never wrong, and carries no signal), **label error, a ≠ b** the label error among pairs of two "
        "different outputs. "
        f"Means over seeds with 95% Student-t CIs, at iteration 1 and {last}. The q* gap counts pairs of one output "
        "(gap 0), so it closes with collapse as well as with narrowing. A frozen judge's row describes the pairs it "
        "would train on.",
        "",
        markdown_table(list(table.columns), table.to_numpy().tolist(), [False, False] + [True] * (table.shape[1] - 2)),
        "",
        *_readings(prepared, knobs),
        "",
        *link,
    ]


REPORT = MechanismReport(section=pair_section)

__all__ = ["FIGURE", "PAIR_METRICS", "REPORT", "pair_section", "pair_source", "pair_table"]
