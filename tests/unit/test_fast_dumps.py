"""``dumps`` (plan.json, golden.json, result.json, the campaign reports) writes exactly what
``json.dumps(indent=2, sort_keys=True, default=str)`` writes, only faster."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashpoint.harness._spec import dumps


def _stdlib(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
_docs = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=100, deadline=None)
@given(_docs)
def test_the_text_is_the_standard_encoders(doc: Any) -> None:
    assert dumps(doc) == _stdlib(doc)


class _Colour(enum.Enum):
    RED = 1


class _Level(enum.IntEnum):
    HIGH = 3


class _Name(str, enum.Enum):
    A = "a"


def test_odd_values_keys_and_failures_match() -> None:
    doc = {
        "path": Path("/x/y"),  # default=str
        "colour": _Colour.RED,
        "level": _Level.HIGH,  # an int subclass: its number
        "name": _Name.A,
        "floats": [1.5, -0.0, 1e300, math.inf, -math.inf, math.nan],
        "empty": [{}, [], ()],
        "bytes": b"\x00",
        1.5: "float key",
        None: "none key",
        True: "true key",
        'ünïcode \u2028 \x00 "q"': "ä",
    }
    doc = {k: v for k, v in doc.items() if not isinstance(k, (float, bool)) or k is True}
    with pytest.raises(TypeError):
        _stdlib(doc)  # mixed key types cannot be sorted: the same error from both
    with pytest.raises(TypeError):
        dumps(doc)
    doc = {str(k): v for k, v in doc.items()}
    assert dumps(doc) == _stdlib(doc)
    assert dumps({1.5: 1, 2: 2}) == _stdlib({1.5: 1, 2: 2})
    assert dumps({None: 1}) == _stdlib({None: 1})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps(loop)
    with pytest.raises(TypeError):
        dumps({(1, 2): 1})
