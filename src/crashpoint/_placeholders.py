"""``{name}`` placeholders in agent commands and fault paths, filled without ``str.format``.

Only a bare ``{name}`` is a placeholder: no format spec (``{python:2000000000}`` would ask
``str.format`` for a 2 GB string), no conversion (``{python!r}``), no attribute or index access
(``{python.__class__}``, ``{python[0]}``). ``{{`` and ``}}`` are literal braces.

>>> fill("{python} -m x --state {state_dir}", {"python": "py", "state_dir": "/s"})
'py -m x --state /s'
>>> fields("{{literal}} {run_id}")
['run_id']
"""

from __future__ import annotations

import string
from collections.abc import Collection, Mapping

from crashpoint.errors import PlaceholderError

__all__ = ["PlaceholderError", "fields", "fill"]


def _parse(text: str) -> list[tuple[str, str | None]]:
    """``text`` as (literal, field name or None) pairs; refuse anything but bare names."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:  # "Single '}' encountered", "expected '}' before end of string"
        raise PlaceholderError(
            f"unbalanced braces in {text!r} ({exc}); write {{{{ and }}}} for literal braces"
        ) from None
    out: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is None:
            out.append((literal, None))
            continue
        if spec or conversion or not name.isidentifier():
            shown = (
                "{"
                + name
                + (f"!{conversion}" if conversion else "")
                + (f":{spec}" if spec else "")
                + "}"
            )
            raise PlaceholderError(
                f"{shown} in {text!r} is not a placeholder: only a bare {{name}} is (no format "
                "spec after ':', no '!' conversion, no '.' or '[...]'); write {{ and }} for "
                "literal braces"
            )
        out.append((literal, name))
    return out


def fields(text: str, allowed: Collection[str] | None = None) -> list[str]:
    """The placeholder names in ``text``, in order; raise :class:`PlaceholderError` for a
    malformed one, or one not in ``allowed`` (when given)."""
    names = [name for _lit, name in _parse(text) if name is not None]
    if allowed is not None:
        for name in names:
            if name not in allowed:
                raise PlaceholderError(
                    f"unknown placeholder {{{name}}} in {text!r}; use "
                    f"{', '.join('{' + a + '}' for a in allowed)} (write {{{{ and }}}} for "
                    "literal braces)"
                )
    return names


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` replaced by ``values[name]`` (``{{``/``}}`` unescaped)."""
    parts: list[str] = []
    for literal, name in _parse(text):
        parts.append(literal)
        if name is not None:
            if name not in values:
                raise PlaceholderError(
                    f"unknown placeholder {{{name}}} in {text!r}; use "
                    f"{', '.join('{' + a + '}' for a in values)}"
                )
            parts.append(values[name])
    return "".join(parts)
