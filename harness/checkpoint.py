"""Checkpoints of a grid between outer iterations: pretrained judges, run state, metrics so far.

One msgpack file (flax.serialization), replaced atomically after every iteration, so
an interrupted run resumes from its last completed iteration with identical results.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import flax.serialization
import jax
import numpy as np

from harness.artifacts import CHECKPOINT_FILE, atomic_write_bytes
from harness.coevolution import CoevolutionState
from harness.diagnostics import METRIC_NAMES, Diagnostics
from harness.pretrain import PretrainResult


class Checkpoint(NamedTuple):
    completed_iterations: int
    pretrained: PretrainResult
    state: CoevolutionState
    records: list[Diagnostics]  # iteration 0 .. completed_iterations


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> None:
    payload = {
        "completed_iterations": checkpoint.completed_iterations,
        "pretrained": checkpoint.pretrained._asdict(),
        "state": flax.serialization.to_state_dict(jax.device_get(checkpoint.state)),
        "records": {name: np.stack([np.asarray(r[name]) for r in checkpoint.records]) for name in METRIC_NAMES},
    }
    atomic_write_bytes(run_dir / CHECKPOINT_FILE, flax.serialization.msgpack_serialize(jax.device_get(payload)))


def read_checkpoint(run_dir: Path) -> dict:
    """The raw contents of a run directory's checkpoint (read once; see load_pretrained, load_checkpoint)."""
    return flax.serialization.msgpack_restore((run_dir / CHECKPOINT_FILE).read_bytes())


def load_pretrained(payload: dict) -> PretrainResult:
    """The pretrained judges stored in a checkpoint."""
    return PretrainResult(**payload["pretrained"])


def load_checkpoint(payload: dict, like_state: CoevolutionState) -> Checkpoint:
    """A checkpoint's contents; `like_state` gives the state's structure (e.g. a fresh initial state)."""
    records = payload["records"]
    n_records = len(next(iter(records.values())))
    return Checkpoint(
        completed_iterations=int(payload["completed_iterations"]),
        pretrained=PretrainResult(**payload["pretrained"]),
        state=jax.tree.map(jax.numpy.asarray, flax.serialization.from_state_dict(like_state, payload["state"])),
        records=[{name: records[name][i] for name in METRIC_NAMES} for i in range(n_records)],
    )


def has_checkpoint(run_dir: Path) -> bool:
    return (run_dir / CHECKPOINT_FILE).is_file()
