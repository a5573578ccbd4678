"""tools/test_profile.py: a real pytest session with the plugin, on tests whose compile work and wall time are known,
then its tables by file and by program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from harness.grid.step_rows import WorkGroupShape
from tools import test_profile

ROOT = Path(__file__).resolve().parents[1]

TESTS = """
import time

import jax
import jax.numpy as jnp
import pytest


def sine_times_three(x):
    return jnp.sin(x) * 3.0


def running_sum_plus_one(x):
    return jnp.cumsum(x) + 1.0


@pytest.fixture(scope="module")
def compiled_in_setup():
    return jax.jit(sine_times_three)(jnp.ones(7))


def test_compiles_a_program_of_its_own(compiled_in_setup):
    jax.jit(running_sum_plus_one)(jnp.arange(13.0)).block_until_ready()


def test_waits_without_compiling():
    time.sleep(0.3)


def test_compiles_one_shape_twice_and_another_once():
    # As a grid program is compiled: through compile_exported, which names the shape; with no compile cache and the
    # process's executables forgotten, the same shape compiles again.
    from harness.grid.compile_cache import compile_exported, disable_compilation_cache, forget_compiled

    disable_compilation_cache()
    program = jax.jit(running_sum_plus_one)
    for size in (5, 5, 11):
        forget_compiled()
        parts = {"size": str(size), "kind": "ones"}
        compile_exported("shaped", program, (jnp.ones(size),), "a static key", parts=parts)
"""


def test_a_session_is_profiled_per_phase_and_summed_by_file(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(TESTS))
    profile = tmp_path / "profile"
    # Every compile counts as long here (the sample's take milliseconds), so each is listed by its program's name.
    env = {**os.environ, test_profile.DIRECTORY_ENV: str(profile), test_profile.LONG_COMPILE_ENV: "0"}
    env["PYTHONPATH"] = str(ROOT)
    plugins = ("-p", "tools.test_profile", "-p", "no:cacheprovider")
    argv = [sys.executable, "-m", "pytest", "test_sample.py", *plugins, "-q"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    (rows_file,) = profile.glob("tests-*.csv")
    rows = pd.read_csv(rows_file).set_index(["test", "phase"])
    assert list(rows.reset_index().columns) == list(test_profile.COLUMNS)
    compiling = "test_sample.py::test_compiles_a_program_of_its_own"
    waiting = "test_sample.py::test_waits_without_compiling"
    shaped = "test_sample.py::test_compiles_one_shape_twice_and_another_once"
    assert len(rows) == 3 * 3  # setup, call and teardown of each test
    # The fixture's compile is its test's setup; the test's own jit is its call; each traced, lowered and compiled.
    for phase in ("setup", "call"):
        row = rows.loc[(compiling, phase)]
        assert row["compiles"] >= 1 and min(row["trace_s"], row["lower_s"], row["compile_s"]) > 0
    assert rows.loc[(waiting, "call"), "compiles"] == 0 and rows.loc[(waiting, "call"), "wall_s"] >= 0.3

    table = test_profile.by_file(profile)
    assert list(table.index) == ["test_sample.py", "TOTAL"]
    sample = table.loc["test_sample.py"]
    assert sample["tests"] == 3 and sample["compiles"] == rows["compiles"].sum()
    assert sample["wall_s"] == round(rows["wall_s"].sum(), 1)

    (compiles_file,) = profile.glob("compiles-*.csv")
    compiles = pd.read_csv(compiles_file)
    assert list(compiles.columns) == list(test_profile.COMPILE_COLUMNS) and len(compiles) == rows["compiles"].sum()
    named = compiles[compiles["program"] != "jit(shaped)"].set_index("program")
    assert named.loc["jit(sine_times_three)", ["test", "phase"]].tolist() == [compiling, "setup"]
    assert named.loc["jit(running_sum_plus_one)", ["test", "phase"]].tolist() == [compiling, "call"]
    programs = test_profile.by_program(profile)
    assert programs.loc["TOTAL", "compiles"] == len(compiles) and programs.loc["TOTAL", "files"] == 1
    assert programs.loc["jit(sine_times_three)", ["compiles", "shapes"]].tolist() == [1, 0]  # not a grid program
    # The grid program's compiles by the shape compile_exported named: two of one shape, one of another.
    shapes = compiles[compiles["program"] == "jit(shaped)"]
    assert (shapes["test"] == shaped).all() and sorted(shapes["shape"].value_counts()) == [1, 2]
    assert programs.loc["jit(shaped)", ["compiles", "shapes", "files"]].tolist() == [3, 2, 1]
    repeated = test_profile.repeats(profile).reset_index()
    assert len(repeated) == 1 and repeated.loc[0, ["program", "compiles", "files"]].tolist() == [
        "jit(shaped)",
        2,
        "test_sample.py",
    ]
    assert programs.loc["TOTAL", "compile_s"] == pytest.approx(compiles["compile_s"].sum(), abs=0.1 * len(programs))
    # The two shapes differ in their size alone: equal sizes would leave one; the part that never varies is not listed.
    separating = test_profile.apart(profile).reset_index()
    assert separating.values.tolist() == [["jit(shaped)", "size", 2, 2, 1]]

    assert test_profile.main([str(profile)]) == 0
    assert all((profile / f"{name}.csv").is_file() for name in ("by-file", "by-program", "repeats", "apart"))


def test_a_directory_without_a_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert test_profile.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "no tests-*.csv" in error[0]


def _phase(recorder: test_profile._Recorder, test: str) -> None:
    recorder.current = {**dict.fromkeys(test_profile.COLUMNS, 0.0), "test": test, "phase": "call", "compiles": 0}


def test_loads_are_not_compiles_and_shapes_go_to_their_own_program(tmp_path: Path) -> None:
    """Events as JAX and compile_exported send them: a load from the persistent cache is timed by the backend compile
    event, after the cache's retrieval event from inside it; a shape names only the program's own row."""
    recorder = test_profile._Recorder()
    recorder.long_compile = 1.0
    backend = "/jax/core/compile/backend_compile_duration"
    _phase(recorder, "test_x.py::test_a")
    recorder.listen(backend, 4.0, fun_name="jit(iterate)")  # compiled
    recorder.listen(test_profile.COMPILED_EVENT, 4.1, program="jit(iterate)", key="1234567890123456")
    recorder.listen(test_profile.CACHE_LOAD_EVENT, 1.5)
    recorder.listen(backend, 1.6, fun_name="jit(iterate)")  # loaded
    recorder.listen(test_profile.COMPILED_EVENT, 1.7, program="jit(iterate)", key="1234567890123456")
    recorder.listen(backend, 2.0, fun_name="jit(other)")
    recorder.listen(test_profile.COMPILED_EVENT, 0.1, program="jit(iterate)", key="ffff")  # short: other's row
    _phase(recorder, "test_y.py::test_b")
    recorder.listen(backend, 3.0, fun_name="jit(iterate)")  # the same shape compiled again, in another file
    recorder.listen(test_profile.COMPILED_EVENT, 3.1, program="jit(iterate)", key="1234567890123456")
    assert recorder.current["compiles"] == 1 and recorder.current["loads"] == 0

    rows = pd.DataFrame(recorder.long_compiles, columns=list(test_profile.COMPILE_COLUMNS))
    assert rows["shape"].tolist() == ["1234567890123456", "1234567890123456", "", "1234567890123456"]
    assert rows["cached"].tolist() == [False, True, False, False]
    rows.to_csv(tmp_path / "compiles-gw0-1.csv", index=False)
    programs = test_profile.by_program(tmp_path)
    # A digest of digits alone is read back as text: one shape, compiled twice and loaded once.
    assert programs.loc["jit(iterate)", ["compiles", "shapes", "loads", "files"]].tolist() == [2, 1, 1, 2]
    assert programs.loc["jit(other)", ["compiles", "shapes", "loads"]].tolist() == [1, 0, 0]
    repeated = test_profile.repeats(tmp_path).reset_index()
    assert repeated[["program", "shape", "compiles", "files"]].values.tolist() == [
        ["jit(iterate)", "1234567890123456", 2, "test_x.py;test_y.py"]
    ]


def test_a_session_without_long_compiles_has_empty_program_tables(tmp_path: Path) -> None:
    pd.DataFrame(columns=list(test_profile.COMPILE_COLUMNS)).to_csv(tmp_path / "compiles-main-1.csv", index=False)
    programs = test_profile.by_program(tmp_path)
    assert programs.index.tolist() == ["TOTAL"] and programs.loc["TOTAL"].sum() == 0
    assert test_profile.repeats(tmp_path).empty


def _iteration_compiles(shapes: list[tuple[str, dict[str, str]]]) -> list[dict]:
    """Rows of a compiles-*.csv: one long compile of the iteration program per (shape key, parts)."""
    return [
        {"test": "test_x.py::t", "phase": "call", "program": "jit(iterate)", "compile_s": 2.0, "shape": key}
        | {"cached": False, "parts": json.dumps(parts)}
        for key, parts in shapes
    ]


def _apart(directory: Path, rows: list[dict]) -> list[list]:
    """`apart`'s table of a session whose only compiles are `rows`, as rows of values."""
    pd.DataFrame(rows, columns=list(test_profile.COMPILE_COLUMNS)).to_csv(directory / "compiles-gw0-1.csv", index=False)
    return test_profile.apart(directory).reset_index().values.tolist()


def test_what_sets_shapes_apart_counts_the_shapes_each_part_alone_separates(tmp_path: Path) -> None:
    """Four shapes of one program: runs and world each vary; equal runs would leave the two worlds of runs 2 and 4
    merged into 2 shapes, equal worlds would leave 3 (runs 2, 4 and 8); the batch never varies and is not listed. A
    second program's shapes are counted on their own, and a compile without parts is not a shape."""
    shapes = [
        ("a", {"runs": "2", "world": "8x2", "batch": "16"}),
        ("b", {"runs": "4", "world": "8x2", "batch": "16"}),
        ("c", {"runs": "2", "world": "4x2", "batch": "16"}),
        ("d", {"runs": "8", "world": "4x2", "batch": "16"}),
    ]
    rows = _iteration_compiles([*shapes, shapes[0]])  # the first shape compiled again: still one shape
    rows.append(rows[0] | {"program": "jit(pretrain_shard)", "shape": "p1", "parts": json.dumps({"judges": "2"})})
    rows.append(rows[0] | {"program": "jit(pretrain_shard)", "shape": "p2", "parts": json.dumps({"judges": "4"})})
    rows.append(rows[0] | {"program": "jit(scan)", "shape": "", "parts": ""})
    assert _apart(tmp_path, rows) == [
        ["jit(iterate)", "runs", 4, 3, 2],
        ["jit(iterate)", "world", 4, 2, 3],
        ["jit(pretrain_shard)", "judges", 2, 2, 1],
    ]


def test_the_parts_that_move_together_count_as_one(tmp_path: Path) -> None:
    """Three grid shapes as `GridShape.parts` writes them (the groups as their repr). a and b differ only in their run
    counts (n_runs and the work group's runs and slots): padding runs to buckets would leave 2 shapes. c also has
    another group (its row is another), which only a program independent of the conditions merges: 1 shape left
    there, where the batch never varies and is not listed."""

    def group(row: str, runs: int) -> str:
        return repr((WorkGroupShape(row, "every_step", runs, runs),))

    shapes = {
        "a": {"n_runs": "2", "groups": group("judge_update", 2), "batch_size": "16"},
        "b": {"n_runs": "4", "groups": group("judge_update", 4), "batch_size": "16"},
        "c": {"n_runs": "4", "groups": group("anchor", 4), "batch_size": "16"},
    }
    assert _apart(tmp_path, _iteration_compiles(list(shapes.items()))) == [
        ["jit(iterate)", "[conditions]", 3, 3, 1],
        ["jit(iterate)", "[run counts]", 3, 2, 2],
        ["jit(iterate)", "groups", 3, 3, 2],
        ["jit(iterate)", "n_runs", 3, 2, 3],
    ]
