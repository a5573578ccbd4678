"""An experiment: one invocation that runs a grid into a directory, with checkpoints between iterations."""

# Every experiment runs grids of the built-in mechanisms: importing them registers them (`harness.grid.registry`).
import harness.mechanisms  # noqa: F401
