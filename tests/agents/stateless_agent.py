"""Keeps no state at all: reports three steps through the probe and prints a fixed line.

Not broken as such, but nothing in it can be crashed at a failpoint (it does not use the
reference library) or at a file operation (it writes no file): a campaign of those faults
against it tests nothing, and the gate must say so instead of passing.
"""

from crashpoint import probe

for step in ("fetch", "summarise", "notify"):
    probe.step_started(step)
    probe.step_completed(step)
print("done")
