"""A grid as a run directory records it: grid.json, and beside it the source of every mechanism it loads.

grid.json names each mechanism a grid loads beside the built-in ones with its module and the SHA-256 of its
source (`GridSpec.mechanisms`); `mechanisms/<name>.py` beside it is a copy of that source. So a run directory
carries the code its numbers came from: a report, a merge, a seed block or a Ray task on another machine reads
the grid by loading those copies (checked against their digests), whatever has become of the modules since.
Resuming a run checks the modules where the condition file named them instead (`check_sources`): an edited
mechanism would continue a run with other code than it started with.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.common.run_files import atomic_write_bytes, atomic_write_text
from harness.grid import registry
from harness.grid.spec import GridSpec

MECHANISMS_DIR = "mechanisms"


def source_copy(grid_file: Path, name: str) -> Path:
    """Where the copy of mechanism `name`'s source lies beside a grid.json."""
    return grid_file.parent / MECHANISMS_DIR / f"{name}.py"


def write_grid_file(grid_file: Path, spec: GridSpec) -> None:
    """Write `spec` as grid.json (atomically), after a copy of each of its mechanisms' sources beside it."""
    for source in spec.mechanisms:
        entry = registry.catalog()[source.name]
        copy = source_copy(grid_file, source.name)
        copy.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(copy, Path(entry.path).read_bytes())
    atomic_write_text(grid_file, spec.model_dump_json(indent=2) + "\n")


def load_recorded_mechanisms(document: dict, directory: Path) -> None:
    """Register each mechanism a grid document names and this process has not loaded, from its copy in
    `directory`/mechanisms/ (its digest checked first).

    Raises:
        registry.MechanismError: a copy is missing or differs from the digest recorded, or it fails to load.
    """
    for source in document.get("mechanisms", ()) if isinstance(document, dict) else ():
        name, module, digest = source.get("name"), source.get("module"), source.get("digest")
        entry = registry.catalog().get(name)
        if entry is not None and entry.digest == digest:
            continue
        copy = directory / MECHANISMS_DIR / f"{name}.py"
        if not copy.is_file():
            raise registry.MechanismError(f"mechanism '{name}' ({module}): its source is not in {copy.parent}")
        if registry.source_digest(copy) != digest:
            raise registry.MechanismError(f"mechanism '{name}': {copy} differs from the source the grid recorded")
        registry.load(str(module), path=copy)


def grid_from_json(text: str, directory: Path) -> GridSpec:
    """A grid from grid.json's text, its mechanisms loaded from their copies in `directory` where needed.

    Raises:
        ValueError: not a grid (pydantic's ValidationError), or a mechanism that cannot be loaded.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    load_recorded_mechanisms(document, directory)
    return GridSpec.model_validate(document)


def read_grid_file(grid_file: Path) -> GridSpec:
    """The grid a grid.json records, its mechanisms loaded from the copies beside it where needed."""
    return grid_from_json(grid_file.read_text(encoding="utf-8"), grid_file.parent)


def check_sources(spec: GridSpec) -> None:
    """Refuse a grid whose mechanisms' modules, where its condition file named them, now hold other code than the
    grid recorded (a module that can no longer be found is not checked: its recorded copy runs).

    Raises:
        registry.MechanismError: one line naming the mechanism, its module and both digests.
    """
    for source in spec.mechanisms:
        try:
            _, path = registry.resolve_reference(source.module)
        except registry.MechanismError:
            continue
        now = registry.source_digest(path)
        if now != source.digest:
            raise registry.MechanismError(
                f"mechanism '{source.name}' ({source.module}) has changed since this run started (sha256 "
                f"{source.digest[:12]}, now {now[:12]}): resume it with the source it started with, or start a new run"
            )
