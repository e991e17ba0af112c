"""Small value classes without :mod:`dataclasses`.

What the store needs to open a run (its policies, the damage it reads, the lock it takes, the
lifecycle's answers) is defined with :class:`Value`: ``__init__`` written out, and equality,
hashing and ``repr`` from ``__slots__``, what ``@dataclass`` would generate. Importing
``dataclasses`` (with ``inspect``, ``ast``, ``dis``, ``tokenize``) and generating each class's
methods is a third of a lifecycle command's start-up, paid once per step of a shell agent.
Classes that callers ``dataclasses.replace()`` stay dataclasses, in modules loaded on demand.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FrozenValue", "Value"]


class Value:
    """A value: equal to another of its class with equal fields (its ``__slots__``, in order),
    hashed and shown by them. Subclasses that are mutable set ``__hash__ = None``."""

    __slots__ = ()

    def _names(self) -> tuple[str, ...]:
        return tuple(vars(type(self))["__slots__"])  # the class's own: its fields

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Value)  # for the type checker: type(other) is type(self)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names())
        return f"{type(self).__name__}({shown})"


class FrozenValue(Value):
    """A :class:`Value` whose fields cannot be assigned once set, as ``@dataclass(frozen=True)``:
    ``__init__`` sets them with :meth:`_init`; copies and pickles are made from the fields, in
    ``__slots__`` order (the subclass's ``__init__`` takes them positionally in that order)."""

    __slots__ = ()

    def _init(self, *values: Any) -> None:
        for name, value in zip(self._names(), values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a {type(self).__name__} is frozen")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._fields())
