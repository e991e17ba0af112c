"""A notification command for the tests: append stdin to FILE, then exit with CODE (default 0).

python tests/agents/notify_hook.py FILE [CODE]
"""

import sys

with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(sys.stdin.read())
if len(sys.argv) > 2:
    print("hook refused on purpose", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
