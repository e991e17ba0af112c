"""Every code block of the README and the how-tos is run by a test, or says why not.

The marks are described in ``tests/docs/_doc_examples.py``. A new block without one fails
here, naming its page and line and the marks to choose from.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from _doc_examples import PAGES, ROOT, Block, all_blocks, blocks

TESTS = Path(__file__).resolve().parents[1]
HOW = (
    "put one of these on the line before its fence: <!-- example: NAME --> (and a test under "
    "tests/ that runs it by that name, e.g. in tests/docs/test_examples.py), <!-- run-by: "
    "tests/PATH.py --> (a test file that reads this page), or <!-- not-run: REASON -->"
)


def _test_sources() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8")
        for p in TESTS.rglob("*.py")
        if p.name != "test_examples_marked.py"
    )


def _unmarked(block: Block) -> bool:
    run_by_test_docs = (
        block.page.startswith("docs/") and block.lang == "python" and "no-run" not in block.info
    )
    return not block.mark and not run_by_test_docs


def test_the_pages_have_blocks() -> None:
    assert "README.md" in PAGES
    assert len(PAGES) >= 5
    assert len(all_blocks()) >= 40


def test_every_block_is_run_or_says_why_not() -> None:
    missing = [b.where() for b in all_blocks() if _unmarked(b)]
    assert not missing, f"code blocks neither run nor marked: {missing}; {HOW}"


def test_every_example_name_is_run_by_a_test() -> None:
    sources = _test_sources()
    names = [b.value for b in all_blocks() if b.mark == "example"]
    twice = [n for n, k in Counter(names).items() if k > 1]
    assert not twice, f"example names used twice: {twice}"
    orphans = [n for n in names if f'"{n}"' not in sources]
    assert not orphans, (
        f"marked <!-- example: NAME --> but no test under tests/ names it: {orphans}"
    )


def test_every_run_by_names_a_test_file_that_reads_the_page() -> None:
    bad = []
    for b in all_blocks():
        if b.mark != "run-by":
            continue
        test = ROOT / b.value
        if not test.is_file() or Path(b.page).name not in test.read_text(encoding="utf-8"):
            bad.append(f"{b.where()}: {b.value}")
    assert not bad, f"run-by must name a test file that names the page: {bad}"


def test_every_not_run_gives_a_reason_and_python_not_run_says_no_run() -> None:
    bad = []
    for b in all_blocks():
        if b.mark == "not-run" and len(b.value) < 10:
            bad.append(f"{b.where()}: reason too short: {b.value!r}")
        if (
            b.page.startswith("docs/")
            and b.lang == "python"
            and b.mark in ("not-run", "run-by")
            and "no-run" not in b.info
        ):
            bad.append(
                f"{b.where()}: tests/unit/test_docs.py would run it: fence it ```python no-run"
            )
    assert not bad, bad


def test_a_new_unmarked_block_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself can fail: a page with one marked and one bare block."""
    import _doc_examples

    (tmp_path / "README.md").write_text(
        "<!-- not-run: a sketch of nothing -->\n```sh\ntrue\n```\n\n```sh\nfalse\n```\n"
    )
    monkeypatch.setattr(_doc_examples, "ROOT", tmp_path)
    found = blocks("README.md")
    assert [(b.line, b.mark) for b in found] == [(2, "not-run"), (6, "")]
    assert [b.where() for b in found if _unmarked(b)] == ["README.md:6"]
