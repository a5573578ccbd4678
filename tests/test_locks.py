"""The two lock files: requirements-run.lock (what `make run` installs) is requirements.lock's pins for exactly the
packages running coevolab needs, so a Python that cannot install the docs' or tests' packages still runs it."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _pins(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {_normal(name): version for name, version in pins}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_closure() -> set[str]:
    """Every distribution coevolab's own dependencies need, from the installed metadata (no extras)."""

    def applies(requirement: Requirement, extras: set[str]) -> bool:
        """Whether a dependency applies here, given the extras its dependent was asked for."""
        if requirement.marker is None:
            return True
        return any(requirement.marker.evaluate(default_environment() | {"extra": e}) for e in extras | {""})

    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), set()) for r in importlib.metadata.requires("coevolab") or []]
    todo = [(r, extras) for r, extras in todo if applies(r, extras)]
    while todo:
        requirement, _ = todo.pop()
        for extra in requirement.extras | {""}:
            if (_normal(requirement.name), extra) in seen:
                continue
            seen.add((_normal(requirement.name), extra))
            for text in importlib.metadata.requires(requirement.name) or []:
                needed = Requirement(text)
                if applies(needed, {extra} if extra else set()):
                    todo.append((needed, set()))
    return {name for name, _ in seen}


def test_run_lock_pins_what_the_full_lock_pins():
    run, full = _pins(ROOT / "requirements-run.lock"), _pins(ROOT / "requirements.lock")
    assert run, "requirements-run.lock pins nothing"
    assert {name: full.get(name) for name in run} == run


def test_run_lock_holds_exactly_what_running_needs():
    run = set(_pins(ROOT / "requirements-run.lock"))
    needed = _runtime_closure()
    assert needed - run == set(), "running needs packages the run lock lacks"
    assert run - needed == set(), "the run lock pins packages running does not need"
