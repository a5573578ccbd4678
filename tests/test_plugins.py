"""A mechanism of a lab's own, loaded from outside the package: examples/mechanisms/judge_tether.py through the
command line, the Python API and seed blocks; its clashes refused in one line; its source recorded, copied into the
run directory, and recompiled when it changes."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict, Field

import harness
from harness import cli
from harness.engine.metrics import Metric
from harness.grid import registry
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.grid.contract import Mechanism
from harness.grid.contract_checks import HOOK_ARGUMENTS, ROW_ARGUMENTS
from harness.grid.knobs import Knobs, knob_owners
from harness.grid.layout import layout_grid
from harness.grid.spec import Condition, GridSpec, MechanismSource
from harness.grid.step_rows import StepRow
from harness.mechanisms import BUILT_IN
from tests.jax_logs import compile_log

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mechanisms" / "judge_tether.py"
# The tether beside the baseline and a frozen judge, in a world of two positions (tests/worlds.py).
GRID = """
[mechanisms]
modules = ["judge_tether.py"]

[run]
seeds = 2
iterations = 2
steps_per_iteration = 10
batch_size = 16
{block}

[world]
vocab_size = 4
seq_len = 2

[conditions.baseline]
[conditions.frozen]
freeze_judge = true
[conditions.tethered]
tether = [0.0, 0.5, 1.0]
"""
FLOAT_COLUMNS = ["policy_quality", "judge_alignment", "policy_entropy", "judge_perceived_quality", "judge_drift"]


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    """Commands cache compiled programs in the session's shared directory."""
    return subprocess_compile_cache


def coevolab(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def lab_folder(root: Path, block: str = "") -> Path:
    """A lab's folder outside the package: its own copy of the tether and a condition file that loads it."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE, root / "judge_tether.py")
    (root / "tether.toml").write_text(GRID.format(block=block))
    return root / "tether.toml"


@pytest.fixture(scope="module")
def tethered(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> tuple[Path, pd.DataFrame]:
    """The tether's grid run by `coevolab run` from a lab folder: (run directory, metrics). Its programs go to the
    session's compile cache (a module fixture runs before `_compile_cache` sets it), where the API's run of the same
    grid in this process finds them."""
    grid = lab_folder(tmp_path_factory.mktemp("lab"))
    out = grid.parent / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        result = coevolab("run", str(grid), "--out", str(out), "--no-figures", "--quiet")
    assert result.returncode == 0, result.stderr
    return out, pd.read_csv(out / "metrics.csv.gz")


def by_condition(metrics: pd.DataFrame, name: str) -> pd.DataFrame:
    return metrics[metrics["condition"] == name].reset_index(drop=True)


def test_the_tether_runs_from_a_condition_file_outside_the_package(tethered) -> None:
    out, metrics = tethered
    columns = list(metrics.columns)
    assert columns.index("referee_label_error") < columns.index("judge_drift") < columns.index("mode_index")
    final = metrics[metrics["iteration"] == 2].set_index(["condition", "seed"])["judge_drift"]
    assert (final.loc["frozen"] == 0).all()  # a frozen judge never leaves its pretrained weights
    assert (final.loc["tethered[tether=1]"] < 1e-5).all()  # pulled all the way back after every update
    assert (final.loc["tethered[tether=0.5]"] < final.loc["baseline"]).all()
    assert (final.loc["baseline"] > 0.05).all()
    # A pull of 0 acts on no run (no work group): every number is the baseline's.
    off, baseline = by_condition(metrics, "tethered[tether=0]"), by_condition(metrics, "baseline")
    pd.testing.assert_frame_equal(off[FLOAT_COLUMNS], baseline[FLOAT_COLUMNS])
    # The run directory records the module and carries its source.
    grid = (out / "grid.json").read_text()
    assert registry.source_digest(EXAMPLE) in grid
    assert (out / "mechanisms" / "judge_tether.py").read_bytes() == EXAMPLE.read_bytes()


def test_report_reads_the_run_from_its_own_copy_of_the_mechanism(tethered, tmp_path: Path) -> None:
    """The lab's module gone (moved, renamed): `coevolab report` re-renders the run, byte for byte, from the copy."""
    out, _ = tethered
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (out.parent / "judge_tether.py").rename(tmp_path / "elsewhere.py")
    try:
        result = coevolab("report", str(copy), "--no-figures")
        assert result.returncode == 0, result.stderr
        assert (copy / "report.md").read_bytes() == (out / "report.md").read_bytes()
    finally:
        (tmp_path / "elsewhere.py").rename(out.parent / "judge_tether.py")


def test_the_api_runs_a_registered_mechanism_to_the_same_numbers(tethered, tmp_path: Path) -> None:
    """`harness.register_mechanism`, then a grid from a dict that sets its knob: the command line's numbers."""
    _, metrics = tethered
    with registry.restored_catalog():
        assert harness.register_mechanism(EXAMPLE) == ("judge_tether",)
        assert Knobs(tether=0.5).tether == 0.5
        document = {
            "run": {"seeds": 2, "iterations": 2, "steps_per_iteration": 10, "batch_size": 16},
            "world": {"vocab_size": 4, "seq_len": 2},
            "conditions": {"baseline": {}, "frozen": {"freeze_judge": True}, "tethered": {"tether": [0.0, 0.5, 1.0]}},
        }
        grid = harness.grid_from_dict(document, name="tether")
        assert [source.name for source in grid.mechanisms] == ["judge_tether"]
        result = harness.run_grid(grid, run_dir=tmp_path / "api", figures=False)
    pd.testing.assert_frame_equal(result.metrics[FLOAT_COLUMNS], metrics[FLOAT_COLUMNS])


def test_a_changed_mechanism_is_compiled_afresh_and_refused_by_resume(tethered, tmp_path: Path) -> None:
    """The same grid, the module edited (the pull applied twice): the compile cache serves no stale program (the
    numbers follow the edit), and `--resume` of the first run refuses the edited module in one line."""
    out, metrics = tethered
    module = out.parent / "judge_tether.py"
    original = module.read_text()
    edited = original.replace("judge.params - pull * (judge.params - pretrained)", "judge.params - 2 * pull * (0.0)")
    assert edited != original
    grid = lab_folder(tmp_path / "lab")
    (tmp_path / "lab" / "judge_tether.py").write_text(edited)
    again = coevolab("run", str(grid), "--out", str(tmp_path / "run"), "--no-figures", "--quiet")
    assert again.returncode == 0, again.stderr
    changed = pd.read_csv(tmp_path / "run" / "metrics.csv.gz")
    tethered_rows = metrics["condition"].str.startswith("tethered[tether=0.5")
    assert not np.allclose(changed.loc[tethered_rows, "judge_drift"], metrics.loc[tethered_rows, "judge_drift"])
    pd.testing.assert_frame_equal(by_condition(changed, "baseline"), by_condition(metrics, "baseline"))

    module.write_text(edited)
    try:
        refused = coevolab("run", "--resume", str(out), "--seeds", "3", "--no-figures", "--quiet")
    finally:
        module.write_text(original)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("coevolab: error: mechanism 'judge_tether'") and "has changed since this run started" in line


def test_a_metric_outside_its_declared_values_stops_the_run_before_it_is_sealed(tmp_path: Path) -> None:
    """The tether's metric made negative (it declares ≥ 0): the run reads its metrics back before sealing them, so it
    exits 2 in one line naming the metric, and leaves no manifest; verify refuses the directory, as the report would."""
    grid = lab_folder(tmp_path / "lab")
    module = tmp_path / "lab" / "judge_tether.py"
    module.write_text(module.read_text().replace("lambda run: run.of(NAME),", "lambda run: -1.0 - run.of(NAME),"))
    out = tmp_path / "run"
    refused = coevolab("run", str(grid), "--out", str(out), "--no-figures", "--quiet")
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "judge_drift is -1" in line and "the run is not sealed" in line, line
    assert not (out / "manifest.json").exists()
    assert coevolab("verify", str(out)).returncode == 2


def test_seed_blocks_run_the_mechanism_in_their_own_processes(tethered, tmp_path: Path) -> None:
    """The grid at 4 seeds as two seed blocks of 2, each a `coevolab run --block` process, merged: the first block is
    the whole 2-seed run's bytes (a block of its shape runs its program, loaded from the compile cache), and in the
    second the mechanism acts as it does in the first."""
    out, _ = tethered
    grid = lab_folder(tmp_path / "lab", block="block_seeds = 2")
    blocks = tmp_path / "blocks"
    for block in ("0", "1"):
        argv = ("run", str(grid), "--seeds", "4", "--out", str(blocks), "--block", block, "--no-figures", "--quiet")
        result = coevolab(*argv)
        assert result.returncode == 0, result.stderr
    merged = coevolab("merge", str(blocks), "--no-figures", "--quiet")
    assert merged.returncode == 0, merged.stderr
    assert (blocks / "blocks" / "0" / "metrics.csv.gz").read_bytes() == (out / "metrics.csv.gz").read_bytes()
    metrics = pd.read_csv(blocks / "metrics.csv.gz")
    assert sorted(set(metrics["seed"])) == [0, 1, 2, 3]
    final = metrics[metrics["iteration"] == 2].set_index(["condition", "seed"])["judge_drift"]
    assert (final.loc["frozen"] == 0).all() and (final.loc["tethered[tether=1]"] < 1e-5).all()
    assert (final.loc["tethered[tether=0.5]"] < final.loc["baseline"]).all()
    off, baseline = by_condition(metrics, "tethered[tether=0]"), by_condition(metrics, "baseline")
    pd.testing.assert_frame_equal(off[FLOAT_COLUMNS], baseline[FLOAT_COLUMNS])


# --------------------------------------------------------------------------------------------------------------------
# What a mechanism may not do, each refused in one line


class _ClashingKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    anchor_fraction: float = Field(0.0, description="taken by the anchor")


class _OwnKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    pull: float = Field(0.0, description="a knob of its own")


def _row(name: str) -> StepRow:
    """A row of the updates stage that does nothing (for what registering checks)."""
    return StepRow(
        name=name,
        stage="updates",
        schedule=lambda knobs, n_outputs: None,
        update=lambda value, member, own: (value, own),
        due=lambda member: None,
    )


@pytest.mark.parametrize(
    ("mechanism", "problem"),
    [
        (Mechanism("anchor", "a name taken"), "the name is taken by another mechanism"),
        (
            Mechanism("mine", "a knob taken", knobs=_ClashingKnobs),
            "knob 'anchor_fraction' is taken by mechanism 'anchor'",
        ),
        (Mechanism("mine", "a row taken", rows=(_row("referee"),)), "row 'referee' is taken by mechanism 'referee'"),
        (Mechanism("mine", "an unknown order", after=("nowhere",)), "its order names mechanism 'nowhere'"),
        (
            Mechanism("mine", "a metric taken", metrics=(BUILT_IN[0].metrics[0],)),
            "metric 'judge_updates' of mechanism 'mine' is taken by judge_update",
        ),
        (
            Mechanism("mine", "a bare function as its report", report=lambda inputs: []),  # type: ignore[arg-type]
            "report is <function",
        ),
        (
            Mechanism("mine", "a state hook without a state", after_step=lambda step, own: own),
            "hook 'after_step' changes only the mechanism's own state, and it keeps none",
        ),
        (
            Mechanism(
                "mine",
                "a state hook of the old form, which took the whole state",
                run_state=lambda shape, row: row[0],
                start_iteration=lambda shape, constants, knobs, state, iteration: state,
            ),
            "hook 'start_iteration' (",
        ),
        (
            Mechanism(
                "mine",
                "a row whose due takes too little",
                rows=(_row("mine_row")._replace(due=lambda step, group, networks: 0),),
            ),
            "row 'mine_row' due (",
        ),
    ],
)
def test_a_clash_is_refused_naming_the_mechanism(mechanism: Mechanism, problem: str) -> None:
    with registry.restored_catalog(), pytest.raises(registry.MechanismError) as caught:
        registry.register(mechanism)
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)
    assert "mine" not in registry.catalog()


def test_every_function_of_the_contract_has_its_arguments_listed() -> None:
    # A hook or row field added to the contract without its arguments would never be checked when a mechanism
    # registers: the lists must name exactly the fields that hold functions.
    def functions(annotations: dict[str, object]) -> set[str]:
        written = {name: str(getattr(hint, "__forward_arg__", hint)) for name, hint in annotations.items()}
        return {name for name, hint in written.items() if hint.startswith("Callable")}

    assert set(HOOK_ARGUMENTS) == functions({field.name: field.type for field in dataclasses.fields(Mechanism)})
    assert set(ROW_ARGUMENTS) == functions(StepRow.__annotations__)


def test_a_mechanism_runs_where_its_order_says_and_a_contradiction_is_refused() -> None:
    first = Mechanism("first", "just before meta-judging", rows=(_row("first_row"),), before=("referee",))
    second = Mechanism("second", "after the referee, before the first", rows=(_row("second_row"),), after=("referee",))
    with registry.restored_catalog():
        registry.register(first)
        registry.register(dataclasses.replace(second, before=("first",)))
        order = [row.name for row in registry.stage_rows(registry.active(["first"]), "updates")]
        assert order == ["judge_update", "anchor", "first_row", "referee", "judge_ema"]
        with pytest.raises(registry.MechanismError, match="which run the other way"):
            registry.stage_rows(registry.active(["first", "second"]), "updates")


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("import no_such_package\n", "ModuleNotFoundError: No module named 'no_such_package'"),
        ("VALUE = 1\n", "it defines no MECHANISM"),
        ("raise SystemExit(0)\n", "SystemExit: 0"),
        (
            "from harness.grid.contract import Mechanism\nMECHANISM = Mechanism('anchor', 'taken')\n",
            "the name is taken by another mechanism",
        ),
    ],
)
def test_a_condition_file_whose_module_fails_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, source: str, problem: str
) -> None:
    (tmp_path / "mine.py").write_text(source)
    (tmp_path / "grid.toml").write_text('[mechanisms]\nmodules = ["mine.py"]\n[conditions.baseline]\n')
    with registry.restored_catalog():
        assert cli.main(["list", str(tmp_path / "grid.toml")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"coevolab: error: {tmp_path / 'grid.toml'}, key 'mechanisms.modules'") and problem in line


def test_knobs_of_a_mechanism_the_grid_does_not_load_are_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with registry.restored_catalog():
        assert "pull" not in knob_owners()  # read before the mechanism registers: what is known must follow it
        registry.register(Mechanism("pulling", "a knob of its own", knobs=_OwnKnobs), module="mine.py")
        assert Knobs(pull=0.1).pull == 0.1
        (tmp_path / "grid.toml").write_text("[conditions.pulled]\npull = 0.5\n")
        assert cli.main(["list", str(tmp_path / "grid.toml")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "key 'pull': a knob of mechanism 'pulling', which this file does not load" in line
    with pytest.raises(ValueError, match="pull"):  # unregistered with the catalog's restore
        Knobs(pull=0.1)


def test_a_helper_module_beside_the_mechanism_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its code would be in no digest: an edit to it would reuse a stale compiled program (exit 0, wrong numbers)."""
    (tmp_path / "lab_helpers.py").write_text("SCALE = 2.0\n")
    (tmp_path / "mine.py").write_text(
        "import numpy as np\nfrom harness.grid.contract import Mechanism\n\nimport lab_helpers\n"
        "MECHANISM = Mechanism('scaled', 'uses a helper')\n"
    )
    (tmp_path / "relative.py").write_text("from . import lab_helpers\n")
    (tmp_path / "grid.toml").write_text('[mechanisms]\nmodules = ["mine.py"]\n[conditions.baseline]\n')
    monkeypatch.syspath_prepend(str(tmp_path))  # where a lab would have put it for the import to work at all
    with registry.restored_catalog():
        assert cli.main(["list", str(tmp_path / "grid.toml")]) == 2
        with pytest.raises(registry.MechanismError, match=r"relative\.py:1\) imports '\.lab_helpers' beside it"):
            registry.load(str(tmp_path / "relative.py"))
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"mine.py:4) imports 'lab_helpers' from {tmp_path / 'lab_helpers.py'}, outside the installed" in line


class _SizeKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    own_depth: int = 0


def test_a_static_size_named_like_another_mechanisms_is_refused() -> None:
    """A plugin declaring `history_depth` would otherwise replace the temporal contrast's depth, silently."""
    clashing = Mechanism(
        "deep", "declares a built-in's size", knobs=_SizeKnobs, sizes=lambda knobs, facts: {"history_depth": 0}
    )
    with registry.restored_catalog():
        registry.register(clashing, module="mine.py")
        spec = GridSpec(
            mechanisms=(MechanismSource(name="deep", module="mine.py", digest=""),),
            conditions=(Condition(name="past", knobs=Knobs(rejected_from="past", temporal_gap=3)),),
        )
        with pytest.raises(registry.MechanismError, match="static size 'history_depth' is declared by mechanism"):
            layout_grid(spec)


def test_a_registered_headline_metric_leaves_other_runs_readable() -> None:
    """Registering a plugin whose metric is a headline changes no other run's reading: its column belongs to the
    grids that use it."""
    clipped = Metric("clipped_mass", "clipped mass", "", "a plugin's headline", lambda run: run.pi[0], headline=True)
    with registry.restored_catalog():
        registry.register(Mechanism("clipping", "a headline metric of its own", metrics=(clipped,)), module="mine.py")
        result = harness.load_result(ROOT / "artifacts" / "reference" / "paper")
    assert "clipped_mass" not in result.metrics.columns
    assert len(result.metrics) == 18 * 5 * 11


BROKEN_HOOK = """import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict

from harness.grid.contract import Mechanism


class BrokenKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    broken_bonus: float = 0.0


def bonus(rewards, batch, own):
    return rewards + jnp.ones(3), own  # not the batch's shape


MECHANISM = Mechanism("broken", "a reward hook of the wrong shape", knobs=BrokenKnobs, shape_reward=bonus)
"""


def _run_with_module(tmp_path: Path, name: str, source: str, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """`coevolab run` of a tiny grid that loads the module `source` (as `name`): its exit code and its one stderr
    line."""
    (tmp_path / name).write_text(source)
    (tmp_path / "grid.toml").write_text(
        f'[mechanisms]\nmodules = ["{name}"]\n[run]\nseeds = 1\niterations = 1\nsteps_per_iteration = 2\n'
        "batch_size = 16\n[world]\nvocab_size = 4\nseq_len = 2\n[conditions.baseline]\n"
    )
    with registry.restored_catalog():
        code = cli.main(["run", str(tmp_path / "grid.toml"), "--out", str(tmp_path / "run"), "--quiet"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    return code, line


def test_a_mistake_in_a_plugins_hook_is_one_line_naming_its_file_line_and_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, line = _run_with_module(tmp_path, "broken.py", BROKEN_HOOK, capsys)
    assert code == 2
    where = f"{tmp_path / 'broken.py'}:14, in bonus; hook 'shape_reward'"
    assert line.startswith(f"coevolab: error: mechanism 'broken' ({where}): TypeError")
    assert "(16,)" in line and "(3,)" in line


def test_a_hook_written_for_the_old_reward_form_is_one_line_naming_the_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`shape_reward` was (rewards, batch, knobs) -> rewards: such a hook binds the new form's three arguments, then
    reads a knob from its own state (None), and the line says which hook of the contract called it."""
    old_form = BROKEN_HOOK.replace(
        "return rewards + jnp.ones(3), own  # not the batch's shape", "return rewards + own.broken_bonus"
    )
    code, line = _run_with_module(tmp_path, "old_form.py", old_form, capsys)
    assert code == 2
    where = f"{tmp_path / 'old_form.py'}:14, in bonus; hook 'shape_reward'"
    assert line == (
        f"coevolab: error: mechanism 'broken' ({where}): AttributeError: 'NoneType' object has no attribute "
        "'broken_bonus'"
    )


WRONG_METRIC = """import jax.numpy as jnp

from harness.engine.metrics import Metric
from harness.grid.contract import Mechanism

MECHANISM = Mechanism(
    "spread_out",
    "a metric of the wrong shape",
    metrics=(Metric("spread", "spread", "", "one value per output, not per run", lambda run: run.pi),),
)
"""


def test_a_metric_of_the_wrong_shape_is_one_line_before_anything_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, line = _run_with_module(tmp_path, "spread.py", WRONG_METRIC, capsys)
    assert code == 2
    assert line == (
        "coevolab: error: metric 'spread' of mechanism 'spread_out' computes shape (16,) for one run, not one "
        "number: its compute must reduce the run's view to a scalar"
    )


def _one_row_module(mechanism: str, function: str, row: str, update: str, due: str, check: str = "None") -> str:
    """The source of a mechanism of one row on the judge's update, whose own function is `function` (its `def` on line
    8 of the file)."""
    return f"""import jax.numpy as jnp

from harness.grid.contract import Mechanism
from harness.grid.step_rows import StepRow
from harness.mechanisms.judge_update import with_judge_update


{function}

MECHANISM = Mechanism(
    "{mechanism}",
    "a row with a mistake",
    rows=(
        StepRow(
            name="{row}",
            stage="updates",
            schedule=lambda knobs, n_outputs: "every_step",
            update={update},
            due={due},
            check={check},
        ),
    ),
)
"""


WRONG_ROW = _one_row_module(
    "shrinking",
    "def shrink(judge, member, own):\n    return judge.replace(params=judge.params[:-1]), own  # one parameter short\n",
    row="shrink",
    update="shrink",
    due="with_judge_update",
)
WRONG_DUE = _one_row_module(
    "always_due",
    "def always(member):\n    return jnp.ones(3, bool)  # three flags for one judge\n",
    row="always",
    update="lambda judge, member, own: (judge, own)",
    due="always",
)
WRONG_CHECK = _one_row_module(
    "scored",
    "def accuracy(judge, member, own):\n    return jnp.float32(0.5)  # an accuracy, not whether the judge fails\n",
    row="scored",
    update="lambda judge, member, own: (judge, own)",
    due="with_judge_update",
    check="accuracy",
)
UNPAIRED = _one_row_module(
    "unpaired",
    "def bare(judge, member, own):\n    return judge  # the judge alone, without its own state\n",
    row="bare",
    update="bare",
    due="with_judge_update",
)

WRONG_HOOK = """import jax.numpy as jnp

from harness.grid.contract import Mechanism


def restart(context, own):
    return own._replace(runs=own.runs.astype(jnp.float32))  # its counter as a float


MECHANISM = Mechanism(
    "restarting",
    "an iteration hook that changes its state's dtype",
    run_state=lambda shape, policy: jnp.zeros((), jnp.int32),
    start_iteration=restart,
)
"""


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        (
            "shrink.py",
            WRONG_ROW,
            "mechanism 'shrinking' ({file}:8, in shrink; row 'shrink' update) returns '[0].params' as (4832,) float32, "
            "not the (4833,) float32 it was given",
        ),
        (
            "always.py",
            WRONG_DUE,
            "mechanism 'always_due' ({file}:8, in always; row 'always' due) returns (3,) bool, not one bool () for "
            "the member",
        ),
        (
            "scored.py",
            WRONG_CHECK,
            "mechanism 'scored' ({file}:8, in accuracy; row 'scored' check) returns () float32, not one bool () for "
            "the member",
        ),
        (
            "bare.py",
            UNPAIRED,
            "mechanism 'unpaired' ({file}:8, in bare; row 'bare' update) returns a Network, not a tuple of the 2 "
            "values it was given (value and own state)",
        ),
        (
            "restart.py",
            WRONG_HOOK,
            "mechanism 'restarting' ({file}:6, in restart; hook 'start_iteration') returns '.runs' as (1,) float32, "
            "not the (1,) int32 it was given",
        ),
    ],
)
def test_a_row_or_hook_returning_another_shape_is_one_line_before_anything_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture, name: str, source: str, expected: str
) -> None:
    # Checked on the traced values: the line comes before XLA compiles the iteration, instead of a broadcasting or
    # loop-carry error from inside the grid's code.
    with compile_log() as messages:
        code, line = _run_with_module(tmp_path, name, source, capsys)
    assert code == 2
    assert line == "coevolab: error: " + expected.format(file=tmp_path / name)
    assert not any("jit(iterate)" in message for message in messages)
