"""The original lab's random streams, so that its published runs serve as run-for-run oracles.

Sits just above the engine: it draws the engine's initial networks and keys the way the
original code does. Its one-run-at-a-time loop, a test oracle, lives in tests/original_loop.py.
"""
