"""Broken: before sending the notification it parks the message in outbox.json, and removes it
once delivered. On resume, if the outbox is still there, it waits - with no deadline - for that
earlier send to finish. Its sender was killed, so it never does: the agent hangs.

Caught by `completes`, through the harness's timeout (run it with a short AgentSpec timeout).

Everything else is good_agent.py's.
"""

import json
import os
import time

from good_agent import Agent


class HangsOnResume(Agent):
    def notify(self, results):
        outbox = os.path.join(self.folder, "outbox.json")
        while os.path.exists(outbox):  # BUG: no deadline; the sender may be dead
            time.sleep(0.1)
        with open(outbox, "w") as f:
            json.dump({"to": "ops"}, f)
        sent = super().notify(results)
        os.remove(outbox)
        return sent


if __name__ == "__main__":
    HangsOnResume.main()
