"""The demo agent: a small research agent built only on crashpoint's public API.

    python -m crashpoint.agents.demo --state DIR [--topic TEXT] [--run-id ID] [--approval]
                                     [--smtp HOST:PORT] [--webhook URL] [--think SECONDS]

plan -> search a bundled corpus (tool) -> summarise with a deterministic fake LLM -> write a
report file -> send a notification (effect) -> [wait for approval] -> publish (effect).
By default both effects go through crashpoint's probe. With ``--smtp`` the notification is a
real email (``smtp_effect``: logged in with ``CRASHPOINT_SMTP_USER``/``_PASSWORD`` when set,
its Message-ID derived from the effect's key); with ``--webhook`` publishing is a real HTTP
POST (``http_effect``: the effect's key as ``Idempotency-Key``). Under the gate, point them at
the stand-in services: ``--smtp {smtp} --webhook {http}/publish``. ``--think SECONDS`` makes
the fake model take that long (as a real one does), so faults drawn at an instant (``kill: {at:
time}``, ``signal``) land inside a step's work however fast the machine is.
It prints its final output as one line of JSON, byte-identical whether or not it crashed and
resumed on the way. Exit codes: 0 done, 75 paused for approval, 77 denied (see
``crashpoint.checkpoint.EXIT_CODES``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from types import SimpleNamespace

from crashpoint.checkpoint import (
    Checkpointing,
    atomic_write,
    open_run,
    open_store,
    run_main,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator
    from typing import Any, NoReturn

#: the bundled corpus, beside this module (read with importlib.resources only when the package
#: is not a folder on disk, e.g. imported from a zip: that import costs a run ~30 ms)
_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

STEPS = ["plan", "search", "summarise", "write_report", "notify", "publish"]
STEPS_WITH_APPROVAL = [
    "plan",
    "search",
    "summarise",
    "write_report",
    "notify",
    "approve",
    "publish",
]
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "the",
        "of",
        "to",
        "in",
        "on",
        "for",
        "how",
        "why",
        "what",
        "is",
        "are",
        "do",
        "does",
        "with",
    }
)


def make_plan(topic: str) -> dict[str, Any]:
    words = [w for w in re.findall(r"[a-z]+", topic.lower()) if w not in STOPWORDS]
    return {"topic": topic, "keywords": sorted(set(words))}


def search(keywords: list[str]) -> list[dict[str, Any]]:
    """The tool: score each sentence of the bundled corpus by keyword hits."""
    hits: list[dict[str, Any]] = []
    for name, text in _corpus_documents():
        for n, line in enumerate(text.splitlines()):
            score = sum(line.lower().count(k) for k in keywords)
            if score:
                hits.append({"doc": name, "line": n, "score": score, "text": line})
    hits.sort(key=lambda h: (-h["score"], h["doc"], h["line"]))
    return hits[:5]


def _corpus_documents() -> Iterator[tuple[str, str]]:
    """The corpus's ``*.txt`` documents, by name: (name, text)."""
    if os.path.isdir(_CORPUS):
        for name in sorted(os.listdir(_CORPUS)):
            if name.endswith(".txt"):
                with open(os.path.join(_CORPUS, name), encoding="utf-8") as f:
                    yield name, f.read()
        return
    from importlib import resources  # a package not on disk (a zip): its loader reads it

    corpus = resources.files("crashpoint.agents") / "corpus"
    for doc in sorted(corpus.iterdir(), key=lambda p: p.name):
        if doc.name.endswith(".txt"):
            yield doc.name, doc.read_text(encoding="utf-8")


def fake_llm(topic: str, hits: list[dict[str, Any]], think: float = 0.0) -> str:
    """A deterministic stand-in for a language model: an extractive summary, after ``think``
    seconds."""
    if think > 0:
        time.sleep(think)
    if not hits:
        return f"Nothing in the corpus is about {topic!r}."
    return " ".join(h["text"] for h in hits[:3])


def write_report(
    folder: str, topic: str, summary: str, hits: list[dict[str, Any]]
) -> dict[str, Any]:
    body = f"# {topic}\n\n{summary}\n\n## Sources\n" + "".join(
        f"- {h['doc']}:{h['line'] + 1}\n" for h in hits
    )
    data = body.encode("utf-8")
    atomic_write(os.path.join(folder, "report.md"), data)
    return {"file": "report.md", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _parser() -> argparse.ArgumentParser:
    import argparse  # only for --help and errors (with gettext, locale, shutil: ~15 ms a start)

    ap = argparse.ArgumentParser(
        prog="python -m crashpoint.agents.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--state", required=True, help="folder for checkpoints and the report")
    ap.add_argument("--topic", default="how do agents recover from a crash")
    ap.add_argument("--run-id", default="demo")
    ap.add_argument(
        "--store",
        metavar="URL_OR_DIR",
        default=None,
        help="the checkpoint store: a folder or a postgresql:// URL (default: STATE/checkpoints)",
    )
    ap.add_argument("--approval", action="store_true", help="wait for a human before publishing")
    ap.add_argument(
        "--interval", type=int, default=0, help="group-commit every N steps instead of every step"
    )
    ap.add_argument("--smtp", metavar="HOST:PORT", help="send the notification as an email")
    ap.add_argument("--webhook", metavar="URL", help="publish by POSTing to this URL")
    ap.add_argument(
        "--think",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the fake model's thinking time (default 0)",
    )
    return ap


#: the options, as :func:`_parser` defines them: name -> (attribute, type; None for a flag)
_OPTIONS: dict[str, tuple[str, Any]] = {
    "--state": ("state", str),
    "--topic": ("topic", str),
    "--run-id": ("run_id", str),
    "--store": ("store", str),
    "--approval": ("approval", None),
    "--interval": ("interval", int),
    "--smtp": ("smtp", str),
    "--webhook": ("webhook", str),
    "--think": ("think", float),
}
_DEFAULTS: dict[str, Any] = {
    "topic": "how do agents recover from a crash",
    "run_id": "demo",
    "store": None,
    "approval": False,
    "interval": 0,
    "smtp": None,
    "webhook": None,
    "think": 0.0,
}


def _plain_args(argv: list[str]) -> SimpleNamespace | None:
    """``argv`` parsed as :func:`_parser` would, without importing argparse, when it is plain:
    each option spelled in full (``--name VALUE`` or ``--name=VALUE``), each value of its type
    (a separate one not starting with ``-``), ``--state`` given. Anything else (``--help``, an
    abbreviation, a typo, a bad value) gives None: argparse parses it, with its messages."""
    values = dict(_DEFAULTS)
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        option = _OPTIONS.get(name)
        if option is None:
            return None
        attr, kind = option
        i += 1
        if kind is None:
            if eq:
                return None
            values[attr] = True
            continue
        if not eq:
            if i == len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        try:
            values[attr] = kind(value)
        except ValueError:
            return None
    if "state" not in values:
        return None
    return SimpleNamespace(**values)


def _usage_error(message: str) -> NoReturn:
    """Exit 2 with the usage and ``message``, as argparse does."""
    _parser().error(message)


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    args: Any = _plain_args(argv) or _parser().parse_args(argv)
    if not 0 <= args.think <= 3600:
        _usage_error(f"--think {args.think}: give seconds between 0 and 3600")
    mail = webhook = None
    if args.smtp:  # the mail and HTTP effects (smtplib, email, urllib) load only when used
        from crashpoint.checkpoint import smtp_effect

        host, _, port = args.smtp.rpartition(":")
        if not host or not port.isdigit():
            _usage_error(f"--smtp {args.smtp!r}: give HOST:PORT, e.g. 127.0.0.1:2525")
        user, password = (
            os.environ.get("CRASHPOINT_SMTP_USER"),
            os.environ.get("CRASHPOINT_SMTP_PASSWORD"),
        )
        mail = smtp_effect(
            host,
            int(port),
            user=user if password else None,
            password=password if user else None,
            sender="demo-agent@example.com",
            timeout=10,
        )
    if args.webhook:
        from crashpoint.checkpoint import http_effect  # only when used: urllib, http.client

        webhook = http_effect(args.webhook, timeout=5, retries=2)

    if args.store:  # the report still goes to the state folder
        os.makedirs(args.state, mode=0o700, exist_ok=True)
    store = open_store(args.store or os.path.join(args.state, "checkpoints"), on_corrupt="rollback")
    checkpointing = Checkpointing.interval(args.interval) if args.interval else Checkpointing()
    steps = STEPS_WITH_APPROVAL if args.approval else STEPS
    with open_run(store, args.run_id, steps=steps, checkpointing=checkpointing) as run:
        plan = run.step("plan", lambda: make_plan(args.topic))
        hits = run.step("search", lambda: search(plan["keywords"]), kind="tool")
        summary = run.step("summarise", lambda: fake_llm(args.topic, hits, args.think), kind="llm")
        report = run.step(
            "write_report", lambda: write_report(args.state, args.topic, summary, hits)
        )
        note: dict[str, Any] = {
            "channel": "#research",
            "text": f"report ready: {args.topic}",
            "sha256": report["sha256"],
        }
        if mail is not None:  # the same notification, as an email
            note = {
                "to": "research@example.com",
                "subject": note["text"],
                "body": f"{note['text']}\nsha256: {report['sha256']}\n",
            }
        notified = run.step(
            "notify", lambda: run.effect("send_notification", note, mail) is not None
        )
        if args.approval:
            run.approval("approve", {"report": report["sha256"]}, reason="publish the report?")
        post = {"title": args.topic, "sha256": report["sha256"]}
        published = run.step("publish", lambda: run.effect("publish", post, webhook) is not None)
        output = run.finish(
            {
                "topic": args.topic,
                "summary": summary,
                "report": report,
                "notified": notified,
                "published": published,
                "sources": [f"{h['doc']}:{h['line'] + 1}" for h in hits],
            }
        )
    print(json.dumps(output, sort_keys=True), flush=True)


if __name__ == "__main__":
    run_main(main)
