"""An FAQ answerer with the OpenAI SDK that keeps its conversation in SQLite.

For each question it asks the model, stores the answer in the database (committed, WAL mode,
``synchronous=FULL``) as soon as it arrives, then POSTs it to ``{http}/answers`` with an
Idempotency-Key from the run and the question, and marks it posted. A restart answers from the
database: it never asks the model a question it already has an answer to.

Planted bugs (``--bug``): ``no_save_reply`` (the answer is stored only together with its
"posted" mark, after the POST: a restart asks the model again), ``keyless`` (no key).

    python openai_memory.py --state DIR --http URL [--bug NAME]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys

import httpx
from openai import OpenAI

QUESTIONS = ["how do I reset my password?", "where is my invoice?", "can I export my data?"]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--bug", choices=("no_save_reply", "keyless"), default=None)
    args = ap.parse_args()
    run = os.environ.get("CRASHPOINT_RUN_ID", "faq-1")
    db = sqlite3.connect(os.path.join(args.state, "memory.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS answers (q INTEGER PRIMARY KEY, text TEXT, posted INTEGER)"
    )
    model = OpenAI(max_retries=2)
    with httpx.Client(timeout=5) as web:
        for n, question in enumerate(QUESTIONS):
            row = db.execute("SELECT text, posted FROM answers WHERE q = ?", (n,)).fetchone()
            if row and row[1]:
                continue
            if row:
                answer = row[0]
            else:
                reply = model.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
                )
                answer = reply.choices[0].message.content or ""
                if args.bug != "no_save_reply":
                    db.execute("INSERT INTO answers VALUES (?, ?, 0)", (n, answer))
            headers = {} if args.bug == "keyless" else {"Idempotency-Key": f"{run}:answer:{n}"}
            r = web.post(f"{args.http}/answers", json={"q": n, "answer": answer}, headers=headers)
            r.raise_for_status()
            db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, 1)", (n, answer))
    for (text,) in db.execute("SELECT text FROM answers ORDER BY q"):
        print(text[:40])
    return 0


if __name__ == "__main__":
    sys.exit(main())
