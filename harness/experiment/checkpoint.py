"""Checkpoints of a grid between outer iterations: pretrained judges, run state, metrics so far.

One msgpack file (flax.serialization), replaced atomically after every iteration, so
an interrupted run resumes from its last completed iteration with identical results.
The file records the state's layout version; one written under another layout is
refused with `CheckpointMismatch` rather than misread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import flax.serialization
import jax
import numpy as np

from harness.common.run_files import CHECKPOINT_FILE, atomic_write_bytes
from harness.engine.state import LAYOUT_VERSION, CoevolutionState
from harness.grid.diagnostics import Diagnostics
from harness.grid.pretrain import PretrainResult


class CheckpointMismatch(ValueError):
    """A checkpoint that this version of the harness cannot continue (another state layout or grid)."""


class Checkpoint(NamedTuple):
    completed_iterations: int
    pretrained: PretrainResult
    state: CoevolutionState
    records: list[Diagnostics]  # iteration 0 .. completed_iterations


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> None:
    payload = {
        "layout_version": LAYOUT_VERSION,
        "completed_iterations": checkpoint.completed_iterations,
        "pretrained": checkpoint.pretrained._asdict(),
        "state": flax.serialization.to_state_dict(jax.device_get(checkpoint.state)),
        "records": {
            name: np.stack([np.asarray(r[name]) for r in checkpoint.records]) for name in checkpoint.records[0]
        },
    }
    atomic_write_bytes(run_dir / CHECKPOINT_FILE, flax.serialization.msgpack_serialize(jax.device_get(payload)))


def read_checkpoint(run_dir: Path) -> dict:
    """The raw contents of a run directory's checkpoint (read once; see load_pretrained, load_checkpoint).

    Raises CheckpointMismatch if it was written under another state layout (or is not a checkpoint).
    """
    path = run_dir / CHECKPOINT_FILE
    try:
        payload = flax.serialization.msgpack_restore(path.read_bytes())
    except (ValueError, TypeError) as error:  # msgpack's errors derive from these
        raise CheckpointMismatch(f"{path} is not a readable checkpoint ({error})") from error
    version = payload.get("layout_version") if isinstance(payload, dict) else None
    if version != LAYOUT_VERSION:
        raise CheckpointMismatch(
            f"{path} was written under state layout {version or 1}; this version of coevolab reads layout "
            f"{LAYOUT_VERSION}: start the run again, or resume it with the version that wrote it"
        )
    return payload


def load_pretrained(payload: dict) -> PretrainResult:
    """The pretrained judges stored in a checkpoint."""
    return PretrainResult(**payload["pretrained"])


def load_checkpoint(payload: dict, like_state: CoevolutionState, metric_names: Sequence[str]) -> Checkpoint:
    """A checkpoint's contents; `like_state` gives the state's structure (e.g. a fresh initial state), metric_names
    the grid's metrics (each must be recorded)."""
    records = payload["records"]
    n_records = len(next(iter(records.values())))
    try:
        state = flax.serialization.from_state_dict(like_state, payload["state"])
    except (ValueError, KeyError) as error:
        raise CheckpointMismatch(f"the checkpoint's state does not fit this grid ({error})") from error
    mismatched = [
        f"{jax.tree_util.keystr(path)} {np.shape(saved)} vs {np.shape(fresh)}"
        for (path, saved), fresh in zip(
            jax.tree_util.tree_flatten_with_path(state)[0], jax.tree.leaves(like_state), strict=True
        )
        if np.shape(saved) != np.shape(fresh)
    ]
    if mismatched:
        raise CheckpointMismatch(f"the checkpoint's state does not fit this grid: {'; '.join(mismatched[:3])}")
    missing = set(metric_names) - set(records)
    if missing:
        raise CheckpointMismatch(f"the checkpoint lacks metrics {sorted(missing)}")
    return Checkpoint(
        completed_iterations=int(payload["completed_iterations"]),
        pretrained=PretrainResult(**payload["pretrained"]),
        state=jax.tree.map(jax.numpy.asarray, state),
        records=[{name: records[name][i] for name in metric_names} for i in range(n_records)],
    )


def has_checkpoint(run_dir: Path) -> bool:
    return (run_dir / CHECKPOINT_FILE).is_file()
