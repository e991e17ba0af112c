"""The lifecycle commands' fast parser reads every command line as argparse does, or leaves it
to argparse: never a different reading (issue 25 item 4).

``crashpoint.cli._fast.parse`` builds the namespace from the commands' own declarations without
importing argparse; for anything it does not follow (help, an error, an abbreviation, ``--``, a
value that starts with ``-``) it returns None and argparse parses. Here both read thousands of
command lines, crafted and random, and must agree wherever the fast one answers.
"""

from __future__ import annotations

import contextlib
import io
import random
from typing import Any

import pytest

from crashpoint.cli import _fast
from crashpoint.cli._parser import build_parser
from crashpoint.errors import UsageError

COMMANDS = ("start", "step", "effect", "status", "complete")
WORDS = [
    "r",
    "run-1",
    "a",
    "send",
    "",
    "-",
    "-5",
    "--",
    "-h",
    "--help",
    "--json",
    "--json=1",
    "--next",
    "--result",
    "--result=",
    "--res",
    "--key",
    "--key=k1",
    "--payload",
    '{"n": 1}',
    "--done",
    "--steps",
    "a,b",
    "--on-corrupt",
    "rollback",
    "raise",
    "--on-corrupt=oops",
    "--output",
    "--print",
    "--store",
    "--store=/s2",
    "/s",
    "start",
    "step",
    "--unknown",
    "null",
]


def _argparse(argv: list[str], command: str) -> dict[str, Any] | str:
    """What argparse makes of ``argv``: the namespace's fields, or how it refused."""
    parser = build_parser(("checkpoints", command))
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return dict(vars(parser.parse_args(argv)))
    except UsageError as exc:
        return f"usage error: {exc}"
    except SystemExit as exc:
        return f"exit {exc.code}"


def _agree(argv: list[str], command: str) -> None:
    fast = _fast.parse(argv, command)
    if fast is None:
        return  # left to argparse: nothing to compare
    assert vars(fast) == _argparse(argv, command), argv


@pytest.mark.parametrize(
    "argv",
    [
        ["checkpoints", "--store", "/s", "start", "r", "--steps", "a,b"],
        ["checkpoints", "--store=/s", "start", "r", "--steps=a,b", "--json"],
        ["checkpoints", "start", "r", "--store", "/s", "--on-corrupt", "rollback"],
        ["checkpoints", "--store", "/s", "start", "r", "--store", "/t"],  # the last one wins
        ["checkpoints", "--store", "/s", "step", "r", "a", "--result", '{"n": 1}'],
        ["checkpoints", "--store", "/s", "step", "r", "a"],
        ["checkpoints", "--store", "/s", "effect", "r", "mail", "--payload", "[1]", "--json"],
        ["checkpoints", "effect", "r", "mail", "--done", "--result", "1", "--key", "k"],
        ["checkpoints", "status", "r", "--next"],
        ["checkpoints", "status", "r", "--result", "a"],
        ["checkpoints", "complete", "r", "--output", "null", "--print"],
        ["checkpoints", "step", "r", "step"],  # a step named like the command
        ["checkpoints", "step", "r", "-"],
        ["checkpoints", "step", "", "a"],
    ],
)
def test_the_fast_parser_reads_common_command_lines_as_argparse_does(argv: list[str]) -> None:
    command = next(w for w in argv[1:] if w in COMMANDS)
    fast = _fast.parse(argv, command)
    assert fast is not None, argv  # these are the fast path's: it must answer
    assert vars(fast) == _argparse(argv, command)


@pytest.mark.parametrize(
    "argv",
    [
        ["checkpoints", "status", "r", "--help"],
        ["checkpoints", "status", "-h"],
        ["checkpoints", "status", "r", "--nex"],  # an abbreviation: argparse's rule
        ["checkpoints", "step", "r"],  # missing NAME
        ["checkpoints", "step", "r", "a", "b"],  # one too many
        ["checkpoints", "step", "r", "a", "--result"],  # no value
        ["checkpoints", "step", "r", "a", "--result", "-5"],  # a value like an option
        ["checkpoints", "start", "r", "--on-corrupt", "oops"],  # not a choice
        ["checkpoints", "start", "r", "--json=1"],  # a flag with a value
        ["checkpoints", "step", "--", "r", "a"],
        ["checkpoints", "--json", "status", "r"],  # a command's option before the command
    ],
)
def test_what_the_fast_parser_does_not_follow_is_left_to_argparse(argv: list[str]) -> None:
    command = next(w for w in argv[1:] if w in COMMANDS)
    assert _fast.parse(argv, command) is None


def test_the_fast_parser_and_argparse_agree_on_random_command_lines() -> None:
    rng = random.Random(25)
    answered = 0
    for _ in range(3000):
        command = rng.choice(COMMANDS)
        argv = ["checkpoints"]
        if rng.random() < 0.5:
            argv += ["--store", rng.choice(["/s", "-x", "start"])]
        argv.append(command)
        tail = [rng.choice(["r", "run-1", "a", "send", ""]) for _ in range(rng.randint(0, 3))]
        tail += [rng.choice(WORDS) for _ in range(rng.randint(0, 4))]
        rng.shuffle(tail)
        argv += tail
        _agree(argv, command)
        answered += _fast.parse(argv, command) is not None
    assert answered > 200  # the comparison is not vacuous (261 of 3000 answered)


def test_a_lifecycle_command_runs_through_the_fast_parser(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    assert (
        _fast.main(["checkpoints", "--store", store, "start", "r", "--steps", "a,b"], "start") == 0
    )
    assert capsys.readouterr().out == "a\n"
    assert _fast.main(["checkpoints", "--store", store, "step", "r", "a"], "step") == 0
    assert capsys.readouterr().out == "b\n"
    # what it leaves to argparse still runs: an abbreviated option
    assert _fast.main(["checkpoints", "--store", store, "status", "r", "--nex"], "status") == 0
    assert capsys.readouterr().out == "b\n"
    assert _fast.main(["checkpoints", "--store", store, "status"], "status") == 2
    assert "the following arguments are required: RUN" in capsys.readouterr().err
