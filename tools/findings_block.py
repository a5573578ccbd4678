"""The findings block (between FINDINGS_START and FINDINGS_END): one line per committed reference run, saying what it
ran and what it found, every number read from the run's own files. `python -m tools.readme_tables --findings
artifacts/reference PAGE...` writes it.

The lines are worded so that they stay true when the verdicts are judged again: the claims' verdicts are counted as
the run's claims.csv (and a study's across.csv) has them, a quoted claim carries the verdict its row has, and every
other number is a mean, a share or a range read from the metrics and per-run tables, with its direction (rises,
falls) read from its sign. Only the choice of what each line quotes (a claim's name, a metric) is written here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness import report
from harness.common.run_files import CLAIMS_FILE, MANIFEST_FILE, metrics_file
from harness.common.wording import plural
from harness.experiment.until_decided import LOOKS_FILE
from harness.grid.spec import GridSpec
from harness.inference.rule import MIN_SEEDS, VERDICTS
from harness.inference.sequential import SPENDING_NAMES
from harness.mechanisms.pair_audit_report import pair_source
from harness.rendering.markdown import literal_stars
from tools.published import PUBLISHED, original_records, published_row
from tools.study_block import conditions_per_shape

FINDINGS_START, FINDINGS_END = "<!-- findings:start -->", "<!-- findings:end -->"
# The claim each run of the published grid quotes: the original lab's clearest practical result.
HEADLINE_CLAIM = "slow-judge-beats-baseline"
# The overoptimization study's unpenalised RL condition (a KL-penalised one is found by its knob).
RL_CONDITION = "rl"


def verdict_tally(verdicts: pd.Series, compact: bool = False) -> str:
    """'5 holds, 1 not supported, 1 contradicted, 10 undecided': each verdict's count, in the rule's order. The
    decided verdicts are always named (undecided and untested only when some claim has them); `compact` names only
    those some claim has."""
    counts = verdicts.value_counts()
    shown = [v for v in VERDICTS if counts.get(v, 0) or not (compact or v in ("untested", "undecided"))]
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in shown)


def _claims(verdicts: pd.DataFrame, where: str = "") -> str:
    """'17 claims (5 holds, ...)', with `where` after the count, and why where some are untested."""
    untested = (verdicts["verdict"] == "untested").any()
    why = f": a verdict needs {MIN_SEEDS} seeds" if untested else ""
    return f"{plural(len(verdicts), 'claim')}{where} ({verdict_tally(verdicts['verdict'], compact=True)}{why})"


def _quoted(verdicts: pd.DataFrame, claim: str) -> str:
    """A claim's statement, its verdict with what it counted (the seeds up and down among its jumps), and the mean
    difference itself with its interval and reading, as its row has them."""
    rows = verdicts[verdicts["claim"] == claim]
    if rows.empty:
        raise SystemExit(f"the findings quote the claim {claim!r}, which the run does not have")
    row = rows.iloc[0]
    jumps = "seeds whose end modes differ" if row.jump_rule == "end mode" else "seeds that differ"
    return (
        f"“{row.statement}”: {row.verdict}, {row.seeds_up} of the {row.seeds_up + row.seeds_down} {jumps} ending "
        f"higher; the mean Δ {row.effect:+.3f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}]: {row.mean_reading}"
    )


def _moved(before: float, after: float, digits: int = 3) -> str:
    """'rises from 0.1 to 0.3' / 'falls from ...' / 'stays at ...', read from the two numbers as written."""
    start, end = f"{before:.{digits}f}", f"{after:.{digits}f}"
    if start == end:
        return f"stays at {start}"
    return f"{'rises' if after > before else 'falls'} from {start} to {end}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def _scope(run_dir: Path, what: str) -> str:
    """The line's opening: the run's name, linked to its report, what it is, and its runs, wall time and cores."""
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    seconds = manifest["wall_seconds"]
    total = seconds.get("invocation", sum(seconds.values()))  # a study's phases nest inside its invocation
    cores = manifest["machine"]["cores"]
    name = run_dir.name
    return (
        f"**[`{name}`]({run_dir.as_posix()}/report.md)**, {what} ({int(manifest['runs']):,} runs in "
        f"{_duration(total)} on {cores} cores)"
    )


def _grid_size(metrics: pd.DataFrame) -> str:
    return f"{plural(metrics['condition'].nunique(), 'condition')} × {plural(metrics['seed'].nunique(), 'seed')}"


def _final(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics[metrics["iteration"] == metrics["iteration"].max()]


def paper(run_dir: Path) -> str:
    """The published grid: the baseline's collapse (quality, alignment, entropy, the judge's own score), the claims."""
    metrics = pd.read_csv(metrics_file(run_dir))
    means = metrics[metrics["condition"] == "baseline"].groupby("iteration").mean(numeric_only=True)
    first, last = means.iloc[0], means.iloc[-1]
    return (
        f"{_scope(run_dir, f'the published grid, {_grid_size(metrics)}')}: the baseline's real quality "
        f"{_moved(first.policy_quality, last.policy_quality)} ({means.iloc[1].policy_quality:.3f} after the first "
        f"iteration) while its judge's alignment with q\\* {_moved(first.judge_alignment, last.judge_alignment, 2)}, "
        f"the policy's entropy {_moved(first.policy_entropy, last.policy_entropy, 2)} nats and the judge's own score "
        f"of the policy {_moved(first.judge_perceived_quality, last.judge_perceived_quality)}; "
        f"{_claims(pd.read_csv(run_dir / CLAIMS_FILE))}."
    )


def paper_original(run_dir: Path) -> str:
    """The published grid under the original's streams: its largest gaps to the published table and, seed by seed,
    to the original lab's own records of its baseline."""
    metrics = pd.read_csv(metrics_file(run_dir))
    summary = report.summarize(metrics).set_index("condition")
    gaps = []
    for label, match, quality, alignment in PUBLISHED:
        row = published_row(summary, match)
        if row is not None:
            off = abs(row["policy_quality_mean"] - quality)
            gaps.append((off, abs(row["judge_alignment_mean"] - alignment), label))
    quality_gap, _, widest = max(gaps)
    alignment_gap = max(gap for _, gap, _ in gaps)
    last = int(metrics["iteration"].max())
    ours = metrics[(metrics["condition"] == "baseline") & (metrics["iteration"] == last)].set_index("seed")
    theirs = original_records()
    theirs = theirs[theirs["iteration"] == last - 1].set_index("seed").reindex(ours.index)
    seed_gap = max((ours[metric] - theirs[metric]).abs().max() for metric in ("policy_quality", "judge_alignment"))
    what = f"the published grid under the original lab's random streams, {_grid_size(metrics)}"
    return (
        f"{_scope(run_dir, what)}: "
        f"its means differ from the {plural(len(gaps), 'published row')} by at most {quality_gap:.4f} in quality "
        f"(the row “{widest}”) and {alignment_gap:.4f} in alignment, and its baseline's "
        f"{plural(len(ours), 'seed')} end within {seed_gap:.1g} of the original lab's own records of them."
    )


def paper_100(run_dir: Path) -> str:
    """The published grid at 100 seeds: its claims, the baseline's attractor, the quoted claim."""
    metrics = pd.read_csv(metrics_file(run_dir), usecols=["condition", "seed"])
    verdicts = pd.read_csv(run_dir / CLAIMS_FILE)
    attractors = pd.read_csv(run_dir / "attractors.csv").set_index("condition")
    baseline = attractors.loc["baseline"]
    return (
        f"{_scope(run_dir, f'the published grid, {_grid_size(metrics)}')}: {_claims(verdicts)}; "
        f"{int(baseline.at_dominant)} of the baseline's {int(baseline.runs)} runs end in its most common end mode; "
        f"{_quoted(verdicts, HEADLINE_CLAIM)}."
    )


def paper_until_decided(run_dir: Path) -> str:
    """The published grid's claims decided by looks planned before the first: the looks, the claims, when each was
    decided."""
    verdicts, looks = pd.read_csv(run_dir / CLAIMS_FILE), pd.read_csv(run_dir / LOOKS_FILE)
    plan = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))["sequential"]
    seeds = " and ".join(f"{seeds:,}" for seeds in looks["seeds"])
    looks_decided = [int((verdicts["decided_at_look"] == look).sum()) for look in range(1, len(looks) + 1)]
    decided = [f"{count} decided at look {look}" for look, count in enumerate(looks_decided, start=1)]
    still_open = int(verdicts["decided_at_look"].isna().sum())
    what = (
        f"the published grid's claims decided by {plural(len(looks), 'look')} planned before the first, at {seeds} "
        f"seeds from seed {plan.get('first_seed', 0)}, {SPENDING_NAMES[plan['spending']]} spending of "
        f"α = {plan['alpha']:g}"
    )
    return (
        f"{_scope(run_dir, what)}: {_claims(verdicts)}, {', '.join(decided)}; {still_open} still open after the "
        "last look."
    )


def temporal(run_dir: Path) -> str:
    """The follow-up mechanisms: the claims, how often temporal contrast's labels are wrong, a stronger judge."""
    metrics = pd.read_csv(metrics_file(run_dir))
    grid = GridSpec.model_validate_json((run_dir / "grid.json").read_text(encoding="utf-8"))
    final = _final(metrics).groupby("condition").mean(numeric_only=True)
    contrast = next(c for c in grid.conditions if c.knobs.rejected_from == "past")
    strongest = max(
        (c for c in grid.conditions if c.knobs.judge_pretrain_target is not None),
        key=lambda c: c.knobs.judge_pretrain_target,
    )
    what = f"the follow-up work's mechanisms, {_grid_size(metrics)}"
    return (
        f"{_scope(run_dir, what)}: "
        f"{_claims(pd.read_csv(run_dir / CLAIMS_FILE))}; at the end a share "
        f"{final.loc[contrast.name, 'pair_label_error_distinct']:.3f} of the judge's “{pair_source(contrast.knobs)}” "
        "pairs of two different outputs are labelled wrongly (a coin: 0.5), and judges pretrained to "
        f"Spearman {strongest.knobs.judge_pretrain_target:g} (the baseline's: {grid.pretrain.target_spearman:g}) "
        f"end at real quality {final.loc[strongest.name, 'policy_quality']:.3f} against the baseline's "
        f"{final.loc['baseline', 'policy_quality']:.3f}."
    )


def _study_scope(run_dir: Path, runs: pd.DataFrame, what: str) -> str:
    shapes = list(dict.fromkeys(runs["shape"]))
    named = f" ({', '.join(shapes)})" if len(shapes) <= 4 else ""  # a few shapes are named; more, counted
    each = f"{conditions_per_shape(runs)} × {plural(runs['seed'].nunique(), 'seed')} each"
    return _scope(run_dir, f"{what} in {plural(len(shapes), 'shape')}{named}, {each}")


def scale(run_dir: Path) -> str:
    """The scale study: the claims across and within shapes, and the within-shape claim's effect over the shapes."""
    runs = pd.read_csv(run_dir / "runs.csv")
    within, across = pd.read_csv(run_dir / CLAIMS_FILE), pd.read_csv(run_dir / "across.csv")
    quoted = within[within["claim"] == HEADLINE_CLAIM]
    if quoted.empty:
        raise SystemExit(f"{run_dir}: no within-shape claim {HEADLINE_CLAIM!r}")
    low, high = quoted.loc[quoted["effect"].idxmin()], quoted.loc[quoted["effect"].idxmax()]
    return (
        f"{_study_scope(run_dir, runs, 'the published conditions')}: {_claims(across, ' across shapes')} and "
        f"{_claims(within, ' within them')}; “{low.statement}”, mean Δ per shape from {low.effect:+.3f} "
        f"({low['shape']}) to {high.effect:+.3f} ({high['shape']})."
    )


def overoptimization(run_dir: Path) -> str:
    """The overoptimization study: the claims within and across judge sizes, and where RL ends with and without a KL
    penalty."""
    runs = pd.read_csv(run_dir / "runs.csv")
    within, across = pd.read_csv(run_dir / CLAIMS_FILE), pd.read_csv(run_dir / "across.csv")
    study = json.loads((run_dir / "study.json").read_text(encoding="utf-8"))
    conditions = {c["name"]: c["knobs"] for c in study["shapes"][0]["grid"]["conditions"]}
    penalised = next(name for name, knobs in conditions.items() if knobs["kl_penalty"] > 0)
    kl = runs.groupby(["condition", "shape"])["kl_from_initial"].mean()

    def spread(condition: str) -> str:
        return f"{kl[condition].min():.2f}–{kl[condition].max():.2f} nats"

    every = {c["name"]: c["knobs"] for shape in study["shapes"] for c in shape["grid"]["conditions"]}
    gold = next((name for name, knobs in every.items() if knobs.get("reward_from_q_star")), None)
    perfect = ""
    if gold is not None:
        own = runs[runs["condition"] == gold]
        base = runs[(runs["condition"] == RL_CONDITION) & (runs["shape"] == own["shape"].iloc[0])]
        perfect = (
            f"; by KL = 1 nat RL against q* itself has gained {own['gold_gain_at_kl_1'].mean():.3f} in gold, RL "
            f"against the judge {base['gold_gain_at_kl_1'].mean():.3f} ({own['shape'].iloc[0]}, means over seeds)"
        )
    return (
        f"{_study_scope(run_dir, runs, 'best-of-n and RL against frozen judges')}: "
        f"{_claims(within, ' within shapes')} and {_claims(across, ' across them')}; RL ends at a KL to π₀ of "
        f"{spread(RL_CONDITION)} over the shapes, {spread(penalised)} with a KL penalty of β = "
        f"{conditions[penalised]['kl_penalty']:g}{perfect}."
    )


# Each committed reference run (artifacts/reference/NAME) and the line it gets, in the order they are listed.
LINES: dict[str, Callable[[Path], str]] = {
    "paper": paper,
    "paper-original": paper_original,
    "paper-100": paper_100,
    "paper-until-decided": paper_until_decided,
    "temporal": temporal,
    "scale": scale,
    "overoptimization": overoptimization,
}


def findings_block(reference_dir: Path) -> str:
    """One bullet per reference run under `reference_dir` (every one of LINES: a run missing is an error)."""
    return literal_stars("\n".join(f"- {line(reference_dir / name)}" for name, line in LINES.items()))
