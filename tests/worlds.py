"""The world of the test grids whose checks hold in any world (what a knob, a mechanism or a split does).

Each position of a sequence is a step of the networks written out in the compiled program, so a world of two
positions compiles in about two thirds of the time of the default four (the smoke grid, cold: 7.3 against 11.1 s).
Its 64 outputs keep distributions easy to tell apart and leave meta-correction pairs to hold out. Tests compared with
the golden metrics or the original lab keep the default world; files with worlds of other sizes say why beside them.
"""

from __future__ import annotations

TWO_POSITIONS = {"vocab_size": 8, "seq_len": 2}
