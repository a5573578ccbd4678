"""What a mechanism's function gives back, checked against what it was given while the program is traced.

A row's function returns the network it was given, updated, and a state hook returns the state it was given: the
same structure, every leaf of the same shape and dtype. A mistake there would otherwise surface far from its cause,
as a broadcasting or loop-carry error deep inside the grid's code (or, where shapes happen to broadcast, as wrong
numbers). Checked on the traced values, so the one-line `MechanismShapeError` comes before anything compiles, naming
the mechanism, its function's file and line, and the row or hook.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine.metrics import MechanismShapeError


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


def _described(leaf: Any) -> str:
    return f"{tuple(jnp.shape(leaf))} {jnp.result_type(leaf)}"


def check_returns_like(given: Any, returned: Any, mechanism: str, where: str, function: Callable) -> None:
    """Raise `MechanismShapeError` unless `returned` has `given`'s tree structure, each leaf `given`'s shape and dtype.

    mechanism: the mechanism's name; where: the row or hook, in words ("row 'x'", "hook 'end_iteration'"); function:
    the mechanism's own function that returned it, named with its file and line.
    """
    place = f"mechanism '{mechanism}' ({where_defined(function)}; {where})"
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


def checked(function: Callable, given_at: int, mechanism: str, where: str) -> Callable:
    """`function` whose result is checked (`check_returns_like`) against its argument at position `given_at`, its
    operations traced under the mechanism's name (`jax.named_scope`: the compiled program's metadata says which
    mechanism each instruction comes from)."""

    def call(*arguments: Any) -> Any:
        with jax.named_scope(mechanism):
            returned = function(*arguments)
        check_returns_like(arguments[given_at], returned, mechanism, where, function)
        return returned

    return call
