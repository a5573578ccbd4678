"""The package's folders are its layers: every import points down the order below, and no modules import in a circle.

Read from the source with `ast`, so an import inside a function or under TYPE_CHECKING counts as much as one at the
top of a module, and so does a string that names a module of the package (what `importlib.import_module` would be
given to reach a module without an import statement).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "harness"
# Lowest first. A module of harness/ itself (the public API) and the command line's package are the top layer.
LAYERS = (
    "common",
    "engine",
    "original",
    "inference",
    "grid",
    "rendering",
    "mechanisms",
    "report",
    "experiment",
    "<top>",
)
TOP_PACKAGES = ("cli",)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "<top>"


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The harness modules `path` imports (`from harness.x import name` counts module harness.x.name if it is one), or
    names in a string constant (an import by name)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known - {"harness"}:
            found.add(node.value)  # the bare package name is also a word of the condition files ("harness" streams)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("harness")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness") and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {module: imported_modules(path, known) - {module} for module, path in paths.items()}


def test_every_module_sits_in_a_layer_folder_or_is_the_top() -> None:
    graph = import_graph()
    top = sorted(module for module in graph if layer_of(module) == "<top>")
    assert [module for module in top if not module.startswith("harness.cli.")] == [
        "harness",
        "harness.api",
        "harness.cli",
    ]
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and not path.name.startswith("__")}
    assert folders == set(LAYERS) - {"<top>"} | set(TOP_PACKAGES)


def test_imports_only_point_down() -> None:
    upward = [
        (module, target)
        for module, targets in import_graph().items()
        for target in targets
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))
    ]
    assert upward == []


def test_only_the_mechanisms_package_imports_a_mechanism_module() -> None:
    """No grid, report or command-line code reaches into a mechanism: what it needs of one comes through the
    registry (a built-in gets nothing a lab's own mechanism could not have)."""
    reaching = sorted(
        (module, target)
        for module, targets in import_graph().items()
        if not module.startswith("harness.mechanisms")
        for target in targets
        if target.startswith("harness.mechanisms.")
    )
    assert reaching == []


def test_no_modules_import_in_a_circle() -> None:
    graph = import_graph()
    # A package's __init__ may re-export its modules; that edge is not a dependency of the package on itself.
    edges = {
        module: {target for target in targets if not target.startswith(module + ".")}
        for module, targets in graph.items()
    }
    state: dict[str, str] = {}

    def visit(module: str, path: tuple[str, ...]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                pytest.fail("import circle: " + " -> ".join((*path, module, target)))
            if target not in state:
                visit(target, (*path, module))
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, ())


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("from harness.report import tables\nfrom harness.engine.world import World\n")
    known = {"harness.report", "harness.report.tables", "harness.engine.world"}
    assert imported_modules(source, known) == {"harness.report.tables", "harness.engine.world"}
    assert LAYERS.index(layer_of("harness.report.tables")) > LAYERS.index(layer_of("harness.engine.world"))


def test_a_module_named_in_a_string_counts_as_imported(tmp_path: Path) -> None:
    # Positive control for the string rule: the way the mechanism catalog once reached its built-ins from below.
    source = tmp_path / "registry.py"
    source.write_text('import importlib\n\ndef load():\n    return importlib.import_module("harness.mechanisms")\n')
    assert imported_modules(source, {"harness.mechanisms", "harness.grid"}) == {"harness.mechanisms"}


def test_the_grid_layer_reads_built_ins_only_once_their_package_registered_them() -> None:
    # The catalog no longer imports the mechanisms' package from below: importing that package registers them. A
    # fresh interpreter that reads a grid from the grid layer alone is refused in one line naming the fix; after
    # `import harness.mechanisms` the same call reads the grid with every built-in knob.
    read = "from harness.grid.conditions import load_grid; print(len(load_grid('conditions/paper.toml').conditions))"
    root = PACKAGE.parent
    alone = subprocess.run([sys.executable, "-c", read], cwd=root, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 1
    assert alone.stderr.strip().splitlines()[-1] == (
        "harness.engine.metrics.BuiltInMechanismsMissing: the built-in mechanisms are not registered: import "
        "harness.mechanisms first (harness.api, the command line, harness.report and harness.experiment.runner "
        "import it)"
    )
    registered = subprocess.run(
        [sys.executable, "-c", f"import harness.mechanisms; {read}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert registered.returncode == 0, registered.stderr
    assert int(registered.stdout) > 10


def test_the_rendering_layer_imports_before_any_mechanism_registers() -> None:
    # The mechanisms' own report sections import the report's parts while `harness.mechanisms` registers them, so
    # those parts read only the loop's own metrics at import (`harness.engine.metrics.loop_metric`), never the
    # registry: a fresh interpreter imports them, and a built-in mechanism's metric is still refused by name there.
    parts = ", ".join(
        f"harness.rendering.{module}" for module in ("bands", "figure_parts", "markdown", "metrics_table")
    )
    check = (
        f"import {parts}; from harness.engine.metrics import loop_metric; "
        "print(harness.rendering.metrics_table.QUALITY.name, loop_metric('judge_alignment').label); "
        "loop_metric('meta_accuracy')"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["policy_quality", "judge", "alignment"]
    assert done.stderr.strip().splitlines()[-1].startswith("KeyError: \"no metric 'meta_accuracy' of the loop's own")
