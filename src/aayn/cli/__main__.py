"""`python -m aayn.cli`: the `aayn` command."""

import sys

from . import main

sys.exit(main())
