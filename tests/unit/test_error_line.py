"""An attempt is quoted by the line of its stderr that names the error: a Node.js agent's
``TypeError: ...`` above its stack frames, a Python traceback's exception, Go's panic; never
the last stack frame or a runtime's footer. The Node.js and Python samples are real: each
test runs the runtime and reads what it printed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter

import pytest

from crashpoint.harness import Attempt, Expect, Golden, Plan
from crashpoint.harness._checker._checks import TrialFacts, check_completes
from crashpoint.harness._spec._stderr import error_line

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node (Node.js) is not installed")


def stderr_of(argv: list[str]) -> bytes:
    proc = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert proc.returncode != 0, proc
    return proc.stderr


@needs_node
@pytest.mark.parametrize(
    ("script", "want"),
    [
        ("JSON.parse('{\"steps\": [1, ')", "SyntaxError: Unexpected end of JSON input"),
        (
            "require('fs').readFileSync('/nonexistent/state.json')",
            "Error: ENOENT: no such file or directory, open '/nonexistent/state.json'",
        ),
        (
            "async function main() { throw new TypeError('state.steps is undefined') } main()",
            "TypeError: state.steps is undefined",
        ),
        (
            "throw new Error('outer', {cause: new Error('inner')})",
            "Error: outer",
        ),
        ("throw 'a plain string'", "a plain string"),
    ],
)
def test_node_errors_are_quoted_not_their_last_frame(script: str, want: str) -> None:
    assert NODE is not None
    err = stderr_of([NODE, "-e", script])
    lines = err.decode().strip().splitlines()
    assert lines[-1].startswith("Node.js v")  # what the old quote (the last line) showed
    assert error_line(err) == want


@pytest.mark.parametrize(
    ("script", "want"),
    [
        ("import json; json.loads('{\"steps\": [1, ')", "json.decoder.JSONDecodeError: Expecting"),
        (
            "try:\n    {}['step']\nexcept KeyError:\n    raise RuntimeError('state is torn')",
            "RuntimeError: state is torn",
        ),
        (
            "import sys\ntry:\n    1/0\nfinally:\n    print('cleaning up', file=sys.stderr)",
            "ZeroDivisionError: division by zero",
        ),
        ("raise SystemExit('refusing: state.json is corrupt')", "refusing: state.json is corrupt"),
    ],
)
def test_python_errors_are_quoted(script: str, want: str) -> None:
    err = stderr_of([sys.executable, "-c", script])
    assert error_line(err).startswith(want)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "panic: state file torn\n\ngoroutine 1 [running]:\nmain.main()\n"
            "\t/src/agent/main.go:12 +0x1d\nexit status 2\n",
            "panic: state file torn",
        ),
        (
            '+ jq .step state.json\njq: error (at state.json:0): Cannot index number with "step"\n',
            'jq: error (at state.json:0): Cannot index number with "step"',
        ),
        ("sh: 1: curl: not found\n", "sh: 1: curl: not found"),
        ("resuming at step 3\nall done?\n", "all done?"),
        ("", ""),
    ],
)
def test_other_conventions(text: str, want: str) -> None:
    assert error_line(text.encode()) == want


@needs_node
def test_the_completes_check_quotes_the_node_error() -> None:
    assert NODE is not None
    err = stderr_of(
        [NODE, "-e", "const s = JSON.parse('{}'); s.steps.push('fetch')  // a torn state"]
    )
    golden = Golden(["fetch"], [], Counter(), b"ok\n", 0.1)
    attempt = Attempt(1, ["node", "agent.js"], 1, None, False, 0.1, b"", err)
    facts = TrialFacts(golden, Plan(()), Expect(), [attempt], [], Counter(), "canary", [], 0)
    completes = check_completes(facts)
    assert not completes.ok
    assert "TypeError: Cannot read properties of undefined (reading 'push')" in completes.message
    assert "Node.js v" not in completes.message
