"""The README's overoptimization block (between OVEROPTIMIZATION_START and OVEROPTIMIZATION_END), from a run of
conditions/overoptimization.toml: what held, the Gao-style figure, the claims within every judge size and across them,
and Gao's fits for RL against the pretrained judge. `python -m tools.readme_tables --overoptimization RUN_DIR
README.md` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.common.run_files import CLAIMS_FILE, MANIFEST_FILE
from harness.common.wording import plural
from harness.rendering.markdown import literal_stars, markdown_table
from harness.report.findings import p_text
from harness.report.overoptimization import FITS_FILE, HELD_OUT_FILE
from tools.study_block import conditions_per_shape

OVEROPTIMIZATION_START, OVEROPTIMIZATION_END = "<!-- overoptimization:start -->", "<!-- overoptimization:end -->"
# The condition whose fits the block shows: RL and best-of-n against judges pretrained on fresh draws.
FITTED = "rl"


def _interval(effect: float, low: float, high: float) -> str:
    if pd.isna(effect):
        return "n/a"
    return f"{effect:+.3f}" if pd.isna(low) else f"{effect:+.3f} [{low:+.3f}, {high:+.3f}]"


def _coefficient(row: pd.Series, name: str) -> str:
    return f"{row[name]:.3f} [{row[name + '_low']:.3f}, {row[name + '_high']:.3f}]"


def what_held(within: pd.DataFrame, across: pd.DataFrame, shapes: list[str]) -> str:
    """Sentences on the verdicts: the within-shape claims grouped by a verdict they have in every shape ("holds"
    first), then those whose verdict differs between shapes, each with its verdicts; then the across claims'."""
    statements = dict(zip(within["claim"], within["statement"], strict=False))
    alike: dict[str, list[str]] = {}
    mixed = []
    for claim, own in within.groupby("claim", sort=False):
        verdicts = dict(zip(own["shape"], own["verdict"], strict=True))
        quoted = f"“{statements[claim]}”"
        if len({verdicts.get(shape) for shape in shapes}) == 1 and shapes[0] in verdicts:
            alike.setdefault(verdicts[shapes[0]], []).append(quoted)
        else:
            mixed.append(f"{quoted} ({'; '.join(f'{shape}: {verdict}' for shape, verdict in verdicts.items())})")
    order = ["holds", "contradicted", "not supported", "undecided", "untested"]
    lines = [
        f"{verdict.capitalize()} with every judge size: {'; '.join(alike[verdict])}."
        for verdict in sorted(alike, key=lambda v: order.index(v) if v in order else len(order))
    ]
    if mixed:
        lines.append(f"Not the same with every judge size: {'; '.join(mixed)}.")
    between = [f"“{row.statement}”: {row.verdict}" for row in across.itertuples(index=False)]
    if between:
        lines.append(f"Across judge sizes: {'; '.join(between)}.")
    return " ".join(lines)


DEPARTURES_HEADING = "## Where this world departs from the literature"


def departures(run_dir: Path) -> str:
    """The study report's generated section on where this world departs from the literature, one heading level down
    (it sits under the results page's own heading); empty where the report has none."""
    lines = (run_dir / "report.md").read_text(encoding="utf-8").splitlines()
    if DEPARTURES_HEADING not in lines:
        return ""
    start = lines.index(DEPARTURES_HEADING)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(["#" + lines[start], *lines[start + 1 : end]]).strip() + "\n"


def overoptimization_block(run_dir: Path, regenerate: str = "make reference-overoptimization") -> str:
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    runs = pd.read_csv(run_dir / "runs.csv")
    within = pd.read_csv(run_dir / CLAIMS_FILE)
    across = pd.read_csv(run_dir / "across.csv")
    fits, held = pd.read_csv(run_dir / FITS_FILE), pd.read_csv(run_dir / HELD_OUT_FILE)
    shapes = list(dict.fromkeys(runs["shape"]))
    cells = {
        (row.claim, row.shape): f"{_interval(row.effect, row.ci_low, row.ci_high)} **{row.verdict}**"
        for row in within.itertuples(index=False)
    }
    statements = dict(zip(within["claim"], within["statement"], strict=False))
    within_rows = [[statements[claim], *(cells.get((claim, s), "n/a") for s in shapes)] for claim in statements]
    within_table = markdown_table(
        ["Claim (stated before the run)", *shapes], within_rows, [False] + [True] * len(shapes)
    )
    across_rows = [
        [
            row.statement,
            f"{row.shape} vs {row.than_shape}" if row.kind == "between" else f"all {len(row.shape.split(', '))} shapes",
            _interval(row.effect, row.ci_low, row.ci_high),
            f"{p_text(row.p_value)} ({p_text(row.p_adjusted)})",
            f"**{row.verdict}**",
        ]
        for row in across.itertuples(index=False)
    ]
    across_table = markdown_table(
        ["Claim across judge sizes", "Compared", "Δ [CI]", "p (adj.)", "Verdict"],
        across_rows,
        [False, False, True, True, False],
    )
    mse = held.pivot_table(index=["shape", "condition", "optimizer"], columns="form", values="held_out_mse")
    fit_rows = []
    judged = fits[fits["scorer"] == "judges"] if "scorer" in fits else fits  # fits written before scorers: judges'
    for row in judged[judged["condition"] == FITTED].itertuples(index=False):
        errors = mse.loc[(row.shape, row.condition, row.optimizer)]
        series = pd.Series(row._asdict())
        fit_rows.append(
            [
                row.shape,
                "best-of-n, d(α − β·d)" if row.optimizer == "best_of_n" else "RL, d(α − β·ln d)",
                _coefficient(series, "alpha"),
                _coefficient(series, "beta"),
                f"{row.r2:.2f}",
                f"{errors[row.optimizer]:.4f} / {errors['quadratic']:.4f}",
            ]
        )
    fit_table = markdown_table(
        ["Judge", "Optimizer, Gao's form", "α [95% CI]", "β [95% CI]", "R²", "Held-out MSE: form / quadratic"],
        fit_rows,
        [False, False, True, True, True, True],
    )
    seconds, machine = manifest["wall_seconds"]["invocation"], manifest["machine"]
    section = departures(run_dir)
    conditions = conditions_per_shape(runs, "judge size")
    return literal_stars(
        f"{plural(len(shapes), 'judge size')} × {conditions} × "
        f"{plural(int(runs['seed'].nunique()), 'seed')} ({len(runs):,} runs), from `{run_dir.as_posix()}` "
        f"([report]({run_dir.as_posix()}/report.md)); regenerate: `{regenerate}`. "
        f"{what_held(within, across, shapes)}\n\n"
        f"![Gold and proxy against √KL for best-of-n and RL, one panel per judge size]"
        f"({run_dir.as_posix()}/figures/gao_{FITTED}.png)\n\n"
        "The claims within each judge size (seed-paired, one Holm family per size; Δ [CI] in the measure's unit):"
        f"\n\n{within_table.rstrip()}\n\n{across_table.rstrip()}\n\n"
        f"Gao's forms fitted to condition `{FITTED}` (least squares over every seed's points, 95% percentile "
        "bootstrap intervals resampling seeds; held-out error leaves one seed out):\n\n"
        f"{fit_table.rstrip()}\n\n"
        f"That study took {seconds:.0f} s in one command on {machine['cores']} cores of an {machine['cpu']} (its "
        "shapes: "
        + ", ".join(f"{name} {value:.0f} s" for name, value in manifest["shape_seconds"].items())
        + ")."
        + (f"\n\n{section.rstrip()}" if section else "")
    )
