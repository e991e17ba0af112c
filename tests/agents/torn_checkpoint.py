"""Broken: the checkpoint is overwritten in place - truncate, then write - with no temp file, no
fsync and no rename.

A crash inside that save routine (a fileop kill between the truncate and the write) leaves an
empty checkpoint. Its checksum still catches the damage, so every later attempt refuses to
resume (exit 65, not a crash recovery): the run never finishes. Caught by `completes`.

Everything else is good_agent.py's.
"""

import os

from good_agent import Agent


class TornCheckpoint(Agent):
    def write(self, data):
        if os.path.exists(self.path):
            os.truncate(self.path, 0)  # BUG: in place; a crash from here to the write loses all
        with open(self.path, "ab") as f:
            f.write(data)


if __name__ == "__main__":
    TornCheckpoint.main()
