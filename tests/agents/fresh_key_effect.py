"""Broken: the effect's idempotency key is fresh per attempt (a random uuid), and the agent only
records "sent" after the call returns.

A kill in the effect's in-doubt window (applied by the outside world, the reply lost) makes the
next attempt send it again under a new key, so the ledger cannot deduplicate it: the outside
world applies it twice. Caught by `exactly_once` (kill at every boundary).

Everything else is good_agent.py's.
"""

import uuid

from good_agent import Agent


class FreshKeyEffect(Agent):
    def effect_key(self):
        return f"notify-{uuid.uuid4().hex}"  # BUG: a new key per attempt; it must be stable


if __name__ == "__main__":
    FreshKeyEffect.main()
