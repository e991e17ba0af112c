"""The fast path of the ``crashpoint`` command: the lifecycle commands alone.

A shell agent runs ``crashpoint checkpoints start|step|effect|status|complete`` once per step,
each a fresh process, so these start in milliseconds: only the lifecycle's room
(:mod:`crashpoint.cli._lifecycle`) registers, nothing else is imported (no other room, no
harness module, not the session's signal handlers: SIGTERM ends the process as by default;
the journal needs no ``finally`` block), and a well-formed command line is parsed here, from
the command's own declarations, without importing argparse. Anything else (``--help``, a
missing or unknown argument, an abbreviated option, ``--``, a value that starts with ``-``)
is left to the argparse parser of that one command, for its help and its messages, so both
parse every command line alike (``tests/unit/test_cli_fast.py`` compares them).
:func:`crashpoint.cli.main` chooses this path; ``tests/contract/test_lean_lifecycle.py`` keeps
its imports few. :func:`exit_now` ends the process without the interpreter's teardown (clearing
every module, a last garbage collection: a tenth of a command's cost) once a command is done and
nothing is owed at exit.

Imports: the frame and the lifecycle's room (and, for what it leaves to argparse, the parser).
"""

from __future__ import annotations

import _thread
import atexit
import os
import sys
from types import SimpleNamespace

from crashpoint.cli import _lifecycle  # noqa: F401  (imported for the commands it registers)
from crashpoint.cli._framework import Arg, commands, groups, run

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["exit_now", "main", "parse"]

GROUP = "checkpoints"


def _dest(a: Arg) -> str:
    return str(a.kwargs.get("dest") or a.flags[0].lstrip("-").replace("-", "_"))


def parse(argv: Sequence[str], command: str) -> SimpleNamespace | None:
    """``argv`` (``checkpoints [--store DIR] COMMAND ...``) parsed as argparse parses it, from
    the command's declarations; None where this parser does not follow argparse (then argparse
    decides: help, errors, abbreviations)."""
    cmd = commands().get((GROUP, command))
    if cmd is None or not argv or argv[0] != GROUP:
        return None
    options: dict[str, Arg] = {}
    positionals: list[Arg] = []
    for a in (*groups()[GROUP].args, *cmd.args):
        if a.flags[0].startswith("-"):
            if set(a.kwargs) - {"dest", "default", "metavar", "help", "choices", "action"}:
                return None  # a kind of option this parser does not know
            if a.kwargs.get("action", "store") not in ("store", "store_true"):
                return None
            for flag in a.flags:
                options[flag] = a
        elif set(a.kwargs) - {"metavar", "help"}:
            return None  # nargs, type, choices on a positional: argparse's job
        else:
            positionals.append(a)
    values: dict[str, Any] = {}
    for a in set(options.values()):
        store_true = a.kwargs.get("action") == "store_true"
        values[_dest(a)] = a.kwargs.get("default", False if store_true else None)
    given: list[str] = []
    seen_command = False
    i = 1
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("-") or word == "-":
            if not seen_command:
                if word != command:
                    return None
                seen_command = True
            else:
                given.append(word)
            continue
        flag, eq, value = word.partition("=")
        opt = options.get(flag)
        if opt is None or (not seen_command and flag != "--store"):
            return None  # -h, --help, --, an unknown or abbreviated option: argparse's
        if opt.kwargs.get("action") == "store_true":
            if eq:
                return None  # argparse refuses a value here, with its message
            values[_dest(opt)] = True
            continue
        if not eq:
            if i >= len(argv) or argv[i].startswith("-"):
                return None  # no value, or one argparse may read as an option
            value = argv[i]
            i += 1
        choices = opt.kwargs.get("choices")
        if choices is not None and value not in choices:
            return None
        values[_dest(opt)] = value
    if not seen_command or len(given) != len(positionals):
        return None
    for a, value in zip(positionals, given, strict=True):
        values[_dest(a)] = value
    return SimpleNamespace(command=GROUP, subcommand=command, _handler=cmd.func, **values)


def main(argv: Sequence[str] | None = None, command: str | None = None) -> int:
    """Run a lifecycle command (``command``: its name, which the caller found in ``argv``);
    return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)

    def parse_args() -> Any:
        got = None if command is None else parse(args, command)
        if got is not None:
            return got
        # imported here, not above: argparse only for what the fast parser leaves to it
        from crashpoint.cli._parser import build_parser

        return build_parser(None if command is None else (GROUP, command)).parse_args(args)

    return run(parse_args, signals=False)


def exit_now(code: int) -> None:
    """End the process with exit status ``code`` now (:func:`os._exit`), without the
    interpreter's teardown, if nothing is owed at exit; else return (the caller exits as usual).

    Owed: an :mod:`atexit` callback (coverage's, a user's ``sitecustomize``), a thread still
    running, ``python -i``, output that does not flush (a closed pipe, a full disk: the
    interpreter then reports it and exits 120, as it always did). Every file a command writes is
    written with :func:`os.write` and closed (the journal's records fdatasync'ed) before it
    returns, so the teardown has nothing left to write."""
    if sys.flags.inspect or _thread._count():
        return
    ncallbacks = getattr(atexit, "_ncallbacks", None)
    if ncallbacks is None or ncallbacks():
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code & 0xFF)
