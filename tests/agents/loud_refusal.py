"""Correct, but refuses damaged state its own way: exit 1 and SQLite's words on stderr
("database disk image is malformed"), not the documented exit 65.

A clear refusal all the same: the harness recognises it by its stderr (expect.refuse_patterns)
and must not score it as a crash that lost the run's effects.

Everything else is good_agent.py's.
"""

import hashlib
import json
import sys

from good_agent import Agent


class LoudRefusal(Agent):
    def decode(self, data):
        digest, _, body = data.partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            print(
                f"sqlite3.DatabaseError: database disk image is malformed ({self.path})",
                file=sys.stderr,
            )
            sys.exit(1)
        return json.loads(body)


if __name__ == "__main__":
    LoudRefusal.main()
