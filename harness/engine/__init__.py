"""The engine: one run and one judge, traced.

The world (outputs and q*), the networks, their flat parameter rows and the training state,
the random streams, the knobs of one condition, every mechanism as a function of one run or
one judge, and the exact metrics of one run. Nothing here knows that a grid exists; the grid
layer batches these functions. Imports nothing from the layers above.
"""
