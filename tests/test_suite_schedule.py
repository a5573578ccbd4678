"""The suite's schedule (tests/conftest.py) names test files that exist: a renamed or misspelt file would silently
drop out of the longest-first order or its shared unit, and the suite would run longer without failing."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST, SHARED_GRID_FILES

TESTS = Path(__file__).resolve().parent


def test_every_scheduled_file_exists_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in (*LONGEST_FIRST, *SHARED_GRID_FILES) if not (TESTS / name).is_file()]
    assert missing == []
