"""Broken: it loads its checkpoint but always starts again from the first step (the loop forgets
to skip the completed ones).

After any kill past the first step the next attempt re-runs steps it had reported completed
(the effect is deduplicated by its key and the output is the same, so only the resume order
shows it). Caught by `resumes_from_last_completed`.

Everything else is good_agent.py's.
"""

from good_agent import STEPS, Agent


class FromStepZero(Agent):
    def todo(self, state):
        return STEPS  # BUG: should be STEPS[len(state["done"]):]


if __name__ == "__main__":
    FromStepZero.main()
