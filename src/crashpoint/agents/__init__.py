"""Demo agents: what the shipped scenarios, the docs and the tests run.

Layer 6 (beside the adapters): an agent here is built only on what any user's agent may import,
the reference library (:mod:`crashpoint.checkpoint`), the probe and the errors; never the
harness, the faults or pytest. :mod:`.demo` is a small research agent on the library.
"""
