"""The command line as a user meets it: real subprocesses, real files, real interruptions."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli
from harness.common.run_files import CHECKPOINT_FILE, stale_temporaries
from harness.experiment.checkpoint import read_checkpoint
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.grid.sharding import usable_cores
from tests.compile_cache_settings import compile_cache_settings_restored

ROOT = Path(__file__).resolve().parents[1]
# A world of two positions (tests/worlds.py), of 4 tokens: the command line's behaviour does not depend on the world.
# At 2 iterations of 10 steps, conditions/tiny.toml's grid (a shape that tests/test_run_directories.py compiles).
# Two of this file's runs compile cold whatever their grid: one fills a cache of its own, one runs with
# --no-compile-cache.
TINY = """
[run]
seeds = 1
iterations = {iterations}
steps_per_iteration = {steps}
batch_size = 16

[world]
vocab_size = 4
seq_len = 2

[conditions.baseline]
{extra}
"""


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    """Commands cache compiled programs in the session's shared directory, never the user's."""
    return subprocess_compile_cache


@pytest.fixture
def private_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A compile cache of this test's own, empty at the start."""
    directory = tmp_path / "compile-cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(directory))
    return directory


@dataclasses.dataclass(frozen=True)
class FirstRun:
    """The tiny grid's first run, cold: its run directory, and the compile cache it filled (cache_files: what was in
    it right after the run)."""

    grid: Path
    out: Path
    cache: Path
    cache_files: frozenset[Path]

    def env(self) -> dict[str, str]:
        """The environment of a command that uses this run's compile cache."""
        return {**os.environ, CACHE_DIR_ENV: str(self.cache)}

    def files_in_cache(self) -> frozenset[Path]:
        return frozenset(path for path in self.cache.rglob("*") if path.is_file())


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """One cold run of the tiny grid into a compile cache of its own, shared by the tests that read what a run writes
    (it is not to be changed by them: copy it first) and the test that runs it again from that cache."""
    root = tmp_path_factory.mktemp("first-run")
    run = FirstRun(tiny_grid(root), root / "run", root / "compile-cache", frozenset())
    result = coevolab("run", str(run.grid), "--out", str(run.out), "--quiet", env=run.env())
    assert result.returncode == 0, result.stderr
    return dataclasses.replace(run, cache_files=run.files_in_cache())


def coevolab(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, **kwargs
    )


def tiny_grid(tmp_path: Path, iterations: int = 2, steps: int = 10, extra: str = "") -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(iterations=iterations, steps=steps, extra=extra))
    return path


def test_help_on_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ([], ["run"], ["report"], ["list"]):
        with pytest.raises(SystemExit) as exited:
            cli.main([*command, "--help"])
        assert exited.value.code == 0 and "usage: coevolab" in capsys.readouterr().out


def test_bad_condition_file_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[conditions.a]\njudge_update_evry = 3\n")
    out = tmp_path / "out"
    result = coevolab("run", str(bad), "--out", str(out))
    assert result.returncode == 2
    assert "condition 'a', key 'judge_update_evry'" in result.stderr
    assert "did you mean 'judge_update_every'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_list_shows_changed_knobs_in_100_columns_from_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process: listing trains nothing, and the command's exit codes and processes are tested above and below.
    assert cli.main(["list", str(ROOT / "conditions" / "smoke.toml")]) == cli.EXIT_OK
    listed = capsys.readouterr().out
    assert "slow-meta" in listed and "meta_holdout_fraction" in listed
    assert cli.main(["list", str(ROOT / "conditions" / "smoke.toml"), "--all"]) == cli.EXIT_OK
    every = capsys.readouterr().out
    assert "n_judges" in every and "pretrain_target" in every
    # The default condition file is found beside the package, not in the current directory.
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == cli.EXIT_OK
    elsewhere = capsys.readouterr()
    assert max(len(line) for line in elsewhere.out.splitlines()) <= 100
    assert "18 conditions × 5 seeds" in elsewhere.out
    # A sweep value that repeats another condition is warned about, once per duplicate.
    assert elsewhere.err.count("warning:") == 1 and "same knobs as 'meta[meta_update_every=1]'" in elsewhere.err


def test_run_writes_every_artifact_and_never_overwrites(first_run: FirstRun, tmp_path: Path) -> None:
    written = ["metrics.csv.gz", "summary.csv", "summary.md", "report.md", "manifest.json", "grid.json"]
    for name in [*written, "attractors.csv", "frontier.csv"]:
        assert (first_run.out / name).is_file(), name
    assert not list(first_run.out.glob("best_of_n.*"))  # a table only for a grid that records it
    # 5 of the run's course, attractors, 2 frontier, the judge's training pairs
    assert len(list((first_run.out / "figures").glob("*.png"))) == 9
    assert not (first_run.out / CHECKPOINT_FILE).exists()

    out = tmp_path / "run"
    shutil.copytree(first_run.out, out)
    metrics = out / "metrics.csv.gz"
    digest = hashlib.sha256(metrics.read_bytes()).hexdigest()
    again = coevolab("run", str(first_run.grid), "--out", str(out), "--quiet")
    assert again.returncode == 2 and "--force" in again.stderr

    # `coevolab report` re-renders the run's own report byte for byte: every file, figures included.
    rendered = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    kept = ("metrics.csv.gz", "progress.csv", "grid.json", "manifest.json")  # the run wrote these
    for path in [p for p in out.rglob("*") if p.is_file() and p.name not in kept]:
        path.unlink()
    report = coevolab("report", str(out))
    assert report.returncode == 0, report.stderr
    again = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert again.keys() == rendered.keys()
    for name, data in rendered.items():
        assert again[name] == data, name
    assert (out / "report.md").read_text().startswith("# coevolab report: tiny\n")
    assert hashlib.sha256(metrics.read_bytes()).hexdigest() == digest  # report never touches metrics
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"startup", "checkpoint", "other"} <= manifest["wall_seconds"].keys()
    # The CPU's vector extensions, which the compiled programs' last bits follow, from the kernel's own list.
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
        extensions = manifest["machine"]["vector_extensions"]
        assert set(extensions) <= flags and ("avx2" in extensions) == ("avx2" in flags), extensions
        assert ("avx512f" in extensions) == ("avx512f" in flags), extensions
    assert oct((out / "metrics.csv.gz").stat().st_mode & 0o777) == oct((out / "report.md").stat().st_mode & 0o777)


def test_an_interrupted_run_stops_cleanly_and_says_how_to_resume(first_run: FirstRun, tmp_path: Path) -> None:
    # The shape of the first run's grid (its compiled programs come from that run's cache) with far more iterations
    # than the run reaches: the interrupt lands after the first checkpoint, long before the end, and the iterations
    # it never runs cost nothing. Resuming a checkpoint to the metrics of an uninterrupted run is test_checkpoint's.
    iterations = 1000
    grid = tiny_grid(tmp_path, iterations=iterations)
    out = tmp_path / "run"
    # A process that starts with SIGINT ignored (as a shell's background jobs and their children do) keeps ignoring
    # it; one that starts with a handler gets the default across exec. So the child is started while this process
    # has one (no code runs in the child between fork and exec, which JAX's threads make unsafe).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "run", str(grid), "--out", str(out)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=first_run.env(),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    while not (out / CHECKPOINT_FILE).exists() and process.poll() is None:
        time.sleep(0.01)
    assert (out / CHECKPOINT_FILE).exists(), "no checkpoint appeared"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert f"coevolab run --resume {out}" in stdout
    assert "Traceback" not in stderr
    assert not (out / "metrics.csv.gz").exists()
    # A clean stop: the last checkpoint is complete and loads, and a write the interrupt cut short removed its
    # temporary file (only a killed process leaves one).
    assert 1 <= int(read_checkpoint(out)["completed_iterations"]) < iterations
    assert stale_temporaries(out) == []


def test_divergent_runs_are_flagged_and_the_rest_unaffected(
    first_run: FirstRun, tmp_path: Path, private_compile_cache: Path
) -> None:
    # The first run's grid (its baseline alone) with a second condition whose judge diverges.
    path = tmp_path / "diverge.toml"
    path.write_text(first_run.grid.read_text() + "[conditions.exploding-judge]\nlr_judge = 1e30\n")
    out = tmp_path / "run"
    # No other test runs this grid's shape, so it compiles cold either way: the run also shows that
    # --no-compile-cache writes nothing to the cache and says so in the manifest, even where JAX's own setting would
    # keep a cache.
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(private_compile_cache)}
    argv = ("run", str(path), "--out", str(out), "--quiet", "--no-compile-cache", "--no-figures")
    result = coevolab(*argv, env=env)
    assert result.returncode == 3, result.stderr
    assert not private_compile_cache.exists() or not any(private_compile_cache.rglob("*"))
    assert json.loads((out / "manifest.json").read_text())["compile_cache"] is None
    assert "exploding-judge" in result.stdout
    metrics = pd.read_csv(out / "metrics.csv.gz")
    bad = metrics[metrics["condition"] == "exploding-judge"]
    assert bad["diverged"].iloc[-1] and not bad["diverged"].iloc[0]
    alone = pd.read_csv(first_run.out / "metrics.csv.gz")
    good = metrics[metrics["condition"] == "baseline"].reset_index(drop=True)
    assert not good["diverged"].any()
    np.testing.assert_allclose(good["policy_quality"], alone["policy_quality"], atol=1e-5)
    assert "diverged" in (out / "report.md").read_text()


def test_too_large_a_grid_is_refused_before_compiling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("[run]\nseeds = 4000\n[world]\nvocab_size = 16\nseq_len = 5\n[conditions.a]\nn_judges = 16\n")
    # In this process: the refusal comes before anything compiles, and the command's processes are tested above.
    with compile_cache_settings_restored():
        assert cli.main(["run", str(path), "--out", str(tmp_path / "run")]) == cli.EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "GiB" in error and "fewer seeds" in error
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(usable_cores() != 2, reason="the seed counts are chosen for two devices (one per core)")
def test_another_seed_condition_and_iteration_count_of_one_shard_shape_compiles_nothing(
    first_run: FirstRun, tmp_path: Path
) -> None:
    # 5 slow-judge conditions (one kind) at 4 seeds, then 6 at 3 seeds and 3 iterations, on two devices: one seed's
    # worth per shard, each seed's 5 or 6 runs of the kind rounded up to the ladder's rung of 6 (`runs_rung`), the 20 or
    # 18 runs dealt into four shards of 6 in two turns; two judges per device to pretrain (conditions of equal judge
    # choices share their seed's judge: 4 or 3 in all); policies initialised in one bucket of 4 seeds.
    # The second grid loads the training, diagnostics, pretraining and initialisation programs from the compile cache
    # the first filled: none is written to it again. (What still compiles is small: the initial policies'
    # log-probability tables, whose rounding follows their count, and single operations on arrays of the grid's own
    # runs.) A copy of the first run's cache, which other tests read as that run left it.
    cache = Path(shutil.copytree(first_run.cache, tmp_path / "compile-cache"))
    programs = ("jit_iterate", "jit_diagnose_shards", "jit_pretrain_shard", "jit_scan")

    def run(name: str, *argv: str) -> Path:
        out = tmp_path / name
        env = {**os.environ, CACHE_DIR_ENV: str(cache)}
        result = coevolab("run", str(first_run.grid), *argv, "--out", str(out), "--quiet", "--no-figures", env=env)
        assert result.returncode == 0, result.stderr
        return out

    def grid_programs() -> set[Path]:
        """The cache's files of the grid's programs: their executables and traced (exported) forms."""
        files = {path for path in cache.rglob("*") if path.is_file()}
        return {path for path in files if path.parent.name == "exported" or path.name.split("-")[0] in programs}

    five = run("five", "--seeds", "4", "--set", "conditions.baseline.judge_update_every=[2, 3, 4, 5, 6]")
    cached = grid_programs()
    assert {name for name in programs if any(path.name.startswith(f"{name}-") for path in cached)} == set(programs)
    six = run(
        "six",
        "--seeds",
        "3",
        "--set",
        "run.iterations=3",
        "--set",
        "conditions.baseline.judge_update_every=[2, 3, 4, 5, 6, 7]",
    )
    assert grid_programs() == cached
    for out, (conditions, seeds, iterations) in ((five, (5, 4, 2)), (six, (6, 3, 3))):
        metrics = pd.read_csv(out / "metrics.csv.gz")
        assert (metrics["condition"].nunique(), metrics["seed"].nunique(), metrics["iteration"].max()) == (
            conditions,
            seeds,
            iterations,
        )
        assert json.loads((out / "manifest.json").read_text())["shards"] == 4


def test_compiled_programs_are_cached_on_disk(first_run: FirstRun, tmp_path: Path) -> None:
    # (--no-compile-cache is test_divergent_runs_are_flagged_and_the_rest_unaffected's.)
    assert first_run.cache_files
    manifest = json.loads((first_run.out / "manifest.json").read_text())
    assert Path(manifest["compile_cache"]) == first_run.cache.resolve()

    # The traced programs are kept beside the executables, each once: the iteration, the diagnostics, the pretraining.
    exported = sorted(path.name.split("-")[0] for path in (first_run.cache / "exported").glob("*.jaxexport"))
    assert exported == ["diagnose_shards", "iterate", "pretrain_shard"]

    # The same grid again compiles nothing new: every program comes from the cache, and
    # the reloaded program computes what the freshly traced one did.
    out = tmp_path / "again"
    again = coevolab("run", str(first_run.grid), "--out", str(out), "--quiet", "--no-figures", env=first_run.env())
    assert again.returncode == 0, again.stderr
    assert first_run.files_in_cache() == first_run.cache_files
    metrics = {run: pd.read_csv(run / "metrics.csv.gz") for run in (first_run.out, out)}
    pd.testing.assert_frame_equal(*metrics.values())

    # --no-figures: the report's text alone; `coevolab report` draws the figures later, to the bytes of a run that
    # drew them itself (every file but the manifest, whose times differ).
    assert not (out / "figures").exists() and "](figures/" not in (out / "report.md").read_text()
    with compile_cache_settings_restored():
        assert cli.main(["report", str(out)]) == cli.EXIT_OK
    files = {run: {p.relative_to(run): p for p in run.rglob("*") if p.is_file()} for run in (first_run.out, out)}
    assert files[out].keys() == files[first_run.out].keys()
    for name, path in files[out].items():
        assert name.name == "manifest.json" or path.read_bytes() == files[first_run.out][name].read_bytes(), name
