"""How long the published grid would take on many machines under the Ray backend: a projection from measured costs.

`benchmarks/test_ray_overhead.py` measures one block's costs on this machine (a Ray run of the published grid at 10
seeds) and writes them, with the projection below, to artifacts/bench/ray.json and ray.md;
`python -m tools.ray_projection docs/how-to/ray.md` renders that file's projection into the Ray page of the docs
(between RAY_START and RAY_END). Nothing here is measured on many machines: it is arithmetic on one machine's block
costs.

Model: a grid of N seeds is ⌈N / b⌉ blocks of b seeds (b = 20 for the published grid's 18 conditions); each machine
runs one block at a time with all its cores; the first block on a machine compiles cold, later ones load its compile
cache. Wall = Ray's start + the blocks in waves of M machines + the merge (taken as measured: the report's rendering
dominates it, 10 s at 5 seeds and 9.5 s at 100 in the committed reference runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from tools.block_files import replace_block

RAY_START, RAY_END = "<!-- ray-projection:start -->", "<!-- ray-projection:end -->"
BENCH_FILE = Path(__file__).resolve().parents[1] / "artifacts" / "bench" / "ray.json"
SEEDS = (100, 1_000)
MACHINES = (1, 4, 16, 64)
TARGET_SECONDS = 30 * 60


@dataclasses.dataclass(frozen=True)
class BlockCosts:
    """One machine's measured costs of the Ray backend, per block and per run (seconds).

    start: Ray's local start (a cluster's head is up before a run; counted once per run anyway).
    block_fixed: a block's task before and around its training that does not grow with its runs: scheduling, the
        worker's start and imports. compile_cold / compile_warm: its compile with an empty / a filled cache.
    per_run: pretraining, training, checkpoints and the rest of a block, per run (condition × seed).
    merge: the merge (joining the blocks' tables, the report).
    conditions, block_seeds: the grid's; a block holds conditions × block_seeds runs.
    """

    start: float
    block_fixed: float
    compile_cold: float
    compile_warm: float
    per_run: float
    merge: float
    conditions: int
    block_seeds: int

    def block_seconds(self, seeds: int, cold: bool) -> float:
        """One block of `seeds` seeds on one machine."""
        runs = self.conditions * seeds
        return self.block_fixed + (self.compile_cold if cold else self.compile_warm) + self.per_run * runs


def projected_seconds(costs: BlockCosts, seeds: int, machines: int) -> float:
    """Wall seconds of the grid at seeds 0..seeds-1 on `machines` machines of the measured kind."""
    blocks = math.ceil(seeds / costs.block_seeds)
    last = seeds - (blocks - 1) * costs.block_seeds
    waves = math.ceil(blocks / machines)
    full = costs.block_seconds(costs.block_seeds, cold=False)
    first = costs.block_seconds(costs.block_seeds if blocks > 1 else last, cold=True)
    # The partial last block runs in the last wave; a wave lasts as long as its longest block.
    blocks_seconds = first + (waves - 1) * full
    return costs.start + blocks_seconds + costs.merge


def machines_needed(costs: BlockCosts, seeds: int, seconds: float = TARGET_SECONDS) -> int | None:
    """The fewest machines that finish `seeds` seeds within `seconds`, or None if no count does (one block alone
    takes longer)."""
    blocks = math.ceil(seeds / costs.block_seeds)
    for machines in range(1, blocks + 1):
        if projected_seconds(costs, seeds, machines) <= seconds:
            return machines
    return None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def projection_table(costs: BlockCosts) -> str:
    """Markdown: projected wall time by seeds (rows) and machines (columns)."""
    header = "| seeds | " + " | ".join(f"{m} machine{'s' if m > 1 else ''}" for m in MACHINES) + " |"
    lines = [header, "|---:|" + "---:|" * len(MACHINES)]
    for seeds in SEEDS:
        cells = [_duration(projected_seconds(costs, seeds, machines)) for machines in MACHINES]
        lines.append(f"| {seeds:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def projection_block(payload: dict) -> str:
    """The Ray page's block: the measured overhead, the projection table and the machines for 1,000 seeds in 30 min."""
    costs = BlockCosts(**payload["costs"])
    needed = machines_needed(costs, 1_000)
    blocks = math.ceil(1_000 / costs.block_seeds)
    target = (
        f"{needed} machines finish 1,000 seeds in 30 minutes"
        if needed is not None
        else f"no number of machines finishes 1,000 seeds in 30 minutes: one block alone takes "
        f"{_duration(costs.block_seconds(costs.block_seeds, cold=True))}"
    )
    measured = payload["measured"]
    added = measured.get("overhead_attributable_seconds", float("nan"))
    loads = measured.get("load_average_before_and_after") or [0.0]
    shared = (
        f" Other work shared the machine while it was measured (load average up to {max(loads):.1f}), so every "
        "cost here may be inflated."
        if max(loads) > payload.get("cores", 1) + 0.5  # more runnable work than cores: the runs waited for them
        else ""
    )
    return "\n".join(
        [
            f"A **projection**, not a measurement on many machines: arithmetic on block costs measured on one "
            f"machine: {payload['machine']}, {payload['date'][:10]}, `make bench`. There {payload['grid']} took "
            f"{measured['in_process_seconds']:.0f} s in one process and {measured['ray_seconds']:.0f} s as Ray tasks "
            f"on a local instance whose daemons share the same {payload.get('cores', '')} cores (a ratio of "
            f"{measured['overhead_ratio']:.2f}; by its parts Ray adds {added:.0f} s: its start {costs.start:.0f} s, "
            f"each block's worker start and imports {costs.block_fixed:.0f} s, a compile per fresh process "
            f"({costs.compile_cold:.0f} s cold, {costs.compile_warm:.0f} s from the cache) where one process compiles "
            f"once). Blocks of {costs.block_seeds} seeds ({costs.conditions * costs.block_seeds} runs) at "
            f"{costs.per_run:.1f} s per run, one per machine at a time, the first on each machine compiling cold; "
            f"{blocks} blocks at 1,000 seeds, so more than {blocks} machines add nothing.{shared}",
            "",
            projection_table(costs),
            "",
            f"By this projection {target}.",
        ]
    )


def rewrite_page(page: Path, bench_file: Path = BENCH_FILE) -> None:
    """Replace the page's projection block (between RAY_START and RAY_END) with one rendered from `bench_file`."""
    block = projection_block(json.loads(bench_file.read_text(encoding="utf-8")))
    replace_block(page, RAY_START, RAY_END, block)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.ray_projection", description=__doc__.splitlines()[0])
    parser.add_argument("pages", type=Path, nargs="+", help="the pages to rewrite the block in (docs/how-to/ray.md)")
    parser.add_argument("--bench", type=Path, default=BENCH_FILE, help=f"measured costs (default {BENCH_FILE})")
    args = parser.parse_args(argv)
    for page in args.pages:
        rewrite_page(page, args.bench)


if __name__ == "__main__":
    main()
