"""Where the test suite's time goes: a pytest plugin that records, for every test, its phases' wall time and the JAX
compile work done in its process while it ran (tracing, lowering to MLIR, XLA's backend compile, each compile's
count), then a per-file table of the whole session, a table of the long compiles by program: which compiled
programs (`jit(iterate)`, `jit(diagnose_shards)`, `jit(pretrain_shard)`, ...) the time goes to, how many long compiles
of each, for how many distinct shapes and from how many test files, a table of the grid programs compiled more
than once for one shape (what a shared compile cache could have served: `harness.grid.compile_cache.COMPILED_EVENT`
names the shape each grid program was compiled for), and a table of what sets a grid program's shapes apart: for each
part of a shape (the runs per shard, the world, the batch size, a loaded mechanism, ...), how many values the suite's
shapes take and how many distinct shapes would be left were that part the same in all of them.

    make test-profile                  # `make test`'s pytest run with the plugin, into artifacts/bench/test-profile/
    python -m tools.test_profile DIR   # the tables (DIR/by-file.csv, by-program.csv, repeats.csv, apart.csv)

The time of a test's module fixtures is its first test's setup, as pytest reports it. Work done in a `coevolab`
subprocess that a test starts is in the test's wall time and not in its compile columns (JAX reports compiles only to
listeners of its own process), so the `other` column of the table is the test's wall time less its own process's
compile work: execution, subprocesses, file work and waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from harness.grid.compile_cache import COMPILED_EVENT

# JAX's compile events (jax._src.dispatch), by the column they are summed into.
COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "compile_s",
}
# JAX reports a program served by its persistent cache as a backend compile too (the load is timed by the same event),
# after this event from inside it: such a "compile" is counted as a load.
CACHE_LOAD_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"
DIRECTORY_ENV = "COEVOLAB_TEST_PROFILE_DIR"
COLUMNS = ("test", "phase", "wall_s", "trace_s", "lower_s", "compile_s", "compiles", "load_s", "loads")
# A compile at least this long is listed on its own, by program name: the grid programs take seconds each, while the
# thousands of small compiles of eager operations would only hide them.
LONG_COMPILE_ENV = "COEVOLAB_TEST_PROFILE_LONG_COMPILE"
LONG_COMPILE_SECONDS = 1.0
# shape: for a grid program (`compile_exported`), a digest of what it was compiled for; empty for other programs.
# cached: the persistent compile cache served it (compile_s is then the load's time).
# parts: for a grid program, what it was compiled for by part (a JSON object of texts); empty for other programs.
COMPILE_COLUMNS = ("test", "phase", "program", "compile_s", "shape", "cached", "parts")


class _Recorder:
    """The compile work of this process, attributed to the test phase running when JAX reported it."""

    def __init__(self) -> None:
        self.current: dict | None = None  # the row of the phase running now
        self.rows: list[dict] = []
        self.long_compiles: list[dict] = []  # one row per compile of at least `long_compile` seconds
        self.long_compile = float(os.environ.get(LONG_COMPILE_ENV, LONG_COMPILE_SECONDS))
        self.loading = False  # the backend compile under way is a load from the persistent cache

    def listen(self, event: str, duration: float, fun_name: str = "", **details: object) -> None:
        if event == COMPILED_EVENT:
            program, key, parts = (str(details.get(name, "")) for name in ("program", "key", "parts"))
            self._name_shape(program, key, parts)
            return
        if event == CACHE_LOAD_EVENT:
            self.loading = True
            return
        column = COMPILE_EVENTS.get(event)
        cached = column == "compile_s" and self.loading
        if column == "compile_s":
            self.loading = False
        if column is None or self.current is None:
            return
        if column == "compile_s":
            self.current["loads" if cached else "compiles"] += 1
        self.current["load_s" if cached else column] += duration
        if column == "compile_s" and duration >= self.long_compile:
            test, phase = self.current["test"], self.current["phase"]
            row = {"test": test, "phase": phase, "program": fun_name, "compile_s": duration, "shape": ""}
            self.long_compiles.append(row | {"cached": cached, "parts": ""})

    def _name_shape(self, program: str, key: str, parts: str) -> None:
        """Give the grid program's compile (or load), the last long one of this phase, the shape it was compiled for.
        Where the program's own was short, the last row is another program's, or one already named, and nothing is
        named (a program compiled directly under a grid program's name just before could be misnamed: none is)."""
        if not self.long_compiles or self.current is None:
            return
        row = self.long_compiles[-1]
        if (row["test"], row["phase"], row["program"], row["shape"]) == (
            self.current["test"],
            self.current["phase"],
            program,
            "",
        ):
            row["shape"], row["parts"] = key, parts


_RECORDER = _Recorder()


def pytest_configure(config: pytest.Config) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_RECORDER.listen)


def _recorded(item: pytest.Item, phase: str) -> Iterator[None]:
    row = {**dict.fromkeys(COLUMNS, 0.0), "test": item.nodeid, "phase": phase, "compiles": 0, "loads": 0}
    _RECORDER.current = row
    yield
    _RECORDER.current = None
    _RECORDER.rows.append(row)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _recorded(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _recorded(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _recorded(item, "teardown")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """The phase's wall time as pytest measured it, onto the row of that phase (the last one of the test)."""
    for row in reversed(_RECORDER.rows):
        if row["test"] == report.nodeid and row["phase"] == report.when:
            row["wall_s"] = report.duration
            return


def pytest_sessionfinish(session: pytest.Session) -> None:
    directory = os.environ.get(DIRECTORY_ENV)
    if not directory or not _RECORDER.rows:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    frame = pd.DataFrame(_RECORDER.rows, columns=list(COLUMNS))
    frame.to_csv(Path(directory) / f"tests-{worker}-{os.getpid()}.csv", index=False, float_format="%.3f")
    compiles = pd.DataFrame(_RECORDER.long_compiles, columns=list(COMPILE_COLUMNS))
    compiles.to_csv(Path(directory) / f"compiles-{worker}-{os.getpid()}.csv", index=False, float_format="%.3f")


def _read(directory: Path, prefix: str) -> pd.DataFrame:
    """Every test process's `prefix`-*.csv in `directory`, one frame, with each row's test file. Shapes are read as
    text (a digest of digits alone is not a number); files of an earlier profile, without shapes or loads, read as
    having none."""
    files = sorted(directory.glob(f"{prefix}-*.csv"))
    if not files:
        raise FileNotFoundError(f"{directory}: no {prefix}-*.csv (run the tests with -p tools.test_profile)")
    frames = [pd.read_csv(path, dtype={"shape": str, "parts": str}, keep_default_na=False) for path in files]
    rows = pd.concat(frames, ignore_index=True)
    defaults = {"compiles": {"shape": "", "cached": False, "parts": ""}, "tests": {"load_s": 0.0, "loads": 0}}[prefix]
    for column, value in defaults.items():
        if column not in rows:
            rows[column] = value
    if "cached" in rows:
        rows["cached"] = rows["cached"].astype(str).str.lower().eq("true")
    rows["file"] = rows["test"].str.split("::").str[0]
    return rows


def by_file(directory: Path) -> pd.DataFrame:
    """Every test process's rows in `directory`, summed by test file, longest first, with a TOTAL row: compiles are
    XLA's (and their seconds), loads the programs JAX's persistent cache served; `other` is the wall time less the
    process's own compile work (tracing, lowering, compiling, loading)."""
    rows = _read(directory, "tests")
    work = ["trace_s", "lower_s", "compile_s", "load_s"]
    table = rows.groupby("file")[["wall_s", *work, "compiles", "loads"]].sum()
    table["tests"] = rows[rows["phase"] == "call"].groupby("file").size()
    # Compiles may run beside the test's thread (a program compiled while another runs), so `other` can be negative.
    table["other_s"] = table["wall_s"] - table[work].sum(axis=1)
    table = table.sort_values("wall_s", ascending=False)
    table.loc["TOTAL"] = table.sum()
    return table.round(1).astype({"compiles": int, "loads": int, "tests": int})


def by_program(directory: Path) -> pd.DataFrame:
    """The long compiles of every test process in `directory`, summed by program name, longest first, with a TOTAL
    row: how many XLA compiled and their seconds, how many distinct shapes of a grid program those were (0 for other
    programs, whose shapes are not named), how many JAX's persistent cache served instead, and how many test files
    compiled or loaded the program."""
    rows = _read(directory, "compiles")
    compiled = rows[~rows["cached"]]
    table = pd.DataFrame(
        {
            "compiles": compiled.groupby("program").size(),
            "compile_s": compiled.groupby("program")["compile_s"].sum(),
            "shapes": compiled[compiled["shape"] != ""].groupby("program")["shape"].nunique(),
            "loads": rows[rows["cached"]].groupby("program").size(),
            "files": rows.groupby("program")["file"].nunique(),
        }
    ).fillna(0)
    table = table.sort_values("compile_s", ascending=False)
    table.loc["TOTAL"] = [*table[["compiles", "compile_s", "shapes", "loads"]].sum(), rows["file"].nunique()]
    return table.round(1).astype({"compiles": int, "shapes": int, "loads": int, "files": int})


def repeats(directory: Path) -> pd.DataFrame:
    """The grid programs XLA compiled more than once for one shape in `directory`'s session, most seconds first:
    program, shape, compiles, their seconds and the test files (`;`-joined) that compiled it. Each compile after the
    first is one that a compile cache shared by the whole session could have served (two processes compiling one
    shape at once, a test that turns the cache off or points it elsewhere)."""
    rows = _read(directory, "compiles")
    rows = rows[~rows["cached"] & (rows["shape"] != "")]
    table = rows.groupby(["program", "shape"]).agg(
        compiles=("compile_s", "size"),
        compile_s=("compile_s", "sum"),
        files=("file", lambda files: ";".join(sorted(set(files)))),
    )
    table = table[table["compiles"] > 1].sort_values("compile_s", ascending=False)
    return table.round(1)


# Parts of a grid shape (`GridShape.parts`) that move together, each as one more row of `apart`: what a design where
# they did not select a program would merge. "[run counts]": how many runs, judge slots and judges per run a shard
# holds, and each work group's runs and slots (its row, cadence and static size stay): what padding runs to buckets
# would merge. "[conditions]": those, the work groups whole, the mechanisms' static sizes and the mechanisms used:
# what a program independent of the grid's conditions would merge, leaving the world, the networks, the batch, the
# loaded mechanisms, the streams and the devices.
GROUP_COUNTS = re.compile(r"runs=\d+, slots=\d+, ")
RUN_COUNTS = ("n_runs", "n_slots", "max_members")
COMPOUND_PARTS = {
    "[run counts]": (RUN_COUNTS, True),
    "[conditions]": ((*RUN_COUNTS, "groups", "sizes", "used"), False),
}


def _compound(parts: pd.DataFrame, drop: tuple[str, ...], group_counts: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the compound's columns, the other columns) of `parts`; where `group_counts`, the groups' runs and slots move
    from the other columns to the compound's."""
    others = parts.drop(columns=[name for name in drop if name in parts])
    own = parts[[name for name in drop if name in parts]].copy()
    if group_counts and "groups" in others:
        own["groups"] = others["groups"].map(lambda text: ",".join(GROUP_COUNTS.findall(text)))
        others["groups"] = others["groups"].str.replace(GROUP_COUNTS, "", regex=True)
    return own, others


def apart(directory: Path) -> pd.DataFrame:
    """What sets the shapes of each grid program compiled in `directory`'s session apart, by program and part: the
    program's distinct shapes (`shapes`), how many values the part takes among them (`values`), and how many distinct
    shapes would be left were that part the same in all of them (`shapes_without`): the shapes a bucket of that part
    alone would merge. Parts that take one value are left out; each program's parts in the order of `shapes_without`,
    fewest first. The parts that move together (`COMPOUND_PARTS`) get a row each too, named in brackets, where the
    program has any of them."""
    rows = _read(directory, "compiles")
    rows = rows[(rows["parts"] != "") & (rows["shape"] != "")].drop_duplicates(["program", "shape"])
    records = []
    for program, shapes in rows.groupby("program"):
        parts = pd.DataFrame([json.loads(text) for text in shapes["parts"]]).fillna("")
        count = len(parts.drop_duplicates())
        for part in parts.columns:
            if parts[part].nunique() > 1:
                others = parts.drop(columns=part)
                left = len(others.drop_duplicates()) if len(others.columns) else 1
                records.append((program, part, count, parts[part].nunique(), left))
        for name, (drop, group_counts) in COMPOUND_PARTS.items():
            own, others = _compound(parts, drop, group_counts)
            if len(own.columns) and len(own.drop_duplicates()) > 1:
                left = len(others.drop_duplicates()) if len(others.columns) else 1
                records.append((program, name, count, len(own.drop_duplicates()), left))
    table = pd.DataFrame.from_records(
        records, columns=["program", "part", "shapes", "values", "shapes_without"]
    ).sort_values(["program", "shapes_without", "part"])
    return table.set_index(["program", "part"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.test_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="the per-process files of a profiled run")
    args = parser.parse_args(argv)
    try:
        tables = {
            "by-file": by_file(args.directory),
            "by-program": by_program(args.directory),
            "repeats": repeats(args.directory),
            "apart": apart(args.directory),
        }
    except FileNotFoundError as error:
        print(f"test_profile: {error}", file=sys.stderr)
        return 2
    for name, table in tables.items():
        table.to_csv(args.directory / f"{name}.csv")
        print(f"{name}:\n{table.to_string()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
