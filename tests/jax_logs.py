"""What JAX logs while a block runs: the compiles it did."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import jax


@contextlib.contextmanager
def compile_log() -> Iterator[list[str]]:
    """Messages of JAX's compile log ("Compiling jit(f) ...") while the block runs."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield messages
    finally:
        logger.removeHandler(handler)
