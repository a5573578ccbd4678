"""A mechanism's functions checked against the contract: what they take, when the mechanism registers, and what
they give back, against what they were given, while the program is traced.

A hook is called with a fixed list of arguments (`HOOK_ARGUMENTS`); one that cannot take them (a hook written for
another form of the contract) is refused when its mechanism registers (`call_mismatch`), instead of a traceback from
inside the grid's trace. A row's update returns the network and own state it was given, updated, and a state hook
returns the state it was given: the same structure, every leaf of the same shape and dtype. A mistake there would
otherwise surface far from its cause, as a broadcasting or loop-carry error deep inside the grid's code (or, where
shapes happen to broadcast, as wrong numbers). Checked on the traced values, so the one-line `MechanismShapeError`
comes before anything compiles, naming the mechanism, its function's file and line, and the row or hook.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine.metrics import MechanismShapeError

# The arguments each of a mechanism's functions is called with, by its field (`Mechanism`'s and `StepRow`'s
# docstrings say what each is), in order.
HOOK_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "uses": ("knobs",),
    "run_state": ("shape", "policy_row"),
    "slot_state": ("shape", "judge_row"),
    "sizes": ("knobs_of_runs", "facts"),
    "constants": ("host_runs",),
    "extra_bytes": ("shape",),
    "judge_plan": ("plan", "knobs"),
    "aggregate": ("reward", "judges"),
    "judge_update_due": ("due", "step", "own"),
    "contrast": ("share", "step", "own"),
    "reset_due": ("due", "context", "own"),
    "reward_row": ("row", "judge", "own"),
    "shape_reward": ("rewards", "batch", "own"),
    "update_policy": ("update", "batch", "own"),
    "start_iteration": ("context", "own"),
    "end_iteration": ("context", "own"),
    "after_step": ("step", "own"),
    "view": ("context",),
}
ROW_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "schedule": ("knobs", "n_outputs"),
    "update": ("value", "member", "own"),
    "due": ("member",),
    "check": ("value", "member", "own"),
    "group_size": ("knobs_of_runs", "n_outputs"),
}


def where_defined(function: Callable) -> str:
    """`file:line, in name` of a function (what a partial wraps, what a decorator wraps); its name alone where Python
    cannot tell its source."""
    target = inspect.unwrap(function)
    while isinstance(target, functools.partial):
        target = target.func
    name = getattr(target, "__qualname__", repr(target))
    try:
        return f"{inspect.getsourcefile(target)}:{target.__code__.co_firstlineno}, in {name}"
    except (TypeError, AttributeError):
        return f"in {name}"


def call_mismatch(function: Callable, arguments: tuple[str, ...], where: str) -> str | None:
    """Why `function` cannot be called with `arguments` (positional, by these names in the contract), in one line
    naming its file and line and `where` ("hook 'x'", "row 'y' due"); None where it can, or where Python cannot read
    its signature."""
    try:
        inspect.signature(function).bind(*arguments)
    except TypeError as error:
        return f"{where} ({where_defined(function)}) is called with ({', '.join(arguments)}), and {error}"
    except ValueError:  # no signature to read (a builtin)
        pass
    return None


def _described(leaf: Any) -> str:
    return f"{tuple(jnp.shape(leaf))} {jnp.result_type(leaf)}"


def _kind(value: Any) -> str:
    """An array's shape and dtype, in words; any other value's type (a tuple's length)."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return _described(value) if _is_value(value) else f"a {type(value).__name__}"


def _is_value(value: Any) -> bool:
    """Whether `value` is an array (traced, JAX's or numpy's) or a Python number."""
    return isinstance(value, bool | int | float) or (hasattr(value, "shape") and hasattr(value, "dtype"))


def check_flag(flag: Any, mechanism: str, where: str, function: Callable) -> Any:
    """Raise `MechanismShapeError` unless a row's `due` or `check` returned one bool for its member (an array of
    another shape would broadcast over the work group, acting on members it did not mean); returns the flag."""
    if not _is_value(flag) or jnp.shape(flag) != () or jnp.result_type(flag) != jnp.bool_:
        raise MechanismShapeError(
            f"mechanism '{mechanism}' ({where_defined(function)}; {where}) returns {_kind(flag)}, not one bool () "
            "for the member"
        )
    return flag


def check_returns_like(given: Any, returned: Any, mechanism: str, where: str, function: Callable) -> None:
    """Raise `MechanismShapeError` unless `returned` has `given`'s tree structure, each leaf `given`'s shape and dtype.

    mechanism: the mechanism's name; where: the row or hook, in words ("row 'x'", "hook 'end_iteration'"); function:
    the mechanism's own function that returned it, named with its file and line.
    """
    place = f"mechanism '{mechanism}' ({where_defined(function)}; {where})"
    if isinstance(given, tuple) and not (isinstance(returned, tuple) and len(returned) == len(given)):
        raise MechanismShapeError(
            f"{place} returns {_kind(returned)}, not a tuple of the {len(given)} values it was given (value and own "
            "state)"
        )
    if jax.tree.structure(returned) != jax.tree.structure(given):
        raise MechanismShapeError(
            f"{place} returns a value of another structure than it was given: {jax.tree.structure(returned)} "
            f"instead of {jax.tree.structure(given)}"
        )
    for (path, before), after in zip(
        jax.tree_util.tree_leaves_with_path(given), jax.tree.leaves(returned), strict=True
    ):
        if jnp.shape(before) != jnp.shape(after) or jnp.result_type(before) != jnp.result_type(after):
            leaf = f"'{jax.tree_util.keystr(path)}'" if path else "its value"
            raise MechanismShapeError(
                f"{place} returns {leaf} as {_described(after)}, not the {_described(before)} it was given"
            )


# How an error raised inside a mechanism's function records the place of the contract it was called at (an
# exception note, PEP 678), for `harness.grid.registry.plugin_error` to name.
PLACE_NOTE = "called by the grid as "


def noting_place(function: Callable, where: str) -> Callable:
    """`function`, whose errors carry a note naming `where` ("hook 'shape_reward'", "row 'anchor' due"): the place
    of the contract that called it, which its own traceback does not say."""

    @functools.wraps(function)
    def call(*arguments: Any) -> Any:
        try:
            return function(*arguments)
        except Exception as error:
            error.add_note(PLACE_NOTE + where)
            raise

    return call


def place_of(error: BaseException) -> str | None:
    """The innermost place of the contract an error was raised under (`noting_place`), or None."""
    places = [note.removeprefix(PLACE_NOTE) for note in getattr(error, "__notes__", ()) if note.startswith(PLACE_NOTE)]
    return places[0] if places else None


def checked(function: Callable, given_at: int | tuple[int, ...], mechanism: str, where: str) -> Callable:
    """`function` whose result is checked (`check_returns_like`) against its argument at position `given_at` (a tuple
    of positions: against the tuple of those arguments), its operations traced under the mechanism's name
    (`jax.named_scope`: the compiled program's metadata says which mechanism each instruction comes from)."""

    def call(*arguments: Any) -> Any:
        with jax.named_scope(mechanism):
            returned = noting_place(function, where)(*arguments)
        given = arguments[given_at] if isinstance(given_at, int) else tuple(arguments[i] for i in given_at)
        check_returns_like(given, returned, mechanism, where, function)
        return returned

    return call
