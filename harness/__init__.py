"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program."""

from harness.sharding import use_every_cpu_core

# Before anything starts JAX: one CPU device per core, so grids can run a shard per core.
use_every_cpu_core()
