"""Broken: a step is reported completed before its result is durable (probe.step_completed, then
the checkpoint write).

A kill right after the report (before the write) loses the step, so the next attempt starts
again at a step the outside world was told was done. Caught by `resumes_from_last_completed`
(kill at every boundary: the kill before each step_completed reply lands in that gap).

Everything else is good_agent.py's.
"""

from good_agent import Agent

from crashpoint import probe


class CompletedBeforeDurable(Agent):
    def complete(self, step, state):
        probe.step_completed(step)  # BUG: reported done before it is durable
        self.save(state)


if __name__ == "__main__":
    CompletedBeforeDurable.main()
