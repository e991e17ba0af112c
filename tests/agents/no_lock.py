"""Broken: nothing keeps a second process off the same run (no lock), so two resumers started at
once both work, side by side.

Caught by `single_writer` (resumers): the barrier releases the two together at their first
event, so their steps and their writes to state.json overlap even when the steps are quick
(AGENT_STEP_SECONDS makes them slower still).

Everything else is good_agent.py's.
"""

from good_agent import Agent


class NoLock(Agent):
    def lock(self):
        return None  # BUG: nothing keeps a second process off this run


if __name__ == "__main__":
    NoLock.main()
