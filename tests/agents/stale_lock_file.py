"""Broken: one writer is enforced by a lock FILE (O_CREAT | O_EXCL) that is removed only on a
clean exit. A killed process leaves it behind forever, and every later attempt refuses to start
(exit 1: "another run is in progress").

Caught by `completes`.

Everything else is good_agent.py's.
"""

import os
import sys

from good_agent import Agent


class StaleLockFile(Agent):
    def lock(self):
        lock = os.path.join(self.folder, "run.lock")
        try:  # BUG: a lock file outlives a killed owner (an flock would not)
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            sys.exit(f"another run is in progress, refusing to start ({lock} exists)")
        return lock

    def unlock(self, handle):
        os.remove(handle)  # only reached on a clean exit


if __name__ == "__main__":
    StaleLockFile.main()
