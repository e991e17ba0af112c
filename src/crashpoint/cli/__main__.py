"""``python -m crashpoint.cli``: the same as the ``crashpoint`` command."""

import sys

from crashpoint.cli import console_main

sys.exit(console_main())
