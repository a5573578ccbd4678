"""examples/quickstart.ipynb, executed in a kernel of this interpreter on a tiny grid."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.compile_cache_settings import LONG_COMPILE_SECONDS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
KERNEL = "coevolab-tests"
# Replaces the notebook's cell tagged "parameters": a tiny grid of the shape of tests/test_api.py's (its conditions,
# 2 seeds, 20 steps per iteration), so the kernel loads the programs that file compiled from the session's cache.
TINY = "SEEDS = 2\nITERATIONS = 2\nSTEPS_PER_ITERATION = 20\n"


def read_notebook() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def test_the_notebook_is_kept_without_outputs() -> None:
    notebook = read_notebook()
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source


@pytest.fixture
def this_interpreter_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernel spec that starts this interpreter (the venv's), found before any kernel the user has installed; and
    Jupyter's and IPython's own directories in tmp_path, so neither the user's profile nor their files take part."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return KERNEL


def outputs_of(notebook: nbformat.NotebookNode, marker: str) -> list[dict]:
    """The outputs of the one code cell whose source contains `marker`."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    return cell.outputs


def text_of(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


def test_the_quickstart_notebook_runs(
    this_interpreter_kernel: str, tmp_path: Path, shared_compile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel keeps its long compiles in the session's cache (JAX reads these settings from its environment), as
    # the test processes do: those of the grid shape test_api trained are loaded, not compiled again.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(shared_compile_cache))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(LONG_COMPILE_SECONDS))
    # run_grid's default run directory is a fresh temporary one, left for the user: here, under tmp_path.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = read_notebook()
    (parameters,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    parameters.source = TINY
    NotebookClient(
        notebook, kernel_name=this_interpreter_kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails

    progress = text_of(outputs_of(notebook, "run_grid("))
    assert "iteration 1/2" in progress and "iteration 2/2" in progress
    summary = text_of(outputs_of(notebook, "result.summary["))
    assert all(name in summary for name in ("baseline", "frozen", "slow-meta"))
    (figure,) = [o for o in outputs_of(notebook, 'result.figure("headline")') if "image/png" in o.get("data", {})]
    assert figure["data"]["image/png"]
    verdict = text_of(outputs_of(notebook, "result.verdicts"))
    assert "untested" in verdict  # 2 seeds: no verdict, the effect for orientation
    assert "metrics.csv" in text_of(outputs_of(notebook, "load_result("))
