"""How this repository starts its agents. Nothing else is needed: installing crashpoint
registers its pytest plugin (fixtures, marker, options)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def demo_agent() -> list[str]:
    """crashpoint's demo agent: checkpoints every step, effects with stable keys."""
    return [sys.executable, "-m", "crashpoint.agents.demo", "--state", "{state_dir}"]


@pytest.fixture
def broken_agent() -> list[str]:
    """Our naive agent (see broken_agent.py)."""
    return [sys.executable, str(HERE / "broken_agent.py"), "--state", "{state_dir}"]
