"""A study: one condition file whose grids differ in shape (world and networks), run one program per shape.

A condition file becomes a study when it has `[shapes.NAME]` tables. Each shape is the file's grid with its `world`
and `model` tables replaced key by key by the shape's own, and optionally only some of its conditions:

    [shapes.small]                                   # the file's [world] and [model] as they are
    [shapes.large]
    world = { vocab_size = 16 }
    [shapes.large-judge]
    world = { vocab_size = 16 }
    model = { judge_embed_dim = 32, judge_hidden_dim = 64 }
    conditions = ["baseline", "frozen"]              # default: every condition of the file

Everything else (run settings, pretraining, conditions, `[claims]`) is the file's, so a shape's grid is exactly the
grid a file with that world and model would give, and its `[claims]` are judged within every shape that holds their
conditions. `[across.NAME]` tables state claims that compare shapes (`harness.inference.across_shapes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.grid.conditions import ConditionFileError, parse_grid, read_document, validated, with_seeds
from harness.grid.spec import GridSpec
from harness.inference.across_shapes import AcrossClaim

SHAPES, ACROSS = "shapes", "across"
_SHAPE_KEYS = ("world", "model", "conditions", "description")


class Shape(BaseModel):
    """One shape of a study: its name, what it changes, and its grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
    description: str = ""
    grid: GridSpec


class StudySpec(BaseModel):
    """Shapes in the file's order, and the claims that compare them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    shapes: tuple[Shape, ...] = Field(min_length=1)
    across: tuple[AcrossClaim, ...] = ()

    @field_validator("shapes")
    @classmethod
    def _unique(cls, shapes: tuple[Shape, ...]) -> tuple[Shape, ...]:
        names = [shape.name for shape in shapes]
        if len(set(names)) != len(names):
            raise ValueError(f"shape names must be unique: {names}")
        return shapes

    @model_validator(mode="after")
    def _claims_fit(self) -> StudySpec:
        conditions = {shape.name: [c.name for c in shape.grid.conditions] for shape in self.shapes}
        within = {shape.name: [c.name for c in shape.grid.claims] for shape in self.shapes}
        for claim in self.across:
            claim.check_against(conditions, within)
        return self

    def shape(self, name: str) -> Shape:
        return next(shape for shape in self.shapes if shape.name == name)


def is_study_document(document: Mapping[str, Any]) -> bool:
    return SHAPES in document


def is_study_file(path: str | Path) -> bool:
    """Whether a condition file (after `extends`) declares shapes."""
    return is_study_document(read_document(Path(path)))


def _shape_document(document: Mapping[str, Any], name: str, table: Any, file: str) -> dict[str, Any]:
    """The file's document as the grid of shape `name`."""
    where = f"{SHAPES}.{name}"
    if not isinstance(table, Mapping):
        raise ConditionFileError(file, "a shape must be a table", key=where)
    for key in table:
        if key not in _SHAPE_KEYS:
            raise ConditionFileError(file, f"unknown key; a shape sets {', '.join(_SHAPE_KEYS)}", key=f"{where}.{key}")
    grid = {key: value for key, value in document.items() if key not in (SHAPES, ACROSS)}
    for section in ("world", "model"):
        override = table.get(section, {})
        if not isinstance(override, Mapping):
            raise ConditionFileError(file, f"{section} must be a table", key=f"{where}.{section}")
        grid[section] = {**grid.get(section, {}), **override}
    return grid


def _kept_conditions(grid: GridSpec, table: Mapping[str, Any], file: str, name: str) -> GridSpec:
    """The shape's grid restricted to its `conditions` list (expanded names), keeping the claims they still answer."""
    kept = table.get("conditions")
    if kept is None:
        return grid
    where = f"{SHAPES}.{name}.conditions"
    if not isinstance(kept, Sequence) or isinstance(kept, str):
        raise ConditionFileError(file, "conditions must be a list of condition names", key=where)
    names = [condition.name for condition in grid.conditions]
    missing = [condition for condition in kept if condition not in names]
    if missing:
        raise ConditionFileError(file, f"no such condition: {', '.join(missing)}", key=where)
    return grid.only(kept)


def parse_study(document: Mapping[str, Any], file: str, name: str) -> StudySpec:
    """A parsed TOML document with [shapes.NAME] tables -> StudySpec (every shape's grid validated as a grid)."""
    tables = document.get(SHAPES)
    if not isinstance(tables, Mapping) or not tables:
        raise ConditionFileError(file, "[shapes] must hold at least one [shapes.NAME] table", key=SHAPES)
    shapes = []
    for shape_name, table in tables.items():
        grid = parse_grid(_shape_document(document, shape_name, table, file), file, name=f"{name}/{shape_name}")
        grid = _kept_conditions(grid, table, file, shape_name)
        description = str(table.get("description", "")) if isinstance(table, Mapping) else ""
        shapes.append(Shape(name=shape_name, description=description, grid=grid))
    across_tables = document.get(ACROSS, {})
    if not isinstance(across_tables, Mapping):
        raise ConditionFileError(file, "[across] must hold [across.NAME] tables", key=ACROSS)
    claims = [
        validated(AcrossClaim, {**table, "name": claim}, file, None, prefix=f"{ACROSS}.{claim}.")
        for claim, table in across_tables.items()
    ]
    try:
        return StudySpec(name=name, shapes=tuple(shapes), across=tuple(claims))
    except ValidationError as error:
        raise ConditionFileError(file, str(error.errors()[0]["msg"]).removeprefix("Value error, ")) from None


def load_study(path: str | Path, seeds: int | Sequence[int] | None = None) -> StudySpec:
    """Read and validate a study file; `seeds` (a count N for 0..N-1, or a list) overrides [run].seeds."""
    path = Path(path)
    return parse_study(with_seeds(read_document(path), seeds), str(path), path.stem)
