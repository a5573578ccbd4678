"""The verdict rule's calibration table: `python -m tools.calibration [--families N] [--out DIR]` (make calibration).

Simulates nulls A, B, C, D (drifts within an end mode, counted by end mode and, for comparison, by the resolution
alone) and two true effects at 20, 100 and 200 seeds through the rule as shipped
(`harness.inference.calibration`), with the real baseline's end values and the published grid's claims read from
the committed 100-seed run, and writes into DIR (default artifacts/reference/calibration):
- families.csv: familywise and per-claim error, power (per scenario and seed count);
- margins.csv: the error of the equivalence verdicts when the truth sits exactly at the margin;
- coverage.csv: the betting interval's coverage of the mean difference;
- seeds_needed.csv: the seeds-needed estimate across generator seeds, and the power the rule has there;
- sequential.csv: familywise error of families grown look by look to 200 seeds (planned looks, anytime e-values);
- calibration.md: all five as tables (the README's docs block is rendered from it).
--only NAME (repeatable) recomputes those tables alone and reads the others back from DIR.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs the grids set)
from harness.common.run_files import metrics_file
from harness.grid.conditions import load_grid
from harness.inference import calibration as cal
from harness.inference.claims import Claim
from harness.inference.rule import ClaimData
from harness.inference.run_measures import metric_ranges
from harness.inference.seeds_needed import TARGET, seeds_needed
from harness.inference.sequential import ANYTIME, SPENDING_FUNCTIONS, SPENDING_NAMES, anytime_looks, planned_looks
from harness.inference.verdicts import judged
from harness.rendering.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "artifacts" / "reference" / "paper-100"
OUT = ROOT / "artifacts" / "reference" / "calibration"
SEEDS = (20, 100, 200)
EFFECT_CLAIM = "reset-3-modestly-above"
MODERATE = cal.Jumps((0.25, 0.5, -0.25, -0.5), (0.075, 0.075, 0.02, 0.02))
EQUAL_AT_MARGIN = cal.Jumps((0.25, -0.25), (0.25, 0.05))  # mean 0.05: an "equal" claim's margin
ABOVE_AT_RESOLUTION = cal.Jumps((0.25, -0.25), (0.10, 0.06))  # mean 0.01: an "above" claim's resolution
HOLM_FIRST_STEP = 17  # a 17-claim family; no equivalence hypothesis can reject below 551 seeds, so none joins it
POPULATION = 60  # seeds observed before estimating the seeds needed


def _end_values(metrics: pd.DataFrame, condition: str, metric: str = "policy_quality") -> np.ndarray:
    last = metrics["iteration"].max()
    rows = metrics[(metrics["condition"] == condition) & (metrics["iteration"] == last)].sort_values("seed")
    return rows[metric].to_numpy(np.float64)


def _pairs(metrics: pd.DataFrame, condition: str, than: str) -> tuple[np.ndarray, np.ndarray]:
    """(differences of real quality, whether the two runs share their end mode) per seed at the last iteration."""
    differences = _end_values(metrics, condition) - _end_values(metrics, than)
    same = _end_values(metrics, condition, "mode_index") == _end_values(metrics, than, "mode_index")
    return differences, same


def scenarios(metrics: pd.DataFrame, claims: list[Claim]) -> list[cal.Scenario]:
    baseline = _end_values(metrics, "baseline")
    slow = _end_values(metrics, "slow-judge[judge_update_every=10]")
    null_a = cal.independent_ends(baseline)
    effect_at = [c.name for c in claims].index(EFFECT_CLAIM)
    differences, same = _pairs(metrics, "frozen", "baseline")
    drifts = cal.within_mode_drifts(differences, same, baseline, null_a)
    drift_mean = float(np.mean(np.where(same, differences, 0.0)))

    def empirical(differences: np.ndarray) -> cal.Draw:
        def draw(rng: np.random.Generator, claim: Claim, n: int) -> tuple[np.ndarray, np.ndarray]:
            other = rng.choice(baseline, size=n)
            return other + rng.choice(differences, size=n), other

        return draw

    return [
        cal.Scenario("A", "both sides drawn independently from the baseline's end values", null_a),
        cal.Scenario(
            "B",
            "skewed jumps of mean 0 (+0.764 at 3.5%, −0.25 at 10.7%)",
            cal.jumps_from(baseline, cal.SKEWED_NULL, null_a),
        ),
        cal.Scenario("C", "A with every difference moved by −0.001", cal.independent_ends(baseline, -0.001)),
        cal.Scenario(
            "D",
            f"the committed frozen-vs-baseline pairs: same-mode drifts as measured (mean {drift_mean:+.4f}), "
            "jumps between modes given random signs",
            drifts,
        ),
        cal.Scenario("D by resolution", "D with jumps counted by the resolution alone", cal.without_end_modes(drifts)),
        cal.Scenario(
            "moderate",
            "A, and one claim with jumps up 15%, down 4% (±0.25, ±0.5)",
            null_a,
            cal.jumps_from(baseline, MODERATE, null_a),
            effect_at,
        ),
        cal.Scenario(
            "large",
            "A, and one claim with slower judge updates' own differences from the baseline",
            null_a,
            empirical(slow - baseline),
            effect_at,
        ),
    ]


# (direction, margin, shape, jumps, jump share p₀: None where equivalence is the mean's via the range)
MARGIN_CASES = (
    ("equal", 0.05, "even jumps", EQUAL_AT_MARGIN, None),
    ("equal", 0.05, "rare large jumps", cal.Jumps((0.764,), (0.05 / 0.764,)), None),
    ("above", 0.01, "even jumps", ABOVE_AT_RESOLUTION, None),
    ("above", 0.01, "rare large jumps", cal.Jumps((0.764,), (0.01 / 0.764,)), None),
    ("equal", 0.05, "10% of seeds jump (p₀ = 0.1)", cal.Jumps((0.25, -0.25), (0.05, 0.05)), 0.1),
)


# The margin cases' range: their jumps (±0.25, 0.764) lie within it, and the TOST can reject from 72 seeds at margin
# 0.05 and from 367 at 0.01, so the table shows the rule deciding (at q*'s range it cannot below 551 seeds).
MARGIN_BOUND = 1.0


def margins(datasets: int, bound: float = MARGIN_BOUND) -> pd.DataFrame:
    """The verdicts' error with the truth exactly at the margin (an "equal" claim's holds or contradicted, an "above"
    claim's not supported), the rule's and a sign-flip TOST's, within a range of `bound`."""
    rows = []
    for direction, margin, shape, jumps, share in MARGIN_CASES:
        name = f"{direction}-at-{'share' if share is not None else 'margin'}"
        claim = cal.value_claim(direction, margin, name=name, jump_share=share)
        for n in SEEDS:
            rule_error, flip_error = cal.margin_errors(claim, jumps, bound, n, datasets, seed=3)
            flip_error = flip_error if share is None else np.nan  # a TOST of the mean says nothing of a share
            rows.append(
                {
                    "claim": claim.name,
                    "jumps": shape,
                    "margin": margin,
                    "seeds": n,
                    "datasets": datasets,
                    "verdict_error": rule_error,
                    "sign_flip_tost_error": flip_error,
                }
            )
    return pd.DataFrame(rows)


def coverage(found: list[cal.Scenario], datasets: int, bound: float) -> pd.DataFrame:
    claim = cal.value_claim()
    rows = []
    for scenario in found:
        draw = scenario.effect if scenario.effect is not None else scenario.draw
        truth = cal.population_mean(draw, claim)
        for n in SEEDS:
            rows.append(
                {
                    "scenario": scenario.name,
                    "seeds": n,
                    "datasets": datasets,
                    "true_mean": truth,
                    "coverage": cal.coverage(draw, claim, truth, n, datasets, seed=5, bound=bound),
                }
            )
    return pd.DataFrame(rows)


def seeds_needed_rows(found: list[cal.Scenario], datasets: int, bound: float) -> pd.DataFrame:
    claim = cal.value_claim()
    factors = (float(HOLM_FIRST_STEP), float(HOLM_FIRST_STEP))
    rows = []
    for scenario in [s for s in found if s.effect is not None]:
        side, other = scenario.effect(np.random.default_rng(17), claim, POPULATION)
        population = side - other

        def decided(rows_: np.ndarray, rng: np.random.Generator, population: np.ndarray = population) -> bool:
            data = ClaimData(population[rows_], (None,), ("0",), bound)
            return judged(data, claim, factors, cal.ALPHA, lambda *_: rng).verdict != "undecided"

        estimates = [seeds_needed(decided, POPULATION, seed=seed) for seed in range(1, 6)]
        n80 = int(np.median(estimates))
        rows.append(
            {
                "scenario": scenario.name,
                "observed": POPULATION,
                "level": cal.ALPHA / HOLM_FIRST_STEP,
                "seeds_needed": n80,
                "lowest": int(min(estimates)),
                "highest": int(max(estimates)),
                "spread": (max(estimates) - min(estimates)) / 2 / n80,
                "target": TARGET,
                "power_there": cal.power_at(population, claim, factors, n80, datasets, seed=9),
                "datasets": datasets,
            }
        )
    return pd.DataFrame(rows)


SEQUENTIAL_SCENARIOS = ("A", "B", "C", "D", "moderate", "large")


def sequential_rows(found: list[cal.Scenario], claims: list[Claim], families: int, bound: float) -> pd.DataFrame:
    """Families grown from 20 to 200 seeds under the nulls and the effects, judged at every look: planned looks
    (both spending functions) and anytime e-values after every block of 20."""
    rows = []
    for scenario in [s for s in found if s.name in SEQUENTIAL_SCENARIOS]:
        for spending in SPENDING_FUNCTIONS:
            looks = anytime_looks(20, 200) if spending == ANYTIME else planned_looks(20, 200)
            found_row = cal.sequential_errors(scenario, claims, looks, spending, families, seed=13, bound=bound)
            rule = "e-values after every block" if spending == ANYTIME else f"planned, {SPENDING_NAMES[spending]}"
            rows.append(found_row | {"rule": rule})
            print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def render(
    families: pd.DataFrame, margin: pd.DataFrame, cover: pd.DataFrame, needed: pd.DataFrame, sequential: pd.DataFrame
) -> str:
    def pct(x: float) -> str:
        return "—" if pd.isna(x) else f"{100 * x:.1f}%"

    def table(frame: pd.DataFrame, columns: dict[str, str]) -> str:
        shown = frame[list(columns)].copy()
        for column in shown.columns:
            if column.endswith(
                (
                    "error",
                    "error_mean",
                    "mean_reading",
                    "sign_flip",
                    "power",
                    "coverage",
                    "power_there",
                    "spread",
                    "share",
                )
            ):
                shown[column] = shown[column].map(pct)
        rows = [[str(value) for value in row] for row in shown.itertuples(index=False)]
        right = [
            column not in ("scenario", "claim", "worst_claim", "jumps", "rule", "looks") for column in shown.columns
        ]
        return markdown_table(list(columns.values()), rows, right).rstrip()

    return "\n\n".join(
        [
            table(
                families,
                {
                    "scenario": "Scenario",
                    "seeds": "Seeds",
                    "families": "Families",
                    "familywise_error": "Familywise error",
                    "familywise_error_mean": "… its verdicts read as means",
                    "familywise_error_mean_reading": "The mean readings: familywise error",
                    "familywise_error_sign_flip": "… had means been sign-flip tested",
                    "per_claim_error": "Per-claim error",
                    "worst_claim_error": "Worst claim",
                    "power": "Power (effect claim holds)",
                },
            ),
            table(
                margin,
                {
                    "claim": "Truth at the margin",
                    "jumps": "Made of",
                    "seeds": "Seeds",
                    "datasets": "Datasets",
                    "verdict_error": "Rule: wrong",
                    "sign_flip_tost_error": "Sign-flip TOST: wrong",
                },
            ),
            table(
                cover,
                {
                    "scenario": "Scenario",
                    "seeds": "Seeds",
                    "datasets": "Datasets",
                    "coverage": "95% betting interval covers",
                },
            ),
            table(
                needed,
                {
                    "scenario": "Effect",
                    "observed": "Observed seeds",
                    "seeds_needed": "Seeds needed (median)",
                    "lowest": "Lowest",
                    "highest": "Highest",
                    "spread": "± spread",
                    "power_there": "Power there",
                },
            ),
            table(
                sequential,
                {
                    "scenario": "Scenario",
                    "rule": "Looks",
                    "looks": "At seeds",
                    "families": "Families",
                    "familywise_error": "Familywise error (any look)",
                    "decided_share": "Claims decided by the last look",
                    "power": "Power (effect claim holds)",
                },
            ),
        ]
    )


CALIBRATION_START, CALIBRATION_END = "<!-- calibration:start -->", "<!-- calibration:end -->"
SUMMARY_START, SUMMARY_END = "<!-- calibration-summary:start -->", "<!-- calibration-summary:end -->"


TABLES = ("families", "margins", "coverage", "seeds_needed", "sequential")


def _read(directory: Path) -> tuple[pd.DataFrame, ...]:
    return tuple(pd.read_csv(directory / f"{name}.csv") for name in TABLES)


def calibration_block(directory: Path = OUT) -> str:
    """The docs page's block: every table of a calibration directory, as `main` wrote calibration.md."""
    return (directory / "calibration.md").read_text(encoding="utf-8").rstrip()


def summary_block(directory: Path = OUT) -> str:
    """The README's block: familywise error under the nulls and power under the effects, one line each, read from
    families.csv and seeds_needed.csv, and the worst margin error of the rule."""
    families, margin, _, needed, sequential = _read(directory)
    by_mean, by_share = (margin[margin["claim"].str.endswith(end)] for end in ("-at-margin", "-at-share"))

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    rows = []
    for scenario, group in families.groupby("scenario", sort=False):
        measure = "power" if group["power"].notna().any() else "familywise_error"
        cells = ", ".join(f"{n} seeds {pct(v)}" for n, v in zip(group["seeds"], group[measure], strict=True))
        readings = ", ".join(pct(v) for v in group["familywise_error_mean_reading"])
        kind = "power of the verdicts" if measure == "power" else "familywise error of the verdicts"
        rows.append(f"- **{scenario}**: {kind} {cells}; of the mean readings {readings}")
    sizes = sorted(set(families["families"]))
    needed_text = "; ".join(
        f"{row.scenario}: {int(row.seeds_needed)} seeds needed (±{pct(row.spread)} across generator seeds), "
        f"power there {pct(row.power_there)}"
        for row in needed.itertuples()
    )
    return "\n".join(
        [
            f"{', '.join(map(str, sizes))} simulated families of the published grid's claims per line "
            f"(`make calibration`; tables in `artifacts/reference/calibration/`):",
            "",
            *rows,
            f"- equivalence with the truth exactly at the margin: wrong at most {pct(by_mean['verdict_error'].max())} "
            f"(a sign-flip TOST: up to {pct(by_mean['sign_flip_tost_error'].max())}); stated on a jump share, with "
            f"exactly p₀ of the seeds jumping: wrong at most {pct(by_share['verdict_error'].max())}",
            f"- seeds needed, against the rule's power there: {needed_text}",
            "- judged look by look from 20 to 200 seeds (each claim keeping its first verdict), familywise error at "
            "most, over planned looks and e-values after every block: "
            + ", ".join(
                f"{scenario} {pct(error)}"
                for scenario, error in sequential.groupby("scenario", sort=False)["familywise_error"].max().items()
            ),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", type=int, default=200, help="simulated families per scenario and seed count")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", action="append", choices=TABLES, help="recompute this table alone (repeatable)")
    args = parser.parse_args(argv)
    wanted = set(args.only or TABLES)
    metrics = pd.read_csv(metrics_file(REFERENCE))
    grid = load_grid(ROOT / "conditions" / "paper-100.toml")
    claims = list(grid.claims)
    low, high = metric_ranges(grid.world)["policy_quality"]
    bound = high - low  # the rule's own bound on a difference of real quality in the published world
    found = scenarios(metrics, claims)
    started = time.perf_counter()

    def family_rows() -> pd.DataFrame:
        rows = []
        for scenario in found:
            for n in SEEDS:
                rows.append(cal.family_errors(scenario, claims, n, args.families, seed=1, bound=bound))
                print(rows[-1], f"{time.perf_counter() - started:.0f} s", flush=True)
        return pd.DataFrame(rows)

    compute = {
        "families": family_rows,
        "margins": lambda: margins(args.families),
        "coverage": lambda: coverage(found, max(100, args.families // 2), bound),
        "seeds_needed": lambda: seeds_needed_rows(found, args.families, bound),
        "sequential": lambda: sequential_rows(found, claims, args.families, bound),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        if name in wanted:
            compute[name]().to_csv(args.out / f"{name}.csv", index=False, float_format="%.4f")
    write_markdown(args.out, args.families, bound)


def write_markdown(directory: Path, families: int, bound: float) -> None:
    """calibration.md: the tables as the committed CSVs hold them (read back, so the page and the files agree to
    their written digits), and where they came from."""
    note = (
        f"Real quality differences in the published world lie within ±{bound:.3f} (q*'s range), the bound the "
        "families' equivalence tests and mean intervals use; the margin cases use ±"
        f"{MARGIN_BOUND:g}, where the equivalence test can reject at these seed counts. Generated by "
        f"`python -m tools.calibration --families {families}`."
    )
    (directory / "calibration.md").write_text(render(*_read(directory)) + "\n\n" + note + "\n")


if __name__ == "__main__":
    main()
