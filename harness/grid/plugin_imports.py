"""Which modules a mechanism's file imports from outside the installed packages.

A mechanism loaded from a file is identified by that file's SHA-256: the compile cache keys its program by it, a run
directory keeps a copy of it, and `--resume` refuses a run whose file changed. A helper module the file imports from
beside it (or from anywhere outside the installed packages) is covered by none of these: an edit to it would leave
a cached program and a resumed run computing with the old code, and exit 0. So such imports are refused when the
mechanism is loaded (`harness.grid.registry.load`), found by reading the file's import statements: the standard
library, installed distributions (site-packages) and this package are the places a mechanism may import from.
Imports made at run time by a string (`importlib.import_module`) are not seen.
"""

from __future__ import annotations

import ast
import importlib.util
import site
import sys
import sysconfig
from pathlib import Path

# Where installed code lives: the standard library, site-packages (system, virtual environment, user), this package.
_INSTALLED = tuple(
    Path(p).resolve()
    for p in {
        *(sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        *getattr(site, "getsitepackages", list)(),
        getattr(site, "getusersitepackages", lambda: None)(),
        str(Path(__file__).resolve().parents[1]),  # this package (installed editable, it lives outside them)
    }
    if p
)


def _installed(path: Path) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(root) for root in _INSTALLED)


def _location(name: str) -> Path | None:
    """The file or folder a top-level module is found at; None where it is built in, frozen or not found (an import
    that will fail says so itself)."""
    if name in sys.builtin_module_names:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin not in (None, "built-in", "frozen"):
        return Path(spec.origin)
    locations = list(spec.submodule_search_locations or ())
    return Path(locations[0]) if locations else None


def outside_imports(path: Path) -> list[tuple[int, str, Path | None]]:
    """(line, module, where it is found) of each import in the file at `path` of a module outside the installed
    packages; a relative import (found beside the file) has None for where. Empty: every import is installed code."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            imported = node.module or ", ".join(alias.name for alias in node.names)
            found.append((node.lineno, "." * node.level + imported, None))
            continue
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            location = _location(name.split(".")[0])
            if location is not None and not _installed(location):
                found.append((node.lineno, name, location))
    return sorted(found, key=lambda item: item[0])
