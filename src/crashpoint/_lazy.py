"""Lazy faces (PEP 562): a package's public names, imported from their modules on first use.

A face that is imported where it is not used must cost nothing: the root package is imported by
every agent that calls the probe, the harness's face by the pytest plugin at start-up. Such a
face lists, for each name of its ``__all__``, the module that defines it, and asks
:func:`attach` for its module-level ``__getattr__`` and ``__dir__``::

    _WHERE = {"Campaign": "crashpoint.harness._engine", ...}
    __getattr__, __dir__ = attach(__name__, _WHERE)

The names are also imported under ``if TYPE_CHECKING:`` in the face, so type checkers and
readers see where each comes from. A name resolved once is cached in the package's namespace.
Standard library only.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # without importing typing: this runs inside every agent
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["attach"]


def attach(
    package: str, where: Mapping[str, str], *, extra: str = ""
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: name -> the module it lives in (a name that is
    itself a submodule maps to that submodule). ``extra``: the optional dependency the names
    need (``postgres``); a name that cannot be imported without it then raises an ImportError
    that says which extra to install."""

    def __getattr__(name: str) -> Any:
        module_name = where.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            __import__(module_name)  # importlib.import_module, without importing importlib
            module = sys.modules[module_name]
        except ImportError as exc:
            if not extra:
                raise
            raise ImportError(
                f"{package}.{name} needs the extra {extra!r} ({exc}): "
                f"pip install 'crashpoint[{extra}]'"
            ) from None
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
