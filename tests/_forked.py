"""Fork mode for end-to-end tests about verdicts, not about spawning.

A campaign whose agent imports a heavy SDK (anthropic, mcp, openai, langgraph, dbos) pays that
import in every spawned attempt (1-3 s each on a loaded machine). :func:`run_forked` runs the
same campaign with its attempts forked from a warm zygote that did the script's top-level
imports once (``warm: true``), without learning the golden run's extra imports (vetting them
in a fork of the zygote saves no CPU over the few attempts these tests run: measured 22.0 s
against 22.6 s over six SDK test files), and checks that fork mode was used. Attempts that
need a fresh interpreter (``fileop``, an rlimit) are still spawned by the harness. What a
spawned attempt adds is tested in tests/crash/test_fork_mode.py and test_fork_server.py.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from crashpoint.harness import AgentSpec, Campaign, CampaignResult, Zygote


def warm(spec: AgentSpec) -> AgentSpec:
    """``spec`` in fork mode: ``{python}`` for this interpreter, ``warm: true``."""
    command = spec.command
    if command and command[0] == sys.executable:
        command = ("{python}", *command[1:])
    return dataclasses.replace(spec, command=command, warm=("*",))


@contextmanager
def forking(spec: AgentSpec) -> Iterator[Zygote]:
    """A started zygote for ``spec`` (already ``warm``: see :func:`warm`), learning off, and a
    check on leaving that it forked something (the golden run at least): pass it as
    ``launcher=``."""
    with pytest.MonkeyPatch.context() as mp, Zygote.for_agent(spec) as z:
        mp.setenv("CRASHPOINT_NO_LEARN", "1")
        yield z
        assert z.forks > 0, "fork mode was not used"


def run_forked(spec: AgentSpec, *args: Any, **kwargs: Any) -> CampaignResult:
    """``Campaign(warm(spec), *args, **kwargs).run()`` with a zygote as its launcher."""
    spec = warm(spec)
    with forking(spec) as z:
        return Campaign(spec, *args, launcher=z, **kwargs).run()
