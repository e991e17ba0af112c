"""The harness's specification: scenarios, fault families, plans (no I/O, no processes)."""
