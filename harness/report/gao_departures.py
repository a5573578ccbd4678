"""The generated section "Where this world departs from the literature": each claim of a study that cites a source,
its verdict in every shape that judged it, and the perfect proxy's numbers beside it; then how Gao's forms
extrapolate.

One rule gives every word the section prints about a claim, from its verdicts (`harness.inference.verdicts`):

- "agrees" where the claim holds in every shape that judged it;
- "departs" where it is contradicted or not supported (shown absent, within its margin) in at least one shape, and
  nowhere holds: the shapes where it does are named;
- "mixed" where it holds in some shape and is contradicted or not supported in another;
- "undecided" otherwise (undecided or untested somewhere, and neither of the above).

The extrapolation lines are measurements, not verdicts: how many of the fitted curves each form predicts more closely
beyond the range it was fitted to (root mean squared error, every seed's points).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.grid.study import StudySpec
from harness.rendering.metrics_table import num
from harness.report.study_roles import StudyRoles

AGREES, DEPARTS, MIXED, UNDECIDED = "agrees", "departs", "mixed", "undecided"
BEST_OF_N = "best-of-n"  # the baselines' key of the sentence on best-of-n against q*, said once
NEGATIVE = ("contradicted", "not supported")


def reading(verdicts: pd.Series) -> str:
    """The section's word for one claim's verdicts over the shapes that judged it (the module's rule)."""
    held, against = (verdicts == "holds").any(), verdicts.isin(NEGATIVE).any()
    if len(verdicts) and (verdicts == "holds").all():
        return AGREES
    if held and against:
        return MIXED
    if against and not held:
        return DEPARTS
    return UNDECIDED


def _shape_lines(own: pd.DataFrame) -> list[str]:
    lines = []
    for _, row in own.iterrows():
        interval = f" [{num(row['ci_low'])}, {num(row['ci_high'])}]" if np.isfinite(row.get("ci_low", np.nan)) else ""
        effect = f"effect {num(row['effect'])}{interval}; " if np.isfinite(row.get("effect", np.nan)) else ""
        lines.append(f"  - {row['shape']}: **{row['verdict']}** ({effect}{row.get('why', '')})")
    return lines


def _perfect_proxy_line(metric: str, baselines: dict[str, str]) -> list[str]:
    line = baselines.get(metric)
    return [f"  - Baselines: {line}"] if line else []


def perfect_proxy_baselines(points: pd.DataFrame, fits: pd.DataFrame, per_run: pd.DataFrame, roles: StudyRoles) -> dict:
    """Sentences on what the baselines do (q* itself, and q* plus random errors at the judges' alignment), by the
    measure they sit beside, from the reference shape's data."""
    own = points[(points["shape"] == roles.reference) & (points["condition"] == roles.base)]
    curve = own[(own["optimizer"] == "best_of_n") & (own["scorer"] == "q_star")]
    out: dict[str, str] = {}
    if len(curve):
        mean = curve.groupby("step")[["kl", "gold_gain"]].mean()
        fit = fits[(fits["shape"] == roles.reference) & (fits["condition"] == roles.base)]
        fit = fit[(fit["optimizer"] == "best_of_n") & (fit["scorer"] == "q_star")]
        beta = f"; β of its d(α − β·d) fit is {num(fit['beta'].iloc[0])}" if len(fit) else ""
        text = (
            f"best-of-n from π₀ against q* itself ({roles.reference}) gains {num(mean['gold_gain'].iloc[-1])} in gold "
            f"by n = {int(mean.index[-1]):,} (KL {num(mean['kl'].iloc[-1], 2)} nats), its largest gain over the grid "
            f"being {num(mean['gold_gain'].max())}: its proxy is its gold, whose expectation never falls as n "
            f"grows{beta}."
        )
        noisy = own[(own["optimizer"] == "best_of_n") & (own["scorer"] == "noisy_q_star")]
        if len(noisy):
            gains = noisy.groupby("step")["gold_gain"].mean()
            fit = fits[(fits["shape"] == roles.reference) & (fits["condition"] == roles.base)]
            fit = fit[(fit["optimizer"] == "best_of_n") & (fit["scorer"] == "noisy_q_star")]
            beta = f" (β {num(fit['beta'].iloc[0])})" if len(fit) else ""
            text += (
                f" Against q* plus random errors at the judge's alignment it gains {num(gains.iloc[-1])} by "
                f"n = {int(gains.index[-1]):,}, {num(gains.max())} at most{beta}."
            )
        out[BEST_OF_N] = text
    own_runs = per_run[per_run["shape"] == roles.reference] if len(per_run) else per_run
    proxies = [
        (condition, how)
        for condition, how in (
            (roles.perfect_proxy, "by q* itself"),
            (roles.noisy_proxy, "by q* plus random errors at its judge's alignment"),
        )
        if condition
    ]
    if proxies and len(own_runs):
        base = own_runs[own_runs["condition"] == roles.base]
        for measure, what in (("gold_gain_at_kl_1", "gains in gold by KL = 1 nat"), ("policy_quality", "ends at")):
            said = [
                f"RL rewarded {how} ({condition}, {roles.reference}) {what} {num(values.mean())}"
                for condition, how in proxies
                if measure in own_runs
                and (values := own_runs.loc[own_runs["condition"] == condition, measure]).notna().any()
            ]
            if said:
                out[measure] = (
                    f"{'; '.join(said)} (means over seeds), against {num(base[measure].mean())} for RL against the "
                    f"judge ({roles.base})."
                )
    return out


def _extrapolation_lines(extrapolation: pd.DataFrame, base: str | None) -> list[str]:
    scored = extrapolation.dropna(subset=["rmse_beyond"]) if "rmse_beyond" in extrapolation else extrapolation
    lines = []
    for optimizer, own in scored.groupby("optimizer", sort=False):
        wide = own.pivot_table(index=["shape", "condition"], columns="form", values="rmse_beyond", sort=False)
        if optimizer not in wide or "quadratic" not in wide:
            continue
        closer = int((wide[optimizer] < wide["quadratic"]).sum())
        lines.append(
            f"- {'Best-of-n' if optimizer == 'best_of_n' else 'RL'}, fitted to {own['fitted_to'].iloc[0]}: Gao's form "
            f"predicts the rest more closely than the quadratic in {closer} of {len(wide)} curves (shape × condition; "
            "`gao_extrapolation.csv` lists each)."
        )
        for shape, curve in own[own["condition"] == base].groupby("shape", sort=False):
            gao, quadratic = curve[curve["form"] == optimizer].iloc[0], curve[curve["form"] == "quadratic"].iloc[0]
            lines.append(
                f"  - {shape}, {base}: at the last step Gao's form predicts a gold gain of "
                f"{num(gao['predicted_end'])}, the quadratic {num(quadratic['predicted_end'])}; reached: "
                f"{num(gao['actual_end'])}."
            )
    return lines


def departures_section(
    study: StudySpec,
    within: pd.DataFrame,
    across: pd.DataFrame,
    baselines: dict[str, str],
    extrapolation: pd.DataFrame,
    base: str | None = None,
) -> list[str]:
    """Markdown lines of the section: every within-shape claim with a source (in the study file's order) and every
    across claim with one, each with its word, its verdicts and the perfect proxy's numbers where the study has
    them; then the extrapolation lines, with each shape's numbers for condition `base`. Empty where no claim cites a
    source."""
    cited = {claim.name: claim for shape in study.shapes for claim in shape.grid.claims if claim.source}
    items, words = [], []
    for name, claim in cited.items():
        own = within[within["claim"] == name] if len(within) else within
        if own.empty:
            continue
        word = reading(own["verdict"])
        words.append(word)
        items += [f"- **{claim.statement}** ({claim.source}): {word}.", *_shape_lines(own)]
        items += _perfect_proxy_line(claim.metric, baselines)
    for claim in study.across:
        row = across[across["claim"] == claim.name] if len(across) else across
        if not getattr(claim, "source", "") or row.empty:
            continue
        word = reading(row["verdict"])
        words.append(word)
        items.append(f"- **{claim.statement}** ({claim.source}), across shapes: {word}: {row['why'].iloc[0]}.")
    if not items:
        return []
    counts = ", ".join(f"{word} {words.count(word)}" for word in (AGREES, DEPARTS, MIXED, UNDECIDED))
    best_of_n = (
        [f"The baselines, beside every best-of-n claim: {baselines[BEST_OF_N]}", ""] if BEST_OF_N in baselines else []
    )
    return [
        "## Where this world departs from the literature",
        "",
        "Each claim of this study that states a published finding, with its verdict in every shape that judged it. "
        "A claim **agrees** where it holds in every such shape; **departs** where it is contradicted or not "
        "supported (shown absent, within its margin) in some shape and holds in none; **mixed** where it holds in "
        "one shape and is contradicted or not supported in another; **undecided** otherwise. "
        f"Of {len(words)} claims: {counts}.",
        "",
        *best_of_n,
        *items,
        "",
        "How Gao's forms extrapolate (measured, not a verdict):",
        "",
        *_extrapolation_lines(extrapolation, base),
        "",
    ]
