"""`python -m harness.cli`: the `coevolab` command."""

import sys

from harness.cli import command_line

if __name__ == "__main__":  # not when a tool imports every module of the package
    sys.exit(command_line())
