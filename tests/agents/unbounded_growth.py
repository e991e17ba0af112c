"""Broken: every save also appends the whole state to history.jsonl "for debugging", and nothing
ever prunes it, so the state folder grows with every step (quadratically in the run's length).

Caught by `within_disk_budget` (Expect(max_state_bytes=...)).

Everything else is good_agent.py's.
"""

import json
import os

from good_agent import Agent


class UnboundedGrowth(Agent):
    def save(self, state):
        super().save(state)
        with open(os.path.join(self.folder, "history.jsonl"), "ab") as f:
            f.write(json.dumps(state, sort_keys=True).encode() + b"\n")  # BUG: never pruned


if __name__ == "__main__":
    UnboundedGrowth.main()
