"""What the pytest plugin costs a project that does not use it (issue 24, item 4).

    python benchmarks/plugin_overhead.py [--runs 15]

Writes a one-test project (``pytest.ini`` with ``filterwarnings = error``, one test that uses
no crashpoint fixture or marker) in a temporary folder and times ``python -m pytest`` in a
fresh interpreter, with the plugin and with ``-p no:crashpoint``, alternating the two so that
the machine's load falls on both alike. Prints the median wall time of each and their ratio
(the target: within 5%), and whether the run with the plugin printed any crashpoint line.
Bytecode is cached (the project's own and the installed packages'), as after a first run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _run(folder: str, *extra: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CRASHPOINT_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - t0, out.stdout + out.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each (default 15)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as folder:
        with open(os.path.join(folder, "pytest.ini"), "w") as f:
            f.write("[pytest]\nfilterwarnings = error\n")
        with open(os.path.join(folder, "test_plain.py"), "w") as f:
            f.write("def test_sum():\n    assert sum([1, 2]) == 3\n")
        _run(folder)  # warm-up: bytecode written, files in the page cache
        _run(folder, "-p", "no:crashpoint")
        with_plugin: list[float] = []
        without: list[float] = []
        lines: set[str] = set()
        for _ in range(a.runs):
            t, out = _run(folder)
            with_plugin.append(t)
            lines |= {
                ln
                for ln in out.splitlines()
                if "crashpoint" in ln and not ln.startswith(("plugins:", "rootdir:"))
            }
            without.append(_run(folder, "-p", "no:crashpoint")[0])
    w, wo = statistics.median(with_plugin), statistics.median(without)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), {a.runs} runs each")
    print(f"one unrelated test, with the plugin:        median {w * 1000:7.1f} ms")
    print(f"one unrelated test, -p no:crashpoint:       median {wo * 1000:7.1f} ms")
    print(f"ratio (with / without): {w / wo:.3f}  (target <= 1.05)")
    print(f"crashpoint lines in the output: {len(lines)}" + (f": {sorted(lines)}" if lines else ""))


if __name__ == "__main__":
    main()
