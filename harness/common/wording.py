"""Small helpers for the words the harness prints."""

from __future__ import annotations


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 run', '2 runs' (or `words` for an irregular plural)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"
