"""coevolab's version, in one place: the package's metadata (pyproject reads it), `coevolab --version` and every run's
manifest take it from here. CHANGELOG.md and CITATION.cff name it too (tests/test_release.py holds them to it)."""

__version__ = "0.3.0"
