"""``resumers: {hosts: true}`` on paper and in one real process: the option's validation, the
family's name, the plan's fault, and the wrapper (a pid and UTS namespace of its own) run for
real where the machine allows. The race of k such resumers on the PostgreSQL store:
tests/crash/test_pg_resumers.py."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from crashpoint._proc import hosts_unavailable, on_own_host
from crashpoint.errors import FaultSpecError
from crashpoint.harness import Golden, family_from_spec, plan_for

RUN = Golden(
    ["a"],
    [{"op": "step_started", "step": "a", "i": 0}, {"op": "step_completed", "step": "a", "i": 1}],
    Counter(),
    b"",
    0.1,
)


def test_hosts_is_true_or_false_naming_the_option() -> None:
    with pytest.raises(FaultSpecError) as info:
        family_from_spec({"resumers": {"processes": 3, "hosts": "yes"}})
    assert info.value.option == "hosts"
    assert "resumers.hosts must be true or false" in str(info.value)


def test_the_family_and_its_plan_carry_hosts() -> None:
    fam = family_from_spec({"resumers": {"processes": 3, "hosts": True, "count": 1}})
    assert fam.name == "resumers@processes=3:hosts"
    (f,) = plan_for(fam, RUN, 1, 0).faults
    assert (f.kind, f.processes, f.arg("hosts")) == ("resumers", 3, True)
    plain = family_from_spec({"resumers": {"count": 1}})
    assert plan_for(plain, RUN, 1, 0).faults[0].arg("hosts") is None


def test_a_process_on_its_own_host_has_its_own_pids_and_host_name() -> None:
    why = hosts_unavailable()
    if why:
        pytest.skip(why)
    code = "import os, socket; print(os.getpid(), socket.gethostname(), flush=True)"
    argv = on_own_host([sys.executable, "-c", code], "crashpoint-resumer-7")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    pid, host = done.stdout.split()
    assert int(pid) <= 3  # the first processes of a pid namespace of its own (sh execs it)
    assert host == "crashpoint-resumer-7"
