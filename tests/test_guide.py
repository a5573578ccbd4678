"""The guide to a mechanism in one file (and its metrics) is checked against the code it cites: the docs page
docs/tutorials/your-mechanism.md, its one copy (the README links to it).

The section runs from its heading to the next one of the same level. Every backticked file path must exist; every
backticked name must resolve: a dotted name from `harness` by importing, any other name as an attribute (or a field) of
a module the section cites, or else as a word of one of the cited files' source. Every fenced python snippet must
appear verbatim (modulo each line's leading indentation, and the comma after an entry of a tuple) in the source file
the section last cited before it.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Where the guide lives: the file and its heading.
GUIDE = ("docs/tutorials/your-mechanism.md", "# Your mechanism in one file")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
PATH = re.compile(r"[\w./-]+\.(py|toml|csv|md)")
FENCE = re.compile(r"^[ \t]*```python\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)


def section(readme: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same level (or the end)."""
    level = heading.split(" ")[0]
    lines = readme.splitlines()
    start = lines.index(heading)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(level + " ")),
        len(lines),
    )
    return "\n".join(lines[start + 1 : end])


@pytest.fixture(scope="module")
def guide() -> str:
    path, heading = GUIDE
    text = section((ROOT / path).read_text(), heading)
    assert "**Metrics**" in text  # the metric paragraph is part of the guide
    return text


def backticked(text: str) -> list[str]:
    """Inline code spans outside the fenced snippets."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def cited_paths(text: str) -> list[str]:
    return [span for span in backticked(text) if PATH.fullmatch(span)]


def module_of(path: str) -> ModuleType | None:
    """The module a cited harness source file is, imported."""
    if not (path.startswith("harness/") and path.endswith(".py")):
        return None
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def attribute(owner: object, name: str) -> object:
    """owner.name, or the named field of a dataclass, a pydantic model or a NamedTuple; raises AttributeError."""
    if hasattr(owner, name):
        return getattr(owner, name)
    fields = getattr(owner, "model_fields", None) or {}
    if dataclasses.is_dataclass(owner):
        fields = {field.name: field for field in dataclasses.fields(owner)}
    if name in fields:
        return fields[name]
    raise AttributeError(f"{owner!r} has no {name}")


def resolves(name: str, modules: list[ModuleType], sources: list[str]) -> bool:
    parts = name.split(".")
    if parts[0] == "harness":
        for split in range(len(parts), 0, -1):
            try:
                owner: object = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            try:
                for part in parts[split:]:
                    owner = attribute(owner, part)
            except AttributeError:
                return False
            return True
        return False
    for module in modules:
        try:
            owner = module
            for part in parts:
                owner = attribute(owner, part)
        except AttributeError:
            continue
        return True
    # A local name the guide quotes (a variable of a cited function): each part must be a word of a cited file.
    return all(any(re.search(rf"\b{re.escape(part)}\b", source) for source in sources) for part in parts)


def test_every_cited_file_exists(guide: str) -> None:
    paths = cited_paths(guide) + [token for span in backticked(guide) if " " in span for token in span.split()]
    missing = [path for path in paths if PATH.fullmatch(path) and not (ROOT / path).exists()]
    assert cited_paths(guide), "the guide cites no file"
    assert not missing, missing


def test_every_cited_name_exists(guide: str) -> None:
    paths = cited_paths(guide)
    modules = [module for path in paths if (module := module_of(path)) is not None]
    sources = [(ROOT / path).read_text() for path in paths if path.endswith(".py")]
    names = [span for span in backticked(guide) if IDENTIFIER.fullmatch(span) and not PATH.fullmatch(span)]
    assert {"Mechanism", "StepRow", "RunKnobs", "Network", "adam_step", "with_judge_update"} <= set(names)
    unresolved = [name for name in names if not resolves(name, modules, sources)]
    assert not unresolved, unresolved


def test_every_snippet_is_in_the_file_cited_before_it(guide: str) -> None:
    snippets = list(FENCE.finditer(guide))
    assert len(snippets) >= 4
    for snippet in snippets:
        before = [path for path in cited_paths(guide[: snippet.start()]) if path.endswith(".py")]
        assert before, f"no source file cited before the snippet:\n{snippet.group(1)}"
        source = [line.strip() for line in (ROOT / before[-1]).read_text().splitlines()]
        lines = [line.strip() for line in snippet.group(1).rstrip("\n").splitlines()]
        assert in_source(lines, source), f"not in {before[-1]}:\n{snippet.group(1)}"


def in_source(lines: list[str], source: list[str]) -> bool:
    """Whether `lines` (stripped) are consecutive lines of `source` (stripped); an entry of a tuple or a call may
    end without the comma that follows it in the source, so that the snippet is a statement of its own."""
    for start in range(len(source) - len(lines) + 1):
        window = source[start : start + len(lines)]
        if window[:-1] == lines[:-1] and window[-1] in (lines[-1], lines[-1] + ","):
            return True
    return False


def test_the_checks_catch_a_wrong_guide() -> None:
    """The checks themselves: a name, a file and a snippet that are not in the code are each caught."""
    modules = [importlib.import_module("harness.grid.batching")]
    source = (ROOT / "harness/grid/batching.py").read_text()
    assert resolves("apply_where_due", modules, [source])
    assert resolves("WorkGroup.slot_ids", modules, [source])
    assert not resolves("apply_where_overdue", modules, [source])
    assert not resolves("harness.grid.batching.apply_everywhere", modules, [source])
    assert not (ROOT / "harness/grid/no_such_file.py").exists()
    text = "`harness/grid/batching.py`\n```python\ndef apply_where_due(networks):\n```\n"
    snippet = next(FENCE.finditer(text))
    lines = [line.strip() for line in snippet.group(1).splitlines()]
    stripped = [line.strip() for line in source.splitlines()]
    assert not in_source(lines, stripped)
    assert in_source(["class WorkGroup:"], stripped)
    assert not in_source(["class WorkGroup"], stripped)  # a line is matched whole, not as a prefix


def test_the_table_of_functions_gives_each_the_arguments_the_grid_calls_it_with(guide: str) -> None:
    """The guide's table of every function the grid calls names each of the contract's hooks and row functions
    (`HOOK_ARGUMENTS`, `ROW_ARGUMENTS`) with the arguments it is called with, and no hook the contract lacks."""
    from harness.grid.contract_checks import HOOK_ARGUMENTS, ROW_ARGUMENTS

    listed: dict[str, tuple[str, ...]] = {}
    for line in guide.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith(("`", "rows: `")):
            continue
        names = re.findall(r"`([\w.]+)`", cells[0])
        arguments = [
            tuple(filter(None, map(str.strip, group.split(",")))) for group in re.findall(r"\(([^)]*)\)", cells[1])
        ]
        if len(arguments) == 1:  # one list for every function the row names
            arguments *= len(names)
        assert len(arguments) == len(names), line
        listed |= dict(zip(names, arguments, strict=True))
    expected = HOOK_ARGUMENTS | ROW_ARGUMENTS
    assert {name: listed.get(name) for name in expected} == expected
    # Beside the contract's hooks, only the functions of its other parts (metrics, tables, the report section), so a
    # row left for a hook the contract no longer has fails here.
    others = {"Metric.compute", "RunTable.compute", "RunTable.compute_measures", "MechanismReport.section"}
    assert set(listed) - set(expected) == others | {"why_identical"}
