"""``python -m crashpoint.cli``: the same as the ``crashpoint`` command."""

import sys

from crashpoint.cli import main

sys.exit(main())
