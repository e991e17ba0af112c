"""The demo agent starts lean without changing what it does: its plain command lines are parsed
without argparse into exactly what argparse gives, anything else is left to argparse, and its
corpus reads the same from its folder as through importlib.resources (a package not on disk).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashpoint.agents import demo

PLAIN = [
    ["--state", "s"],
    ["--state=s"],
    ["--state", "s", "--state", "t"],  # the last wins, as in argparse
    ["--state", "s", "--topic", "torn tails", "--run-id", "r-1", "--approval"],
    ["--state", "s", "--interval", "3", "--think", "0.25", "--store", "postgresql://x/y"],
    ["--state", "s", "--smtp", "127.0.0.1:2525", "--webhook", "http://127.0.0.1:1/p"],
    ["--topic=-dashed", "--state", "s", "--interval=-2", "--think=1e1"],
    ["--state", ""],
]
#: what the fast path leaves to argparse (help, abbreviations, typos, bad or missing values)
OTHER = [
    [],
    ["--help"],
    ["-h"],
    ["--stat", "s"],
    ["--state"],
    ["--state", "-s"],
    ["--state", "s", "--bogus"],
    ["--state", "s", "positional"],
    ["--state", "s", "--interval", "two"],
    ["--state", "s", "--think", "x"],
    ["--state", "s", "--approval=yes"],
    ["--topic", "t"],
    ["--state", "s", "--"],
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_command_line_parses_as_argparse_parses_it(argv: list[str]) -> None:
    fast = demo._plain_args(argv)
    assert fast is not None
    assert vars(fast) == vars(demo._parser().parse_args(argv))


@pytest.mark.parametrize("argv", OTHER, ids=" ".join)
def test_anything_else_is_left_to_argparse(argv: list[str]) -> None:
    assert demo._plain_args(argv) is None


def test_a_bad_value_gets_argparses_usage_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--state", "s", "--think", "4000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m crashpoint.agents.demo")
    assert "error: --think 4000.0: give seconds between 0 and 3600" in err


def test_the_corpus_reads_the_same_through_importlib_resources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keywords = ["agents", "crash", "recover"]
    on_disk = list(demo._corpus_documents())
    assert len(on_disk) >= 3
    assert all(name.endswith(".txt") for name, _ in on_disk)
    hits = demo.search(keywords)
    monkeypatch.setattr(demo, "_CORPUS", str(tmp_path / "not-a-folder"))
    assert list(demo._corpus_documents()) == on_disk
    assert demo.search(keywords) == hits
