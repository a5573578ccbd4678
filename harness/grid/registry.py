"""The mechanisms a grid can use, by name: the built-in ones and those a lab loads from its own modules.

The built-in mechanisms enter the catalog first: the package `harness.mechanisms`, one layer above this one, registers
them when it is imported (`register_built_ins`; the grid's code imports no mechanism, and reading the catalog before
that import is refused in one line). Every mechanism registered later follows, by `register` (Python) or `load` (a
module name or a file, as a condition file's `[mechanisms] modules` gives it). A grid uses the built-in mechanisms
and the ones it names (`GridSpec.mechanisms`); what the grid's program is built from (its knobs, state, rows, hooks
and metrics) follows from that list, in catalog order (`active`).

Registering checks the mechanism against every other: its name, its knobs' names, its rows' names and metrics' names
are its own; `after` / `before` name registered mechanisms. Any clash is a `MechanismError` naming the mechanism and
what clashes. Hooks are not claimed: every mechanism's hook at a point is called, in mechanism order.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness.engine import metrics as metric_registry
from harness.grid import knobs as knob_registry
from harness.grid.contract import STATE_HOOKS, Mechanism, RunTable
from harness.grid.contract_checks import HOOK_ARGUMENTS, ROW_ARGUMENTS, call_mismatch, checked, noting_place, place_of
from harness.grid.knobs import field_choices, field_host_only
from harness.grid.plugin_imports import outside_imports
from harness.grid.report_section import MechanismReport
from harness.grid.step_rows import STAGES, Stage, StepRow
from harness.inference.run_measures import DERIVED_MEASURES, SUMMARY_COLUMNS

# The keys of a condition table that are not knobs (`harness.grid.conditions`): no knob may take these names.
CONDITION_KEYS = ("description", "boundary", "original_script", "zip")
# Stems of a run directory's own files, which no mechanism's table (`RunTable`, written as <name>.parquet) may take.
RESERVED_TABLE_NAMES = ("metrics", "summary", "claims", "attractors", "frontier", "runs", "across", "looks", "grid")
# Columns the metrics table's rows are keyed by or the reports derive beside the metrics (`prepare`, `run_summaries`,
# `DERIVED_MEASURES`): a metric or a table measure of one of these names would be read as the other.
RESERVED_COLUMNS = frozenset(
    {"condition", "seed", "iteration", "boundary", "diverged", "mode_sequence", *SUMMARY_COLUMNS, *DERIVED_MEASURES}
)
# Modules loaded from files are imported under names of this prefix, their stem and digest: two files of one name do
# not collide.
LOADED_PREFIX = "coevolab_mechanism_"


class MechanismError(ValueError):
    """A mechanism that cannot be loaded or registered; the message is one line naming it and the problem."""


@dataclasses.dataclass(frozen=True)
class Registered:
    """A registered mechanism and where it came from: module (its module's name, or the file as given), path (the
    file it was read from) and digest (SHA-256 of that file; empty for built-ins, which the package's own source
    digest covers)."""

    mechanism: Mechanism
    builtin: bool
    module: str = ""
    path: str = ""
    digest: str = ""


_CATALOG: dict[str, Registered] = {}


def register_built_ins(mechanisms: Sequence[Mechanism], module: str) -> None:
    """Register the built-in mechanisms, in order (what importing `harness.mechanisms` does, once). They come before
    any other: `register` refuses a lab's mechanism until they are in."""
    if metric_registry.built_ins_registered():
        return
    for mechanism in mechanisms:
        register(mechanism, builtin=True, module=module)


def catalog() -> dict[str, Registered]:
    """Every registered mechanism by name: built-ins first (in `harness.mechanisms.BUILT_IN` order), then the others
    in the order they were registered."""
    metric_registry.require_built_ins()
    return dict(_CATALOG)


def mechanism(name: str) -> Mechanism:
    """The registered mechanism called `name`."""
    registered = catalog()
    if name not in registered:
        raise MechanismError(f"no mechanism '{name}' is loaded; loaded: {', '.join(registered)}")
    return registered[name].mechanism


def _check_knobs(mechanism: Mechanism) -> None:
    if mechanism.knobs is None:
        return
    for name, field in mechanism.knobs.model_fields.items():
        if field.is_required():
            raise MechanismError(f"mechanism '{mechanism.name}': knob '{name}' has no default")
        if name in CONDITION_KEYS:
            raise MechanismError(f"mechanism '{mechanism.name}': knob '{name}' is a condition key, not a knob name")
        if not field_host_only(field) and not field_choices(field) and type(field.default) not in (bool, int, float):
            raise MechanismError(
                f"mechanism '{mechanism.name}': knob '{name}' enters the program, so its default must be a bool, an "
                f"int, a float or one of a Literal's strings (or mark it host-only), not {field.default!r}"
            )


def _check_hooks(mechanism: Mechanism) -> None:
    """Every function of `mechanism` takes the arguments its hook or row is called with; a state hook changes only its
    mechanism's own state, so a mechanism that keeps none has nothing to give it."""
    functions = [(getattr(mechanism, hook), arguments, f"hook '{hook}'") for hook, arguments in HOOK_ARGUMENTS.items()]
    functions += [
        (getattr(row, field), arguments, f"row '{row.name}' {field}")
        for row in mechanism.rows
        for field, arguments in ROW_ARGUMENTS.items()
    ]
    for function, arguments, where in functions:
        problem = call_mismatch(function, arguments, where) if function is not None else None
        if problem:
            raise MechanismError(f"mechanism '{mechanism.name}': {problem}")
    if mechanism.run_state is None and mechanism.slot_state is None:
        for hook in STATE_HOOKS:
            if getattr(mechanism, hook) is not None:
                raise MechanismError(
                    f"mechanism '{mechanism.name}': hook '{hook}' changes only the mechanism's own state, and it "
                    "keeps none (declare run_state or slot_state)"
                )


def _clashes(mechanism: Mechanism, others: list[Mechanism]) -> str | None:
    """What of `mechanism` another registered mechanism already has, in words (or a table named like a run
    directory's own files); None if nothing."""
    for name in [*(metric.name for metric in mechanism.metrics), *(m for t in mechanism.tables for m in t.measures)]:
        if name in RESERVED_COLUMNS:
            return f"'{name}' is a column the reports key by or derive themselves, not a name for a metric or measure"
    for table in mechanism.tables:
        if table.name in RESERVED_TABLE_NAMES or not table.name.isidentifier():
            return f"table '{table.name}' is not a name of its own (a Python identifier, no run directory's file)"
        if bool(table.measures) != (table.compute_measures is not None):
            return f"table '{table.name}' declares measures or compute_measures without the other"
    for other in others:
        if other.name == mechanism.name:
            return "the name is taken by another mechanism"
        for name in _own_knobs(mechanism) & _own_knobs(other):
            return f"knob '{name}' is taken by mechanism '{other.name}'"
        for row in {row.name for row in mechanism.rows} & {row.name for row in other.rows}:
            return f"row '{row}' is taken by mechanism '{other.name}'"
        for table in {table.name for table in mechanism.tables} & {table.name for table in other.tables}:
            return f"table '{table}' is taken by mechanism '{other.name}'"
    names = {other.name for other in others}
    for named in (*mechanism.after, *mechanism.before):
        if named not in names:
            return f"its order names mechanism '{named}', which is not loaded"
    return None


def _own_knobs(mechanism: Mechanism) -> set[str]:
    return set(mechanism.knobs.model_fields) if mechanism.knobs is not None else set()


def register(
    mechanism: Mechanism, *, builtin: bool = False, module: str = "", path: str = "", digest: str = ""
) -> None:
    """Add `mechanism` to the catalog. Registering the same mechanism from the same source again does nothing.

    Raises:
        MechanismError: it is not a `Mechanism`, its knobs are malformed, a function of it cannot take its hook's
            arguments, it takes a state hook without keeping a state, or it clashes with a registered one.
    """
    if not isinstance(mechanism, Mechanism):
        raise MechanismError(f"{module or 'register'}: expected a harness.grid.contract.Mechanism, got {mechanism!r}")
    if mechanism.report is not None and not isinstance(mechanism.report, MechanismReport):
        raise MechanismError(
            f"mechanism '{mechanism.name}': report is {mechanism.report!r}, not a "
            "harness.grid.report_section.MechanismReport(section, why_identical)"
        )
    if not builtin:
        metric_registry.require_built_ins()
    previous = _CATALOG.get(mechanism.name)
    if previous is not None and (previous.mechanism is mechanism or (digest and previous.digest == digest)):
        return
    _check_knobs(mechanism)
    _check_hooks(mechanism)
    problem = _clashes(mechanism, [entry.mechanism for entry in _CATALOG.values()])
    if problem:
        where = f" ({module})" if module else ""
        raise MechanismError(f"mechanism '{mechanism.name}'{where}: {problem}")
    try:
        metric_registry.register_metrics(mechanism.name, mechanism.metrics, builtin)
        for table in mechanism.tables:
            metric_registry.register_table_measures(mechanism.name, table.name, dict(table.measures))
    except ValueError as error:
        metric_registry.unregister_metrics(mechanism.name)
        raise MechanismError(str(error)) from None
    if mechanism.knobs is not None:
        knob_registry.register_knobs(mechanism.name, mechanism.knobs, builtin)
    _CATALOG[mechanism.name] = Registered(mechanism, builtin, module, path, digest)
    _clear_caches()


def unregister(name: str) -> None:
    """Remove a mechanism that is not built in from the catalog (e.g. after a test)."""
    entry = _CATALOG.get(name)
    if entry is None:
        return
    if entry.builtin:
        raise MechanismError(f"mechanism '{name}' is built in and cannot be unregistered")
    del _CATALOG[name]
    metric_registry.unregister_metrics(name)
    knob_registry.unregister_knobs(name)
    _clear_caches()


@contextmanager
def restored_catalog() -> Iterator[None]:
    """Whatever is registered inside the block is unregistered when it ends (for tests and scratch sessions)."""
    before = set(catalog())
    try:
        yield
    finally:
        for name in [name for name in _CATALOG if name not in before]:
            unregister(name)


def source_digest(path: Path) -> str:
    """SHA-256 of a module's source file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_path(reference: str) -> bool:
    return reference.endswith(".py") or "/" in reference or "\\" in reference


def resolve_reference(reference: str, relative_to: Path | None = None) -> tuple[str, Path]:
    """(module reference as given, the file it names or imports) of a mechanism module, without importing a file.

    A reference ending in .py (or holding a path separator) is a file, relative to `relative_to` (the condition
    file's folder) unless absolute; anything else is a module name imported as Python would.
    """
    if is_path(reference):
        path = Path(reference).expanduser()
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        if not path.is_file():
            raise MechanismError(f"mechanism module {reference}: no such file ({path})")
        return reference, path.resolve()
    spec = importlib.util.find_spec(reference) if reference.strip() else None
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        raise MechanismError(f"mechanism module {reference}: no such module")
    return reference, Path(spec.origin).resolve()


def load(reference: str, relative_to: Path | None = None, path: Path | None = None) -> Registered:
    """Import a mechanism module and register every mechanism it declares (`MECHANISM`, or a tuple `MECHANISMS`).

    reference: a module name, or a file (see `resolve_reference`); path: read the module from this file instead
    (a run directory's copy of it). Returns the registration of its (first) mechanism.

    Raises:
        MechanismError: no such module, it fails to import (the error in one line), declares no mechanism, or a
            mechanism clashes with a registered one.
    """
    from_file = path is not None
    if path is None:
        reference, path = resolve_reference(reference, relative_to)
        from_file = is_path(reference)
    digest = source_digest(path)
    _refuse_outside_imports(reference, path)
    try:
        if from_file:
            name = f"{LOADED_PREFIX}{path.stem}_{digest[:16]}"
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
        else:
            module = importlib.import_module(reference)
    except MechanismError:
        raise
    except (Exception, SystemExit) as error:  # an error in the lab's module (or its exit on import): one line, named
        first = str(error).splitlines()[0] if str(error) else ""
        raise MechanismError(f"mechanism module {reference}: {type(error).__name__}: {first}") from None
    declared = getattr(module, "MECHANISMS", None) or (getattr(module, "MECHANISM", None),)
    if not declared or declared[0] is None:
        raise MechanismError(f"mechanism module {reference}: it defines no MECHANISM (a harness.grid.Mechanism)")
    for mechanism in declared:
        register(mechanism, module=reference, path=str(path), digest=digest)
    return catalog()[declared[0].name]


def _refuse_outside_imports(reference: str, path: Path) -> None:
    """One line where a mechanism's file imports a module from outside the installed packages, which its digest would
    not cover (`harness.grid.plugin_imports`); a file that does not parse is left to the import to report."""
    try:
        found = outside_imports(path)
    except (SyntaxError, ValueError):
        return
    if found:
        line, module, where = found[0]
        place = f"from {where}" if where is not None else "beside it (a relative import)"
        raise MechanismError(
            f"mechanism module {reference} ({path}:{line}) imports '{module}' {place}, outside the installed packages: "
            "its code would not be part of the mechanism's digest, so an edit to it would reuse a stale compiled "
            "program and a resumed run would not notice; put that code in the mechanism's file, or install it (not "
            "editable) as a package"
        )


def plugin_error(error: BaseException) -> str | None:
    """One line for an error raised inside a lab's own mechanism file (not a built-in's), naming the mechanism, the
    file and line, and the function (the hook) it was in, with the error's type and first line; None where no frame
    of the error's traceback is in such a file. The innermost such frame is named."""
    files = {str(Path(entry.path).resolve()): name for name, entry in catalog().items() if not entry.builtin}
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename and str(Path(frame.filename).resolve()) in files
    ]
    if not frames:
        return None
    frame = frames[-1]
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = files[str(Path(frame.filename).resolve())]
    place = place_of(error)
    called = f"; {place}" if place else ""
    return (
        f"mechanism '{name}' ({frame.filename}:{frame.lineno}, in {frame.name}{called}): "
        f"{type(error).__name__}: {message}"
    )


def names_in(reference_module: str) -> list[str]:
    """The names of the registered mechanisms a module reference declared."""
    return [name for name, entry in catalog().items() if entry.module == reference_module]


# --------------------------------------------------------------------------------------------------------------------
# A grid's mechanisms, and what follows from them


def active(names: Sequence[str] = ()) -> tuple[Mechanism, ...]:
    """The mechanisms of a grid that loads `names` (beside the built-ins), in catalog order."""
    return _active(tuple(names))


@functools.cache
def _active(names: tuple[str, ...]) -> tuple[Mechanism, ...]:
    registered = catalog()
    missing = [name for name in names if name not in registered]
    if missing:
        raise MechanismError(f"mechanism {missing[0]} is not loaded")
    return tuple(entry.mechanism for name, entry in registered.items() if entry.builtin or name in names)


def plugins_of(names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(name, source digest) of each mechanism `names` loads: what, beside the package's source, selects a program."""
    registered = catalog()
    return tuple((name, registered[name].digest) for name in names)


def ordered_hooks(mechanisms: Sequence[Mechanism], hook: str) -> list[tuple[str, Callable]]:
    """(mechanism name, hook) of every mechanism that takes `hook`, in the order `checked_hooks` gives, each noting
    its place in the contract on an error (`noting_place`): for the host's hooks, whose values are plain Python."""
    return [(m.name, noting_place(getattr(m, hook), f"hook '{hook}'")) for m in _hook_order(tuple(mechanisms), hook)]


def checked_hooks(
    mechanisms: Sequence[Mechanism], hook: str, given_at: int | tuple[int, ...]
) -> list[tuple[str, Callable]]:
    """(mechanism name, hook) of every mechanism that takes `hook`, in mechanism order, except that a mechanism with
    `before` comes just before the first of those it names (and after those its `after` names), as its rows do; each
    hook checked while traced to return what it was given at argument `given_at` (the value, and its own state where
    it returns one) in structure, shapes and dtypes (`contract_checks.checked`)."""
    ordered = _hook_order(tuple(mechanisms), hook)
    return [(m.name, checked(getattr(m, hook), given_at, m.name, f"hook '{hook}'")) for m in ordered]


def row_owners(mechanisms: Sequence[Mechanism]) -> dict[str, str]:
    """Every row's name -> the name of the mechanism that declares it."""
    return {row.name: m.name for m in mechanisms for row in m.rows}


@functools.cache
def _hook_order(mechanisms: tuple[Mechanism, ...], hook: str) -> tuple[Mechanism, ...]:
    return _ordered([m for m in mechanisms if getattr(m, hook) is not None], f"hook '{hook}'")


def _ordered(mechanisms: Sequence[Mechanism], where: str) -> tuple[Mechanism, ...]:
    """`mechanisms` in order: each, in mechanism order, joins at the end, or just before the first of those it must
    come before; it must still come after those it names in `after` (each was registered before it, so is placed)."""
    order: list[Mechanism] = []
    for mechanism in mechanisms:
        placed = [m.name for m in order]
        earliest = max((placed.index(name) + 1 for name in mechanism.after if name in placed), default=0)
        position = min((placed.index(name) for name in mechanism.before if name in placed), default=len(order))
        if position < earliest:
            raise MechanismError(
                f"{where}: mechanism '{mechanism.name}' cannot come after {', '.join(mechanism.after)} and "
                f"before {', '.join(mechanism.before)}, which run the other way"
            )
        order.insert(position, mechanism)
    return tuple(order)


def stage_rows(mechanisms: Sequence[Mechanism], stage: Stage) -> tuple[StepRow, ...]:
    """A stage's rows in the order they run: mechanism order, except that a mechanism with `before` runs just before
    the first of those it names (and after those its `after` names)."""
    return _stage_rows(tuple(mechanisms), stage)


@functools.cache
def _stage_rows(mechanisms: tuple[Mechanism, ...], stage: Stage) -> tuple[StepRow, ...]:
    assert stage in STAGES, stage
    order = _ordered([m for m in mechanisms if any(row.stage == stage for row in m.rows)], f"stage '{stage}'")
    return tuple(row for m in order for row in m.rows if row.stage == stage)


def rows(mechanisms: Sequence[Mechanism]) -> tuple[StepRow, ...]:
    """Every row of the mechanisms, stage by stage, in the order the step runs them."""
    return tuple(row for stage in STAGES for row in stage_rows(mechanisms, stage))


def metric_columns(mechanisms: Sequence[Mechanism]) -> tuple[metric_registry.Metric, ...]:
    """The metrics of a grid of `mechanisms`, in metrics.csv.gz's column order."""
    return metric_registry.columns([m.name for m in mechanisms])


def tables(mechanisms: Sequence[Mechanism]) -> tuple[RunTable, ...]:
    """The per-run tables of a grid of `mechanisms`, in mechanism order."""
    return tuple(table for m in mechanisms for table in m.tables)


def measured_tables() -> tuple[RunTable, ...]:
    """Every registered mechanism's per-run tables that yield measures (`RunTable.measures`), in catalog order: what
    a run directory's report joins to its metrics where the directory holds the table."""
    return tuple(table for table in tables([entry.mechanism for entry in catalog().values()]) if table.measures)


def _clear_caches() -> None:
    _active.cache_clear()
    _stage_rows.cache_clear()
    _hook_order.cache_clear()
