"""``python -m crashpoint``: the same as the ``crashpoint`` command."""

import sys

from crashpoint.cli import main

sys.exit(main())
