"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program.

Importing the package configures nothing. A program that wants one shard per CPU core calls
`harness.grid.sharding.use_every_cpu_core()` before JAX starts (the command line and the test
suites do); without it, JAX's default single CPU device runs every grid in one shard.
"""
