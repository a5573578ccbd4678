"""Claims judged after every block of seeds, with the error controlled at any stopping point: e-values of the jumps.

Planned looks (`sequential`) spend α over a few seed counts fixed in advance, and a claim clear at 88 seeds waits
for the next planned look. Here the verdict may be read after every block instead: each "above"/"below" claim's
effect hypothesis (as many seeds jump up as down, the rule's sign test) is tested by an e-value that is a test
martingale in the seeds, so by Ville's inequality its chance of ever reaching 1/α', at any look, chosen after seeing
the data, is at most α' (Ramdas, Grünwald, Vovk & Shafer 2023, "Game-theoretic statistics and safe anytime-valid
inference").

The e-value of a claim against one rival is the mixture likelihood ratio of its jumps' directions, a jump up with
chance p under a Beta(½, ½) prior on p against p = ½:

    E = B(u + ½, d + ½) / B(½, ½) × 2^(u + d)    (u jumps up, d down; ties add nothing)

It depends on the counts alone, so the seeds' order does not matter. A family's claims share α by Bonferroni
(each claim's e-value against m/α, m the family's tested mean claims), a claim against several rivals holds where
every rival's e-value passes (intersection–union) and is contradicted where one passes R times the threshold. The
verdict words are the rule's (`rule`): "holds" needs the jumps the claimed way adding up to at least the resolution,
"contradicted" the other way. Spread claims, "equal" claims and "not supported" have no e-value here: they stay
undecided, and the verdict says so (use planned looks for them). p_value
is 1/E, an anytime-valid p-value; p_adjusted its Bonferroni adjustment, m/E.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.special

from harness.inference.claims import Claim
from harness.inference.rule import ClaimData
from harness.inference.verdicts import DEFAULT_FAMILY, MIN_SEEDS, claim_data, verdict_table

PRIOR = 0.5  # Beta(½, ½): the Jeffreys prior on the chance of a jump up


def sign_e_value(up: int, down: int) -> float:
    """The mixture e-value of u jumps up and d down against equal chances (a test martingale in the jumps)."""
    log_e = scipy.special.betaln(up + PRIOR, down + PRIOR) - scipy.special.betaln(PRIOR, PRIOR)
    return float(np.exp(log_e + (up + down) * np.log(2.0)))


def _rival_counts(data: ClaimData, index: int, resolution: float) -> tuple[int, int, float]:
    """(jumps up, jumps down, mean of the jumps over all seeds) against rival `index`."""
    jumps = data.differences(index, resolution)
    return int(np.sum(jumps > 0)), int(np.sum(jumps < 0)), float(np.mean(jumps)) if len(jumps) else 0.0


def anytime_verdict(claim: Claim, data: ClaimData, threshold: float) -> tuple[str, str, float]:
    """(verdict, why, the claim-level e-value) of one "above"/"below" claim at Bonferroni threshold `threshold`
    (m/α)."""
    r, rivals = claim.resolution, len(data.others)
    counts = [_rival_counts(data, i, r) for i in range(rivals)]
    values = [sign_e_value(up, down) for up, down, _ in counts]
    sign = -1.0 if claim.direction == "below" else 1.0

    def told(i: int) -> str:
        up, down, _ = counts[i]
        words = data.jump_words(r, up + down)
        return f"of the {up + down} {words}, {up} end higher and {down} lower (sign e-value {values[i]:.3g})"

    need = f"{threshold * rivals:.3g}"
    favour = [sign * (up - down) > 0 for up, down, _ in counts]
    if all(favour):
        weakest = int(np.argmin(values))
        if values[weakest] >= threshold:
            if min(sign * mean for _, _, mean in counts) >= r:
                why = f"{told(weakest)} ≥ {threshold:.3g}, adding up to {counts[weakest][2]:+.3g}"
                return "holds", why, values[weakest]
            why = f"{told(weakest)}, but adding up to less than the resolution ({r:g})"
            return "undecided", why, values[weakest]
    against = [i for i in range(rivals) if not favour[i]]
    if against:
        strongest = max(against, key=lambda i: values[i])
        mean = counts[strongest][2]
        if values[strongest] >= threshold * rivals and sign * mean <= -r:
            why = f"{told(strongest)} ≥ {need}: the other way, adding up to {mean:+.3g}"
            return "contradicted", why, values[strongest]
    weakest = int(np.argmin(values))
    return "undecided", f"{told(weakest)}: below {threshold:.3g}, not decided", values[weakest]


def anytime_table(
    metrics: pd.DataFrame,
    claims: Sequence[Claim],
    alpha: float,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """The verdicts table (`verdicts.verdict_table`'s columns, its descriptive numbers) with every verdict, why,
    p_value (1/E) and p_adjusted (m/E) from the e-values of the module, valid at any look. Families as the
    fixed-seed rule forms them; m: a family's mean claims with at least MIN_SEEDS seeds."""
    table = verdict_table(metrics, claims, 1 - alpha, estimate_seeds=False, ranges=ranges)
    datas = [claim_data(metrics, claim, ranges)[0] for claim in claims]
    families = [claim.family or DEFAULT_FAMILY for claim in claims]
    tested = [
        c.statistic == "mean" and c.direction != "equal" and len(d.side) >= MIN_SEEDS
        for c, d in zip(claims, datas, strict=True)
    ]
    sizes = pd.Series([f for f, t in zip(families, tested, strict=True) if t]).value_counts()
    for row, (claim, data) in enumerate(zip(claims, datas, strict=True)):
        if not tested[row]:
            if len(data.side) >= MIN_SEEDS:
                kind = "a spread claim" if claim.statistic == "std" else "an equal claim"
                table.loc[row, ["verdict", "why"]] = (
                    "undecided",
                    f"{kind} has no anytime-valid test here: judge it with planned looks",
                )
            continue
        m = int(sizes[families[row]])
        verdict, why, e_value = anytime_verdict(claim, data, m / alpha)
        if verdict == "undecided":
            why += "; equivalence is not tested after every block"
        table.loc[row, ["verdict", "why", "test", "adjustment"]] = (
            verdict,
            why,
            "sign e-value on the jumps (Beta(½, ½) mixture), valid at any look",
            f"Bonferroni over {m} (e-values)",
        )
        table.loc[row, ["p_value", "p_error", "p_adjusted"]] = (min(1.0, 1 / e_value), 0.0, min(1.0, m / e_value))
        table.loc[row, ["equivalence_p", "equivalence_p_adjusted"]] = (np.nan, np.nan)
    return table
