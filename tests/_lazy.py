"""Agent SDKs, imported when a test uses them, not when pytest collects the module.

Importing anthropic, openai, mcp, dbos, langgraph, pydantic_ai or agents costs 0.5-3 s each;
at module level that is paid by every xdist worker at collection, whether or not it runs the
module's tests. :func:`needs` skips a module's tests when the SDK is not installed (as
``pytest.importorskip`` would, without importing it) and :class:`LazyModule` imports it on its
first attribute.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

import pytest


def installed(name: str) -> bool:
    """Whether ``name`` can be found (a dotted name imports its parent packages only)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package is missing
        return False


def needs(*names: str, reason: str) -> pytest.MarkDecorator:
    """``pytestmark = needs("anthropic", reason=...)``: skip unless every module is installed."""
    missing = [n for n in names if not installed(n)]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)}: {reason}")


class LazyModule:
    """``anthropic = LazyModule("anthropic")``: ``anthropic.Anthropic`` imports it then."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest's collection probes (__test__, fixture markers)
            raise AttributeError(attr)
        return getattr(self._module(), attr)
