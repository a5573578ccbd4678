"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program."""

from __future__ import annotations

import os

import jax


def _configure_xla_cpu() -> None:
    """Settings that keep XLA:CPU from hanging; they take effect only if JAX's backend is
    not yet initialised (so import harness before using JAX).

    Asynchronous CPU dispatch can leave the caller waiting forever on an execution
    (upstream jax#25861; seen here on eager ops and vmapped while-loops), and XLA's
    multi-threaded Eigen pool can wedge on vmapped graphs. Both cost little here: a
    grid is a few large calls, and XLA still runs independent kernels in parallel.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    jax.config.update("jax_cpu_enable_async_dispatch", False)


_configure_xla_cpu()
