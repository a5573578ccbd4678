"""A condition's knobs: flat by name, as a condition file writes them, each validated by the mechanism that owns it.

Every mechanism declares its knobs as a pydantic model of its own (`harness.grid.contract.Mechanism.knobs`), which
registering the mechanism registers here (`register_knobs`); `Knobs` holds one instance of each, so the knobs of
mechanisms registered at any time validate with the same code and errors. Inside the compiled program a grid's
knobs are `RunKnobs`: one array per knob the program reads, with one entry per run, so grids that differ only in
knob values share one compiled executable.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic.fields import FieldInfo
from pydantic_core import core_schema

from harness.engine.metrics import require_built_ins

# A knob whose field has json_schema_extra[HOST_ONLY] = True acts on the host only, before the compiled program runs
# (e.g. how far its judges are pretrained). It is kept out of `RunKnobs`: an unused input would still be an argument
# of every executable, and a knob that may be None has no array value of its own.
HOST_ONLY = "host_only"
# What a knob that counts something counts: its field's json_schema_extra[UNIT] (see `knob_unit`).
UNIT = "unit"
INNER_STEPS = "inner policy steps"
OUTER_ITERATIONS = "outer iterations"
# The part a knob plays in a study's comparisons (harness.report.study_roles): its field's json_schema_extra[STUDY_ROLE]
# (see `knobs_with_role`). A condition that differs from the study's base only in a PERFECT_PROXY knob being set is
# rewarded by q* itself; in a NOISY_PROXY knob, by q* plus random errors as aligned with q* as its judges;
# conditions that differ from the base only in DATA_SIZE knobs were pretrained on datasets of other sizes.
STUDY_ROLE = "study_role"
PERFECT_PROXY = "perfect proxy"
NOISY_PROXY = "noisy proxy"
DATA_SIZE = "pretraining data size"


class _KnobModel(NamedTuple):
    model: type[BaseModel]
    builtin: bool


# Every registered mechanism's knob model, by mechanism name, in registration order.
_MODELS: dict[str, _KnobModel] = {}


class _KnobTables(NamedTuple):
    """Every registered knob -> its field, and -> the name of its mechanism, in mechanism order."""

    fields: dict[str, FieldInfo]
    owners: dict[str, str]


def register_knobs(mechanism: str, model: type[BaseModel], builtin: bool) -> None:
    """Declare `mechanism`'s knobs (as registering the mechanism does; `harness.grid.registry` checks clashes)."""
    _MODELS[mechanism] = _KnobModel(model, builtin)
    _tables.cache_clear()


def unregister_knobs(mechanism: str) -> None:
    _MODELS.pop(mechanism, None)
    _tables.cache_clear()


def _models() -> dict[str, _KnobModel]:
    # The built-in mechanisms register their knobs when `harness.mechanisms` is imported (the layer above this one).
    require_built_ins()
    return _MODELS


@functools.cache
def _tables() -> _KnobTables:
    """The knob tables, made once after each change to the registered models: a grid's layout reads a knob's field
    for every run and knob (35,000 reads for a 600-run grid), and rebuilding them on each read was most of its time."""
    models = _models()
    return _KnobTables(
        fields={knob: field for entry in models.values() for knob, field in entry.model.model_fields.items()},
        owners={knob: name for name, entry in models.items() for knob in entry.model.model_fields},
    )


def knob_fields(mechanisms: Sequence[str] | None = None) -> dict[str, FieldInfo]:
    """Every knob of the named mechanisms (default: every registered one), in mechanism order: name -> its field."""
    fields, owners = _tables()
    return {knob: field for knob, field in fields.items() if mechanisms is None or owners[knob] in mechanisms}


def knob_owners() -> dict[str, str]:
    """Every registered knob -> the name of the mechanism that declares it."""
    return dict(_tables().owners)


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def field_host_only(field: FieldInfo) -> bool:
    """Whether a knob's field marks it host-only (`HOST_ONLY`)."""
    return bool(_extra(field).get(HOST_ONLY, False))


def field_choices(field: FieldInfo) -> tuple[str, ...]:
    """The values of a categorical knob's field (a Literal of strings); () for other knobs."""
    return typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else ()


def host_only(name: str) -> bool:
    """Whether a knob acts on the host only (see HOST_ONLY), and so has no array in `RunKnobs`."""
    return field_host_only(_tables().fields[name])


def knob_unit(name: str) -> str | None:
    """What a counting knob counts (INNER_STEPS or OUTER_ITERATIONS); None for a knob that counts nothing."""
    return _extra(_tables().fields[name]).get(UNIT)


def knobs_with_role(role: str) -> tuple[str, ...]:
    """The registered knobs whose field declares `role` (`STUDY_ROLE`), in mechanism order."""
    return tuple(name for name, field in knob_fields().items() if _extra(field).get(STUDY_ROLE) == role)


def choices(name: str) -> tuple[str, ...]:
    """The values of a categorical knob, in the order of their codes in `RunKnobs`; () for other knobs."""
    return field_choices(_tables().fields[name])


def program_knobs(mechanisms: Sequence[str] | None = None) -> tuple[str, ...]:
    """The knobs of the named mechanisms the compiled program reads (all but host-only ones), in mechanism order."""
    return tuple(name for name, field in knob_fields(mechanisms).items() if not field_host_only(field))


class Knobs:
    """One condition's knobs: `Knobs(judge_update_every=5, anchor_fraction=0.1)`; unset knobs take their defaults.

    A built-in mechanism's knobs are always present; another mechanism's only where one of its knobs is set (so the
    knobs of a grid that does not use a lab's mechanism read, and serialise, the same with or without it loaded).
    Read a knob as an attribute (`knobs.anchor_fraction`), a mechanism's knobs as its model (`knobs.of("anchor")`).
    Immutable and hashable; equal where every knob is equal.

    Raises:
        ValueError: a knob no registered mechanism declares (pydantic's ValidationError, from the owning
            mechanism's model, for a value it refuses).
    """

    __slots__ = ("_parts",)
    _parts: dict[str, BaseModel]

    def __init__(self, **values: Any) -> None:
        owners = knob_owners()
        unknown = [name for name in values if name not in owners]
        if unknown:
            raise UnknownKnob(unknown[0])
        parts: dict[str, BaseModel] = {}
        for name, entry in _models().items():
            given = {key: value for key, value in values.items() if owners[key] == name}
            if given or entry.builtin:
                parts[name] = entry.model(**given)
        object.__setattr__(self, "_parts", parts)

    def __getattr__(self, name: str) -> Any:
        owner = _tables().owners.get(name)
        if owner is None:
            raise AttributeError(f"no knob {name!r}")
        return getattr(self.of(owner), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Knobs are immutable; use model_copy(update={...})")

    def of(self, mechanism: str) -> BaseModel:
        """The knobs of `mechanism`, as its own model (its defaults where none of them is set here)."""
        if mechanism in self._parts:
            return self._parts[mechanism]
        if mechanism not in _models():
            raise KeyError(f"no mechanism '{mechanism}' with knobs is registered")
        return _models()[mechanism].model()

    def mechanisms(self) -> list[str]:
        """The mechanisms whose knobs are held here (every built-in one, and any other whose knob is set)."""
        return list(self._parts)

    def model_dump(self) -> dict[str, Any]:
        """Every knob held, by name, in mechanism order (what grid.json records of a condition)."""
        return {name: value for part in self._parts.values() for name, value in part.model_dump().items()}

    def model_copy(self, update: Mapping[str, Any] | None = None) -> Knobs:
        """These knobs with `update`'s values (validated as any knob is)."""
        return Knobs(**(self._set() | dict(update or {})))

    def _set(self) -> dict[str, Any]:
        """The knobs set away from their defaults, and every knob of a mechanism that is not built in."""
        values: dict[str, Any] = {}
        for name, part in self._parts.items():
            values |= part.model_dump(exclude_defaults=_models()[name].builtin)
        return values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Knobs) and self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash(tuple(self.model_dump().items()))

    def __repr__(self) -> str:
        return f"Knobs({', '.join(f'{name}={value!r}' for name, value in self._set().items())})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _knobs_of, (self._set(),)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.model_dump().items())

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """Validated from a mapping of knobs (or taken as is), serialised as `model_dump`."""

        def validate(value: Any) -> Knobs:
            if isinstance(value, Knobs):
                return value
            if not isinstance(value, Mapping):
                raise ValueError(f"knobs are a table of knob values, not {type(value).__name__}")
            return cls(**value)

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(lambda knobs: knobs.model_dump())
        )


def _knobs_of(values: dict[str, Any]) -> Knobs:
    """Knobs from the values `Knobs._set` gives (how a pickled `Knobs` is rebuilt)."""
    return Knobs(**values)


class UnknownKnob(ValueError):
    """A knob that no registered mechanism declares."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown knob '{name}'")


@jax.tree_util.register_pytree_with_keys_class
class RunKnobs:
    """The knobs the compiled program reads, as arrays with a leading run axis: each float32, int32 or bool (R,),
    one entry per run (a scalar inside a function of one run); categorical knobs are int32 codes
    (`choices`). Read a knob as an attribute (`knobs.anchor_fraction`). A pytree whose leaves are the knobs
    in mechanism order."""

    __slots__ = ("_arrays",)
    _arrays: dict[str, Any]

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_arrays", dict(arrays))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._arrays[name]
        except KeyError:
            raise AttributeError(f"no program knob {name!r}; the grid's program reads {list(self._arrays)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RunKnobs are immutable")

    def replace(self, **arrays: Any) -> RunKnobs:
        """These knobs with the named arrays replaced."""
        unknown = set(arrays) - set(self._arrays)
        if unknown:
            raise AttributeError(f"no program knobs {sorted(unknown)}")
        return RunKnobs({**self._arrays, **arrays})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._arrays)

    def tree_flatten_with_keys(self) -> tuple[list[tuple[Any, Any]], tuple[str, ...]]:
        return [(jax.tree_util.GetAttrKey(name), value) for name, value in self._arrays.items()], self.names

    @classmethod
    def tree_unflatten(cls, names: tuple[str, ...], leaves: Sequence[Any]) -> RunKnobs:
        return cls(dict(zip(names, leaves, strict=True)))

    def __repr__(self) -> str:
        return f"RunKnobs({', '.join(self._arrays)})"


def _array_dtype(name: str, default: Any) -> Any:
    """A knob's dtype inside the program: booleans, integers and floats as such, categories as int32 codes."""
    if choices(name):
        return jnp.int32
    return {bool: jnp.bool_, int: jnp.int32, float: jnp.float32}[type(default)]


def _codes(name: str, values: list[object]) -> list[object]:
    """A knob's values as they enter the program: a category's code (its place in `choices`), others as they are."""
    categories = choices(name)
    return [categories.index(value) for value in values] if categories else values


def stack_knobs(knobs: Sequence[Knobs], mechanisms: Sequence[str]) -> RunKnobs:
    """`RunKnobs` of the program knobs of the named mechanisms, one entry per run, in run order."""
    fields = knob_fields(mechanisms)
    arrays = {
        name: jnp.asarray(_codes(name, [getattr(k, name) for k in knobs]), _array_dtype(name, fields[name].default))
        for name in program_knobs(mechanisms)
    }
    chex.assert_equal_shape(list(arrays.values()))
    return RunKnobs(arrays)


def knob_codes(knobs: RunKnobs) -> dict[str, np.ndarray]:
    """The program knobs as host arrays, by name (for the host side: tables, tests)."""
    return {name: np.asarray(getattr(knobs, name)) for name in knobs.names}
