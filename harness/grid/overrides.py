"""Knob overrides from the command line: `--set KEY=VALUE`, applied to a condition file's document before it is
validated, so a value set here is checked, worded and recorded (grid.json) exactly as one written in the file.

KEY is a dotted path into the document: `TABLE.KEY` sets a key of a settings table (`run.seeds`, `world.q_star`,
`pretrain.steps`, `model.hidden`: the tables and keys a condition file takes, checked as the file's are),
`conditions.NAME.KNOB` one condition's knob (NAME as the file names it, before sweep expansion), `conditions.*.KNOB`
every condition's. VALUE is read as a TOML value (`5`, `0.3`, `true`, `[1, 2]`, `"text"`); a
bare word that is not one (`rugged`) is the string itself.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from harness.grid.knobs import Knobs

if TYPE_CHECKING:
    from harness.grid.spec import GridSpec

CONDITIONS = "conditions"
EVERY_CONDITION = "*"


class OverrideError(ValueError):
    """An override that cannot apply: `key` is the KEY it names, the message says why (one line)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(frozen=True)
class Override:
    """One `--set KEY=VALUE`: where it points (the table's path, then the key) and the value, as TOML reads it."""

    key: str
    table: tuple[str, ...]
    name: str
    value: Any


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: the string as written


def _close(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else f"; one of: {', '.join(choices)}"


def parse_override(text: str) -> Override:
    """`KEY=VALUE` as an Override.

    Raises:
        OverrideError: no `=`, an empty key or value, or a KEY that names no settings table's key or condition's knob.
    """
    key, equals, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not equals or not key or not value:
        raise OverrideError(text, "expected KEY=VALUE, e.g. run.seeds=20 or conditions.baseline.KNOB=VALUE")
    parts = key.split(".")
    if parts[0] == CONDITIONS:
        if len(parts) >= 3 and parts[-1] and all(parts[1:-1]):
            return Override(key, (CONDITIONS, ".".join(parts[1:-1])), parts[-1], _value(value))
        raise OverrideError(key, "expected conditions.NAME.KNOB (or conditions.*.KNOB)")
    if len(parts) == 2 and all(parts):
        return Override(key, (parts[0],), parts[1], _value(value))  # the table's name is checked with the file's
    raise OverrideError(key, "expected TABLE.KEY (run.seeds, world.q_star, ...) or conditions.NAME.KNOB")


def apply_overrides(document: Mapping[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """`document` (a condition file's tables, as `tomllib` reads them) with each override set, in order; validation
    of the values is the document's own (`harness.grid.conditions.parse_grid`).

    Raises:
        OverrideError: a condition the document does not define (with the closest name), or a table it holds that
            is not a table.
    """
    result = {section: dict(table) if isinstance(table, Mapping) else table for section, table in document.items()}
    for override in overrides:
        section = override.table[0]
        table = result.setdefault(section, {})
        if not isinstance(table, dict):
            raise OverrideError(override.key, f"[{section}] of the file is not a table")
        if section != CONDITIONS:
            table[override.name] = override.value
            continue
        condition = override.table[1]
        names = [name for name in table if isinstance(table[name], Mapping)]
        if condition != EVERY_CONDITION and condition not in names:
            raise OverrideError(override.key, f"the file defines no condition '{condition}'{_close(condition, names)}")
        for name in names if condition == EVERY_CONDITION else [condition]:
            table[name] = {**table[name], override.name: override.value}
    return result


def changes(spec: GridSpec, overrides: Sequence[Override]) -> list[str]:
    """The overrides that would change `spec` (a run's grid, as grid.json records it), as `KEY: now → set`; those
    that set what the grid already has are no change. A value that does not validate counts as a change.

    A condition named in an override is matched by the file's name for it: the grid's condition of that name, or
    every condition a sweep expanded from it (`NAME[knob=value]`)."""
    changed = []
    for override in overrides:
        if override.table[0] != CONDITIONS:
            current = getattr(spec, override.table[0], None)
            if not isinstance(current, BaseModel):
                changed.append(f"{override.key}: not a setting of the grid")
                continue
            try:
                updated = type(current).model_validate({**current.model_dump(), override.name: override.value})
            except ValidationError:
                updated = None
            if updated != current:
                changed.append(f"{override.key}: {getattr(current, override.name, None)!r} → {override.value!r}")
            continue
        named = override.table[1]
        for condition in spec.conditions:
            if named != EVERY_CONDITION and condition.name != named and not condition.name.startswith(f"{named}["):
                continue
            try:
                updated = Knobs(**{**condition.knobs.model_dump(), override.name: override.value})
            except ValidationError:
                updated = None
            if updated != condition.knobs:
                now = getattr(condition.knobs, override.name, None)
                changed.append(f"{override.key} ({condition.name}): {now!r} → {override.value!r}")
    return changed
