"""Seed blocks as Ray tasks on a real Ray cluster of this machine (a head without CPUs and two 1-CPU nodes): the merged
metrics.csv.gz is the bytes of the same grid run in-process; a worker killed mid-block, or its node lost, resumes the
block from its checkpoint; two attempts at one block give one result; errors of a block itself are not retried; an
unreachable address or a missing Ray fails in one line with nothing written.

The grid loads a mechanism of a lab's own from a file outside the package (examples/mechanisms/judge_tether.py, copied
beside each condition file here), so every run on the cluster is also a loaded mechanism run by Ray workers, which
find it in the run directory's copy of its source (mechanisms/judge_tether.py): a worker is given the grid and the run
directory, never the condition file, and needs no copy of the module where it runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli
from harness.common.run_files import CHECKPOINT_FILE, GRID_FILE, METRICS_FILE, stale_temporaries
from harness.experiment.blocks import (
    BLOCK_FILE,
    BlockError,
    BlockRecord,
    block_dir,
    block_lock,
    block_run_dir,
    block_spec,
    read_record,
    run_block,
)
from harness.experiment.checkpoint import read_checkpoint
from harness.experiment.ray_backend import BlockLost, RayBackend, run_block_task
from harness.grid import registry
from harness.grid.compile_cache import CACHE_DIR_ENV, harness_source_digest
from harness.grid.conditions import load_grid
from tests.compile_cache_settings import compile_cache_settings_restored
from tests.stop_handlers import wait_for_stop_handlers

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402  (after the skip: the module needs Ray)

ROOT = Path(__file__).resolve().parents[1]
MECHANISM = ROOT / "examples" / "mechanisms" / "judge_tether.py"
# A grid whose program compiles quickly (about 20 s cold on two cores): three conditions in a 2-token × 2-position
# world, one seed per block; one of them pulls its judge toward its pretrained weights (the lab's mechanism).
GRID = """
[mechanisms]
modules = ["judge_tether.py"]

[run]
seeds = 2
iterations = 4
steps_per_iteration = {steps}
batch_size = 16
block_seeds = 1

[world]
vocab_size = 2
seq_len = 2

[conditions.baseline]

[conditions.frozen]
freeze_judge = true

[conditions.tethered]
tether = 0.5
"""
# The fault tests' grid: iterations long enough (about a second) that a kill at the first checkpoint lands mid-block.
SLOW_STEPS = 300
# Each node would otherwise offer most of the machine's memory, three times over; a block here asks for about 1.5 GiB.
NODE_MEMORY = 4 * 2**30
OBJECT_STORE = 80 * 2**20  # the blocks hand back one record each


def lab_grid(path: Path, text: str) -> Path:
    """A condition file in a lab's folder: `text` at `path`, the lab's mechanism module beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    shutil.copy(MECHANISM, path.parent / MECHANISM.name)
    return path


@pytest.fixture(autouse=True)
def _catalog_restored() -> Iterator[None]:
    """A grid read in this process (a driver, a test's own `load_grid`) registers the lab's mechanism; later tests of
    this process see the catalog as it was."""
    with registry.restored_catalog():
        yield


def _coevolab(*argv: object) -> int:
    # No test here reads a figure, so the reports are text alone (drawing is most of a small report's time).
    return cli.main([*map(str, argv), "--quiet", "--no-figures"])


def _in_process_run(grid: Path, out: Path, cache: Path) -> None:
    """`coevolab run` of `grid` in a process of one JAX device, as each 1-CPU node's task has (so they share its
    compiled programs)."""
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "1", CACHE_DIR_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(grid), "--out", str(out), "--quiet", "--no-figures"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == cli.EXIT_OK, result.stderr


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lab_grid(tmp_path_factory.mktemp("ray-grid") / "grid.toml", GRID.format(steps=10))


@pytest.fixture(scope="module")
def grids(grid_file: Path, shared_compile_cache: Path) -> dict[str, Path]:
    """The grid's condition file and its in-process run (the reference bytes)."""
    _in_process_run(grid_file, grid_file.parent / "reference", shared_compile_cache)
    return {"grid": grid_file, "reference": grid_file.parent / "reference"}


@pytest.fixture(scope="module")
def slow_grids(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ray-slow-grids")
    grid = lab_grid(root / "slow.toml", GRID.format(steps=SLOW_STEPS))
    _in_process_run(grid, root / "reference", shared_compile_cache)
    return {"grid": grid, "reference": root / "reference"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A Ray cluster of this machine: a head that runs no tasks and two 1-CPU worker nodes."""
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    resources = {"object_store_memory": OBJECT_STORE, "memory": NODE_MEMORY}
    head = {"num_cpus": 0, "include_dashboard": False, **resources}
    # The in-process `coevolab run`s of the tests on it turn JAX's compile cache on.
    with compile_cache_settings_restored():
        machines = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(2):
            machines.add_node(num_cpus=1, **resources)
        machines.wait_for_nodes()
        yield machines
        machines.shutdown()
    for number, handler in handlers.items():  # Ray's nodes set their own; later tests in this worker get the old ones
        signal.signal(number, handler)


def _one_line_error(capsys: pytest.CaptureFixture[str], says: str) -> None:
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and says in error[0], error


def test_blocks_on_a_cluster_merge_to_the_bytes_of_an_in_process_run(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    out = tmp_path / "run"
    assert _coevolab("run", grids["grid"], "--out", out, "--ray", cluster.address) == cli.EXIT_OK
    assert (out / METRICS_FILE).read_bytes() == (grids["reference"] / METRICS_FILE).read_bytes()
    # What the bytes hold: the lab's mechanism ran (its metric, its pull keeping the judges nearer their start).
    final = pd.read_csv(out / METRICS_FILE).query("iteration == 4").set_index(["condition", "seed"])["judge_drift"]
    assert (final.loc["tethered"] < final.loc["baseline"]).all() and (final.loc["frozen"] == 0).all()
    execution = json.loads((out / "manifest.json").read_text())["execution"]
    assert execution["backend"] == "Ray" and execution["blocks"] == 2
    assert execution["line"] in (out / "report.md").read_text()
    for block in (0, 1):
        attempts = read_record(out, block).attempts
        assert len(attempts) == 1 and attempts[0].finished and attempts[0].resumed_from_iteration is None
        # Each task held its block's lock and let go of it cleanly: the file stays, naming no holder.
        assert block_lock(out, block).is_file() and block_lock(out, block).read_text() == ""
    assert stale_temporaries(out) == []


def test_a_worker_runs_the_labs_mechanism_from_the_run_directorys_copy(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    """Block 0 finished (the in-process run's), the lab's module gone (moved, renamed): the task of block 1 loads the
    mechanism from mechanisms/judge_tether.py of the run directory, to the in-process run's bytes."""
    spec, out = load_grid(grids["grid"]), tmp_path / "run"
    block_run_dir(spec, 0, out)  # grid.json and the copy of the mechanism's source
    shutil.copytree(block_dir(grids["reference"], 0), block_dir(out, 0))
    assert (out / "mechanisms" / MECHANISM.name).read_bytes() == MECHANISM.read_bytes()
    module = grids["grid"].parent / MECHANISM.name
    module.rename(tmp_path / "elsewhere.py")
    try:
        registry.unregister("judge_tether")  # the driver reads it from the copy too
        assert _coevolab("run", "--resume", out, "--ray", cluster.address) == cli.EXIT_OK
    finally:
        (tmp_path / "elsewhere.py").rename(module)
    assert (out / METRICS_FILE).read_bytes() == (grids["reference"] / METRICS_FILE).read_bytes()
    assert [len(read_record(out, block).attempts) for block in (0, 1)] == [1, 1]
    assert read_record(out, 1).attempts[0].finished and stale_temporaries(out) == []


@pytest.mark.heavy
def test_a_run_grown_on_a_cluster_runs_only_its_new_blocks(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    out = tmp_path / "grown"
    assert _coevolab("run", grids["grid"], "--seeds", 1, "--out", out, "--ray", cluster.address) == cli.EXIT_OK
    assert _coevolab("run", "--resume", out, "--seeds", 2, "--ray", cluster.address) == cli.EXIT_OK
    assert (out / METRICS_FILE).read_bytes() == (grids["reference"] / METRICS_FILE).read_bytes()
    assert [len(read_record(out, block).attempts) for block in (0, 1)] == [1, 1]


def _garbage_checkpoint_run(grid: Path, out: Path) -> None:
    """A one-block run directory whose block has its grid, its record and a checkpoint that is not one."""
    spec = load_grid(grid, seeds=(0,))
    block_run_dir(spec, 0, out)
    directory = block_dir(out, 0)
    directory.mkdir()
    (directory / GRID_FILE).write_text(block_spec(spec, 0).model_dump_json(indent=2) + "\n")
    (directory / BLOCK_FILE).write_text(BlockRecord(block=0, seeds=(0,)).model_dump_json(indent=2) + "\n")
    (directory / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")


def test_errors_of_a_block_are_reported_in_one_line_and_not_retried(
    cluster: Cluster,
    grids: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    subprocess_compile_cache: Path,
) -> None:
    broken = tmp_path / "broken"
    _garbage_checkpoint_run(grids["grid"], broken)
    assert _coevolab("run", "--resume", broken, "--ray", cluster.address) == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, "is not a readable checkpoint")
    # One attempt (recorded before the checkpoint is read), never finished: Ray did not try it again.
    attempts = read_record(broken, 0).attempts
    assert len(attempts) == 1 and attempts[0].finished is None

    too_big = tmp_path / "too-big"
    argv = ("run", grids["grid"], "--out", too_big, "--ray", cluster.address, "--ray-cpus-per-block", 4)
    assert _coevolab(*argv) == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, "a block needs 4 CPUs")
    assert not block_dir(too_big, 0).exists()  # refused before any task started

    backend = RayBackend.connect(cluster.address, quiet=True)
    try:
        with pytest.raises(BlockError, match="block 5 is out of range"):
            backend(
                load_grid(grids["grid"]), block_run_dir(load_grid(grids["grid"]), 0, tmp_path / "range"), [5], run_block
            )
    finally:
        backend.close()


@pytest.mark.heavy
def test_a_block_of_another_grid_is_refused_by_its_worker_in_one_line(
    cluster: Cluster,
    grids: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    subprocess_compile_cache: Path,
) -> None:
    """As a block's own error above, refused before its task records an attempt (`run_block` refuses it wherever it
    runs: tests/test_blocks.py)."""
    foreign = tmp_path / "foreign"
    _garbage_checkpoint_run(grids["grid"], foreign)
    other = json.loads((block_dir(foreign, 0) / GRID_FILE).read_text())
    other["pretrain"]["label_noise"] = 0.2
    (block_dir(foreign, 0) / GRID_FILE).write_text(json.dumps(other))
    assert _coevolab("run", "--resume", foreign, "--ray", cluster.address) == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, "holds a block of another grid")
    assert read_record(foreign, 0).attempts == []


def test_an_unreachable_cluster_or_a_missing_ray_fails_in_one_line_and_writes_nothing(
    grid_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    subprocess_compile_cache: Path,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "never"
    # Named as given: Ray's own resolution would turn localhost into this machine's IP.
    assert _coevolab("run", grid_file, "--out", out, "--ray", f"localhost:{port}") == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, f"--ray localhost:{port}: cannot reach a Ray cluster at localhost:{port} (")
    assert not out.exists()
    assert _coevolab("run", grid_file, "--out", out, "--ray", "--block", 0) == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, "--block K runs one here")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as it does where Ray is not installed
    assert _coevolab("run", grid_file, "--out", out, "--ray") == cli.EXIT_BAD_INPUT
    _one_line_error(capsys, "pip install 'coevolab[ray]'")
    assert not out.exists()


def test_sigterm_stops_a_ray_run_as_it_stops_a_run_in_process(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    """SIGTERM to the driver (a scheduler preempting it) while blocks run: exit 143, the blocks' checkpoints kept, the
    command to resume printed; as without Ray. The grid's shape, with iterations enough never to finish first."""
    grid = lab_grid(tmp_path / "long.toml", grids["grid"].read_text().replace("iterations = 4", "iterations = 100000"))
    out = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", grid, "--out", out, "--ray", cluster.address, "--no-figures"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    checkpoint, deadline = block_dir(out, 0) / CHECKPOINT_FILE, time.monotonic() + 600
    while not checkpoint.exists() and time.monotonic() < deadline and driver.poll() is None:
        time.sleep(0.05)
    assert checkpoint.exists(), driver.communicate()
    os.kill(driver.pid, signal.SIGTERM)
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == cli.EXIT_TERMINATED, (stdout, stderr)
    assert "terminated (SIGTERM)" in stdout and f"coevolab run --resume {out}" in stdout and "Traceback" not in stderr
    assert int(read_checkpoint(block_dir(out, 0))["completed_iterations"]) >= 1


@pytest.mark.parametrize(("name", "delay"), [("SIGINT", 0.5), ("SIGTERM", 2.0)])
def test_a_stop_in_the_first_seconds_of_a_ray_run_is_one_line(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path, name: str, delay: float
) -> None:
    """Ctrl-C or SIGTERM while the driver starts and joins the cluster (ray.init replaces the handlers; its SIGTERM
    would exit 15): 130 / 143, no traceback, at most one line on stderr."""
    signum, code = (signal.SIGINT, cli.EXIT_INTERRUPTED) if name == "SIGINT" else (signal.SIGTERM, cli.EXIT_TERMINATED)
    command = ["run", grids["grid"], "--out", tmp_path / "run", "--ray", cluster.address, "--no-figures"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wait_for_stop_handlers(driver)  # then `delay` into its start: imports, joining the cluster
    time.sleep(delay)
    os.kill(driver.pid, signum)
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == code, (driver.returncode, stdout, stderr)
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 1, stderr


def test_a_task_imports_no_jax_before_it_sets_the_device_count() -> None:
    """A worker imports this module to run a block's task, which sets JAX's CPU device count before JAX starts: the
    module itself imports nothing that imports JAX (the cluster here has 1-CPU nodes, JAX's default, so a task would
    not notice; a local --ray on a machine of several cores would refuse every block)."""
    code = "import sys, harness.experiment.ray_backend; print(sorted(m for m in sys.modules if m.startswith('jax')))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr)


def test_no_module_of_the_package_imports_ray_when_it_is_imported() -> None:
    code = (
        "import importlib, pkgutil, sys, harness\n"
        "for module in pkgutil.walk_packages(harness.__path__, 'harness.'):\n"
        "    importlib.import_module(module.name)\n"
        "print(sorted(name for name in sys.modules if name == 'ray' or name.startswith('ray.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.heavy
def test_two_attempts_at_one_block_give_one_result(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    spec = load_grid(grids["grid"])
    out = block_run_dir(spec, 0, tmp_path / "twice")
    backend = RayBackend.connect(cluster.address, quiet=True)
    try:
        task = ray.remote(max_calls=1)(run_block_task).options(num_cpus=1, max_retries=0)
        arguments = (
            spec.model_dump_json(),
            0,
            str(out),
            1,
            str(subprocess_compile_cache),
            True,
            harness_source_digest(),
        )
        records = ray.get([task.remote(*arguments), task.remote(*arguments)])
    finally:
        backend.close()
    # One attempt ran the block; the other waited for it and found it finished.
    assert records[0] == records[1] and len(BlockRecord.model_validate_json(records[0]).attempts) == 1
    reference = block_dir(grids["reference"], 0) / METRICS_FILE
    assert (block_dir(out, 0) / METRICS_FILE).read_bytes() == reference.read_bytes()
    assert stale_temporaries(out) == [] and not (block_dir(out, 0) / CHECKPOINT_FILE).exists()


@pytest.mark.heavy
def test_a_block_on_two_devices_agrees_with_one_device_to_float_rounding(
    grid_file: Path, tmp_path: Path, shared_compile_cache: Path
) -> None:
    """What holds across device counts (a Ray task's CPUs): the same runs and end modes, floats within 1e-4; not
    always the same bytes, since one device runs a block in one shard and two split it in two (fillers included),
    each compiled as its own program. Same device count, same bytes: the tests above."""
    grid = lab_grid(tmp_path / "one-block.toml", grid_file.read_text().replace("block_seeds = 1", "block_seeds = 2"))
    tables, plans = {}, {}
    for devices in (1, 2):
        env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices), CACHE_DIR_ENV: str(shared_compile_cache)}
        out = tmp_path / f"devices-{devices}"
        command = [sys.executable, "-m", "harness.cli", "run", grid, "--out", out, "--block", "0", "--quiet"]
        result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == cli.EXIT_OK, result.stderr
        tables[devices] = pd.read_csv(block_dir(out, 0) / METRICS_FILE)
        manifest = json.loads((block_dir(out, 0) / "manifest.json").read_text())
        plans[devices] = (manifest["devices"], manifest["shards"])
    assert plans == {1: (1, 1), 2: (2, 2)}
    one, two = tables[1], tables[2]
    assert one[["condition", "seed", "iteration", "mode_index"]].equals(
        two[["condition", "seed", "iteration", "mode_index"]]
    )
    floats = [name for name in one.columns if one[name].dtype.kind == "f"]
    np.testing.assert_allclose(one[floats].to_numpy(float), two[floats].to_numpy(float), rtol=0, atol=1e-4)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _worker_at_first_checkpoint(out: Path) -> int:
    """The pid of the worker running block 0 (from blocks/0.lock), once the block's first checkpoint exists."""
    checkpoint, deadline = block_dir(out, 0) / CHECKPOINT_FILE, time.monotonic() + 600
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return int(block_lock(out, 0).read_text().split()[1])


def _resumed_to_the_same_bytes(out: Path, reference: Path) -> None:
    attempts = read_record(out, 0).attempts
    assert len(attempts) == 2 and attempts[0].finished is None, attempts
    assert attempts[1].finished and attempts[1].resumed_from_iteration >= 1, attempts
    assert (out / METRICS_FILE).read_bytes() == (reference / METRICS_FILE).read_bytes()
    assert len(read_record(out, 1).attempts) == 1


@pytest.mark.heavy
def test_a_killed_worker_resumes_its_block_from_its_checkpoint(
    cluster: Cluster, slow_grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    out = tmp_path / "killed"
    watcher = threading.Thread(target=lambda: os.kill(_worker_at_first_checkpoint(out), signal.SIGKILL), daemon=True)
    watcher.start()  # the driver runs in this thread: it sets a SIGTERM handler, which only the main thread may
    assert _coevolab("run", slow_grids["grid"], "--out", out, "--ray", cluster.address) == cli.EXIT_OK
    watcher.join(timeout=10)
    _resumed_to_the_same_bytes(out, slow_grids["reference"])


@pytest.mark.heavy
def test_a_block_lost_more_often_than_retried_says_what_is_kept(
    cluster: Cluster, grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    """No retries: block 0's worker killed once is the block lost; the message names it and says what the files
    keep (its own checkpoint among them), and how to resume."""
    grid = lab_grid(tmp_path / "long.toml", grids["grid"].read_text().replace("iterations = 4", "iterations = 100000"))
    spec, out = load_grid(grid), tmp_path / "lost"
    block_run_dir(spec, 0, out)
    watcher = threading.Thread(target=lambda: os.kill(_worker_at_first_checkpoint(out), signal.SIGKILL), daemon=True)
    backend = RayBackend.connect(cluster.address, quiet=True)
    backend.max_retries = 0
    try:
        watcher.start()
        with pytest.raises(BlockLost) as lost:
            backend(spec, out, [0, 1], run_block)
    finally:
        backend.close()
        watcher.join(timeout=10)
    message = str(lost.value)
    assert message.startswith("block 0: its task failed 1 time (") and len(message.splitlines()) == 1, message
    kept = message.split("kept: ")[1]
    assert "0" in kept.split(" checkpointed")[0] and kept.endswith(f"run again with --resume {out}"), message


@pytest.mark.heavy
def test_a_lost_node_is_replaced_and_its_block_resumes(
    cluster: Cluster, slow_grids: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    out = tmp_path / "lost-node"
    # The driver in a process of its own, so that this thread can change the cluster (Ray sets signal handlers).
    driver = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", slow_grids["grid"], "--out", out, "--ray", cluster.address],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = _worker_at_first_checkpoint(out)
    ancestors, pid = {worker}, worker
    while pid > 1:
        pid = _parent(pid)
        ancestors.add(pid)
    lost = next(node for node in cluster.worker_nodes if any(p.pid in ancestors for _, p in node.live_processes()))
    cluster.remove_node(lost, allow_graceful=False)
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker, signal.SIGKILL)  # a lost machine takes its processes with it
    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, memory=NODE_MEMORY)
    _, errors = driver.communicate(timeout=600)
    assert driver.returncode == cli.EXIT_OK, errors
    _resumed_to_the_same_bytes(out, slow_grids["reference"])
