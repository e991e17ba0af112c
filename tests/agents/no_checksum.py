"""Broken: the checkpoint has no checksum, so a flipped bit is accepted as data.

After a bit flip in state.json the agent either crashes on the damaged JSON (neither repairing
nor refusing clearly) or, when the bit lands in a result, completes silently with a different
report. Caught by `corruption_detected` (corrupt: bitflip).

Everything else is good_agent.py's.
"""

import json

from good_agent import Agent


class NoChecksum(Agent):
    def encode(self, state):
        return json.dumps(state, sort_keys=True).encode()  # BUG: no checksum...

    def decode(self, data):
        return json.loads(data)  # BUG: ...so a flipped bit is believed


if __name__ == "__main__":
    NoChecksum.main()
