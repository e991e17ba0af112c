"""Secrets never reach disk: :class:`Secret` values and secret-named fields are redacted."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import pairwise

from crashpoint.checkpoint._record import MAX_DEPTH, TOO_DEEP
from crashpoint.errors import InvalidArgument, WrongArgumentType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar

    T = TypeVar("T")

    class _Generic(Generic[T]):
        __slots__ = ()
else:  # Secret[str] at run time without importing typing (every store imports this module)

    class _Generic:
        __slots__ = ()

        def __class_getitem__(cls, item: object) -> type:
            return cls


__all__ = ["DEFAULT_SECRET_NAMES", "REDACTED", "Redactor", "Secret"]

REDACTED = "[redacted]"

#: A field is secret when one of the words of its name (split on ``_ - .`` and camelCase) is
#: one of these, or two adjacent words join into one of them (``api_key`` -> ``apikey``).
DEFAULT_SECRET_NAMES = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "authorization",
        "auth",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "session",
        "privatekey",
        "signature",
        "bearer",
    }
)

#: the words of a field's name; compiled on first use (re's cache): a name of lowercase letters
#: alone is one word, found without it (a lifecycle command compiles no pattern of its own)
_WORDS = r"[A-Z]+(?=[A-Z][a-z]|\b|[_\-.\d])|[A-Z]?[a-z]+|[A-Z]+|\d+"


class Secret(_Generic["T"]):
    """A value that must never be written to disk or printed.

    ``Secret("sk-...")`` is stored as ``"[redacted]"``; read the value with :meth:`reveal`.
    """

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def reveal(self) -> T:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise WrongArgumentType("a Secret cannot be pickled")


def _words(name: str) -> list[str]:
    if name.isascii() and name.isalpha() and name.islower():
        return [name]  # what the pattern finds in it: one word
    return [w.lower() for w in re.findall(_WORDS, name)]


class Redactor:
    """Replaces secrets in a JSON-able structure with :data:`REDACTED`."""

    def __init__(self, names: Iterable[str] = DEFAULT_SECRET_NAMES) -> None:
        self.names = frozenset(n.lower() for n in names)
        self._cache: dict[str, bool] = {}

    def is_secret_name(self, name: str) -> bool:
        hit = self._cache.get(name)
        if hit is None:
            words = _words(name)
            hit = any(w in self.names for w in words) or any(
                a + b in self.names for a, b in pairwise(words)
            )
            if len(self._cache) < 4096:
                self._cache[name] = hit
        return hit

    def redact(self, value: Any) -> Any:
        """A copy of ``value`` with every :class:`Secret` and secret-named field redacted.

        Data nested deeper than a record may be (or holding itself) raises
        :class:`~crashpoint.errors.InvalidArgument`, never RecursionError."""
        return self._redact(value, 0)

    def _redact(self, value: Any, depth: int) -> Any:
        t = type(value)
        if t is str or t is int or t is float or t is bool or value is None:
            return value  # the common leaves, without the cost of ABC isinstance checks
        if depth > MAX_DEPTH:
            raise InvalidArgument(TOO_DEEP)
        depth += 1
        if t is dict:
            out_: dict[str, Any] = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise WrongArgumentType(f"checkpoint keys must be strings, got {k!r}")
                out_[k] = (
                    REDACTED
                    if (v is not None and self.is_secret_name(k))
                    else self._redact(v, depth)
                )
            return out_
        if t is list:
            return [self._redact(v, depth) for v in value]
        if isinstance(value, Secret):
            return REDACTED
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise WrongArgumentType(f"checkpoint keys must be strings, got {k!r}")
                out[k] = (
                    REDACTED
                    if (v is not None and self.is_secret_name(k))
                    else self._redact(v, depth)
                )
            return out
        if isinstance(value, (list, tuple)):
            return [self._redact(v, depth) for v in value]
        return value
