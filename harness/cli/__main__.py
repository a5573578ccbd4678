"""`python -m harness.cli`: the `coevolab` command."""

import sys

from harness.cli import main

sys.exit(main())
