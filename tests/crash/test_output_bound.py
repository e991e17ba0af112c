"""What agents print cannot exhaust the harness: output is streamed to the attempt's files and
capped (head and tail kept, the cut stated), so an agent printing 64 MiB leaves the harness's
memory and its evidence bounded, spawned or forked; the cut view still compares exactly
(same_output); and capture ends with the attempt, not when a straggler closes the pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

from crashpoint._proc import _process
from crashpoint.harness import AgentProcess, AgentSpec, Plan, TrialRunner

MIB = 1 << 20
#: what the big agent prints: 2x the RSS bound below, 32x the evidence kept (it was 1 GiB, then
#: 512 MiB: the same proof at 8x the time). Measured after the warm-up: the harness's peak RSS
#: grew by 4 MiB; with a capture that never trimmed its tail, by 50-60 MiB
BIG = 64 * MIB
#: the harness's peak RSS may grow by less than this while the agent prints BIG
RSS_BOUND = 32 * MIB
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}

#: What the warm-up trial prints: past the caps (the cut path taken, the head and tail buffers
#: at their size), far under BIG. A warm-up printing BIG too would raise the peak before the
#: measure: a capture holding the whole stream while it ran would then pass (it did).
WARM = 4 * MIB

#: A throwaway harness: runs a warm-up trial (WARM bytes) and one trial of an agent that prints
#: BIG bytes to stdout (spawned, or forked from a zygote; the size is read from a file) and
#: reports its own peak RSS before and after the big one, and the files left.
HARNESS = textwrap.dedent("""
    import json, os, resource, sys
    from collections import Counter
    from crashpoint.harness import AgentSpec, Golden, Plan, TrialRunner
    from crashpoint.harness._engine._zygote import Zygote

    folder, mode, WARM, BIG = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    size = os.path.join(folder, "size")
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    def prints(n):
        with open(size, "w") as f:
            f.write(n)
    if mode == "spawn":
        agent = AgentSpec(command=("sh", "-c", 'head -c "$(cat "$0")" /dev/zero', size),
                          timeout=300)
        launcher = None
    else:
        agent = AgentSpec(entry="cp_big_agent:main", timeout=300,
                          env=(("PYTHONPATH", folder), ("SIZE", size)))
        launcher = Zygote.for_agent(agent).start()
    golden = Golden([], [], Counter(), b"", 0.1)
    with TrialRunner(agent, os.path.join(folder, "report"), restarts=0, keep_passing=True,
                     launcher=launcher) as runner:
        prints(WARM)
        runner.run(Plan((), "warm-up", 0, 0), Golden([], [], Counter(), b"", 0.1))
        before = peak()
        prints(BIG)
        result = runner.run(Plan((), "big", 0, 1), golden)
        after = peak()
    if launcher is not None:
        launcher.close()
    files = {n: os.path.getsize(os.path.join(result.folder, n))
             for n in os.listdir(result.folder) if n.startswith("attempt-")}
    a = result.attempts[0]
    print(json.dumps({"before": before, "after": after, "files": files,
                      "returncode": a.returncode, "stdout_len": len(a.stdout),
                      "stdout_head": a.stdout[:8].hex(),
                      "cut_line": a.stdout[1 << 20:(1 << 20) + 200].decode("latin-1"),
                      "forked": launcher.forks if launcher else 0}))
""")

BIG_AGENT = textwrap.dedent("""
    import os, sys

    def main(argv):
        with open(os.environ["SIZE"]) as f:
            size = int(f.read())
        chunk = b"\\0" * (1 << 20)
        for _ in range(size >> 20):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
""")


@pytest.mark.parametrize("mode", ["spawn", "fork"])
def test_an_agent_printing_64_mib_leaves_memory_and_files_bounded(
    mode: str, tmp_path: Path
) -> None:
    (tmp_path / "harness.py").write_text(HARNESS)
    (tmp_path / "cp_big_agent.py").write_text(BIG_AGENT)
    r = subprocess.run(
        [sys.executable, str(tmp_path / "harness.py"), str(tmp_path), mode, str(WARM), str(BIG)],
        capture_output=True,
        timeout=600,
        check=False,
        start_new_session=True,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = json.loads(r.stdout)
    assert got["returncode"] == 0
    assert got["forked"] == (1 if mode == "fork" else 0) * 2  # warm-up and the trial: forked
    # the harness's peak RSS grew by far less than what the agent printed (unbounded: > 64 MiB)
    assert got["after"] - got["before"] < RSS_BOUND, got
    # the attempt's files hold the head, the cut line and the tail: about 2 MiB, not 64
    assert set(got["files"]) == {"attempt-1.stdout", "attempt-1.stderr"}
    assert 2 * MIB < got["files"]["attempt-1.stdout"] < 2 * MIB + 300
    assert got["files"]["attempt-1.stderr"] == 0
    # the Attempt keeps the same bounded view, and says what was cut
    assert got["stdout_len"] == got["files"]["attempt-1.stdout"]
    assert got["stdout_head"] == "00" * 8
    assert got["cut_line"].startswith(
        f"\n... {BIG - 2 * MIB:,} bytes cut (whole stream {BIG:,} bytes, sha256 "
    )


SAME_OUTPUT_AGENT = textwrap.dedent("""
    import os, sys
    golden = os.environ["CRASHPOINT_TRIAL"] == "golden"
    middle = "g" if golden or os.environ.get("SAME") == "1" else "t"
    sys.stdout.write("x" * 5000 + middle + "x" * 5000)
""")


@pytest.mark.parametrize("same", [True, False])
def test_same_output_is_exact_when_the_output_was_cut(same: bool, tmp_path: Path) -> None:
    """Only one byte in the cut middle differs from the golden run's: same_output fails; the
    identical output passes. Caps of 100 bytes cut 9,801 of the 10,001."""
    (tmp_path / "agent.py").write_text(SAME_OUTPUT_AGENT)
    agent = AgentSpec(
        command=(sys.executable, str(tmp_path / "agent.py")),
        timeout=30,
        env=(("SAME", "1" if same else "0"),),
    )
    with TrialRunner(
        agent, str(tmp_path / "report"), restarts=0, keep_head=100, keep_tail=100
    ) as runner:
        golden = runner.golden()
        assert b"... 9,801 bytes cut (whole stream 10,001 bytes, sha256 " in golden.output
        result = runner.run(Plan((), "none", 0, 0), golden)
    out = result.attempts[0].stdout
    assert out[:100] == golden.output[:100]
    assert out[-100:] == golden.output[-100:]
    checks = {c.name: c.ok for c in result.checks}
    assert checks["same_output"] is same


def test_capture_does_not_wait_for_a_straggler_that_holds_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a cgroup a helper that cleared its environment and left the session escapes
    the reaper (a documented limit) and keeps the agent's stdout open for 60 s: the attempt
    still ends when the agent has, with what it printed, its reader done and its pipes closed
    (it waited 5 s per attempt for end-of-file before)."""
    monkeypatch.setattr(_process, "attempt_cgroup", lambda: (None, "disabled by the test"))
    marker = f"cp-holder-{time.time_ns()}"
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen(["env", "-i", "setsid", sys.executable, "-c",
                              "import time; time.sleep(60)", "{marker}"],
                             stdin=subprocess.DEVNULL)
        print(p.pid, flush=True)
    """)
    )
    p = AgentProcess([sys.executable, str(script)], BASE_ENV, timeout=30).start()
    pipes = _pipes(p._capture._fds)
    ex = p.wait()
    holder = psutil.Process(int(ex.stdout))
    try:
        assert holder.cmdline()[-1] == marker  # still alive, holding the pipe: it escaped
        assert ex.containment == "session (disabled by the test)"
        assert ex.returncode == 0
        assert not p._capture._thread.is_alive()
        assert len(pipes) == 2
        assert not pipes & _pipes(int(fd) for fd in os.listdir("/proc/self/fd"))
    finally:
        holder.kill()
        holder.wait(5)


def _pipes(fds: Iterable[int]) -> set[str]:
    """The pipes (``pipe:[inode]``) among this process's descriptors ``fds``."""
    out = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("pipe:"):
                out.add(link)
    return out
