"""Broken: the agent keeps its configuration - API key included - in its checkpoint.

The canary the harness puts in OPENAI_API_KEY ends up in state.json (and in every copy of the
state taken at a crash). Caught by `no_secret_leak`.

Everything else is good_agent.py's.
"""

import os

from good_agent import Agent


class LeaksSecret(Agent):
    def start(self, state):
        # BUG: the API key goes into the checkpoint with the rest of the configuration
        state["config"] = {"model": "gpt-4o", "api_key": os.environ.get("OPENAI_API_KEY", "")}


if __name__ == "__main__":
    LeaksSecret.main()
