"""The report section of a grid grown until its claims are decided: the plan, the looks taken, the verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.common.wording import plural
from harness.inference.sequential import ANYTIME, Spending, method_text
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import num
from harness.report.findings import p_text, seeds_needed_text, verdict_rule, verdicts_markdown


def looks_markdown(looks: pd.DataFrame) -> str:
    """One row per look taken: its seeds, level, α spent so far, the conditions it grew and the claims it decided."""
    header = ["Look", "Seeds", "Level", "α spent", "Conditions grown", "Runs", "Decided by then", "Decided here"]
    rows = [
        [
            str(row.look),
            str(row.seeds),
            f"{row.level:.3g}",
            f"{row.spent:.3g}",
            str(row.conditions_grown),
            str(row.runs),
            str(row.decided),
            row.decided_here or "—",
        ]
        for row in looks.itertuples(index=False)
    ]
    return markdown_table(header, rows, right=[True, True, True, True, True, True, True, False])


def decisions_markdown(claims: pd.DataFrame) -> str:
    """One row per claim: its verdict, the look that decided it, its seeds there, the level and its adjusted p."""
    header = ["Claim", "Verdict", "Decided at look", "Seeds", "Level", "Δ [CI]", "p (adj.)", "Seeds needed (at α)"]
    rows = [
        [
            row.claim,
            f"**{row.verdict}**",
            "open" if pd.isna(row.decided_at_look) else str(int(row.decided_at_look)),
            str(row.seeds),
            f"{row.look_level:.3g}",
            f"{num(row.effect, signed=True)} [{num(row.ci_low, signed=True)}, {num(row.ci_high, signed=True)}]",
            p_text(row.p_adjusted),
            seeds_needed_text(row),
        ]
        for row in claims.itertuples(index=False)
    ]
    return markdown_table(header, rows, right=[False, False, True, True, True, True, True, True])


def sequential_section(
    claims: pd.DataFrame,
    looks: pd.DataFrame,
    planned: tuple[int, ...],
    levels: np.ndarray,
    alpha: float,
    spending: Spending,
) -> str:
    """Markdown of the section: method, looks, decisions, then the verdicts table with the rule each look applied.

    claims: claims.csv of the sequential run (verdict_table's columns, decided_at_look and look_level); looks: its
    looks.csv.
    """
    open_ = int(claims["decided_at_look"].isna().sum())
    earlier = (
        " These verdicts were judged by an earlier version's rule (jumps counted by the resolution alone): "
        "`coevolab run --resume DIR --until-decided` judges them again from the finished stages."
        if "jump_rule" not in claims.columns
        else ""
    )
    tally = f"{plural(len(claims) - open_, 'claim')} decided, {open_} open"
    lines = [
        "## Which claims hold, deciding as seeds were added",
        "",
        f"{tally} after {plural(len(looks), 'look')} of {len(planned)} planned. "
        + method_text(planned, levels, alpha, spending)
        + earlier,
        "",
        looks_markdown(looks),
        decisions_markdown(claims),
        (
            "Each claim's row below comes from the look that decided it (an open claim's from the last look); its "
            "verdict and p (adj.) are the e-values' of the method above (p = 1/e, adjusted m/e), and every other "
            "number is the rule's that follows. "
            if spending == ANYTIME
            else "Each claim's row below comes from the look that decided it (an open claim's from the last look), by "
            f"the rule that follows with α = {alpha:g} replaced by that look's level (*Level* above). "
        )
        + verdict_rule(claims, 1 - alpha)
        + " *Seeds needed* (open claims only) is "
        f"estimated at α = {alpha:g} from all seeds at the last look: the seeds a grid of a fixed size would need.",
        "",
        verdicts_markdown(claims),
    ]
    return "\n".join(lines)
