"""Ground truth without crashpoint: the MCP server dies in the middle of a tool call; can
FastMCP's client connect again and retry?

The server is FastMCP's own server over stdio (this script, run with ``--serve``), with the
job's two tools. The first ``create_ticket`` it receives makes it exit before it answers
(``os._exit``: a crash), once; every ticket and page it applies is appended to a ledger file,
keyed by the request_id. The script runs agent.py against it (the job re-enters ``async with
client:`` after a failed call and retries, three tries), with a deadline. Run it with the
Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the job gives up (every reconnect reused the dead server's session:
FastMCP <= 3.1.1, PR #3630) or is still waiting after 60 s, 0 and "ok" if it finishes with one
ticket and one page (FastMCP >= 3.2.0 starts a new server process), 2 if the job did not run
as planned.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 60.0


def serve(folder: str) -> None:
    from fastmcp import FastMCP

    app = FastMCP("incidents")
    ledger = os.path.join(folder, "ledger.jsonl")
    crashed = os.path.join(folder, "crashed")

    def apply(kind: str, key: str, reply: str) -> str:
        seen = set()
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                seen = {json.loads(line)["key"] for line in f}
        if key not in seen:
            with open(ledger, "a", encoding="utf-8") as f:
                f.write(json.dumps({"kind": kind, "key": key}) + "\n")
        return reply

    @app.tool()
    def create_ticket(title: str, severity: str = "", request_id: str = "") -> str:
        if not os.path.exists(crashed):
            open(crashed, "w").close()
            os._exit(1)  # the server dies before it answers (nothing applied)
        return apply("ticket", request_id, f"opened INC-1: {title}")

    @app.tool()
    def page_oncall(team: str, message: str, request_id: str = "") -> str:
        return apply("page", request_id, f"paged {team}")

    app.run(transport="stdio", show_banner=False)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        return 0
    with tempfile.TemporaryDirectory(prefix="fastmcp-3630-") as folder:
        server = shlex.join([sys.executable, os.path.abspath(__file__), "--serve", folder])
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", folder]
        proc = subprocess.Popen(
            [*cmd, "--mcp-stdio", server],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            crashed = os.path.exists(os.path.join(folder, "crashed"))
            if not crashed:
                print("the server never received the call: could not tell")
                return 2
            print(
                f"BUG: the server died during create_ticket and the job was still waiting "
                f"for its answer after {DEADLINE:.0f} s (the pending call_tool never ended)"
            )
            return 1
        ledger = os.path.join(folder, "ledger.jsonl")
        applied = []
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                applied = [json.loads(line)["kind"] for line in f]
        crashed = os.path.exists(os.path.join(folder, "crashed"))
        if proc.returncode != 0 and crashed and "gave up" in err:
            print(
                "BUG: the server died during create_ticket and every reconnect of the client "
                f"failed (applied {applied}): {err.strip().splitlines()[-1]}"
            )
            return 1
        if proc.returncode != 0 or sorted(applied) != ["page", "ticket"]:
            print(f"the job exited {proc.returncode}, applied {applied}: could not tell")
            print(err[-2000:], file=sys.stderr)
            return 2
        print(f"ok: the client reconnected to a new server, the job retried: {out.strip()!r}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
