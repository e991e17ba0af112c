"""Broken: at start it launches a background "telemetry uploader" and never stops or waits for
it, so the child outlives every attempt that exits.

Caught by `no_orphans` (the harness kills the survivor and names it). With
``LEAVE_CHILD_DETACHED=1`` the child starts a session of its own (``setsid``), so once the agent
is gone it is neither a descendant nor a session member: the harness finds it by the attempt's
``CRASHPOINT_REAP_TOKEN`` instead. Its pid goes to stderr.

Everything else is good_agent.py's.
"""

import os
import subprocess
import sys

from good_agent import Agent


class LeavesChild(Agent):
    def start(self, state):
        # BUG: the "telemetry uploader" is never stopped, waited for or reaped
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            start_new_session=os.environ.get("LEAVE_CHILD_DETACHED") == "1",
        )
        print(f"child {child.pid}", file=sys.stderr)


if __name__ == "__main__":
    LeavesChild.main()
