"""Seed blocks as Ray tasks, on this machine or a cluster (`coevolab run FILE --ray [ADDRESS]`).

`RayBackend` is a `harness.experiment.blocks.Backend`: every pending block becomes one Ray task that runs
`run_block(spec, block, run_dir)` in a fresh worker process (`max_calls=1`: nothing of one block's JAX process is
reused by the next), with
- `num_cpus` = the block's CPUs (default: every CPU of the cluster's smallest node, so a block uses a machine as
  `coevolab run` does, one JAX device per core, and a block's bytes are those of an in-process run on such a
  machine); JAX is given exactly that many CPU devices, set in the task before JAX starts;
- `memory` = the harness's own estimate for the grid's largest block plus what a JAX process needs beside it, so
  Ray never places more blocks on a node than its memory holds;
- `max_retries` for a worker or node that dies (lost machine, OOM kill, SIGKILL); a retry continues from the block's
  last checkpoint, and block.json lists every attempt. Errors raised by the block itself (a block of another grid,
  a checkpoint of another layout, a grid this node's coevolab cannot read) are the same however often they are
  tried, so they are never retried: the driver cancels the other blocks (their checkpoints stay) and raises the
  worker's own exception, which the command line reports in one line.

The run directory must be on a file system that every node sees at the same path (NFS, a cluster file system): the
tasks write blocks/<k>/ there and the driver merges them from it. While a task works on block k it holds the block's
lock (`harness.experiment.blocks.block_lock`: blocks/<k>.lock, naming its host and pid), waiting for it where another
holds it, so two attempts at one block (a retry beside a worker thought dead) run one after the other and the second
finds the block finished; the driver holds the run directory's own lock throughout. Ray is imported only when a
backend is made; this module's own imports are light, so a worker sets JAX's device count before anything imports
JAX.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import stop_signals

if TYPE_CHECKING:  # at run time these come after a worker has set JAX's device count (run_block_task)
    from harness.experiment.blocks import BlockRunner
    from harness.grid.spec import GridSpec

RAY = "Ray"  # how the blocks ran, as the manifest and the report name it
LOCAL = "local"  # --ray without an address: a Ray instance of this machine alone, started and stopped by the run
INSTALL_HINT = (
    "--ray needs Ray, which is not installed: pip install 'coevolab[ray]' (in a checkout: pip install -e '.[ray]')"
)
# Blocks hand back one record each; Ray's shared-memory object store holds nothing bigger.
LOCAL_OBJECT_STORE_BYTES = 128 * 2**20
# A block's process beside the grid's own estimate: Python, JAX and XLA, the compiled programs (measured: a block of
# conditions/paper.toml at one seed peaks at 1.6 GiB resident, of which the estimate covers about 0.1).
PROCESS_BYTES = 3 * 2**29
MAX_RETRIES = 3  # system failures (a worker or node lost) per block; errors of the block itself are never retried
CONNECT_SECONDS = 5.0  # how long an address may take to accept a connection before it counts as unreachable
_DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S*")


class RaySetupError(ValueError):
    """Ray is missing, the cluster cannot be reached or has no node a block fits, or a node runs another coevolab:
    bad input or set-up, exit code 2 on the command line."""


class BlockLost(RuntimeError):
    """A block's task failed for a reason outside the block, more often than it is retried (exit code 1)."""


@dataclass(frozen=True)
class BlockResources:
    """What one block's task asks Ray for."""

    cpus: int
    memory_bytes: int


def block_resources(spec: GridSpec, cpus: int) -> BlockResources:
    """The resources of a task running the largest block of `spec` (block 0: every block is its size or smaller)."""
    from harness.experiment.blocks import block_spec
    from harness.grid.layout import layout_grid
    from harness.grid.memory import estimate_bytes

    return BlockResources(cpus, estimate_bytes(layout_grid(block_spec(spec, 0)).shape) + PROCESS_BYTES)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RaySetupError(INSTALL_HINT) from None
    return ray


def _bootstrap_address(ray: Any, address: str) -> str:
    """`address` as host:port, resolving 'auto' (RAY_ADDRESS, or the cluster last started on this machine)."""
    if address.startswith("ray://"):
        return address.removeprefix("ray://")
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return canonicalize_bootstrap_address_or_die(address)
    except (ConnectionError, ValueError) as error:
        raise RaySetupError(f"--ray {address}: no Ray cluster found ({str(error).splitlines()[0]})") from None


def check_reachable(address: str, host_port: str, seconds: float = CONNECT_SECONDS) -> None:
    """Raise RaySetupError unless host:port accepts a TCP connection within `seconds` (Ray itself retries an
    unreachable address for minutes before it gives up).

    Raises:
        RaySetupError: the address is not host:port, or nothing answers there.
    """
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise RaySetupError(f"--ray {address}: expected HOST:PORT of a Ray cluster's head, 'auto' or nothing")
    try:
        with socket.create_connection((host, int(port)), timeout=seconds):
            pass
    except OSError as error:
        raise RaySetupError(
            f"--ray {address}: cannot reach a Ray cluster at {host_port} ({error.strerror or error}); start one "
            "(ray start --head) or run without an address for a local instance"
        ) from None


def _cpu_count(text: str) -> int:
    """--ray-cpus-per-block N: a whole number ≥ 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a count of CPUs (a whole number ≥ 1), got {text!r}")
    return int(text)


def add_ray_arguments(run: argparse.ArgumentParser) -> None:
    """`coevolab run`'s options of this backend: --ray [ADDRESS] and --ray-cpus-per-block N."""
    run.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL,
        metavar="ADDRESS",
        help="run the seed blocks as Ray tasks: on a Ray instance of this machine, or on the cluster at ADDRESS "
        "(HOST:PORT, or auto: the one this machine joined); the run directory must be on a file system every node "
        "sees (pip install 'coevolab[ray]')",
    )
    run.add_argument(
        "--ray-cpus-per-block",
        type=_cpu_count,
        metavar="N",
        help="CPUs (and JAX devices) of one block's task (default: every CPU of the cluster's smallest node)",
    )


def _without_device_count(flags: str) -> str:
    return " ".join(_DEVICE_COUNT_FLAG.sub("", flags).split())


def run_block_task(
    spec_json: str,
    block: int,
    run_dir: str,
    cpus: int,
    cache_dir: str | None,
    use_cache: bool,
    source: str,
    tensorboard: bool = False,
) -> str:
    """A Ray task's body: block `block` of the grid `spec_json` into `run_dir`, on `cpus` JAX CPU devices.

    Args:
        cache_dir: the compile cache of every task ($COEVOLAB_CACHE_DIR of the driver), or None for the node's own
            default; use_cache: False for --no-compile-cache.
        source: the driver's harness source digest; a node whose coevolab differs would train another program.
        tensorboard: the block writes its per-iteration means as TensorBoard events too.

    Returns:
        The block's record (block.json's text).

    Raises:
        RaySetupError: this node runs another coevolab than the driver, or JAX has other devices than asked for.
        BlockError, CheckpointMismatch, ArtifactWriteError: as `run_block` raises them.
    """
    # Before JAX is imported in this fresh worker: it reads both when its CPU backend starts.
    os.environ["JAX_NUM_CPU_DEVICES"] = str(cpus)
    os.environ["XLA_FLAGS"] = _without_device_count(os.environ.get("XLA_FLAGS", ""))
    import jax

    from harness.experiment.blocks import run_block
    from harness.grid.compile_cache import disable_compilation_cache, enable_compilation_cache, harness_source_digest
    from harness.grid.grid_file import grid_from_json

    host = socket.gethostname()
    if harness_source_digest() != source:
        raise RaySetupError(f"node {host} runs another version of coevolab than the driver; install the same on both")
    if len(jax.devices("cpu")) != cpus:
        raise RaySetupError(f"node {host}: JAX started with {len(jax.devices('cpu'))} CPU devices, not {cpus}")
    if use_cache:
        enable_compilation_cache(Path(cache_dir) if cache_dir else None)
    else:
        disable_compilation_cache()
    spec = grid_from_json(spec_json, Path(run_dir))
    return run_block(spec, block, Path(run_dir), wait=True, tensorboard=tensorboard).model_dump_json()


@dataclass
class RayBackend:
    """Runs pending blocks as Ray tasks (see the module's docstring); made by `connect`, closed by `close`.

    cpus_per_block: None for every CPU of the cluster's smallest node. compile_cache: whether tasks keep compiled
    programs on disk ($COEVOLAB_CACHE_DIR as the driver has it, else each node's ~/.cache/coevolab/jax).
    tensorboard: each task writes its block's per-iteration means as TensorBoard events too.
    """

    address: str
    cpus_per_block: int | None = None
    compile_cache: bool = True
    quiet: bool = False
    max_retries: int = MAX_RETRIES
    owns_connection: bool = False  # this backend called ray.init (and so ends the session in close)
    tensorboard: bool = False

    @classmethod
    def connect(
        cls, address: str = LOCAL, cpus_per_block: int | None = None, compile_cache: bool = True, quiet: bool = False
    ) -> RayBackend:
        """Join the Ray cluster at `address` ('auto', HOST:PORT, ray://HOST:PORT), or start a local instance (LOCAL):
        no dashboard, a small object store, Ray's own logging kept to errors. Joins the session of this process if
        it is already connected.

        Raises:
            RaySetupError: Ray is not installed, or no cluster answers at `address` (nothing is written then).
        """
        ray = _import_ray()
        quiet_logs = {"logging_level": logging.ERROR, "log_to_driver": False}
        joined = not ray.is_initialized()
        if joined:
            # ray.init's SIGTERM handler exits with 15; inside, a SIGTERM ends the command as ours would (143)
            with stop_signals.under_library_handler():
                if address == LOCAL:
                    ray.init(
                        address=LOCAL,
                        include_dashboard=False,
                        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                        **quiet_logs,
                    )
                else:
                    # An address given as HOST:PORT is tried as given (Ray's own resolution would name another IP).
                    given = address.removeprefix("ray://")
                    explicit = given != "auto" and ":" in given
                    check_reachable(address, given if explicit else _bootstrap_address(ray, address))
                    try:
                        ray.init(address=address, **quiet_logs)
                    except (ConnectionError, RuntimeError) as error:
                        raise RaySetupError(f"--ray {address}: {str(error).splitlines()[0]}") from None
        return cls(address, cpus_per_block, compile_cache, quiet, owns_connection=joined)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RayBackend | None:
        """The backend `coevolab run`'s options ask for (connected), or None without --ray.

        Raises:
            RaySetupError: --ray with --block, or as `connect` raises it.
        """
        if args.ray is None:
            if args.ray_cpus_per_block is not None:
                raise RaySetupError("--ray-cpus-per-block applies to --ray only")
            return None
        if args.block is not None:
            raise RaySetupError("--ray runs every pending block of the grid as a Ray task; --block K runs one here")
        backend = cls.connect(args.ray, args.ray_cpus_per_block, not args.no_compile_cache, args.quiet)
        return dataclasses.replace(backend, tensorboard=args.tensorboard)

    def close(self) -> None:
        """Leave the cluster, if `connect` joined it (a local instance it started stops)."""
        ray = _import_ray()
        if self.owns_connection and ray.is_initialized():
            ray.shutdown()

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(f"ray: {text}", flush=True)

    def resources(self, spec: GridSpec) -> BlockResources:
        """A block's task resources, checked against the cluster's nodes.

        Raises:
            RaySetupError: no live node has the CPUs and memory a block asks for.
        """
        ray = _import_ray()
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive") and node["Resources"].get("CPU")]
        if not nodes:
            raise RaySetupError("the Ray cluster has no live node with CPUs to run a block on")
        cpus = self.cpus_per_block or int(min(node["CPU"] for node in nodes))
        need = block_resources(spec, cpus)
        if not any(node["CPU"] >= need.cpus and node.get("memory", 0) >= need.memory_bytes for node in nodes):
            biggest = max(nodes, key=lambda node: (node["CPU"], node.get("memory", 0)))
            raise RaySetupError(
                f"a block needs {need.cpus} CPUs and {need.memory_bytes / 2**30:.1f} GiB of memory, and no node of "
                f"the Ray cluster has both (largest: {biggest['CPU']:.0f} CPUs, "
                f"{biggest.get('memory', 0) / 2**30:.1f} GiB); lower --ray-cpus-per-block or [run] block_seeds"
            )
        return need

    def __call__(self, spec: GridSpec, run_dir: Path, pending: Sequence[int], run_one: BlockRunner) -> None:
        """Run `pending` blocks of `spec` as tasks and wait for all of them, reporting each as it finishes.

        `run_one` (the driver's progress around `run_block`) stays here: the workers run `run_block` itself.

        Raises:
            BlockError: a pending block is not one of the grid's (before any task starts).
            BlockLost: a task's worker or node died more than `max_retries` times.
            RaySetupError: no node fits a block.
            Exception: what a block's task raised (BlockError, CheckpointMismatch, ...), the other tasks cancelled
                first.
        """
        del run_one
        if not pending:
            return
        ray = _import_ray()
        from harness.common.wording import plural
        from harness.experiment.blocks import BlockRecord, block_count, block_seeds, check_block, kept_work
        from harness.grid.compile_cache import CACHE_DIR_ENV, harness_source_digest

        for block in pending:  # here, not in a worker started only to refuse it
            check_block(spec, block)
        need = self.resources(spec)
        task = ray.remote(max_calls=1)(run_block_task).options(
            num_cpus=need.cpus,
            memory=need.memory_bytes,
            max_retries=self.max_retries,
            retry_exceptions=False,
            name="coevolab-block",
        )
        spec_json, where, source = spec.model_dump_json(), str(Path(run_dir).resolve()), harness_source_digest()
        cache = os.environ.get(CACHE_DIR_ENV)
        tasks = {
            task.remote(spec_json, k, where, need.cpus, cache, self.compile_cache, source, self.tensorboard): k
            for k in pending
        }
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        self._say(
            f"{len(pending)} of {block_count(spec)} blocks as tasks of {need.cpus} CPUs and "
            f"{need.memory_bytes / 2**30:.1f} GiB on {nodes} nodes ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)"
        )
        try:
            while tasks:
                done, _ = ray.wait(list(tasks), num_returns=1)
                block = tasks.pop(done[0])
                try:
                    record_json = ray.get(done[0])
                except ray.exceptions.RayTaskError as error:
                    raise (error.cause if isinstance(error.cause, Exception) else BlockLost(str(error))) from None
                except ray.exceptions.RayError as error:
                    lost = str(error).strip().splitlines()[0]
                    for ref in tasks:  # stopped before saying what is kept, so that what it says stays true
                        ray.cancel(ref, force=True)
                    raise BlockLost(
                        f"block {block}: its task failed {plural(self.max_retries + 1, 'time')} ({lost}); kept: "
                        f"{kept_work(spec, run_dir)}; run again with --resume {run_dir}"
                    ) from None
                record = BlockRecord.model_validate_json(record_json)
                last = record.attempts[-1]
                seeds = block_seeds(spec, block)
                self._say(
                    f"block {block} (seeds {seeds[0]}..{seeds[-1]}) finished on {last.host}, attempt "
                    f"{len(record.attempts)}, {sum(last.seconds.values()):.0f}s; {len(tasks)} to go"
                )
        finally:
            for ref in tasks:  # an error or Ctrl-C: the other blocks stop, their checkpoints stay for a resume
                ray.cancel(ref, force=True)
