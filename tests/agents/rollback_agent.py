"""Six steps on crashpoint's Run; it logs what really runs, for the rollback tests.

    python tests/agents/rollback_agent.py STORE LOG

Each step's function appends ``ran NAME`` to LOG when it runs (not when it replays); the
``send`` and ``publish`` steps perform an ``email`` effect that appends ``effect KEY``.
Prints the run's output as JSON; exits with crashpoint's documented codes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from crashpoint.checkpoint import Store, open_run, run_main

STEPS = ["fetch", "plan", "draft", "send", "review", "publish"]


def main() -> None:
    root, log = sys.argv[1], sys.argv[2]

    def note(line: str) -> None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def deliver(payload: Any, key: str) -> str:
        note(f"effect {key}")
        return "sent"

    with open_run(Store(root), "r1", steps=STEPS) as run:
        out: dict[str, Any] = {}
        for name in STEPS:

            def body(name: str = name) -> str:
                note(f"ran {name}")
                if name in ("send", "publish"):
                    run.effect("email", {"step": name}, deliver)
                return name.upper()

            out[name] = run.step(name, body)
        run.finish(out)
    print(json.dumps(run.output, sort_keys=True), flush=True)


if __name__ == "__main__":
    run_main(main)
