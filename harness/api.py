"""The Python entry point: a grid from a dict or a condition file, run in-process, its results as tables and figures.

    import harness

    harness.use_every_cpu_core()  # first, before anything starts JAX: one shard per core
    grid = harness.grid_from_dict({"run": {"seeds": 2}, "conditions": {"baseline": {}}}, name="mine")
    result = harness.run_grid(grid, progress=lambda done, total: print(f"{done}/{total}"))
    result.summary, result.verdicts, result.figure("headline")

A run is `coevolab run`'s (`harness.experiment.runner.execute`): the same files in its run directory, the same
checkpoints, the same report bytes. A result is read back from that directory, so `run_grid(...)` and
`load_result(run_dir)` give the same tables; `load_result` needs no training and opens any directory `coevolab run`
wrote.
"""

from __future__ import annotations

import dataclasses
import numbers
import shutil
import tempfile
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import chex
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import ValidationError

from harness.common.integrity import RunDirectoryError, discard_contents, run_entries
from harness.common.locks import DirectoryBusy, holding_run_dir, reading_run_dir
from harness.common.run_files import CLAIMS_FILE, FIGURES_DIR, GRID_FILE, metrics_file
from harness.common.wording import plural
from harness.engine.state import CoevolutionState
from harness.experiment.runner import Progress, diverged_runs, execute, load_spec
from harness.experiment.until_decided import is_sequential
from harness.experiment.verify import check_finished, is_run_directory, replaceable_entries
from harness.grid import registry
from harness.grid.compile_cache import enable_compilation_cache
from harness.grid.conditions import ConditionFileError, duplicate_conditions, grid_from_mapping, load_grid
from harness.grid.contract import Mechanism
from harness.grid.knobs import Knobs
from harness.grid.layout import layout_grid
from harness.grid.memory import check_fits
from harness.grid.sharding import use_every_cpu_core
from harness.grid.spec import GridSpec, RunSettings
from harness.inference.verdicts import verdict_table
from harness.report import REPORT_FILE, claim_ranges, run_report_table
from harness.report.figures import FIGURE_KEYS, draw_figures
from harness.report.tables import summarize

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
    "register_mechanism",
    "run_grid",
    "use_every_cpu_core",
]

ProgressCallback = Callable[[int, int], None]
"""Called after each outer iteration with (iterations done, iterations in all)."""


def grid_from_dict(
    document: Mapping[str, Any], name: str = "grid", seeds: int | Sequence[int] | None = None
) -> GridSpec:
    """A grid from a dict shaped like a condition file (see conditions/example.toml), validated as a file is.

    Args:
        document: {"run": {...}, "world": {...}, "pretrain": {...}, "conditions": {NAME: {knob: value, ...}},
            "claims": {NAME: {...}}}; only "conditions" is required. A knob given as a list (or tuple) sweeps it.
        name: the grid's name, for report titles and run-directory names.
        seeds: overrides [run].seeds: a count N (seeds 0..N-1) or a sequence of seeds.

    Returns:
        The validated grid.

    Raises:
        ConditionFileError: the first mistake (unknown knob, bad value, ...), worded as `coevolab` words it for a file;
            seeds that are neither a count nor a sequence of whole numbers.
    """
    return grid_from_mapping(document, name=name, seeds=_seeds_argument(seeds, f"grid '{name}'"))


def _whole(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _seeds_argument(seeds: object, where: str) -> int | tuple[int, ...] | None:
    """`seeds=` as the grid takes it: None, a count, or a tuple of seeds, numpy integers (and arrays) included.

    Raises:
        ConditionFileError: anything else (2.5, "3", [0, 1.5]), in one line.
    """
    if seeds is None:
        return None
    if _whole(seeds):
        return int(cast(numbers.Integral, seeds))
    if isinstance(seeds, Sequence | np.ndarray) and not isinstance(seeds, str | bytes):
        values = list(cast(Sequence[object], seeds))
        if all(_whole(value) for value in values):
            return tuple(int(cast(numbers.Integral, value)) for value in values)
    raise ConditionFileError(
        where, f"seeds: expected a count of seeds (a whole number ≥ 1) or a sequence of whole numbers, got {seeds!r}"
    )


MechanismError = registry.MechanismError


def register_mechanism(module: str | Path | types.ModuleType) -> tuple[str, ...]:
    """Load a mechanism module and register the mechanisms it declares (`MECHANISM`, or a tuple `MECHANISMS`), so
    that `Knobs` and grids take their knobs: a grid made by `grid_from_dict` whose conditions set them loads the
    module, as a condition file's `[mechanisms] modules` would.

    Args:
        module: a file (a path, or a string ending in .py), an importable module's name, or an imported module.

    Returns:
        The names of the mechanisms it declares.

    Raises:
        MechanismError: no such module, it fails to import, it declares no mechanism, or one clashes with a
            registered mechanism (a name, a knob, a row, a metric, a table or a static size taken), in one line.
    """
    if isinstance(module, types.ModuleType):
        if getattr(module, "__file__", None) is None:
            raise MechanismError(f"module {module.__name__} has no source file: write the mechanism in a file")
        module = Path(module.__file__)
    loaded = registry.load(str(module))
    return tuple(registry.names_in(loaded.module)) or (loaded.mechanism.name,)


def _as_grid(grid: GridSpec | Mapping[str, Any] | str | Path, seeds: int | Sequence[int] | None) -> GridSpec:
    if isinstance(grid, GridSpec):
        given = _seeds_argument(seeds, f"grid '{grid.name}'")
        if given is None:
            return grid
        try:
            run = RunSettings.model_validate({**grid.run.model_dump(), "seeds": given})
        except ValidationError as error:
            raise ConditionFileError(f"grid '{grid.name}'", f"seeds: {error.errors()[0]['msg']}") from None
        return grid.model_copy(update={"run": run})
    if isinstance(grid, Mapping):
        return grid_from_dict(grid, seeds=seeds)
    return load_grid(grid, seeds=_seeds_argument(seeds, str(grid)))


class _CallbackProgress:
    """The runner's Progress, reduced to one call per finished iteration: callback(done, total)."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback, self.total = callback, 0

    def phase(self, name: str, detail: str = "") -> None:
        pass

    def phase_done(self, name: str, seconds: float) -> None:
        pass

    def iterations(self, done: int, total: int) -> None:
        self.total = total

    def iteration_done(self, iteration: int) -> None:
        self.callback(iteration + 1, self.total)

    def close(self) -> None:
        pass


def _progress(progress: ProgressCallback | Progress | None) -> Progress | None:
    """The runner's Progress for what run_grid was given: a Progress as it is (e.g.
    harness.experiment.progress.PlainProgress()), a callback wrapped."""
    if progress is None or hasattr(progress, "iteration_done"):
        return cast("Progress | None", progress)
    return _CallbackProgress(cast(ProgressCallback, progress))


def _empty_run_dir(run_dir: Path | None, name: str, overwrite: bool) -> Path:
    """The directory to run into: a fresh temporary one, or `run_dir` if it is empty or `overwrite` allows it (a run
    directory only; its files are removed under its lock, by the caller: `discard_contents`)."""
    if run_dir is None:
        return Path(tempfile.mkdtemp(prefix=f"coevolab-{name}-"))
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(f"{run_dir}: exists and is not a directory")
    if run_dir.exists() and run_entries(run_dir):
        if not overwrite:
            raise FileExistsError(f"{run_dir} already holds files; pass overwrite=True to replace the run in it")
        if not is_run_directory(run_dir):
            raise FileExistsError(f"{run_dir} holds files but no coevolab run; overwrite replaces a run directory only")
        foreign = replaceable_entries(run_dir).foreign
        if foreign:
            raise FileExistsError(
                f"{run_dir} holds {', '.join(entry.name for entry in foreign[:3])}, which no coevolab run writes; "
                "overwrite removes a run's own files only: move them out first"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class GridResult:
    """A finished grid: its tables, its training state and its run directory (what `coevolab run` writes).

    Attributes:
        spec: the grid that ran.
        run_dir: its run directory (metrics.csv.gz, grid.json, manifest.json, summary, report.md, figures/).
        metrics: the tidy metrics table, one row per condition × seed × iteration (0 = before training), as read
            from metrics.csv.gz; columns: condition, seed, iteration, every metric of the grid (the loop's and those
            of the mechanisms its runs use, `harness.grid.spec.grid_metrics`),
            mode_sequence, boundary, diverged.
        summary: one row per condition at the final iteration: mean, std and CI per headline metric, paired
            differences from the reference condition (the unrounded table behind summary.csv).
        verdicts: one row per claim of the grid (`harness.inference.verdicts.VERDICT_COLUMNS`; no rows without
            claims): effect, CI and verdict (the unrounded table behind claims.csv).
        pretraining: one row per pretrained judge: seed, member, target, steps, spearman (script too under the
            original streams).
        times: seconds per phase of the run (startup, pretrain, compile, train, checkpoint, report, other).
        final_state: every run's state after the last iteration: runs (leading axis R = conditions × seeds, in
            `run_labels` order; policy params float32 (R, P)) and judge slots (leading axis J; judge params
            float32 (J, P)). None for a result loaded from a directory (the files do not keep it).
        figure_files: {name: path} of every PNG under run_dir/figures (the five of FIGURE_KEYS, and the attractor,
            frontier and pair figures where the report draws them).
    """

    spec: GridSpec
    run_dir: Path
    metrics: pd.DataFrame
    summary: pd.DataFrame
    verdicts: pd.DataFrame
    pretraining: pd.DataFrame
    times: Mapping[str, float]
    final_state: CoevolutionState | None
    figure_files: Mapping[str, Path]

    def __repr__(self) -> str:
        # Short, for a notebook: the default would print every table and the state's arrays.
        run = self.spec.run
        return (
            f"GridResult({self.spec.name!r}: {plural(len(self.spec.conditions), 'condition')} × "
            f"{plural(len(run.seeds), 'seed')}, {plural(run.iterations, 'iteration')}; run_dir={str(self.run_dir)!r})"
        )

    @property
    def run_labels(self) -> list[tuple[str, int]]:
        """(condition, seed) of each run of `final_state`, in its run order."""
        return layout_grid(self.spec).run_labels()

    @property
    def diverged(self) -> pd.DataFrame:
        """The runs whose parameters went non-finite: condition, seed, first_bad_iteration (empty if none)."""
        return diverged_runs(self.metrics)

    @property
    def report_file(self) -> Path:
        """The run's markdown report."""
        return self.run_dir / REPORT_FILE

    def figures(self, keys: Sequence[str] = FIGURE_KEYS) -> dict[str, Figure]:
        """The report's figures as matplotlib Figures (no pyplot state), drawn from `metrics`.

        Args:
            keys: which of FIGURE_KEYS to draw.

        Returns:
            {key: Figure}; saved as PNG (`harness.rendering.figure_parts.save`), each gives the bytes of its file in
            `figure_files`.
        """
        return draw_figures(self.metrics, self.spec.name, keys)

    def figure(self, key: str) -> Figure:
        """One of the report's figures as a matplotlib Figure.

        Args:
            key: one of FIGURE_KEYS (headline, boundaries_and_best, all_conditions, end_state, inside_vs_outside).

        Returns:
            The Figure, drawn from `metrics` as the report draws it.
        """
        return self.figures([key])[key]

    def save(self, run_dir: str | Path, overwrite: bool = False) -> GridResult:
        """Copy this result's run directory (every file `coevolab run` wrote) to another directory.

        Args:
            run_dir: the directory to copy to; created if absent, and it must be empty unless `overwrite`.
            overwrite: copy into a directory that already holds files (files of the same name are replaced).

        Returns:
            The result as read back from `run_dir` (its final state carried over).

        Raises:
            FileExistsError: `run_dir` holds files and `overwrite` is False, or holds files but no run.
            DirectoryBusy: another process writes in `run_dir`.
        """
        target = _empty_run_dir(Path(run_dir), self.spec.name, overwrite)
        with holding_run_dir(target):
            discard_contents(
                target, replaceable_entries(target).owned
            )  # every file of the run it held: nothing of it mixes with this one's
            # Lock files are each directory's own, never copied (a held one would be open twice in this process).
            shutil.copytree(self.run_dir, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lock"))
        return dataclasses.replace(load_result(target), final_state=self.final_state)


def load_result(run_dir: str | Path) -> GridResult:
    """A finished run read back from its directory (one `coevolab run` or `run_grid` wrote); no training.

    Checked before it is read, as `coevolab verify` checks it: every file against the manifest's size and SHA-256,
    metrics.csv.gz read back against grid.json.

    Args:
        run_dir: a finished run directory of a grid (metrics.csv.gz, grid.json, manifest.json, ...).

    Returns:
        Its GridResult, with final_state None.

    Raises:
        FileNotFoundError: the directory lacks metrics.csv.gz (the run has not finished) or grid.json.
        RunDirectoryError: a file differs from the manifest (or the manifest is missing or edited), grid.json is not
            a grid, its metrics table does not read back as the grid's runs, or the directory holds a study (one line).
    """
    run_dir = Path(run_dir)
    for needed in (metrics_file(run_dir), run_dir / GRID_FILE):
        if not needed.is_file():
            raise FileNotFoundError(f"{run_dir}: no {needed.name}; not a finished run directory")
    with reading_run_dir(run_dir):  # no report rewrites it while it is read
        checked = check_finished(run_dir)
        spec = load_spec(run_dir)
        metrics = checked.metrics
        assert metrics is not None  # read back beside the grid.json above
        # Read as `coevolab report` reads it (best-of-n measures joined), so the tables and verdicts are the report's.
        prepared = run_report_table(run_dir, metrics)
        if is_sequential(run_dir):  # its verdicts are its looks', as its report reads them from claims.csv
            verdicts = pd.read_csv(run_dir / CLAIMS_FILE)
        else:
            verdicts = verdict_table(prepared, spec.claims, ranges=claim_ranges(spec))
    manifest = checked.manifest
    figures = sorted((run_dir / FIGURES_DIR).glob("*.png"))
    return GridResult(
        spec=spec,
        run_dir=run_dir,
        metrics=metrics,
        summary=summarize(prepared),
        verdicts=verdicts,
        pretraining=pd.DataFrame(manifest.get("pretrain", [])),
        times=dict(manifest.get("wall_seconds", {})),
        final_state=None,
        figure_files={path.stem: path for path in figures},
    )


def run_grid(
    grid: GridSpec | Mapping[str, Any] | str | Path,
    *,
    seeds: int | Sequence[int] | None = None,
    run_dir: str | Path | None = None,
    overwrite: bool = False,
    progress: ProgressCallback | Progress | None = None,
    compile_cache: bool | str | Path = False,
    figures: bool = True,
    tensorboard: bool = False,
) -> GridResult:
    """Pretrain, compile and train every condition × seed of a grid in this process, and write its run directory.

    Args:
        grid: a GridSpec, a dict shaped like a condition file (`grid_from_dict`), or a condition file's path.
        seeds: overrides the grid's seeds: a count N (seeds 0..N-1) or a sequence of seeds.
        run_dir: where to write the run's files (created; must be empty unless `overwrite`); default: a fresh
            temporary directory, left in place (`GridResult.save` copies it elsewhere).
        overwrite: write into a `run_dir` that already holds files.
        progress: called as progress(done, total) after each outer iteration; or a
            `harness.experiment.runner.Progress` (`harness.experiment.progress.PlainProgress()` prints the command's
            lines).
        compile_cache: keep compiled programs on disk (True: $COEVOLAB_CACHE_DIR or ~/.cache/coevolab/jax, or a
            directory), so a later process skips compiling the same grid shape. Changes JAX's global cache setting.
        figures: False: the run directory's report is text and tables alone, no PNG drawn (`figures()` still draws
            them from the metrics).
        tensorboard: also write each finished iteration's per-condition means as TensorBoard events in
            run_dir/tensorboard (needs tensorboardX); run_dir/progress.csv has them either way, while the grid runs.

    Returns:
        The finished grid's GridResult, read back from its run directory, with the final training state.

    Raises:
        ConditionFileError: the grid does not validate.
        harness.grid.memory.GridTooLarge: the grid would not fit in memory (checked before anything is written).
        harness.grid.trainer.PretrainingFailed: some judge never reached its pretraining target.
        FileExistsError: `run_dir` holds files and `overwrite` is False, or holds files but no run.
        DirectoryBusy: another process writes in `run_dir` (a run, a merge, a report).
        OSError: nothing can be written in `run_dir`.
    """
    spec = _as_grid(grid, seeds)
    for condition, same_as in duplicate_conditions(spec):
        warnings.warn(
            f"condition '{condition}' resolves to the same knobs as '{same_as}' (duplicate runs)", stacklevel=2
        )
    check_fits(layout_grid(spec).shape, len(spec.run.seeds))  # refuse before writing anything, as `coevolab` does
    directory = _empty_run_dir(None if run_dir is None else Path(run_dir), spec.name, overwrite)
    if compile_cache:
        enable_compilation_cache(None if compile_cache is True else Path(compile_cache))
    with holding_run_dir(directory):
        discard_contents(
            directory, replaceable_entries(directory).owned
        )  # with overwrite: the run it held, before anything of this one is written
        shown = _progress(progress)
        try:
            outcome = execute(spec, directory, shown, figures=figures, tensorboard=tensorboard)
        finally:  # a run that raised leaves no progress display running (a heartbeat's thread) behind it
            if shown is not None:
                shown.close()
    result = dataclasses.replace(load_result(directory), final_state=outcome.final_state)
    chex.assert_tree_shape_prefix(outcome.final_state.runs, (len(result.run_labels),))
    return result
