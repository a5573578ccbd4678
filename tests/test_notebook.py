"""examples/quickstart.ipynb: kept with the outputs of one complete run of itself (make notebook), and executed afresh
in a kernel of this interpreter on a tiny grid."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.compile_cache_settings import LONG_COMPILE_SECONDS
from tools.notebook import PARAMETERS_TAG, execute, read_notebook

# Replaces the notebook's cell tagged "parameters": a tiny grid of the shape of tests/test_api.py's (its conditions,
# 2 seeds, 20 steps per iteration), so the kernel loads the programs that file compiled from the session's cache.
TINY = "SEEDS = 2\nITERATIONS = 2\nSTEPS_PER_ITERATION = 20\n"


def parameters_cell(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    (cell,) = [c for c in notebook.cells if PARAMETERS_TAG in c.metadata.get("tags", [])]
    return cell


def outputs_of(notebook: nbformat.NotebookNode, marker: str) -> list[dict]:
    """The outputs of the one code cell whose source contains `marker`."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    return cell.outputs


def text_of(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


def test_the_committed_notebook_holds_the_outputs_of_one_complete_run_of_itself() -> None:
    """What the repository and the site show (make notebook writes it): every code cell executed once, in order, in
    one kernel, with no error; the outputs are those of the sizes its parameters cell states."""
    notebook = read_notebook()
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert notebook.metadata.kernelspec.name == "python3"  # the reader's kernel, not the one make notebook used
    sizes = dict(re.findall(r"^(\w+) = (\d+)", parameters_cell(notebook).source, flags=re.M))
    iterations = int(sizes["ITERATIONS"])
    progress = text_of(outputs_of(notebook, "run_grid("))
    assert re.findall(r"iteration (\d+)/(\d+)", progress) == [
        (str(i), str(iterations)) for i in range(1, iterations + 1)
    ]
    _the_outputs_say_what_the_notebook_shows(notebook)


def test_the_quickstart_notebook_runs(
    tmp_path: Path, shared_compile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel keeps its long compiles in the session's cache (JAX reads these settings from its environment), as
    # the test processes do: those of the grid shape test_api trained are loaded, not compiled again.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(shared_compile_cache))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(LONG_COMPILE_SECONDS))
    # run_grid's default run directory is a fresh temporary one, left for the user: here, under tmp_path.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = read_notebook()
    for cell in notebook.cells:  # as kept in the repository, but run afresh
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    parameters_cell(notebook).source = TINY
    execute(notebook, tmp_path, tmp_path / "scratch")  # raises CellExecutionError, with the cell, if any cell fails

    progress = text_of(outputs_of(notebook, "run_grid("))
    assert "iteration 1/2" in progress and "iteration 2/2" in progress
    _the_outputs_say_what_the_notebook_shows(notebook)


def _the_outputs_say_what_the_notebook_shows(notebook: nbformat.NotebookNode) -> None:
    summary = text_of(outputs_of(notebook, "result.summary["))
    assert all(name in summary for name in ("baseline", "frozen", "slow-meta"))
    (figure,) = [o for o in outputs_of(notebook, 'result.figure("headline")') if "image/png" in o.get("data", {})]
    assert figure["data"]["image/png"]
    verdict = text_of(outputs_of(notebook, "result.verdicts"))
    assert "untested" in verdict  # fewer than 20 seeds: no verdict, the effect for orientation
    assert "metrics.csv.gz" in text_of(outputs_of(notebook, "load_result("))
