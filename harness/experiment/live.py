"""A running grid, watched: every finished outer iteration's per-condition means, readable before the grid ends.

`progress.csv` in the run directory (a seed block's in its block's folder) is rewritten, atomically, after every
outer iteration: one row per condition and iteration so far (iteration 0 is before training), the mean over the
runs of every float metric (of its finite values: a diverged run drops out) and how many runs it averages. It is
built from the records the checkpoint keeps, so a resumed run writes it whole again. With `tensorboard`, the same
means also go to TensorBoard event files (tensorboardX, the optional extra `coevolab[tensorboard]`): one TensorBoard
run per condition, `tensorboard/<condition>/`, each metric's mean a scalar tagged with the metric's name, its step the
iteration, so that `tensorboard --logdir DIR` draws every condition's curve of a metric on one card, overlaid, as
they come, offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs and metrics it reads)
from harness.common.run_files import atomic_write_text
from harness.engine.metrics import metric

if TYPE_CHECKING:
    from harness.grid.diagnostics import Diagnostics
    from harness.grid.trainer import GridTrainer

PROGRESS_FILE = "progress.csv"
TENSORBOARD_DIR = "tensorboard"
TENSORBOARD_HINT = (
    "--tensorboard needs tensorboardX, which is not installed: pip install 'coevolab[tensorboard]' (in a checkout: "
    "pip install -e '.[tensorboard]')"
)


class TensorBoardMissing(RuntimeError):
    """--tensorboard without tensorboardX installed."""


def check_tensorboard() -> None:
    """Before any work of a run with --tensorboard: tensorboardX imports.

    Raises:
        TensorBoardMissing: it is not installed (one line saying how to install it).
    """
    tensorboard_writer_class()


def tensorboard_writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise TensorBoardMissing(TENSORBOARD_HINT) from None
    return SummaryWriter


def tensorboard_writer(log_dir: Path) -> Any:
    """A tensorboardX SummaryWriter into `log_dir`.

    Raises:
        TensorBoardMissing: tensorboardX is not installed (one line saying how to install it).
    """
    return tensorboard_writer_class()(logdir=str(log_dir), flush_secs=1)


def iteration_means(program: GridTrainer, records: list[Diagnostics]) -> pd.DataFrame:
    """Per condition (grid order) and iteration: the mean of every float metric over its runs' finite values, and
    `runs`, how many runs the condition has."""
    table = program.metrics_table(records)
    columns = [name for name in program.metric_names if metric(name).kind == "float"]
    grouped = table.groupby(["condition", "iteration"], sort=False)
    means = grouped[columns].mean()
    means.insert(0, "runs", grouped.size())
    return means.reset_index()


class LiveLog:
    """Writes `progress.csv` (and TensorBoard's events, if asked) after each outer iteration of one program."""

    def __init__(self, run_dir: Path, program: GridTrainer, tensorboard: bool = False) -> None:
        self.run_dir, self.program = Path(run_dir), program
        self.tensorboard = tensorboard
        self.writers: dict[str, Any] = {}  # condition -> its TensorBoard run's writer
        self.written = -1  # the last iteration sent to TensorBoard by this process
        if tensorboard:
            check_tensorboard()

    def update(self, records: list[Diagnostics]) -> None:
        """The means of every iteration in `records` (record k: after iteration k, 0 before training)."""
        means = iteration_means(self.program, records)
        atomic_write_text(self.run_dir / PROGRESS_FILE, means.to_csv(index=False))
        if not self.tensorboard:
            return
        for row in means[means["iteration"] > self.written].itertuples(index=False):
            writer = self._writer(row.condition)
            for name in means.columns[3:]:
                value = getattr(row, name)
                if pd.notna(value):
                    writer.add_scalar(name, float(value), int(row.iteration))
        self.written = int(means["iteration"].max())
        for writer in self.writers.values():
            writer.flush()

    def _writer(self, condition: str) -> Any:
        if condition not in self.writers:
            self.writers[condition] = tensorboard_writer(self.run_dir / TENSORBOARD_DIR / condition)
        return self.writers[condition]

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
