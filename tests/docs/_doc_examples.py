"""The code blocks of the README and the how-tos, with the mark each one carries.

Every fenced block of ``README.md`` and ``docs/how-to/*.md`` is run by a test or says why not,
with an HTML comment (invisible once rendered) on the line just before its fence:

- ``<!-- example: NAME -->``: a test under ``tests/`` names ``"NAME"`` and runs the block from
  a scratch folder outside the repository (``tests/docs/test_examples.py`` for most);
- ``<!-- run-by: tests/PATH.py -->``: that test file reads this page and runs or checks the
  block itself (it names the page's file);
- ``<!-- not-run: REASON -->``: not runnable here, and why (a cloud service, a fragment of a
  file shown whole elsewhere, sample output);
- a ```` ```python ```` block of a ``docs/`` page without ``no-run`` needs no mark:
  ``tests/unit/test_docs.py`` runs it (a ``no-run`` fence says it does not, and then needs a
  mark).

``tests/docs/test_examples_marked.py`` fails on a block without a mark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/how-to/*.md")),
]
MARK = re.compile(r"^<!--\s*(example|run-by|not-run):\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    info: str  # the rest of the fence's info string (e.g. "no-run")
    body: str
    mark: str  # "example", "run-by", "not-run" or ""
    value: str  # the example's name, the test file, or the reason

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    lines = (ROOT / page).read_text(encoding="utf-8").split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("```"):
            i += 1
            continue
        tag, _, info = line[3:].partition(" ")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        m = MARK.match(lines[i - 1].strip()) if i else None
        out.append(
            Block(
                page,
                i + 1,
                tag,
                info.strip(),
                "\n".join(lines[i + 1 : end]) + "\n",
                m.group(1) if m else "",
                m.group(2) if m else "",
            )
        )
        i = end + 1
    return out


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def example(name: str) -> Block:
    """The block marked ``<!-- example: NAME -->`` (exactly one)."""
    found = [b for b in all_blocks() if b.mark == "example" and b.value == name]
    assert len(found) == 1, f"{len(found)} blocks are marked example: {name}"
    return found[0]
