"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program."""

from __future__ import annotations

import os


def _configure_xla_cpu() -> None:
    """XLA's multi-threaded Eigen pool can wedge on vmapped graphs like ours (every
    worker parked, the caller waiting forever); XLA still runs independent kernels
    in parallel without it. Takes effect only if JAX's backend is not yet initialised.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


_configure_xla_cpu()
