"""A digest mailer written the way such scripts are written: ``smtplib`` with no login (a
local relay), a plain JSON file for its progress. It does not import crashpoint and knows
nothing of the harness: its mail server is ``--smtp HOST:PORT``, as in any deployment.

For each recipient it sends one digest, then records the recipient as done (written to a temp
file, fsynced, renamed, folder fsynced). A crash after the server accepted a message and
before the agent recorded it sends that message again on restart:

* as written (no ``--fixed``), each message gets a fresh random ``Message-ID``
  (``email.utils.make_msgid()``, the usual default), so the re-sent mail is a second mail the
  recipient reads twice;
* ``--fixed`` derives the ``Message-ID`` from the run and the recipient, so the server
  recognises the re-sent message and delivers it once.

    python agent.py --state DIR --smtp HOST:PORT [--fixed]
"""

from __future__ import annotations

import argparse
import json
import os
import smtplib
import sys
from email.message import EmailMessage
from email.utils import make_msgid

RECIPIENTS = ["ada@example.org", "brian@example.org", "chen@example.org"]


def load(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            done: list[str] = json.load(f)["done"]
            return done
    except FileNotFoundError:
        return []


def save(path: str, done: list[str]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"done": done}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for progress.json")
    ap.add_argument("--smtp", required=True, metavar="HOST:PORT", help="the mail relay")
    ap.add_argument("--fixed", action="store_true", help="a Message-ID derived from the run")
    args = ap.parse_args(argv)
    host, _, port = args.smtp.rpartition(":")
    os.makedirs(args.state, exist_ok=True)
    path = os.path.join(args.state, "progress.json")
    done = load(path)
    for rcpt in RECIPIENTS:
        if rcpt in done:
            continue
        msg = EmailMessage()
        msg["From"] = "digest@example.org"
        msg["To"] = rcpt
        msg["Subject"] = "Your weekly digest"
        msg["Message-ID"] = (
            f"<digest-week-48-{rcpt.split('@')[0]}@example.org>" if args.fixed else make_msgid()
        )
        msg.set_content(f"Hello {rcpt.split('@')[0]}, here is what happened this week.\n")
        with smtplib.SMTP(host, int(port), timeout=30) as relay:  # no login: a local relay
            relay.send_message(msg)
        done.append(rcpt)
        save(path, done)
    print(json.dumps({"sent": done}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
