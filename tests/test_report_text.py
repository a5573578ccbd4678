"""The report as a reader meets it: headings, the difference rule, end modes, identical conditions, grid facts,
registry-driven panels, reproducible bytes. Tests that read no figure's reading write their reports without figures
(most of a report's time)."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report import make_metrics

from harness.engine import metrics as registry
from harness.engine.world import World
from harness.grid import registry as mechanism_registry
from harness.grid.contract import Mechanism
from harness.grid.knobs import Knobs
from harness.grid.report_section import MechanismReport, ReportInputs
from harness.grid.spec import Condition, GridSpec, MechanismSource
from harness.rendering.metrics_table import belief_gap, prepare
from harness.report import mode_shares, summarize, write_report
from harness.report.figures import boundaries_title
from harness.report.identical import explain, identical_groups
from harness.report.readings import reading_modes
from harness.report.tables import descriptive_rule

# A statement that one condition ends above or below another, or does not differ: only a claim's verdict may say it.
DIRECTION = re.compile(r"\b(?:ends?|ended) (?:clearly )?(?:above|below)\b|\bno difference\b|\((?:above|below)\)")


def shown(path: Path) -> str:
    """A report's Markdown as a reader sees it rendered: q* escaped as q\\* (`markdown.literal_stars`) shows as q*."""
    return path.read_text().replace("q\\*", "q*")


def with_modes(metrics: pd.DataFrame, modes: dict[tuple[str, int], tuple[str, float]]) -> pd.DataFrame:
    m = metrics.copy()
    m["mode_sequence"] = [modes[(c, s)][0] for c, s in zip(m["condition"], m["seed"], strict=True)]
    m["mode_quality"] = [modes[(c, s)][1] for c, s in zip(m["condition"], m["seed"], strict=True)]
    return m


@pytest.fixture(scope="module")
def same_end() -> pd.DataFrame:
    """Two conditions that end at the same output: qualities differ by float noise only."""
    runs = {("baseline", s): [0.0, 1.7475814] for s in range(3)}
    runs |= {("noise", s): [0.0, 1.7475814 + 1e-5 + 1e-7 * s] for s in range(3)}
    runs |= {("better", s): [0.0, 2.0 + 0.01 * s] for s in range(3)}
    modes = {key: ("↑ ↑ ↑ ↑", 1.7475814) for key in runs}
    modes |= {("better", s): ("↑ ↑ ↑ ↗", 2.0) for s in range(3)}
    return with_modes(make_metrics(runs), modes)


@pytest.fixture(scope="module")
def same_end_report(same_end: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """same_end's report, written once for the tests that only read it (drawing its figures is most of a report's
    time)."""
    directory = tmp_path_factory.mktemp("same-end-report")
    write_report(same_end, directory, grid_name="tiny")
    return directory


def test_the_summary_and_its_readings_state_no_direction(same_end: pd.DataFrame, same_end_report: Path) -> None:
    # The CI excludes zero, yet the difference is float noise: the summary describes it and says nothing of it.
    summary = summarize(same_end).set_index("condition")
    assert summary.loc["noise", "policy_quality_diff_ci_low"] > 0
    report = shown(same_end_report / "report.md")
    assert not DIRECTION.findall(report)
    assert "differ from the reference by mean paired Δ 0.000 to +0.262 q* (descriptive" in report


def test_end_modes_are_counted_per_condition(same_end: pd.DataFrame, same_end_report: Path) -> None:
    shares = mode_shares(same_end)
    assert shares.loc[shares["condition"] == "better", "runs"].tolist() == [3]
    report = shown(same_end_report / "report.md")
    assert "6 of 9 runs end at ↑ ↑ ↑ ↑ (q* 1.748), 3 at ↑ ↑ ↑ ↗ (q* 2.000)" in report
    assert "## Where runs end" in report
    assert "↑ ↑ ↑ ↗" in report and "glyph" in report


def test_headings_name_grid_seeds_and_iteration(same_end_report: Path) -> None:
    summary_md = shown(same_end_report / "summary.md")
    assert summary_md.startswith("# Summary of tiny\n")
    assert "grid `tiny`: 3 conditions × 3 seeds (0–2); final iteration 1." in summary_md
    report = shown(same_end_report / "report.md")
    assert (
        report.count("3 conditions × 3 seeds (0–2); final iteration 1.") == 3
    )  # every table (summary, modes, escapes)
    assert "## How to read this" in report
    for x in registry.headline_metrics():
        assert f"**{x.label}** ({x.unit}; column `{x.name}`): {x.definition}." in report
    # No run diverged: no claim about a Diverged column, and no such column.
    assert "No run diverged." in report and "Diverged runs" not in report


def test_boundaries_title_fits_the_grid(same_end: pd.DataFrame) -> None:
    title = boundaries_title(summarize(same_end))
    assert "boundary" not in title and "dashed" not in title
    assert "the 2 top-ranked mechanisms by final mean quality" in title  # a ranking of means, never "best"
    one_bound = same_end.assign(boundary=same_end["condition"] == "noise")
    title = boundaries_title(summarize(one_bound))
    assert "the 1 top-ranked mechanism" in title and "1 boundary condition (dashed)" in title


def test_a_new_headline_metric_appears_everywhere(same_end: pd.DataFrame, tmp_path: Path) -> None:
    """A headline metric a mechanism registers (one registry entry) reaches the summary, the definitions and the
    readings."""
    extra = dataclasses.replace(
        registry.metric("policy_entropy"),
        name="kl_initial",
        label="KL to the initial policy",
        unit="nats",
        definition="KL(π ‖ π₀) over all outputs",
    )
    metrics = same_end.assign(kl_initial=same_end["iteration"] * 0.5)
    with mechanism_registry.restored_catalog():
        mechanism_registry.register(Mechanism(name="kl_probe", summary="a headline metric", metrics=(extra,)))
        write_report(metrics, tmp_path)
    report = shown(tmp_path / "report.md")
    assert "KL to the initial policy (nats)" in report.split("## Summary")[1].splitlines()[4]  # a table column
    assert "**KL to the initial policy** (nats; column `kl_initial`): KL(π ‖ π₀) over all outputs." in report
    assert "KL to the initial policy (nats) 0.000 → 0.500" in report  # the headline reading
    assert "kl_initial_mean" in pd.read_csv(tmp_path / "summary.csv").columns


def test_a_labs_mechanism_brings_its_own_report_section(same_end: pd.DataFrame, tmp_path: Path) -> None:
    """A mechanism registered from outside the package gets what a built-in gets (`MechanismReport`): its section in
    report.md after the conditions with identical results, given the prepared table, each condition's knobs and the
    world, and its word on why two conditions coincide; a grid that does not load it has neither."""
    seen: list[ReportInputs] = []

    def section(inputs: ReportInputs) -> list[str]:
        seen.append(inputs)
        return ["## The probe's own section", "", f"{len(inputs.table)} rows over {len(inputs.knobs)} conditions.", ""]

    def why_identical(table: pd.DataFrame, condition: str, knobs: object) -> str | None:
        return f"the probe never acted in `{condition}`" if condition == "twin" else None

    twin = same_end[same_end["condition"] == "baseline"].assign(condition="twin")
    metrics = pd.concat([same_end, twin], ignore_index=True)
    probe = Mechanism(name="probe", summary="reports itself", report=MechanismReport(section, why_identical))
    names = ("baseline", "noise", "better", "twin")
    with mechanism_registry.restored_catalog():
        mechanism_registry.register(probe, module="probe.py", path="probe.py", digest="0" * 64)
        loaded = GridSpec(
            name="tiny",
            mechanisms=(MechanismSource(name="probe", module="probe.py", digest="0" * 64),),
            conditions=(*(Condition(name=n) for n in names[:3]), Condition(name="twin", knobs=Knobs(lr_judge=0.5))),
        )
        write_report(metrics, tmp_path / "loaded", grid_name="tiny", grid=loaded, figures=False)
        write_report(
            metrics,
            tmp_path / "not",
            grid_name="tiny",
            grid=loaded.model_copy(update={"mechanisms": ()}),
            figures=False,
        )
    report = (tmp_path / "loaded" / "report.md").read_text()
    assert report.index("### Conditions with identical results") < report.index("## The probe's own section")
    assert report.index("## The probe's own section") < report.index("## Where runs end")
    assert f"{len(metrics)} rows over 4 conditions." in report
    assert "`twin`: they differ only in `lr_judge` (0.0003 vs 0.5); the probe never acted in `twin`." in report
    (inputs,) = seen
    assert list(inputs.knobs) == list(names) and inputs.world == loaded.world and not inputs.figures
    assert inputs.out_dir == tmp_path / "loaded"
    assert "probe" not in (tmp_path / "not" / "report.md").read_text()


def test_a_report_without_figures_is_the_report_less_its_figures(
    same_end: pd.DataFrame, same_end_report: Path, tmp_path: Path
) -> None:
    write_report(same_end, tmp_path, grid_name="tiny", figures=False)
    drawn = {path.name for path in same_end_report.iterdir()}
    assert {path.name for path in tmp_path.iterdir()} == drawn - {"figures"}
    for name in drawn - {"figures", "report.md"}:
        assert (tmp_path / name).read_bytes() == (same_end_report / name).read_bytes(), name
    lines = shown(same_end_report / "report.md").split("\n")
    kept = lines[: lines.index("## Figures")]
    links = [i for i, line in enumerate(kept) if line.startswith("![")]
    assert links and all(kept[i + 1] == "" for i in links)  # the attractors' figure is linked in its section
    expected = [line for i, line in enumerate(kept) if i not in links and i - 1 not in links]
    assert shown(tmp_path / "report.md") == "\n".join(expected)


def test_same_table_same_bytes_and_normal_file_modes(
    same_end: pd.DataFrame, same_end_report: Path, tmp_path: Path
) -> None:
    write_report(same_end, tmp_path / "b", grid_name="tiny")  # the arguments same_end_report was written with
    files = sorted(p.relative_to(same_end_report) for p in same_end_report.rglob("*") if p.is_file())
    assert len(files) == 10  # summary.csv, summary.md, report.md, attractors.csv, 6 figures
    for name in files:
        assert (same_end_report / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    umask = os.umask(0)
    os.umask(umask)
    for name in files:
        assert stat.S_IMODE((same_end_report / name).stat().st_mode) == 0o666 & ~umask


def test_the_descriptive_rule_is_stated_once_and_no_table_reads_a_direction(tmp_path: Path) -> None:
    """A −1e-5 difference whose CI excludes zero, one whose CI spans zero and a clear one: every table and reading
    gives numbers, and no word says which is above which (the claims' verdicts alone do)."""
    runs = {("baseline", s): [0.0, 1.7475814] for s in range(3)}
    runs |= {("tiny", s): [0.0, 1.7475814 - 1e-5 - 1e-7 * s] for s in range(3)}
    runs |= {("spans", s): [0.0, 1.7475814 + (-0.3, 0.05, 0.4)[s]] for s in range(3)}
    runs |= {("better", s): [0.0, 2.0 + 0.01 * s] for s in range(3)}
    metrics = make_metrics(runs)
    summary = summarize(metrics).set_index("condition")
    assert summary.loc["tiny", "policy_quality_diff_ci_high"] < 0  # "significant" by its interval, yet noise
    write_report(metrics, tmp_path)
    report, summary_md = shown(tmp_path / "report.md"), shown(tmp_path / "summary.md")
    rule = descriptive_rule(0.95)
    assert report.count(rule) == 1 and summary_md.count(rule) == 1
    for text in (report, summary_md):
        assert not DIRECTION.findall(text)
        rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
        assert "[" not in rows["better"].split("|")[-3]  # 3 seeds: no interval shown


def test_no_cross_run_correlation_is_quoted(same_end_report: Path) -> None:
    report = shown(same_end_report / "report.md")
    readings = report.split("## Figures", 1)[1]
    assert "ρ =" not in readings and "Spearman" not in readings.replace("(Spearman ρ)", "")
    assert "correlat" not in readings


def test_belief_gap_is_gains_since_iteration_zero(tmp_path: Path) -> None:
    runs = {("baseline", s): [0.5, 1.0, 1.5, 1.2] for s in range(2)}
    perceived = {("baseline", 0): [0.3, 1.0, 2.0, 2.5], ("baseline", 1): [0.7, 1.0, 1.0, 0.9]}
    metrics = make_metrics(runs, overrides={k: {"judge_perceived_quality": v} for k, v in perceived.items()})
    gaps = belief_gap(prepare(metrics)).set_index("iteration")["gap"]
    for t in range(4):
        expected = np.mean([(perceived[k][t] - perceived[k][0]) - (runs[k][t] - runs[k][0]) for k in perceived])
        assert gaps[t] == pytest.approx(expected)
    assert gaps[0] == 0.0
    # Well defined: a value depends on no later iteration (a z-score over the run would).
    shorter = belief_gap(prepare(metrics[metrics["iteration"] <= 1])).set_index("iteration")["gap"]
    assert shorter[1] == pytest.approx(gaps[1])
    write_report(metrics, tmp_path, figures=False)
    report = shown(tmp_path / "report.md")
    assert "**Belief gap**" in report and "gained since iteration 0" in report
    assert "faster" not in report and "z-scor" not in report and "standardised" not in report.lower()


def many_modes() -> pd.DataFrame:
    """Six end modes over 12 runs: four become columns of the end-mode table, two are "other"."""
    modes = [("↑ ↑ ↑ ↑", 1.7)] * 5 + [("↑ ↑ ↑ ↗", 2.0)] * 2 + [("↓ ↓ ↑ ↑", 2.6)] * 2
    modes += [("→ → ↑ ↑", 2.3), ("↗ ↗ ↑ ↑", 1.2), ("↓ ↑ ↑ ↑", 1.4)]
    runs = {(f"c{i // 3}", i % 3): [0.0, q] for i, (_, q) in enumerate(modes)}
    return with_modes(make_metrics(runs), {key: modes[i] for i, key in enumerate(runs)})


def test_mode_counts_agree_between_sentence_and_table(tmp_path: Path) -> None:
    metrics = many_modes()
    sentence = reading_modes(mode_shares(metrics))
    assert sentence.endswith("and 2 runs at 2 other modes.")
    write_report(metrics, tmp_path, figures=False)
    report = shown(tmp_path / "report.md")
    table = report.split("## Where runs end", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[-1] == "runs at 2 other modes"
    others = [c.strip() for c in (line.strip("|").split("|")[-1] for line in lines[2:])]
    assert sum(int(c) for c in others if c != "·") == 2  # the column counts runs, as the sentence does
    assert sentence in report


def grid_for(names_and_knobs: dict[str, Knobs]) -> GridSpec:
    conditions = tuple(Condition(name=n, knobs=k, description=f"what {n} does") for n, k in names_and_knobs.items())
    return GridSpec(name="tiny", conditions=conditions)


@pytest.fixture
def twins() -> tuple[pd.DataFrame, GridSpec]:
    """slow-meta repeats slow (meta never fires), alias repeats baseline's knobs, near differs by 1e-3."""
    base = [0.0, 1.2, 1.7475814]
    runs = {(c, s): [q + 0.01 * s for q in base] for c in ("baseline", "slow", "slow-meta", "alias") for s in range(2)}
    runs |= {("near", s): [q + 0.01 * s + 1e-3 for q in base] for s in range(2)}
    m = make_metrics(runs)
    m.loc[m["condition"] == "slow-meta", "policy_quality"] += 1e-7  # float32 rounding elsewhere in the batch
    m["meta_corrections"] = 0
    m.loc[m["condition"] == "slow-meta", "meta_accuracy"] = 0.8 + 0.01 * m["iteration"]
    m.loc[m["condition"] == "baseline", "policy_entropy"] += 0.5  # baseline differs from the slow pair...
    m.loc[m["condition"] == "alias", "policy_entropy"] += 0.5  # ...and alias repeats it exactly
    grid = grid_for(
        {
            "baseline": Knobs(),
            "slow": Knobs(judge_update_every=10),
            "slow-meta": Knobs(judge_update_every=10, meta_update_every=10, meta_holdout_fraction=0.05),
            "alias": Knobs(),
            "near": Knobs(n_judges=3),
        }
    )
    return m, grid


def test_identical_conditions_are_found_and_explained(twins: tuple[pd.DataFrame, GridSpec], tmp_path: Path) -> None:
    m, grid = twins
    assert identical_groups(prepare(m)) == [("baseline", "alias"), ("slow", "slow-meta")]
    write_report(m, tmp_path, grid=grid, figures=False)
    report = shown(tmp_path / "report.md")
    section = report.split("### Conditions with identical results", 1)[1].split("\n#", 1)[0].strip()
    assert "`baseline` = `alias`: same knobs" in section
    line = next(x for x in section.splitlines() if x.startswith("- `slow` = `slow-meta`"))
    assert "they differ only in `meta_holdout_fraction` (0 vs 0.05) and `meta_update_every` (1 vs 10)" in line
    assert "meta-correction never fired in `slow-meta` (`meta_corrections` is 0" in line
    assert "never below 0.800, threshold 0.75" in line
    assert "`near`" not in section
    assert section in shown(tmp_path / "summary.md")
    # Once a correction fires, the data no longer explain the match.
    fired = m.assign(meta_corrections=np.where(m["condition"] == "slow-meta", 1, 0))
    assert "never fired" not in explain(prepare(fired), ("slow", "slow-meta"), grid)


def test_grid_facts_units_mechanisms_and_q_star_scale(twins: tuple[pd.DataFrame, GridSpec], tmp_path: Path) -> None:
    m, grid = twins
    grid = grid.model_copy(update={"conditions": (*grid.conditions, Condition(name="r", knobs=Knobs(reset_every=3)))})
    m = pd.concat([m, m[m["condition"] == "near"].assign(condition="r")], ignore_index=True)
    write_report(m, tmp_path, grid=grid, figures=False)
    report = shown(tmp_path / "report.md")
    q = np.asarray(World(grid.world).q_star, dtype=float)
    assert f"runs from {q.min():.3f} to {q.max():.3f}, mean {q.mean():.3f}" in report
    assert f"over the {q.size:,} outputs" in report
    assert "`judge_update_every` and `meta_update_every` count inner policy steps" in report
    assert "`reset_every` counts outer iterations" in report
    assert "an outer iteration is 200 inner policy steps" in report
    assert "  - `slow-meta` (mechanism): what slow-meta does" in report
    with pytest.raises(ValueError, match="does not describe"):
        write_report(m, tmp_path, grid=grid.only(["baseline"]), figures=False)


def test_identical_conditions_are_counted_once(tmp_path: Path) -> None:
    """Two names for one result make one mechanism in the counts, and the sentence says which were merged."""
    runs = {("baseline", s): [0.0, 1.0 + 0.01 * s] for s in range(3)}
    for name in ("meta", "slow-meta"):  # one configuration under two names: identical at every seed
        runs |= {(name, s): [0.0, 2.0 + 0.01 * s] for s in range(3)}
    runs |= {("other", s): [0.0, 1.0 + 0.01 * s] for s in range(3)}
    modes = {key: ("↑ ↑ ↑ ↗", 2.0) if key[0] in ("meta", "slow-meta") else ("↑ ↑ ↑ ↑", 1.0) for key in runs}
    write_report(with_modes(make_metrics(runs), modes), tmp_path)
    report = shown(tmp_path / "report.md")
    assert (
        "the 3 mechanisms (2 distinct results: `meta` = `slow-meta` counted once) differ from the reference by mean "
        "paired Δ 0.000 to +1.000 q* (descriptive" in report
    )
    # The attractor reading ranks the pair once, under its first name, and names the other beside it.
    escapes = "Most escapes: `meta` = `slow-meta` (3 of 3, 3 to higher q*); fewest: `other` = `baseline` (0 of 3)."
    assert escapes in report


def test_a_belief_gap_from_a_stretched_scale_is_read_as_such(tmp_path: Path) -> None:
    """Where judges end better aligned than they started, a large belief gap is their score scale stretching: the
    reading says so in a sentence of its own, with alignment and both qualities; a judge that lost alignment is
    not excused."""
    runs = {("baseline", s): [0.0, 1.0] for s in range(2)} | {("anchor", s): [0.0, 1.0] for s in range(2)}
    judges = {"baseline": ([0.7, 0.5], [0.0, 2.0]), "anchor": ([0.7, 0.99], [0.0, 5.0])}  # alignment, perceived
    overrides = {(c, s): {"judge_alignment": judges[c][0], "judge_perceived_quality": judges[c][1]} for c, s in runs}
    write_report(make_metrics(runs, overrides=overrides), tmp_path)
    reading = shown(tmp_path / "report.md").split("### What the loop believes vs reality", 1)[1]
    assert (
        " In `anchor` (gap +4.000; judge alignment 0.700 → 0.990; judge-perceived quality 5.000 against real 1.000), "
        "the judges end ranking outputs at least as well as before training, so the gap there is not belief in gains "
        "the policy did not make but is dominated by the judges' score scale stretching" in reading
    )
    assert "`baseline` (gap" not in reading
