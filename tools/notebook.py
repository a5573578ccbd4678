"""The quickstart notebook executed in place, so the repository and the documentation site show it with the outputs of
one real run: python -m tools.notebook (make notebook; minutes on 2 cores, most of it training the grid).

The kernel is this interpreter's (the venv's), found before any kernel the user has installed, with Jupyter's and
IPython's own directories in a scratch folder, so neither the user's profile nor their files take part.
tests/test_notebook.py executes the same notebook this way on a tiny grid, and checks that the committed outputs are
those of a complete run of the notebook as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
KERNEL = "coevolab-notebook"
PARAMETERS_TAG = "parameters"  # the cell of the grid's sizes, which the tests replace


def read_notebook(path: Path = NOTEBOOK) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


@contextlib.contextmanager
def this_interpreter_kernel(scratch: Path) -> Iterator[str]:
    """The name of a kernel spec that starts this interpreter, with Jupyter's and IPython's directories under
    `scratch`, for as long as the context lasts (the environment is restored after)."""
    spec = scratch / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    settings = {
        "JUPYTER_PATH": str(scratch / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": str(scratch / "ipython"),
    }
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield KERNEL
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute(notebook: nbformat.NotebookNode, workdir: Path, scratch: Path) -> nbformat.NotebookNode:
    """`notebook` executed cell by cell in this interpreter's kernel, in `workdir`; raises CellExecutionError (with
    the cell and its traceback) if a cell fails. No timing metadata is recorded: the outputs alone are kept."""
    with this_interpreter_kernel(scratch) as kernel:
        NotebookClient(
            notebook,
            kernel_name=kernel,
            timeout=1800,
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        ).execute()
    return notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    args = parser.parse_args()
    notebook = read_notebook(args.notebook)
    kernelspec = notebook.metadata.get("kernelspec")  # the reader's default kernel, not this scratch one
    with tempfile.TemporaryDirectory(prefix="coevolab-notebook-") as scratch:
        # The notebook's run directory (run_grid's default: a fresh temporary one) goes with the scratch folder.
        os.environ["TMPDIR"] = scratch
        execute(notebook, Path(scratch), Path(scratch))
    if kernelspec is not None:
        notebook.metadata["kernelspec"] = kernelspec
    nbformat.validate(notebook)
    nbformat.write(notebook, args.notebook)
    print(f"{args.notebook}: executed, {sum(c.cell_type == 'code' for c in notebook.cells)} code cells with outputs")


if __name__ == "__main__":
    main()
