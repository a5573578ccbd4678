"""A grid of conditions × seeds and its compilation.

Condition files, the layout of runs and judge slots, the schedules that group runs by
mechanism, where each run starts (origins) and its pretrained judges, the training step
that batches the engine's mechanisms over the grid, the exact diagnostics, the shards over
devices, the memory estimate, the compiled programs (executables) and their persistent
cache, and the trainer that drives them from the host.
"""
