"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program.

The Python API (`harness.api`), re-exported here:

    import harness

    harness.use_every_cpu_core()  # first: one shard per core, before anything starts JAX
    result = harness.run_grid(harness.grid_from_dict({"conditions": {"baseline": {}}}, name="mine"))
    result.summary

Importing the package configures nothing and loads no JAX: the names below are imported on first use, so
`harness.use_every_cpu_core()` can still set JAX's device count. Without it, JAX's default single CPU device runs
every grid in one shard; called after JAX started, it warns.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harness.common.version import __version__ as __version__  # re-exported: harness.__version__

if TYPE_CHECKING:
    from harness.api import (
        FIGURE_KEYS,
        ConditionFileError,
        DirectoryBusy,
        GridResult,
        GridSpec,
        Knobs,
        Mechanism,
        MechanismError,
        RunDirectoryError,
        grid_from_dict,
        load_grid,
        load_result,
        register_mechanism,
        run_grid,
        use_every_cpu_core,
    )
    from harness.experiment.study import run_study
    from harness.grid.study import load_study

__all__ = [
    "FIGURE_KEYS",
    "ConditionFileError",
    "DirectoryBusy",
    "GridResult",
    "GridSpec",
    "Knobs",
    "Mechanism",
    "MechanismError",
    "RunDirectoryError",
    "grid_from_dict",
    "load_grid",
    "load_result",
    "load_study",
    "register_mechanism",
    "run_grid",
    "run_study",
    "use_every_cpu_core",
]

# Where each exported name lives; `use_every_cpu_core` comes from its own module so that calling it loads as little
# as possible before JAX's device count is set.
_HOMES = {name: "harness.api" for name in __all__} | {
    "use_every_cpu_core": "harness.grid.sharding",
    "load_study": "harness.grid.study",  # a file of several shapes; run_study(study, run_dir) runs it
    "run_study": "harness.experiment.study",
}
# Every name but use_every_cpu_core reads grids, whose knobs and metrics the built-in mechanisms declare: their package
# is imported first, which registers them (harness.api imports it too).
_NEEDS_BUILT_INS = set(__all__) - {"use_every_cpu_core"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        if name in _NEEDS_BUILT_INS:
            importlib.import_module("harness.mechanisms")
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
