"""An experiment: one invocation that runs a grid into a directory, with checkpoints between iterations."""
