"""Condition files: TOML in, a validated GridSpec out.

A file has optional [run], [world], [model] and [pretrain] tables, one [conditions.NAME]
table per condition and optional [claims.NAME] tables (see `harness.inference.claims`). A knob
given as a list sweeps: one condition per value, named `NAME[knob=value]`; several lists
expand to their product, except the knobs named in `zip`, whose lists advance together.
`extends = "other.toml"` (relative to the file) starts from another file: its tables are
merged key by key, and a condition or claim of the same name replaces the base's. Every
mistake becomes a ConditionFileError naming the file, the condition and the key.
`load_grid` reads a file; `grid_from_mapping` takes the same content as a Python mapping,
validated by the same code, so its errors read the same.
"""

from __future__ import annotations

import difflib
import itertools
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.engine.architecture import ModelConfig
from harness.engine.world import WorldConfig
from harness.grid import registry
from harness.grid.contract import Mechanism
from harness.grid.knobs import Knobs, host_only, knob_fields, knob_owners
from harness.grid.overrides import Override, OverrideError, apply_overrides
from harness.grid.spec import (
    Condition,
    GridRuleError,
    GridSpec,
    MechanismSource,
    PretrainSettings,
    RunSettings,
    location,
)
from harness.inference.claims import Claim

_SECTIONS: dict[str, type[BaseModel]] = {
    "run": RunSettings,
    "world": WorldConfig,
    "model": ModelConfig,
    "pretrain": PretrainSettings,
}
_CONDITION_FIELDS = ("description", "boundary", "original_script")
_ZIP = "zip"
_MECHANISMS, _MODULES = "mechanisms", "modules"
_EXTENDS = "extends"
_NAMED_TABLES = ("conditions", "claims")  # merged by name under `extends`
_CLAIMS_SETTINGS = ("adjustment",)  # keys of [claims] itself that set every claim's field (not claim tables)


class ConditionFileError(ValueError):
    """A condition file that cannot become a grid; the message names file, condition and key."""

    def __init__(self, file: str, message: str, condition: str | None = None, key: str | None = None) -> None:
        self.file, self.condition, self.key = file, condition, key
        super().__init__(f"{', '.join([file, *location(condition, key)])}: {message}")


def _unknown_key_message(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(valid)}"
    return f"unknown key{hint}"


def validated(
    model: type[BaseModel], values: Mapping[str, Any], file: str, condition: str | None, prefix: str = ""
) -> Any:
    """Build `model` from `values`, turning the first validation problem into a ConditionFileError."""
    valid = list(model.model_fields)
    for key in values:
        if key not in model.model_fields:
            raise ConditionFileError(file, _unknown_key_message(key, valid), condition, prefix + key)
    try:
        return model(**values)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"] if not isinstance(part, int)) or None
        # A whole-model rule (no field) is blamed on the section it came from.
        located = prefix + key if key else prefix.rstrip(".") or None
        # pydantic prefixes a validator's own message with "Value error, "; the reader needs only the message.
        message = str(problem["msg"]).removeprefix("Value error, ")
        raise ConditionFileError(file, message, condition, located) from None


def _format_value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value).lower() if isinstance(value, bool) else str(value)


def _knob_problem(key: str, valid: list[str]) -> str:
    """Why `key` is not a knob of this file's grid, in words."""
    owner = knob_owners().get(key)
    if owner is not None:
        return f"a knob of mechanism '{owner}', which this file does not load: add its module to [mechanisms] modules"
    return _unknown_key_message(key, valid)


def validated_knobs(values: Mapping[str, Any], file: str, condition: str) -> Knobs:
    """`Knobs` from a condition's values, the first problem a ConditionFileError naming the knob."""
    try:
        return Knobs(**values)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"] if not isinstance(part, int)) or None
        raise ConditionFileError(file, str(problem["msg"]).removeprefix("Value error, "), condition, key) from None


def expand_condition(
    name: str, table: Mapping[str, Any], file: str, mechanisms: Sequence[Mechanism] | None = None
) -> list[Condition]:
    """One condition table -> its conditions: a list-valued knob sweeps, several lists take the product.
    `mechanisms`: the grid's (default: the built-in ones), whose knobs the table may set."""
    if not isinstance(table, Mapping):
        raise ConditionFileError(file, "a condition must be a table of knobs", name)
    chosen = mechanisms if mechanisms is not None else registry.active()
    knob_names = list(knob_fields([m.name for m in chosen]))
    extras = {k: table[k] for k in _CONDITION_FIELDS if k in table}
    knob_values = {k: v for k, v in table.items() if k not in (*_CONDITION_FIELDS, _ZIP)}
    valid = [*knob_names, *_CONDITION_FIELDS, _ZIP]
    for key in knob_values:
        if key not in knob_names:
            raise ConditionFileError(file, _knob_problem(key, valid), name, key)
    swept = [k for k, v in knob_values.items() if isinstance(v, list)]
    for key in swept:
        if not knob_values[key]:
            raise ConditionFileError(file, "a sweep needs at least one value", name, key)
    zipped = table.get(_ZIP, [])
    if not isinstance(zipped, list) or not all(isinstance(k, str) and k in swept for k in zipped):
        raise ConditionFileError(file, "zip must list knobs that are given as lists", name, _ZIP)
    if len({len(knob_values[k]) for k in zipped}) > 1:
        raise ConditionFileError(file, "zipped knobs need lists of the same length", name, _ZIP)
    # Axes of the product: each free list, plus one axis that walks the zipped lists together.
    axes = [[(k, v) for v in knob_values[k]] for k in swept if k not in zipped]
    if zipped:
        axes.append(list(zip(*([(k, v) for v in knob_values[k]] for k in zipped), strict=True)))
    conditions = []
    for combination in itertools.product(*axes):
        chosen = dict(pair for item in combination for pair in (item if isinstance(item[0], tuple) else [item]))
        values = dict(knob_values) | chosen
        combination = [chosen[k] for k in swept]
        label = (
            name
            if not swept
            else f"{name}[{','.join(f'{k}={_format_value(v)}' for k, v in zip(swept, combination, strict=True))}]"
        )
        knobs = validated_knobs(values, file, label)
        conditions.append(validated(Condition, {"name": label, "knobs": knobs, **extras}, file, label))
    return conditions


def load_mechanisms(document: Mapping[str, Any], file: str) -> tuple[MechanismSource, ...]:
    """Import and register the modules a document's [mechanisms] table names (`modules = [...]`: module names, or
    files, already made absolute by `read_document`); the mechanisms they declare, in order."""
    table = document.get(_MECHANISMS, {})
    if not isinstance(table, Mapping):
        raise ConditionFileError(file, "[mechanisms] must be a table with a list `modules`", key=_MECHANISMS)
    for key in table:
        if key != _MODULES:
            raise ConditionFileError(file, _unknown_key_message(key, [_MODULES]), key=f"{_MECHANISMS}.{key}")
    modules = table.get(_MODULES, [])
    if not isinstance(modules, list) or not all(isinstance(module, str) for module in modules):
        raise ConditionFileError(file, "modules must be a list of module names or files", key="mechanisms.modules")
    sources = []
    for module in modules:
        try:
            loaded = registry.load(module)
        except registry.MechanismError as error:
            raise ConditionFileError(file, str(error), key="mechanisms.modules") from None
        names = registry.names_in(loaded.module) or [loaded.mechanism.name]
        sources += [MechanismSource(name=n, module=module, digest=loaded.digest) for n in names]
    return tuple(dict.fromkeys(sources))


def parse_grid(document: Mapping[str, Any], file: str, name: str | None = None) -> GridSpec:
    """A parsed TOML document -> GridSpec."""
    valid_sections = [*_SECTIONS, *_NAMED_TABLES, _MECHANISMS]
    if "shapes" in document:  # harness.grid.study's tables
        raise ConditionFileError(
            file, "a study (it has [shapes]): run it with `coevolab run FILE`, or load it with harness.load_study"
        )
    for section in document:
        if section not in valid_sections:
            raise ConditionFileError(file, _unknown_key_message(section, valid_sections), key=section)
    settings = {}
    for section, model in _SECTIONS.items():
        table = document.get(section, {})
        if not isinstance(table, Mapping):
            raise ConditionFileError(file, f"[{section}] must be a table", key=section)
        settings[section] = validated(model, table, file, None, prefix=f"{section}.")
    sources = load_mechanisms(document, file)
    mechanisms = registry.active([source.name for source in sources])
    tables = document.get("conditions", {})
    if not isinstance(tables, Mapping) or not tables:
        raise ConditionFileError(file, "no conditions: add at least one [conditions.NAME] table", key="conditions")
    conditions = [c for cname, table in tables.items() for c in expand_condition(cname, table, file, mechanisms)]
    names = [c.name for c in conditions]
    for repeated in names:
        if names.count(repeated) > 1:
            raise ConditionFileError(file, "two conditions have this name (after sweep expansion)", repeated)
    claim_tables = document.get("claims", {})
    if not isinstance(claim_tables, Mapping):
        raise ConditionFileError(file, "[claims] must hold [claims.NAME] tables", key="claims")
    claims = []
    file_wide = {key: claim_tables[key] for key in _CLAIMS_SETTINGS if key in claim_tables}  # e.g. adjustment = "bh"
    for claim_name, table in claim_tables.items():
        if claim_name in _CLAIMS_SETTINGS:
            continue
        if not isinstance(table, Mapping):
            raise ConditionFileError(file, "a claim must be a table", key=f"claims.{claim_name}")
        claim = validated(Claim, {**file_wide, **table, "name": claim_name}, file, None, prefix=f"claims.{claim_name}.")
        try:
            claim.check_against(names, settings["run"].iterations)
        except ValueError as error:
            raise ConditionFileError(file, str(error), key=f"claims.{claim_name}") from None
        claims.append(claim)
    try:
        return GridSpec(
            name=name or Path(file).stem,
            mechanisms=sources,
            conditions=tuple(conditions),
            claims=tuple(claims),
            **settings,
        )
    except ValidationError as error:
        # A rule across tables (e.g. the original lab's streams with a non-default [model]): one line, located where
        # the rule says (`GridRuleError`).
        first = error.errors()[0]
        rule = first.get("ctx", {}).get("error")
        if isinstance(rule, GridRuleError):
            raise ConditionFileError(file, rule.detail, rule.condition, rule.key) from None
        raise ConditionFileError(file, str(first["msg"]).removeprefix("Value error, ")) from None


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`: settings tables merged key by key, named tables (conditions, claims) by name; the
    [mechanisms] modules of both, the base's first."""
    merged = dict(base)
    for section, table in override.items():
        if isinstance(table, Mapping) and isinstance(base.get(section), Mapping):
            merged[section] = {**base[section], **table}
        else:
            merged[section] = table
    modules = [
        module
        for document in (base, override)
        if isinstance(document.get(_MECHANISMS), Mapping)
        for module in document[_MECHANISMS].get(_MODULES, [])
    ]
    if modules:
        merged[_MECHANISMS] = {**merged[_MECHANISMS], _MODULES: list(dict.fromkeys(modules))}
    return merged


def _absolute_modules(document: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The document with each [mechanisms] module that names a file made absolute (files are relative to the
    document that names them, which `extends` would otherwise lose)."""
    table = document.get(_MECHANISMS)
    if not isinstance(table, Mapping) or not isinstance(table.get(_MODULES), list):
        return document
    modules = [
        str(registry.resolve_reference(m, directory)[1]) if isinstance(m, str) and registry.is_path(m) else m
        for m in table[_MODULES]
    ]
    return {**document, _MECHANISMS: {**table, _MODULES: modules}}


def _extended(document: Mapping[str, Any], file: str, directory: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """`document` with its `extends` chain resolved; a base file is named relative to `directory`."""
    if _EXTENDS not in document:
        return dict(document)
    document = dict(document)
    base_name = document.pop(_EXTENDS)
    if not isinstance(base_name, str):
        raise ConditionFileError(file, "extends must name a condition file", key=_EXTENDS)
    base_path = (directory / base_name).resolve()
    if base_path in seen:
        raise ConditionFileError(file, f"extends {base_name} forms a cycle", key=_EXTENDS)
    return _merged(read_document(base_path, seen), document)


def read_document(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A condition file's TOML with its `extends` chain resolved."""
    file = str(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConditionFileError(file, "no such file") from None
    except IsADirectoryError:
        raise ConditionFileError(file, "is a directory, not a condition file") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ConditionFileError(file, f"cannot read: {reason}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConditionFileError(file, f"not valid TOML: {error}") from None
    try:
        document = _absolute_modules(document, path.parent)
    except registry.MechanismError as error:
        raise ConditionFileError(file, str(error), key="mechanisms.modules") from None
    return _extended(document, file, path.parent, (*seen, path.resolve()))


def with_seeds(document: Mapping[str, Any], seeds: int | Sequence[int] | None) -> Mapping[str, Any]:
    """`document` with [run].seeds replaced by `seeds` (a count N for 0..N-1, or a list of seeds), if given."""
    if seeds is None:
        return document
    run = dict(document.get("run", {})) if isinstance(document.get("run", {}), Mapping) else {}
    run["seeds"] = seeds if isinstance(seeds, int) else list(seeds)
    return {**document, "run": run}


def load_grid(
    path: str | Path, seeds: int | Sequence[int] | None = None, overrides: Sequence[Override] = ()
) -> GridSpec:
    """Read and validate a condition file; `seeds` (a count N for 0..N-1, or a list of seeds) overrides [run].seeds,
    then each of `overrides` (`--set KEY=VALUE`, harness.grid.overrides) sets its key, all validated as the file is.

    Raises:
        ConditionFileError: the first mistake, naming the file and the key (an override's too).
    """
    path = Path(path)
    try:
        document = apply_overrides(with_seeds(read_document(path), seeds), overrides)
    except OverrideError as error:
        raise ConditionFileError(str(path), f"--set: {error}", key=error.key) from None
    return parse_grid(document, str(path))


def _as_toml_values(value: Any) -> Any:
    """Python containers as TOML gives them: mappings as dicts, tuples (and other non-string sequences) as lists, so
    a sweep written as a tuple sweeps as it would in a file."""
    if isinstance(value, Mapping):
        return {str(key): _as_toml_values(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_as_toml_values(item) for item in value]
    return value


def grid_from_mapping(
    document: Mapping[str, Any],
    name: str = "grid",
    seeds: int | Sequence[int] | None = None,
    source: str | None = None,
    relative_to: str | Path = ".",
) -> GridSpec:
    """Validate a condition file's content given as a mapping (the structure `tomllib` reads from one).

    Args:
        document: {"run": {...}, "world": {...}, "pretrain": {...}, "conditions": {NAME: {knob: value}},
            "claims": {NAME: {...}}}, every table optional but "conditions", as in a condition file. Tuples count as
            lists (a tuple of values sweeps); `extends` names a condition file relative to `relative_to`.
        name: the grid's name (a file's is its stem), for titles and run-directory names.
        seeds: overrides [run].seeds: a count N (seeds 0..N-1) or a sequence of seeds.
        source: what error messages name in place of a file (default: "grid 'NAME'").
        relative_to: the directory an `extends` file name is relative to.

    Returns:
        The validated GridSpec, exactly as `load_grid` gives for a file of the same content and name.

    Raises:
        ConditionFileError: the first mistake, naming the source, the condition and the key, worded as for a file.
    """
    if not isinstance(document, Mapping):
        raise TypeError(f"a grid is a mapping of tables (run, conditions, ...), not {type(document).__name__}")
    source = source if source is not None else f"grid '{name}'"
    try:
        values = _absolute_modules(_as_toml_values(document), Path(relative_to))
    except registry.MechanismError as error:
        raise ConditionFileError(source, str(error), key="mechanisms.modules") from None
    expanded = _with_registered_modules(_extended(values, source, Path(relative_to), ()))
    return parse_grid(with_seeds(expanded, seeds), source, name=name)


def _with_registered_modules(document: dict[str, Any]) -> dict[str, Any]:
    """The document with the module of every registered mechanism (not built in) whose knobs a condition sets added
    to its [mechanisms] modules: a mechanism registered from Python (`harness.register_mechanism`) is used by
    setting its knobs."""
    owners, catalog = knob_owners(), registry.catalog()
    tables = document.get("conditions", {})
    set_knobs = (
        {key for table in tables.values() if isinstance(table, Mapping) for key in table}
        if isinstance(tables, Mapping)
        else set()
    )
    modules = [
        catalog[owners[key]].path
        for key in set_knobs
        if key in owners and not catalog[owners[key]].builtin and catalog[owners[key]].path
    ]
    if not modules:
        return document
    return _merged(document, {_MECHANISMS: {_MODULES: sorted(set(modules))}})


def duplicate_conditions(spec: GridSpec) -> list[tuple[str, str]]:
    """(condition, earlier condition) for each condition whose resolved knobs equal an earlier one's.

    Resolved: the knobs that act on the program, the Spearman target its judges are pretrained to (an unset
    target is the grid's [pretrain] one: the same judges as setting it) and what they are pretrained on.
    """
    seen: dict[str, str] = {}
    duplicates = []
    for condition in spec.conditions:
        program = {name: value for name, value in condition.knobs if not host_only(name)}
        key = repr((sorted(program.items()), spec.judge_target(condition), spec.judge_data(condition)))
        if key in seen:
            duplicates.append((condition.name, seen[key]))
        else:
            seen[key] = condition.name
    return duplicates
