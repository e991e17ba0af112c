"""Broken: nothing keeps a second process off the same run (no lock), so two resumers started at
once both work, side by side.

Caught by `single_writer` (resumers; run with AGENT_STEP_SECONDS set so that the steps take
long enough for the two to overlap).

Everything else is good_agent.py's.
"""

from good_agent import Agent


class NoLock(Agent):
    def lock(self):
        return None  # BUG: nothing keeps a second process off this run


if __name__ == "__main__":
    NoLock.main()
