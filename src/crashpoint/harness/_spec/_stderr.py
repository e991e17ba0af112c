"""The line of an attempt's stderr that says what went wrong: the error, not the last frame.

A failing attempt is quoted by one line of its stderr. The last line is the error in a Python
traceback, but not in Node.js (``TypeError: ...`` comes first, then its ``    at ...`` frames,
then ``Node.js v20.1.0``), nor in Go (``panic: ...`` then the goroutines), nor after a
traceback followed by a log line. :func:`error_line` reads the conventions of each:

- Python: the first line after the last ``Traceback (most recent call last):`` that is not a
  frame (frames and their source lines are indented);
- Node.js, Java, .NET: the error line above the last block of ``at ...`` frames (the nearest
  ``Name: message`` line of the same paragraph, else the line just above the frames);
- otherwise the last line that reads as an error (``SomethingError: ...``, ``panic: ...``,
  ``fatal: ...``, ``error: ...``, ``thread 'main' panicked at ...``);
- else the last line that is not a runtime's footer (``Node.js v20.1.0``, ``exit status 2``).

Pure text: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["error_line"]

#: A stack frame of Node.js, Java, .NET (``    at f (file.js:1:2)``), or Node's "... N lines
#: matching cause stack trace ..." and the object properties it prints after a system error.
_FRAME = re.compile(r"^\s+(?:at\s|\.\.\.\s|\.\.\.$)")
#: ``TypeError: x``, ``Uncaught Error [ERR_X]: y``, ``json.decoder.JSONDecodeError: z``,
#: ``java.lang.IllegalStateException: w``, ``[Error: v]``
_NAMED = re.compile(
    r"^\s*\[?(?:Uncaught\s+)?(?:[A-Za-z_$][\w.$]*)?(?:Error|Exception|Rejection)\b"
    r"(?:\s*\[[^\]]*\])?(?::|\]|$)"
)
#: Other runtimes and tools: Go's ``panic:``, Rust's ``panicked at``, ``fatal:``, ``error:``,
#: ``sh: 1: x: not found``, ``jq: error (at <stdin>:0)``.
_OTHER = re.compile(
    r"^(?:panic:|fatal(?: error)?:|error(?:\[\w+\])?:|ERROR\b|FATAL\b)"
    r"|\bpanicked at\b|^[\w./-]+: (?:\d+: )?(?:.*: )?(?:not found|error\b|No such file|"
    r"Permission denied|cannot\b)",
    re.IGNORECASE,
)
#: What a runtime prints after the error: Node's version and its advice, Go's exit status.
_FOOTER = re.compile(r"^(?:Node\.js v\d[\w.]*|exit status \d+|\(Use `node --trace-.*)$")


def _python(lines: list[str]) -> str:
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    if not starts:
        return ""
    for ln in lines[starts[-1] + 1 :]:
        if ln.strip() and not ln[:1].isspace():
            return ln
    return ""


def _frames(lines: list[str]) -> str:
    last = max((i for i, ln in enumerate(lines) if _FRAME.match(ln)), default=-1)
    if last < 0:
        return ""
    first = last
    while first > 0 and _FRAME.match(lines[first - 1]):
        first -= 1
    above: list[str] = []
    for ln in reversed(lines[:first]):  # the paragraph just above the frames
        if not ln.strip():
            break
        above.append(ln)
    named = next((ln for ln in above if _NAMED.match(ln)), "")
    return named or (above[0] if above else "")


def error_line(stderr: bytes | str) -> str:
    """The line of ``stderr`` that names the error (see the module docstring); "" if empty.
    Reads the last 64 KiB."""
    text = stderr[-65536:].decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = text.rstrip().splitlines()
    if not lines:
        return ""
    for found in (_python(lines), _frames(lines)):
        if found:
            return found.strip()
    for ln in reversed(lines):
        if _NAMED.match(ln) or _OTHER.search(ln.strip()):
            return ln.strip()
    for ln in reversed(lines):
        if ln.strip() and not _FOOTER.match(ln.strip()):
            return ln.strip()
    return lines[-1].strip()
