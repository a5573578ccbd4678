"""`coevolab run FILE --until-decided --max-seeds N` on a tiny grid with claims, in this process (the stages share
compiled programs): a clear claim is decided at the first look and its condition stops growing, the open claim's
conditions grow to the budget, resuming recomputes the same verdicts without training, a changed budget is refused,
a condition's runs in a grid of fewer conditions match its runs in the whole grid, and a run from a later first seed
runs each seed as a fixed-seed grid does. The loop's seed bookkeeping (later first seeds, gaps, resuming, which
finished runs may be a first look) is checked without training, on a backend that writes known metrics."""

from __future__ import annotations

import itertools
import json
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from harness.common.integrity import FILES_KEY, read_manifest, write_manifest
from harness.common.locks import LOCK_SUFFIX
from harness.common.run_files import CLAIMS_FILE, GRID_FILE, METRICS_FILE, read_metrics_text, write_metrics_text
from harness.engine.metrics import all_metrics
from harness.experiment import until_decided
from harness.experiment.blocks import (
    BLOCK_FILE,
    Attempt,
    BlockError,
    BlockRecord,
    BlockRunner,
    block_dir,
    block_spec,
    read_record,
)
from harness.experiment.runner import execute, load_spec
from harness.experiment.until_decided import LOOKS_FILE, PLAN_FILE, STAGES_DIR, SequentialPlan, stage_dir
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.grid.conditions import grid_from_mapping
from harness.grid.spec import GridSpec
from harness.inference.sequential import look_levels
from tests.compile_cache_settings import compile_cache_settings_restored
from tests.tampering import Edit, check_commands, edits

# Three cheap conditions. After 200 self-training steps the frozen judge's alignment is above the baseline's on every
# one of the first 20 seeds: decided at the first look (after 40 steps it was above on only 29 of 40, which the sign
# test on the jumps does not decide). The end mode's quality of resets against the baseline differs on a few seeds
# either way: open at the first look, so its two conditions (not frozen) grow to the budget.
GRID = """
[run]
seeds = 20
iterations = 2
steps_per_iteration = 100

[pretrain]
target_spearman = 0.3

[conditions.baseline]

[conditions.frozen]
boundary = true
freeze_judge = true

[conditions.reset]
reset_every = 1

[claims.frozen-keeps-alignment]
statement = "a frozen judge ends better aligned than the baseline's"
metric = "judge_alignment"
condition = "frozen"
direction = "above"
than_condition = "baseline"

[claims.reset-ends-in-better-modes]
statement = "resets every iteration end in better modes than the baseline"
metric = "mode_quality"
condition = "reset"
direction = "above"
than_condition = "baseline"
"""
MAX_SEEDS = 40


def _coevolab(*argv: object) -> int:
    # No test here reads a figure, so the reports are text alone (drawing is most of a small report's time).
    return cli.main([*map(str, argv), "--quiet", "--no-figures"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> dict[str, Path]:
    """The grid grown until decided (kept), a copy resumed, the whole grid at the second look's seeds, and the grid
    grown from seed 20 (its first look: those seeds again, every condition)."""
    root = tmp_path_factory.mktemp("until-decided")
    grid = root / "grid.toml"
    grid.write_text(GRID)
    with compile_cache_settings_restored(), pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        assert _coevolab("run", grid, "--until-decided", "--max-seeds", MAX_SEEDS, "--out", root / "run") == 0
        shutil.copytree(root / "run", root / "resumed")
        assert _coevolab("run", "--resume", root / "resumed", "--until-decided") == 0
        # The same seeds as the second look's stage, every condition: the first stage's program shape again.
        whole = load_spec(stage_dir(root / "run", 0))
        whole = whole.model_copy(update={"run": whole.run.model_copy(update={"seeds": tuple(range(20, 40))})})
        (root / "whole").mkdir()
        execute(whole, root / "whole", write_report=False)
        later = ("--seed-list", "20-39", "--until-decided", "--max-seeds", MAX_SEEDS, "--out", root / "later")
        assert _coevolab("run", grid, *later) == 0
    return {
        "grid": grid,
        "run": root / "run",
        "resumed": root / "resumed",
        "whole": root / "whole",
        "later": root / "later",
    }


@pytest.mark.heavy
def test_a_clear_claim_is_decided_first_and_its_condition_stops_growing(runs: dict[str, Path]) -> None:
    looks = pd.read_csv(runs["run"] / LOOKS_FILE)
    levels = look_levels((20, 40), 0.05, "pocock")
    assert looks["seeds"].tolist() == [20, 40]
    np.testing.assert_allclose(looks["level"], levels, rtol=1e-8)  # as claims.csv writes floats
    assert looks["conditions_grown"].tolist() == [3, 2]
    claims = pd.read_csv(runs["run"] / CLAIMS_FILE).set_index("claim")
    clear = claims.loc["frozen-keeps-alignment"]
    assert (clear["verdict"], clear["decided_at_look"], clear["seeds"]) == ("holds", 1, 20)
    # Two mean claims are two hypotheses (their equivalence tests cannot reject at 20 seeds, so they stay out of the
    # family): Holm tests the smallest p, this claim's effect, at the look's level over two, and the mean's interval
    # is at the look's level over the family's two claims.
    assert clear["look_level"] == pytest.approx(levels[0]) and clear["ci_level"] == pytest.approx(1 - levels[0] / 2)
    later = claims.loc["reset-ends-in-better-modes"]
    assert later["seeds"] == MAX_SEEDS and later["look_level"] == pytest.approx(levels[1])
    if pd.isna(later["decided_at_look"]):  # open after the budget: the seeds a fixed-size grid would need
        assert later["verdict"] == "undecided" and pd.notna(later["seeds_needed"])
    metrics = pd.read_csv(runs["run"] / METRICS_FILE)
    seeds = metrics.groupby("condition", sort=False)["seed"].nunique()
    assert seeds.to_dict() == {"baseline": 40, "frozen": 20, "reset": 40}
    assert load_spec(stage_dir(runs["run"], 1)).run.seeds == tuple(range(20, 40))
    report = (runs["run"] / "report.md").read_text()
    assert "## Which claims hold, deciding as seeds were added" in report and "Pocock-type" in report


@pytest.mark.heavy
def test_resuming_recomputes_the_same_verdicts_without_training(runs: dict[str, Path]) -> None:
    for name in (CLAIMS_FILE, METRICS_FILE, LOOKS_FILE):
        assert (runs["resumed"] / name).read_bytes() == (runs["run"] / name).read_bytes()
    for stage in (0, 1):
        assert len(read_record(stage_dir(runs["resumed"], stage), 0).attempts) == 1


@pytest.mark.heavy
def test_the_report_re_renders_to_the_same_bytes_and_keeps_the_looks_verdicts(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """`coevolab report` on a grown run writes its report again from its files and changes no other file (a grid's
    report would judge every claim once, on all the seeds, over the looks' verdicts in claims.csv)."""
    run = Path(shutil.copytree(runs["run"], tmp_path / "run"))
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    (run / "report.md").unlink()
    assert cli.main(["report", str(run), "--no-figures"]) == cli.EXIT_OK
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


@pytest.mark.heavy
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), edit=edits)
def test_an_edited_file_of_a_grid_grown_until_decided_is_refused_or_changes_no_number(
    runs: dict[str, Path], data: st.DataObject, edit: Edit
) -> None:
    """tests/tampering.py's property on a grid grown until decided: any of its files (its stages' and their blocks'
    included), edited one at a time, then verify, load_result, its resume (which recomputes a finished run's verdicts
    from its stages) and report (whose verdicts are the looks', read from claims.csv: an input here)."""
    manifest = read_manifest(runs["run"])
    assert manifest is not None
    relative = data.draw(st.sampled_from(sorted([*manifest[FILES_KEY], "manifest.json"])), label="file")
    check_commands(runs["run"], relative, edit, ("verify", "load_result", "resume-until-decided", "report"))


@pytest.mark.heavy
def test_a_condition_runs_alike_in_a_grid_of_fewer_conditions(runs: dict[str, Path]) -> None:
    """Stage 2 ran baseline and reset without frozen: the same end modes as in the whole grid, floats within the
    tolerance blocks have against a grid run whole (other program shapes round differently)."""
    stage = pd.read_csv(stage_dir(runs["run"], 1) / METRICS_FILE)
    whole = pd.read_csv(runs["whole"] / METRICS_FILE)
    whole = whole[whole["condition"] != "frozen"].reset_index(drop=True)
    assert stage[["condition", "seed", "iteration"]].equals(whole[["condition", "seed", "iteration"]])
    np.testing.assert_array_equal(stage["mode_index"], whole["mode_index"])
    floats = [name for name in whole.columns if whole[name].dtype.kind == "f"]
    np.testing.assert_allclose(stage[floats].to_numpy(float), whole[floats].to_numpy(float), rtol=0, atol=1e-4)


@pytest.mark.heavy
def test_a_run_from_a_later_first_seed_runs_each_seed_as_a_fixed_seed_grid_does(runs: dict[str, Path]) -> None:
    """Grown from seed 20: its first look holds seeds 20..39 of every condition, row for row the bytes of a plain
    grid of those seeds (the same program shape), and a second look, if any, seeds 40..59."""
    plan = SequentialPlan.model_validate_json((runs["later"] / PLAN_FILE).read_text())
    assert (plan.first_seed, plan.looks) == (20, (20, 40))
    first = read_metrics_text(stage_dir(runs["later"], 0) / METRICS_FILE).splitlines()
    assert first == read_metrics_text(runs["whole"] / METRICS_FILE).splitlines()
    assert pd.read_csv(runs["later"] / LOOKS_FILE)["conditions_grown"].tolist() == [3, 2]
    assert load_spec(stage_dir(runs["later"], 1)).run.seeds == tuple(range(40, 60))
    seeds = pd.read_csv(runs["later"] / METRICS_FILE).groupby("condition")["seed"].agg(["min", "max", "nunique"])
    assert (seeds["min"] == 20).all() and (seeds["max"] - seeds["min"] + 1 == seeds["nunique"]).all()
    assert set(seeds["nunique"]) <= {20, 40}


# The loop on known truth, without training: a backend that writes every pending block's metrics as a function of
# (condition, seed) alone, as a real run is. "better" ends 0.5 above "base" on 70% of seeds (decided at the first
# look); "same" differs from "base" by jumps either way with equal chance (open, so those two grow; "better" stops).
SYNTHETIC = {
    "run": {"seeds": 20, "iterations": 1, "block_seeds": 10},
    "conditions": {"base": {}, "better": {}, "same": {}},
    "claims": {
        "better-is-better": {
            "statement": "s",
            "metric": "policy_quality",
            "condition": "better",
            "direction": "above",
            "than_condition": "base",
        },
        "same-is-better": {
            "statement": "s",
            "metric": "policy_quality",
            "condition": "same",
            "direction": "above",
            "than_condition": "base",
        },
    },
}


def _quality(condition: str, seed: int) -> float:
    rng = np.random.default_rng([seed, len(condition)])
    draw = rng.random()
    if condition == "better":
        return 0.5 if draw < 0.7 else 0.0
    if condition == "same":
        return 0.25 if draw < 0.1 else -0.25 if draw < 0.2 else 0.0
    return 0.0


MODE_GLYPHS = ("↓ ↓", "→ →", "↑ ↑", "↗ ↗")


def synthetic_rows(conditions: Sequence[str], seeds: Sequence[int], iterations: int) -> pd.DataFrame:
    """A metrics table with every column a run writes, each a function of (condition, seed, iteration) alone: real
    quality (and the end mode's) from _quality, the other floats uniform draws, so the real report renders it."""
    rows = []
    for condition, seed, iteration in itertools.product(conditions, seeds, range(iterations + 1)):
        draws = np.random.default_rng([zlib.crc32(condition.encode()), seed, iteration])
        row: dict[str, object] = {"condition": condition, "seed": seed, "iteration": iteration}
        row |= {metric.name: draws.random() for metric in all_metrics() if metric.kind == "float"}
        row |= {metric.name: iteration for metric in all_metrics() if metric.kind == "int"}
        row |= {metric.name: True for metric in all_metrics() if metric.kind == "bool"}
        quality = _quality(condition, seed)
        mode = round(quality * 4) + 1  # one end mode per quality (−0.25, 0, 0.25, 0.5), as a world has them
        row |= {"policy_quality": quality, "mode_quality": quality, "mode_index": mode}
        rows.append(row | {"mode_sequence": MODE_GLYPHS[mode], "boundary": False, "diverged": False})
    return pd.DataFrame(rows)


def synthetic_backend(spec: GridSpec, run_dir: Path, pending: Sequence[int], run_one: BlockRunner) -> None:
    """Writes each pending block as a finished block would be, with _quality's values (no training)."""
    del run_one
    calls.append((tuple(c.name for c in spec.conditions), tuple(pending)))
    for block in pending:
        own = block_spec(spec, block)
        directory = block_dir(run_dir, block)
        directory.mkdir(parents=True)
        rows = synthetic_rows([c.name for c in own.conditions], own.run.seeds, own.run.iterations)
        write_metrics_text(directory, rows.to_csv(index=False))
        (directory / GRID_FILE).write_text(own.model_dump_json())
        write_manifest(directory, {"synthetic": True})  # sealed before its record, as a block's run seals it
        attempt = Attempt(host="synthetic", started="", finished="")
        record = BlockRecord(block=block, seeds=own.run.seeds, finished=True, attempts=[attempt])
        (directory / BLOCK_FILE).write_text(record.model_dump_json())


calls: list[tuple[tuple[str, ...], tuple[int, ...]]] = []


def test_the_loop_grows_only_open_claims_conditions_and_resumes(tmp_path: Path) -> None:
    spec = grid_from_mapping(SYNTHETIC)
    calls.clear()
    outcome = until_decided.run_until_decided(
        spec, tmp_path, 80, backend=synthetic_backend, how="synthetic", figures=False
    )
    assert outcome.looks["seeds"].tolist() == [20, 40, 80]
    assert calls == [(("base", "better", "same"), (0, 1)), (("base", "same"), (0, 1)), (("base", "same"), (0, 1, 2, 3))]
    claims = outcome.claims.set_index("claim")
    assert claims.loc["better-is-better", ["verdict", "decided_at_look", "seeds"]].tolist() == ["holds", 1, 20]
    assert claims.loc["same-is-better", "verdict"] in ("undecided", "not supported")  # never holds: no true effect
    assert outcome.metrics.groupby("condition")["seed"].nunique().to_dict() == {"base": 80, "better": 20, "same": 80}
    written = {name: (tmp_path / name).read_bytes() for name in (CLAIMS_FILE, METRICS_FILE, LOOKS_FILE, "report.md")}
    (tmp_path / "report.md").unlink()
    assert (
        cli.main(["report", str(tmp_path), "--no-figures"]) == cli.EXIT_OK
    )  # the looks' verdicts read back, not judged again
    assert {name: (tmp_path / name).read_bytes() for name in written} == written
    calls.clear()
    until_decided.run_until_decided(
        None, tmp_path, backend=synthetic_backend, how="synthetic", figures=False
    )  # resumed
    assert calls == []
    assert {name: (tmp_path / name).read_bytes() for name in written} == written
    with pytest.raises(BlockError, match="cannot change"):
        until_decided.run_until_decided(None, tmp_path, 160, backend=synthetic_backend)


def _files_but_the_lock(run_dir: Path) -> dict[Path, bytes]:
    """Every file of a run directory and its bytes, but its lock (which a command takes and leaves in place)."""
    return {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file() and path.suffix != LOCK_SUFFIX}


def test_a_planned_budget_cannot_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command refuses another budget for a run whose looks are planned, in one line that names the planned one,
    and changes none of its files; --max-seeds without --until-decided is refused too. (The refusal comes before
    anything trains, so a run grown by the synthetic backend stands in for a trained one.)"""
    run = tmp_path / "run"
    until_decided.run_until_decided(grid_from_mapping(SYNTHETIC), run, 40, backend=synthetic_backend, figures=False)
    before = _files_but_the_lock(run)
    assert _coevolab("run", "--resume", run, "--until-decided", "--max-seeds", 80) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "planned for 40 seeds" in err and "cannot change" in err and err.count("\n") == 1
    assert _files_but_the_lock(run) == before
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert _coevolab("run", grid, "--max-seeds", 80, "--out", tmp_path / "x") == cli.EXIT_BAD_INPUT
    assert "--max-seeds is the budget of --until-decided" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_judged_after_every_block_by_e_values(tmp_path: Path) -> None:
    """--spending anytime: a look after every block of the first look's seeds, each at α (e-values valid at any look);
    the clear claim is decided, the one without an effect never holds, the spread of levels is α each."""
    spec = grid_from_mapping(SYNTHETIC)
    calls.clear()
    outcome = until_decided.run_until_decided(
        spec, tmp_path, 80, spending="anytime", backend=synthetic_backend, how="synthetic", figures=False
    )
    assert outcome.looks["seeds"].tolist()[0] == 20 and set(outcome.looks["level"]) == {0.05}
    assert set(outcome.looks["spent"]) == {0.05}
    claims = outcome.claims.set_index("claim")
    better = claims.loc["better-is-better"]
    assert better["verdict"] == "holds" and "sign e-value" in better["why"]
    assert better["test"].startswith("sign e-value")
    assert better["p_adjusted"] <= 0.05 and better["p_value"] == pytest.approx(better["p_adjusted"] / 2)
    assert claims.loc["same-is-better", "verdict"] == "undecided"
    plan = json.loads((tmp_path / until_decided.PLAN_FILE).read_text())
    assert plan["spending"] == "anytime" and plan["looks"] == [20, 40, 60, 80]
    assert "valid at any look" in (tmp_path / "report.md").read_text()


def test_a_grid_without_claims_or_budget_is_refused(tmp_path: Path) -> None:
    spec = grid_from_mapping({**SYNTHETIC, "claims": {}})
    with pytest.raises(BlockError, match="no claims"):
        until_decided.run_until_decided(spec, tmp_path / "a", 80, backend=synthetic_backend)
    with pytest.raises(BlockError, match="too small"):
        until_decided.run_until_decided(grid_from_mapping(SYNTHETIC), tmp_path / "b", 10, backend=synthetic_backend)


def test_a_finished_run_grows_as_the_first_look(tmp_path: Path) -> None:
    """A finished run (here of an earlier version, with a metric the stages after it lack) becomes stages/0/ and
    grows from there; the merged metrics keep the columns every stage has."""
    spec = grid_from_mapping(SYNTHETIC)
    rows = synthetic_rows([c.name for c in spec.conditions], spec.run.seeds, spec.run.iterations)
    write_metrics_text(tmp_path, rows.assign(retired_metric=1.0).to_csv(index=False))
    (tmp_path / GRID_FILE).write_text(spec.model_dump_json())
    (tmp_path / "report.md").write_text("# the run's own report\n")
    write_manifest(tmp_path, {"synthetic": True})  # finished: sealed
    calls.clear()
    outcome = until_decided.run_until_decided(None, tmp_path, 40, backend=synthetic_backend, figures=False)
    assert calls == [(("base", "same"), (0, 1))]  # the first look decided better-is-better from the run's 20 seeds
    assert (stage_dir(tmp_path, 0) / "report.md").read_text() == "# the run's own report\n"
    assert "retired_metric" not in outcome.metrics.columns
    assert outcome.claims.set_index("claim").loc["better-is-better", "decided_at_look"] == 1


def _seed_sets(metrics: pd.DataFrame) -> dict[str, list[int]]:
    return {name: sorted(group["seed"].unique().tolist()) for name, group in metrics.groupby("condition")}


def test_a_run_from_a_later_first_seed_grows_the_seeds_that_follow_and_resumes(tmp_path: Path) -> None:
    """Seeds 1000..1004 (fewer than a verdict needs): the first look is 1000..1019, the next looks take the seeds
    that follow; the merged metrics are the backend's values for exactly those seeds, and verify; a resume after the
    last stage was lost runs that stage's seeds again and writes the same files."""
    spec = grid_from_mapping(SYNTHETIC, seeds=range(1000, 1005))
    calls.clear()
    outcome = until_decided.run_until_decided(spec, tmp_path, 80, backend=synthetic_backend, figures=False)
    plan = SequentialPlan.model_validate_json((tmp_path / PLAN_FILE).read_text())
    assert (plan.first_seed, plan.looks) == (1000, (20, 40, 80))
    assert outcome.looks["seeds"].tolist() == [20, 40, 80]
    stages = [load_spec(stage_dir(tmp_path, stage)).run.seeds for stage in range(3)]
    assert stages == [tuple(range(1000, 1020)), tuple(range(1020, 1040)), tuple(range(1040, 1080))]
    assert load_spec(tmp_path).run.seeds == tuple(range(1000, 1020))  # grid.json: the first look's grid
    grown = {"base": list(range(1000, 1080)), "better": list(range(1000, 1020)), "same": list(range(1000, 1080))}
    assert _seed_sets(outcome.metrics) == grown
    expected = pd.concat(synthetic_rows([name], seeds, 1) for name, seeds in grown.items())
    merged = outcome.metrics[outcome.metrics["iteration"] == 1].sort_values(["condition", "seed"])
    np.testing.assert_array_equal(merged["policy_quality"], expected[expected["iteration"] == 1]["policy_quality"])
    assert cli.main(["verify", str(tmp_path)]) == cli.EXIT_OK  # each condition's seeds read back from 1000 on

    written = {name: (tmp_path / name).read_bytes() for name in (CLAIMS_FILE, METRICS_FILE, LOOKS_FILE)}
    shutil.rmtree(stage_dir(tmp_path, 2))
    calls.clear()
    until_decided.run_until_decided(None, tmp_path, backend=synthetic_backend, figures=False)
    assert calls == [(("base", "same"), (0, 1, 2, 3))]
    assert load_spec(stage_dir(tmp_path, 2)).run.seeds == tuple(range(1040, 1080))
    assert {name: (tmp_path / name).read_bytes() for name in written} == written


def test_only_consecutive_seeds_can_grow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A gap or another order is refused in one line before anything is written, by the loop and by the CLI."""
    for seeds in ([*range(1000, 1010), *range(1011, 1021)], [1, 0, *range(2, 20)]):
        with pytest.raises(BlockError, match="consecutive seeds"):
            until_decided.run_until_decided(grid_from_mapping(SYNTHETIC, seeds=seeds), tmp_path, 40)
        assert not (tmp_path / PLAN_FILE).exists() and not (tmp_path / GRID_FILE).exists()
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    argv = ("run", grid, "--seed-list", "0-9,11-20", "--until-decided", "--max-seeds", 40, "--out", tmp_path / "x")
    assert _coevolab(*argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "consecutive seeds" in err and err.count("\n") == 1 and not (tmp_path / "x").exists()


def _finished_run(run_dir: Path, seeds: Sequence[int]) -> GridSpec:
    """A finished fixed-seed run directory of the synthetic grid (its metrics and grid.json), not yet judged."""
    spec = grid_from_mapping(SYNTHETIC, seeds=seeds)
    rows = synthetic_rows([c.name for c in spec.conditions], spec.run.seeds, spec.run.iterations)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_metrics_text(run_dir, rows.to_csv(index=False))
    (run_dir / GRID_FILE).write_text(spec.model_dump_json())
    write_manifest(run_dir, {"synthetic": True})  # finished: sealed
    return spec


def test_a_run_whose_claims_were_judged_cannot_be_a_look(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its verdicts (claims.csv) spent α before any plan: refused in one line, its files left as they were; so is a
    directory that holds stages without a plan."""
    judged = tmp_path / "judged"
    _finished_run(judged, range(20))
    (judged / CLAIMS_FILE).write_text("claim,verdict\nbetter-is-better,holds\n")
    before = {path: path.read_bytes() for path in judged.rglob("*")}
    assert _coevolab("run", "--resume", judged, "--until-decided", "--max-seeds", 40) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "already judged" in err and "start a fresh plan" in err and err.count("\n") == 1
    assert _files_but_the_lock(judged) == before  # the lock the command took is the only file added
    stages = tmp_path / "stages-without-plan"
    _finished_run(stages, range(20))
    (stages / STAGES_DIR / "0").mkdir(parents=True)
    with pytest.raises(BlockError, match="no plan"):
        until_decided.run_until_decided(None, stages, 40, backend=synthetic_backend)


def test_a_finished_run_never_judged_from_a_later_first_seed_grows_as_its_first_look(tmp_path: Path) -> None:
    _finished_run(tmp_path, range(500, 520))
    calls.clear()
    outcome = until_decided.run_until_decided(None, tmp_path, 40, backend=synthetic_backend, figures=False)
    plan = json.loads((tmp_path / PLAN_FILE).read_text())
    assert (plan["first_seed"], plan["looks"]) == (500, [20, 40])
    assert calls == [(("base", "same"), (0, 1))]  # the run itself is the first look: nothing of it runs again
    assert load_spec(stage_dir(tmp_path, 1)).run.seeds == tuple(range(520, 540))
    assert outcome.metrics.groupby("condition")["seed"].max().to_dict() == {"base": 539, "better": 519, "same": 539}
