"""Step time on whatever device JAX picks first (a GPU where one is visible), and a run's distance from the CPU's.

    python -m benchmarks.accelerator OUT                  # time the programs below on this machine's first device
    python -m benchmarks.accelerator OUT --compare RUN    # RUN (coevolab run paper --out RUN) against the committed
                                                          # CPU run of its grid (--reference; default the published
                                                          # grid's, artifacts/reference/paper)

The programs are the throughput benchmarks' (benchmarks/test_throughput.py), outside pytest so that this runs where
JAX and the harness's own dependencies are installed but not the test tools: the published grid at 5 seeds, then the
baseline condition at growing seed counts, each at steps_per_iteration=100, as this device plans them and, where
asked, in the turns a CPU device would take. Per program it records the first step() call (building, compiling and
one iteration) and the median of the timed calls after it, as µs per run-step. Each record is printed as it is
measured and OUT/accelerator.json holds them all (OUT/compare.json for --compare).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, which every grid uses)
from benchmarks import support
from harness.grid.layout import layout_grid
from harness.grid.pretrain import PretrainResult
from harness.grid.sharding import plan_shards
from harness.grid.spec import GridSpec

REFERENCE = support.ROOT / "artifacts" / "reference" / "paper"
COMPARED = ("policy_quality_mean", "judge_alignment_mean", "policy_entropy_mean")


def _timed(spec: GridSpec, pool: PretrainResult, rounds: int, cpu_turns: bool) -> dict[str, Any]:
    # A CPU device's turns, forced by their count; None: as planned for this device.
    pieces = plan_shards(layout_grid(spec), len(jax.local_devices())).pieces if cpu_turns else None
    start = time.perf_counter()
    stepper = support.Stepper(*support.started(spec, pool, pieces=pieces))
    stepper()
    first = time.perf_counter() - start
    seconds = support.median([stepper() for _ in range(rounds)])
    return {
        "runs": stepper.program.shape.n_runs,
        "conditions": len(spec.conditions),
        "seeds": len(spec.run.seeds),
        "steps_per_iteration": spec.run.steps_per_iteration,
        "plan": "a CPU device's turns" if cpu_turns else "this device's",
        "sharding": support.sharding(stepper.program),
        "first_call_s": round(first, 2),
        "median_step_s": round(seconds, 4),
        "rounds": rounds,
        "us_per_run_step": round(support.us_per_run_step(seconds, stepper.run_steps), 3),
    }


def compare(run: Path, reference: Path = REFERENCE) -> dict[str, Any]:
    """How far `run`'s final means per condition lie from `reference`'s, and how many claims' verdicts agree (where
    the reference has claims)."""
    ours, theirs = (pd.read_csv(directory / "summary.csv").set_index("condition") for directory in (run, reference))
    record: dict[str, Any] = {"run": str(run), "reference": str(reference), "conditions": len(theirs)}
    for column in COMPARED:
        gap = (ours[column] - theirs.loc[ours.index, column]).abs()
        record[column] = {
            "max_abs_difference": float(gap.max()),
            "at": str(gap.idxmax()),
            "median_abs_difference": float(gap.median()),
            "equal": int(np.sum(gap == 0)),
        }
    if (reference / "claims.csv").exists():
        claims = [pd.read_csv(directory / "claims.csv").set_index("claim")["verdict"] for directory in (run, reference)]
        record["claims"], record["verdicts_equal"] = len(claims[1]), int((claims[0] == claims[1]).sum())
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, metavar="RUN", help="compare RUN with the CPU reference, time nothing")
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="the run --compare measures RUN against")
    parser.add_argument("--runs", default="360,1800,7200", help="baseline seed counts, comma-separated")
    parser.add_argument("--cpu-turns", default="", help="seed counts also timed in a CPU device's turns")
    parser.add_argument("--rounds", type=int, default=3, help="timed step() calls per program after the first")
    args = parser.parse_args(argv)
    for directory in (args.compare, args.reference) if args.compare is not None else ():
        if not (directory / "summary.csv").is_file():
            parser.error(f"{directory} holds no summary.csv: not a finished run directory")
    args.out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0]
    machine = {"device": f"{device.platform}:{device.device_kind}", "jax": jax.__version__}
    if args.compare is not None:
        record = {**machine, **compare(args.compare, args.reference)}
        (args.out / "compare.json").write_text(json.dumps(record, indent=1) + "\n")
        print(json.dumps(record, indent=1))
        return
    records: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        record = {**machine, **record}
        records.append(record)
        print(json.dumps(record), flush=True)
        (args.out / "accelerator.json").write_text(json.dumps(records, indent=1) + "\n")

    start = time.perf_counter()
    pool = jax.block_until_ready(support.judge_pool(support.FULL))
    keep({"program": "pretrain the judge pool (5 seeds x 5 judges)", "seconds": round(time.perf_counter() - start, 2)})
    for cpu_turns in (False, True):
        keep(
            {"program": "published grid", **_timed(support.published_grid(support.FULL), pool, args.rounds, cpu_turns)}
        )
    turns = {int(n) for n in args.cpu_turns.split(",") if n}
    for n_runs in (int(n) for n in args.runs.split(",") if n):
        for cpu_turns in (False, True) if n_runs in turns else (False,):
            spec = support.baseline_grid(support.FULL, n_runs)
            keep({"program": "baseline", **_timed(spec, pool, args.rounds, cpu_turns)})


if __name__ == "__main__":
    main()
