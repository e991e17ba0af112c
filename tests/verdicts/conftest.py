"""The matrix's scenario files are run by test_matrix.py (one test per cell), not collected
again as scenario items by the suite; ``crashpoint run`` on one of them still runs it."""

collect_ignore_glob = ["scenarios/*.scenario.yaml"]
