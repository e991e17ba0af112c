"""A field name's words (what decides whether it is a secret) are the same with or without the
shortcut for names of lowercase letters alone, which spares a lifecycle command compiling the
pattern (issue 25 item 4)."""

from __future__ import annotations

import random
import re
import string

import pytest

from crashpoint.checkpoint import Redactor
from crashpoint.checkpoint._redact import _WORDS, _words

ALPHABET = string.ascii_letters + string.digits + "_-. " + "éßÅΣ٣"


def _by_pattern(name: str) -> list[str]:
    return [w.lower() for w in re.compile(_WORDS).findall(name)]


@pytest.mark.parametrize(
    "name",
    ["", "a", "i", "key", "apikey", "api_key", "APIKey", "apiKey", "ß", "é", "token2", "x" * 50],
)
def test_crafted_names_split_as_the_pattern_splits_them(name: str) -> None:
    assert _words(name) == _by_pattern(name)


def test_random_names_split_as_the_pattern_splits_them() -> None:
    rnd = random.Random(25)
    for _ in range(20_000):
        name = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 10)))
        assert _words(name) == _by_pattern(name), name


def test_secret_names_are_still_found() -> None:
    r = Redactor()
    assert r.redact({"apikey": 1, "key": 2, "api_key": 3, "n": 4, "monkey": 5}) == {
        "apikey": "[redacted]",
        "key": "[redacted]",
        "api_key": "[redacted]",
        "n": 4,
        "monkey": 5,
    }
