"""Broken: the effect is sent without an idempotency key (the commonest bug of all).

A kill in the effect's in-doubt window (applied by the outside world, the reply lost) makes the
next attempt send it again, and with no key nothing can deduplicate it: the outside world
applies it twice. Caught by `exactly_once`, judged by content: "2 sends of the same payload,
no key".

Everything else is good_agent.py's.
"""

from good_agent import Agent

from crashpoint import probe


class KeylessEffect(Agent):
    def notify(self, results):
        probe.effect("notify", {"to": "ops", "text": results["summarise"][:40]})  # BUG: no key
        return "sent"


if __name__ == "__main__":
    KeylessEffect.main()
