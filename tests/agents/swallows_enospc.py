"""Broken: a failed checkpoint write (ENOSPC) is caught, logged and ignored; the step is reported
completed anyway and the run carries on and exits 0.

The progress past the full disk was never saved, so the next crash (disk_full, then a kill)
sends the agent back to a step it had reported completed. Caught by
`resumes_from_last_completed`. (Under disk_full alone it exits 0 with the right output: the
loss shows only at the next crash, so the family is [disk_full, kill].)

Everything else is good_agent.py's.
"""

import sys

from good_agent import Agent

from crashpoint import probe


class SwallowsEnospc(Agent):
    def complete(self, step, state):
        try:
            self.save(state)
        except OSError as exc:  # BUG: swallowed; the step is reported done all the same
            print(f"warning: checkpoint not saved: {exc}", file=sys.stderr)
        probe.step_completed(step)


if __name__ == "__main__":
    SwallowsEnospc.main()
