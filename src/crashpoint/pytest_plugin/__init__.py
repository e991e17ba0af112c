"""pytest plugin (entry point ``pytest11: crashpoint``); a thin adapter over the harness."""
