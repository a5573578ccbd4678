"""Kernels a compiled step executes, read from a JAX profiler trace.

XLA:CPU runs a program as a sequence of thunks, one per HLO instruction or fusion, and the
profiler records each as a complete event on the thread that ran it. Control flow (`while`,
`conditional`, `call`) and the executor's own spans wrap other events and are left out, so
what is counted is the kernels themselves.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import re
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

import jax

_WRAPPERS = ("while", "conditional", "call", "ThunkExecutor")


@dataclasses.dataclass(frozen=True)
class KernelProfile:
    """Kernels executed in one traced call: count and total µs by kind of op (summed over devices)."""

    count: collections.Counter
    micros: collections.Counter

    def __sub__(self, other: KernelProfile) -> KernelProfile:
        return KernelProfile(self.count - other.count, self.micros - other.micros)


def kind_of(kernel: str) -> str:
    """A kernel's kind from its HLO name: 'ynn_fusion.12' -> 'XNNPACK fusion', 'add_tanh_fusion' -> 'XLA fusion',
    'wrapped_reduce-window.3' -> 'reduce-window', 'dot.4' -> 'dot'."""
    name = re.sub(r"\.\d+$", "", kernel)
    if name.startswith(("ynn_fusion", "xnn_fusion")):
        return "XNNPACK fusion"
    if "fusion" in name:
        return "XLA fusion"
    return name.removeprefix("wrapped_")


def read_trace(directory: Path) -> KernelProfile:
    """The kernels of the one perfetto trace under `directory` (written with create_perfetto_trace=True)."""
    (path,) = directory.rglob("perfetto_trace.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))
    events = events["traceEvents"] if isinstance(events, dict) else events
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    count, micros = collections.Counter(), collections.Counter()
    for event in events:
        if event.get("ph") != "X" or event["name"].startswith(_WRAPPERS):
            continue
        if "XLA" not in threads.get((event["pid"], event["tid"]), ""):
            continue  # host-side spans (Python, dispatch), not kernels
        kind = kind_of(event["name"])
        count[kind] += 1
        micros[kind] += event.get("dur", 0.0)
    return KernelProfile(count, micros)


def profile_call(call: Callable[[], object]) -> KernelProfile:
    """Trace one call (which must block until its outputs are ready) and read its kernels."""
    with tempfile.TemporaryDirectory() as directory:
        jax.profiler.start_trace(directory, create_perfetto_trace=True)
        try:
            call()
        finally:
            jax.profiler.stop_trace()
        return read_trace(Path(directory))


# The loop's own parts of the inner step, named by scopes in harness.grid.training_step.
LOOP_SCOPES = ("policy_step", "judge_stages")


def hlo_sources(hlo_text: str, mechanisms: Collection[str]) -> collections.Counter:
    """Instructions of an optimised HLO text by where they come from, read from each instruction's op_name metadata
    (the named scopes the grid traces under): the innermost mechanism named in its path, else the loop's part
    (`LOOP_SCOPES`), else "loop (other)"; "no metadata" for instructions XLA made without any (copies, tuples,
    parameters)."""
    found: collections.Counter = collections.Counter()
    for line in hlo_text.splitlines():
        if " = " not in line or line.lstrip().startswith("//"):
            continue
        named = re.search(r'op_name="([^"]*)"', line)
        if named is None:
            found["no metadata"] += 1
            continue
        path = named.group(1).split("/")
        owners = [part for part in path if part in mechanisms]
        parts = [part for part in path if part in LOOP_SCOPES]
        found[owners[-1] if owners else parts[0] if parts else "loop (other)"] += 1
    return found
