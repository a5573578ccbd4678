"""Checkpoints of a grid between outer iterations: pretrained judges, run state, metrics so far.

One msgpack file (flax.serialization), replaced atomically after every iteration, so an interrupted run resumes from
its last completed iteration with identical results. The file is an envelope: the state layout version, the
*identity* of the run it belongs to (`run_identity`: a digest over named components, the canonical grid among them),
the SHA-256 of its contents, and the contents. A checkpoint is only ever continued by the run it belongs to: one
written under another state layout, for another grid or block, cut short or changed in any byte is refused with
`CheckpointMismatch` (one line) rather than misread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import flax.serialization
import jax
import numpy as np

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs and metrics it reads)
from harness.common.run_files import CHECKPOINT_FILE, atomic_write_bytes
from harness.engine.state import LAYOUT_VERSION, CoevolutionState
from harness.grid.diagnostics import Diagnostics
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import GridSpec


class CheckpointMismatch(ValueError):
    """A checkpoint that this run cannot continue (another state layout, grid or block; damaged)."""


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must belong to for a run to continue it: named components (each a digest or a short value)
    and one digest over all of them."""

    components: Mapping[str, str]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dict(self.components), sort_keys=True).encode()).hexdigest()

    def differences(self, other: Mapping[str, str]) -> list[str]:
        """The names of the components on which `other` (a checkpoint's) differs from these."""
        return sorted(name for name in {*self.components, *other} if self.components.get(name) != other.get(name))


def grid_digest(spec: GridSpec) -> str:
    """SHA-256 of the canonical grid: its JSON with sorted keys, as grid.json parses back."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def run_identity(spec: GridSpec, block: int | None = None) -> RunIdentity:
    """The identity of a run of `spec` (a seed block's grid, with its index `block`, or a grid run whole): the one
    place its components are named. A component added here (say, a digest of every loaded mechanism module's source)
    makes every checkpoint written without it, or with another value, one that is not continued."""
    return RunIdentity(
        {
            "grid": grid_digest(spec),
            "block": "whole" if block is None else str(block),
            "state_layout": str(LAYOUT_VERSION),
        }
    )


class Checkpoint(NamedTuple):
    completed_iterations: int
    pretrained: PretrainResult
    state: CoevolutionState
    records: list[Diagnostics]  # iteration 0 .. completed_iterations


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint, identity: RunIdentity) -> None:
    payload = {
        "completed_iterations": checkpoint.completed_iterations,
        "pretrained": checkpoint.pretrained._asdict(),
        "state": flax.serialization.to_state_dict(jax.device_get(checkpoint.state)),
        "records": {
            name: np.stack([np.asarray(r[name]) for r in checkpoint.records]) for name in checkpoint.records[0]
        },
    }
    contents = flax.serialization.msgpack_serialize(jax.device_get(payload))
    envelope = {
        "layout_version": LAYOUT_VERSION,
        "identity": dict(identity.components),
        "sha256": hashlib.sha256(contents).hexdigest(),
        "contents": contents,
    }
    atomic_write_bytes(run_dir / CHECKPOINT_FILE, flax.serialization.msgpack_serialize(envelope))


def read_checkpoint(run_dir: Path, identity: RunIdentity | None = None) -> dict:
    """The contents of a run directory's checkpoint (read once; see load_pretrained, load_checkpoint), checked.

    Args:
        identity: the run that means to continue it (None: any run's, for reading alone).

    Raises:
        CheckpointMismatch: written under another state layout, not a checkpoint, damaged (its digest does not
            match), or of another run than `identity`.
    """
    path = Path(run_dir) / CHECKPOINT_FILE
    try:
        envelope = flax.serialization.msgpack_restore(path.read_bytes())
    except (ValueError, TypeError) as error:  # msgpack's errors derive from these
        raise CheckpointMismatch(f"{path} is not a readable checkpoint ({error})") from error
    version = envelope.get("layout_version") if isinstance(envelope, dict) else None
    if version != LAYOUT_VERSION:
        raise CheckpointMismatch(
            f"{path} was written under state layout {version or 1}; this version of coevolab reads layout "
            f"{LAYOUT_VERSION}: start the run again, or resume it with the version that wrote it"
        )
    contents, theirs = envelope.get("contents"), envelope.get("identity")
    if not isinstance(contents, bytes) or not isinstance(theirs, dict):
        raise CheckpointMismatch(
            f"{path} records no run identity (written by an earlier coevolab), so nothing says it belongs to this "
            "grid: start the run again (--force), or resume it with the version that wrote it"
        )
    if hashlib.sha256(contents).hexdigest() != envelope.get("sha256"):
        raise CheckpointMismatch(f"{path} is damaged: its contents do not match their SHA-256 (cut or changed)")
    if identity is not None and (differ := identity.differences(theirs)):
        raise CheckpointMismatch(
            f"{path} belongs to another run: its {' and '.join(differ)} {'differ' if len(differ) > 1 else 'differs'} "
            "from this one's (grid.json changed since it was written, or the directory holds another run's "
            "checkpoint); resume with the grid that wrote it, or start again with --force"
        )
    try:
        payload = flax.serialization.msgpack_restore(contents)
    except (ValueError, TypeError) as error:
        raise CheckpointMismatch(f"{path} is not a readable checkpoint ({error})") from error
    if not isinstance(payload, dict) or {"completed_iterations", "pretrained", "state", "records"} - set(payload):
        raise CheckpointMismatch(f"{path} is not a readable checkpoint (its contents lack a run's fields)")
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
