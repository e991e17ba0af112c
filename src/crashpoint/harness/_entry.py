"""Kept so that replay folders written before the move keep working.

Such a folder's REPLAY line, or a golden run recorded in one, may name
``python -m crashpoint.harness._entry module:function ARG...``; the entry module is now
:mod:`crashpoint._entry` (the base layer: what runs inside every spawned agent).
"""

from crashpoint._entry import main

if __name__ == "__main__":
    main()
