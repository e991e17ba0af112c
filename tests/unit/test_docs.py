"""The docs stay true: their Python examples run, their commands work, and the CLI reference
names every command and option the parser has."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashpoint.cli import main
from crashpoint.cli._main import parser as build_parser  # the whole command line, every room

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(page: str, lang: str) -> list[str]:
    """The bodies of ``lang`` code blocks; a block fenced ```` ```python no-run ```` is skipped."""
    return [
        body
        for tag, info, body in FENCE.findall((DOCS / page).read_text())
        if tag == lang and "no-run" not in info.split()
    ]


@pytest.mark.parametrize("page", PAGES)
def test_python_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples write relative folders such as demo-store/
    for n, code in enumerate(blocks(page, "python"), 1):
        exec(  # noqa: S102 - our docs
            compile(code, f"docs/{page} (python block {n})", "exec"),
            {"__name__": "__docs__"},
        )


def test_cli_examples_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRASHPOINT_STORE", raising=False)
    for code in blocks("reference/cli.md", "python"):
        exec(code, {"__name__": "__docs__"})  # noqa: S102 - builds the store the examples use
    commands = [
        line[2:]
        for body in blocks("reference/cli.md", "console")
        for line in body.splitlines()
        if line.startswith("$ crashpoint ")
    ]
    assert len(commands) >= 5
    for line in commands:
        argv = shlex.split(line)[1:]
        assert main(argv) == 0, (line, capsys.readouterr())
    capsys.readouterr()


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:  # argparse has no public way to walk its tree
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), action
                yield from _parsers(sub, (*path, name))
        else:
            yield path, action


def test_cli_reference_names_every_command_and_option() -> None:
    text = (DOCS / "reference" / "cli.md").read_text()
    missing = []
    for path, action in _parsers(build_parser()):
        if isinstance(action, argparse._SubParsersAction):
            if f"`{path[-1]}" not in text and f"crashpoint {' '.join(path)}" not in text:
                missing.append(" ".join(path))
            continue
        for flag in action.option_strings:
            documented = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
            if flag.startswith("--") and flag != "--help" and not documented:
                missing.append(f"{' '.join(path)} {flag}")
    assert not missing, f"docs/reference/cli.md does not document: {missing}"


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        if page != "index.md":
            assert f"({page})" in index, f"docs/index.md does not link {page}"
