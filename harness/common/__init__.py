"""Leaf helpers every layer may use: the files of a run directory (atomic writes, manifest) and wording."""
