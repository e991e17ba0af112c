"""The lifecycle CLI (issue 13 item 8): a shell agent checkpoints with the same guarantees.

What each command does (its output, exit code, one-line errors, the run's records) is seen by
running it in this process (:func:`cli`: :func:`crashpoint.cli.main`, which the console script
exits with; a process costs ~35 ms of CPU a command, and these tests run ~100). Where the process
is the point, a command is a real process (``python -m crashpoint checkpoints ...``), in its own
session, reaped (:func:`cli_process`): argv bytes that are not UTF-8, the store and the harness
named by the environment, sixteen at once, the record fdatasync'ed before the process returns;
the run's owner is a live process group (the caller, here, is refused). The shell agent
``examples/shell-lifecycle/agent.sh`` is then judged by the harness: killed at every boundary,
its store damaged, its power cut. It passes; its twin ``tests/agents/lifecycle_fresh_key.sh``
(one line differs: the email's key has the shell's pid in it) sends the email twice after a
kill in the in-doubt window, and ``exactly_once`` says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from _cli_main import main
from crashpoint.faults import _strace
from crashpoint.harness import (
    AgentProcess,
    AgentSpec,
    Campaign,
    CampaignResult,
    FaultFamily,
    Ledger,
    family_from_spec,
    load_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "shell-lifecycle" / "agent.sh"
TWIN = ROOT / "tests" / "agents" / "lifecycle_fresh_key.sh"
SH = shutil.which("sh") or "/bin/sh"
CLI = (sys.executable, "-m", "crashpoint")
OUTPUT = b'{"agent": "sh", "sent": "ops@example.com"}\n'
STEPS = ["greet", "send", "finish"]
STRACE_OK, STRACE_WHY = _strace.available()
needs_strace = pytest.mark.skipif(not STRACE_OK, reason=f"power loss needs strace: {STRACE_WHY}")


def base_env(**extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra)
    return env


def cli_process(store: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """One lifecycle command, a process in its own session; (exit code, stdout, stderr)."""
    argv = [*CLI, "checkpoints", "--store", str(store), *args]
    ex = AgentProcess(argv, env or base_env(), timeout=60).start().wait()
    return ex.returncode, ex.stdout.decode(), ex.stderr.decode()


def cli(store: Path, *args: str) -> tuple[int, str, str]:
    """One lifecycle command in this process (its caller: this process group), with no
    ``CRASHPOINT_`` variable set (as :func:`base_env`); (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("CRASHPOINT_")}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["checkpoints", "--store", str(store), *args])
    finally:
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def status(store: Path, run: str) -> dict[str, Any]:
    rc, out, err = cli(store, "status", run, "--json")
    assert rc == 0, err
    return dict(json.loads(out))


def one_line_error(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("crashpoint: error: "), err
    assert "Traceback" not in err


# -- each command ------------------------------------------------------------------------------


def test_a_run_goes_from_start_to_complete_step_by_step(tmp_path: Path) -> None:
    store = tmp_path / "store"  # created by start
    assert cli(store, "start", "r1", "--steps", "fetch,send,finish") == (0, "fetch\n", "")
    assert (store / "r1").is_dir()
    assert cli(store, "status", "r1", "--next")[1] == "fetch\n"
    assert cli(store, "step", "r1", "fetch", "--result", '{"n": 3}') == (0, "send\n", "")
    st = status(store, "r1")
    assert (st["status"], st["next"], st["completed"]) == ("running", "send", ["fetch"])
    assert st["results"] == {"fetch": {"n": 3}}
    assert cli(store, "status", "r1", "--result", "fetch")[1] == '{"n": 3}\n'
    assert cli(store, "step", "r1", "send")[1] == "finish\n"
    assert cli(store, "step", "r1", "finish") == (0, "", "")  # no step left: prints nothing
    assert cli(store, "status", "r1", "--next") == (0, "", "")
    assert cli(store, "complete", "r1", "--output", '{"ok": true}', "--print") == (
        0,
        '{"ok": true}\n',
        "",
    )
    # completing again changes nothing: the first output stays
    assert (
        cli(store, "complete", "r1", "--output", '{"ok": false}', "--print")[1] == '{"ok": true}\n'
    )
    st = status(store, "r1")
    assert (st["status"], st["output"], st["next"]) == ("completed", {"ok": True}, None)
    # a restart of the finished agent has nothing to do
    assert cli(store, "start", "r1", "--steps", "fetch,send,finish") == (0, "", "")
    text = cli(store, "status", "r1")[1]
    assert "status: completed" in text
    assert "completed: fetch, send, finish" in text


def test_a_resume_starts_at_the_first_step_not_recorded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cli(store, "start", "r", "--steps", "a,b,c")
    cli(store, "step", "r", "a", "--result", '"A"')
    # the agent died here; it starts again, with or without its steps
    assert cli(store, "start", "r", "--steps", "a,b,c")[1] == "b\n"
    assert cli(store, "start", "r")[1] == "b\n"
    assert status(store, "r")["attempts"] == 3


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("step", "r", "b"), 70, "not the run's next step; the next step is 'a'"),
        (("step", "r", "a", "--result", "{bad"), 2, "--result is not valid JSON"),
        (("effect", "r", "mail", "--payload", "nope"), 2, "--payload is not valid JSON"),
        (("start", "r", "--steps", "a,x"), 70, "at step #1 the journal recorded 'b'"),
        (("complete", "r"), 1, "has steps left (a, b)"),
        (("status", "ghost"), 2, "no run 'ghost'"),
        (("step", "ghost", "a"), 2, "no run 'ghost'"),
        (("start", "new"), 1, "does not exist yet: give its steps"),
        (("start", "../up", "--steps", "a"), 2, "invalid run id"),
        (("start", "r2", "--steps", "a,a"), 2, "names a step twice"),
    ],
)
def test_bad_requests_get_one_clear_line_and_a_distinct_code(
    tmp_path: Path, args: tuple[str, ...], code: int, words: str
) -> None:
    store = tmp_path / "store"
    assert cli(store, "start", "r", "--steps", "a,b")[0] == 0
    rc, out, err = cli(store, *args)
    assert rc == code, err
    assert out == ""
    one_line_error(err)
    assert words in err


@pytest.mark.parametrize(
    ("run_id", "words"),
    [
        ("r\udcff", "character 2 is the byte 0xff, which is not UTF-8"),  # argv byte 0xff
        ("r\x85x", "character 2 is U+0085, a C1 control character"),
        ("r\u202ex", "character 2 is U+202E, a bidirectional formatting character"),
        ("r\u2067x", "character 2 is U+2067, a bidirectional formatting character"),
    ],
)
def test_an_unsafe_run_id_is_refused_before_anything_is_created(
    tmp_path: Path, run_id: str, words: str
) -> None:
    """Checked before the store's folder (which ``start`` creates) or the run's exist: one line
    saying which character, where and how to fix it; exit 2; nothing on disk."""
    store = tmp_path / "store"
    commands = [("start", run_id, "--steps", "a")]
    run = cli
    if run_id == "r\udcff":  # every command, once, each a process given the byte in its argv
        commands += [("status", run_id), ("step", run_id, "a"), ("effect", run_id, "k")]
        commands += [("complete", run_id)]
        run = cli_process
    for args in commands:
        rc, out, err = run(store, *args)
        assert (rc, out) == (2, ""), err
        one_line_error(err)
        assert words in err, err
        assert "remove it" in err
    assert not store.exists()
    assert os.listdir(tmp_path) == []


def test_a_step_recorded_twice_is_refused_and_the_run_unchanged(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cli(store, "start", "r", "--steps", "a,b")
    cli(store, "step", "r", "a", "--result", "1")
    rc, _out, err = cli(store, "step", "r", "a", "--result", "2")
    assert rc == 70
    assert "'a' is already recorded as completed" in err
    assert status(store, "r")["results"] == {"a": 1}


def test_no_store_is_a_usage_error(tmp_path: Path) -> None:
    ex = AgentProcess([*CLI, "checkpoints", "status", "r"], base_env(), timeout=60).start().wait()
    assert ex.returncode == 2
    one_line_error(ex.stderr.decode())
    assert "CRASHPOINT_STORE" in ex.stderr.decode()
    # the variable names the store as well as --store does
    env = base_env(CRASHPOINT_STORE=str(tmp_path / "s"))
    ex = (
        AgentProcess([*CLI, "checkpoints", "start", "r", "--steps", "a"], env, timeout=60)
        .start()
        .wait()
    )
    assert (ex.returncode, ex.stdout) == (0, b"a\n")
    (tmp_path / "file").write_text("")  # a store that is a file is refused, not overwritten
    rc, _out, err = cli(tmp_path / "file", "start", "r", "--steps", "a")
    assert rc == 2
    one_line_error(err)
    assert "is not a folder" in err


def test_an_effect_is_sent_until_settled_then_skipped(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cli(store, "start", "r", "--steps", "draft,send")
    cli(store, "step", "r", "draft")
    first = cli(store, "effect", "r", "send_email", "--payload", '{"to": "a"}', "--json")
    assert first[0] == 0
    ans = json.loads(first[1])
    assert ans == {
        "action": "send",
        "key": "r:1.send:send_email:0",
        "kind": "send_email",
        "applied": True,
        "in_doubt": False,
        "result": None,
    }
    # announced but not settled (the agent crashed before its step completed): send again,
    # with the same key, and say it was in doubt
    again = json.loads(
        cli(store, "effect", "r", "send_email", "--payload", '{"to": "a"}', "--json")[1]
    )
    assert (again["action"], again["key"], again["in_doubt"]) == ("send", ans["key"], True)
    assert status(store, "r")["effects"][ans["key"]]["status"] == "intent"
    cli(store, "step", "r", "send")  # completing the step settles its effects
    assert status(store, "r")["effects"][ans["key"]]["status"] == "done"
    rc, out, err = cli(store, "effect", "r", "send_email", "--key", ans["key"])
    assert (rc, out) == (3, "")
    assert "already done: skip it" in err


def test_an_effect_settled_with_done_is_skipped_and_keeps_its_result(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cli(store, "start", "r", "--steps", "pay")
    assert cli(store, "effect", "r", "charge", "--key", "k1", "--payload", "5")[0] == 0
    assert (
        cli(store, "effect", "r", "charge", "--key", "k1", "--done", "--result", '{"id": "ch_1"}')[
            0
        ]
        == 0
    )
    rc, out, _ = cli(store, "effect", "r", "charge", "--key", "k1", "--json")
    assert rc == 3
    assert json.loads(out)["result"] == {"id": "ch_1"}
    # without --key: the key counts the effects of its kind settled in the step so far
    assert json.loads(cli(store, "effect", "r", "charge", "--json")[1])["key"] == "r:0.pay:charge:0"
    assert cli(store, "effect", "r", "charge", "--done")[0] == 0  # settles r:0.pay:charge:0
    assert json.loads(cli(store, "effect", "r", "charge", "--json")[1])["key"] == "r:0.pay:charge:1"
    # the run's records are the library's: plan sees no effect in doubt after the step
    cli(store, "step", "r", "pay")
    rc, plan, err = cli(store, "plan", "r")
    assert rc == 0, err
    assert "in-doubt" not in plan
    assert "replay  #0 pay" in plan


def test_an_effect_without_a_key_and_another_payload_is_refused_not_sent(
    tmp_path: Path,
) -> None:
    """Without --key a retry carries the same payload; another payload under the same default
    key is another effect: exit 70, one line, nothing recorded and nothing sent."""
    store = tmp_path / "store"
    cli(store, "start", "r", "--steps", "mail")
    first = json.loads(cli(store, "effect", "r", "email", "--payload", '{"to": "a"}', "--json")[1])
    assert (first["action"], first["key"]) == ("send", "r:0.mail:email:0")
    again = json.loads(cli(store, "effect", "r", "email", "--payload", '{"to":"a"}', "--json")[1])
    assert (again["action"], again["in_doubt"]) == ("send", True)  # a retry: same payload
    rc, out, err = cli(store, "effect", "r", "email", "--payload", '{"to": "b"}', "--json")
    assert (rc, out) == (70, "")
    one_line_error(err)
    assert "refused, not sent" in err
    assert "'r:0.mail:email:0'" in err
    assert "--key" in err
    effects = status(store, "r")["effects"]
    assert list(effects) == ["r:0.mail:email:0"]  # the refused one left no record
    # its own key, or the first one settled: then it is the next effect of that kind
    assert cli(store, "effect", "r", "email", "--payload", '{"to": "b"}', "--key", "b")[0] == 0
    assert cli(store, "effect", "r", "email", "--done")[0] == 0
    nxt = json.loads(cli(store, "effect", "r", "email", "--payload", '{"to": "c"}', "--json")[1])
    assert (nxt["action"], nxt["key"]) == ("send", "r:0.mail:email:1")


def test_sixteen_parallel_keyless_effects_with_sixteen_payloads_send_at_most_one(
    tmp_path: Path,
) -> None:
    """16 processes of one agent (one process group, as a script's background jobs are) each
    announce an effect of one kind without --key, each with its own payload: one is sent, the
    other 15 are refused (exit 70); before, all 16 said "send" under one key."""
    store = tmp_path / "store"
    script = tmp_path / "fan.sh"
    script.write_text(
        textwrap.dedent(
            """\
            cp() { "$PY" -m crashpoint checkpoints --store "$STORE" "$@"; }
            cp start r --steps fan >/dev/null || exit 9
            i=0
            while [ $i -lt 16 ]; do
                (cp effect r email --payload "{\\"n\\": $i}" --json >"$OUT/$i.json" \\
                    2>"$OUT/$i.err"; echo $? >"$OUT/$i.rc") &
                i=$((i + 1))
            done
            wait
            """
        )
    )
    out = tmp_path / "out"
    out.mkdir()
    env = base_env(PY=sys.executable, STORE=str(store), OUT=str(out))
    ex = AgentProcess([SH, str(script)], env, timeout=120).start().wait()
    assert ex.returncode == 0, ex.stderr
    codes = [int((out / f"{i}.rc").read_text()) for i in range(16)]
    sent = [i for i in range(16) if codes[i] == 0]
    assert len(sent) == 1, codes
    assert sorted(codes) == [0] + [70] * 15, codes
    for i in range(16):
        if i not in sent:
            one_line_error((out / f"{i}.err").read_text())
    winner = json.loads((out / f"{sent[0]}.json").read_text())
    assert winner["action"] == "send"
    assert status(store, "r")["effects"] == {
        winner["key"]: {"kind": "email", "status": "intent", "step": "fan"}
    }


def test_a_step_is_durable_before_the_command_returns(tmp_path: Path) -> None:
    """The step's record is written and fdatasync'ed by the step command itself."""
    if not STRACE_OK:
        pytest.skip(f"strace cannot trace here: {STRACE_WHY}")
    store = tmp_path / "store"
    cli_process(store, "start", "r", "--steps", "a")  # its owner gone: the step may take it over
    trace = tmp_path / "trace"
    argv = _strace.wrap(
        [*CLI, "checkpoints", "--store", str(store), "step", "r", "a", "--result", '"ok"'],
        str(trace),
        syscalls=("write", "pwrite64", "fdatasync", "fsync"),
    )
    ex = AgentProcess(argv, base_env(), timeout=120).start().wait()
    assert ex.returncode == 0, ex.stderr.decode()
    calls = [
        c
        for c in _strace.parse(str(trace))
        if c.path.startswith(str(store / "r")) and os.path.basename(c.path).startswith("seg-")
    ]
    names = [c.name for c in calls]
    assert "write" in names, names
    assert "fdatasync" in names[names.index("write") :], names


def test_another_live_agent_owns_the_run_until_it_dies(tmp_path: Path) -> None:
    """Between commands no lock is held: the agent that called start (its process group)
    owns the run. A second agent is refused while the first lives, and takes over after."""
    store = tmp_path / "store"
    owner = subprocess.Popen(
        [
            SH,
            "-c",
            f'"$@" checkpoints --store {store} start r --steps a,b && '
            "echo started && exec sleep 60",
            "sh",
            *CLI,
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
        env=base_env(),
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"a\n"
        assert owner.stdout.readline() == b"started\n"
        for args in (
            ("start", "r"),
            ("step", "r", "a"),
            ("effect", "r", "mail"),
            ("complete", "r"),
        ):
            rc, _out, err = cli(store, *args)
            assert rc == 73, (args, err)
            one_line_error(err)
            assert f"is owned by another live agent (process group {owner.pid}" in err
        assert status(store, "r")["completed"] == []  # reads are never refused
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    assert cli(store, "start", "r")[1] == "a\n"  # its owner is dead: taken over
    assert cli(store, "step", "r", "a")[0] == 0


def test_the_commands_report_steps_and_effects_to_the_harness(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Ledger() as ledger:
        ledger.begin_attempt(1, None)
        env = base_env(**ledger.env(), CRASHPOINT_ATTEMPT="1")
        assert cli_process(store, "start", "r", "--steps", "a,b", env=env)[1] == "a\n"
        cli_process(store, "step", "r", "a", env=env)
        assert (
            json.loads(
                cli_process(
                    store, "effect", "r", "mail", "--payload", '{"to": "x"}', "--json", env=env
                )[1]
            )["applied"]
            is True
        )
        # the same effect again (in doubt): reported with the same key, deduplicated
        assert (
            json.loads(
                cli_process(
                    store, "effect", "r", "mail", "--payload", '{"to": "x"}', "--json", env=env
                )[1]
            )["applied"]
            is False
        )
        cli_process(store, "step", "r", "b", env=env)
        assert cli_process(store, "effect", "r", "mail", "--key", "r:1.b:mail:0", env=env)[0] == 3
        cli_process(store, "complete", "r", env=env)
        events = [(e["attempt"], e["op"], e.get("step") or e.get("key")) for e in ledger.events]
    assert events == [
        (1, "step_started", "a"),
        (1, "step_completed", "a"),
        (1, "step_started", "b"),
        (1, "effect", "r:1.b:mail:0"),
        (1, "effect", "r:1.b:mail:0"),
        (1, "step_completed", "b"),
    ]  # a skipped effect is not reported again


# -- the shell agent, alone and under the harness ---------------------------------------------

SCENARIO = load_scenario(ROOT / "examples" / "shell-lifecycle" / "lifecycle.scenario.yaml")
KILL, CORRUPT, POWER = (f.family for f in SCENARIO.families)


def agent(script: Path = AGENT) -> AgentSpec:
    """The scenario file's agent (``sh agent.sh {state_dir} {python} -m crashpoint``)."""
    spec = SCENARIO.agent
    assert spec.command[:2] == ("sh", "{scenario_dir}/agent.sh")
    return dataclasses.replace(spec, command=(SH, str(script), *spec.command[2:]))


def campaign(
    spec: AgentSpec,
    family: FaultFamily,
    tmp_path: Path,
    seed: int = 13,
    *,
    near_in_doubt: bool = False,
    only: Sequence[int] | None = None,
    **kw: Any,
) -> CampaignResult:
    """The campaign; with ``near_in_doubt``, only its kill in the in-doubt window and the kill
    just before it (a trial of this agent costs seconds: a process per lifecycle command);
    ``only``: those trials (by index) of the plan."""
    camp = Campaign(
        spec,
        [family],
        str(tmp_path / "report"),
        name="lifecycle",
        seed=seed,
        restarts=SCENARIO.restarts,
        expect=SCENARIO.expect,
        **kw,
    )
    if not near_in_doubt:
        return camp.run(only=only)
    golden = camp.runner().golden(camp.needs)
    (k,) = [p.index for p in camp.plans(golden) if "in_doubt" in p.describe()]
    return camp.run(golden=golden, only=[k - 1, k])


def why(result: CampaignResult) -> str:
    return "\n".join(f"{t.plan.describe()}: {[str(c) for c in t.failed]}" for t in result.failures)


def test_the_twin_differs_from_the_agent_in_its_key_only() -> None:
    a, b = AGENT.read_text().splitlines(), TWIN.read_text().splitlines()
    assert len(a) == len(b)
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert len(diff) == 1
    assert "$$" in diff[0][1]
    assert "$$" not in diff[0][0]


def test_the_shell_agent_runs_alone_and_a_second_run_replays(tmp_path: Path) -> None:
    for _ in range(2):
        ex = (
            AgentProcess([SH, str(AGENT), str(tmp_path / "state"), *CLI], base_env(), timeout=120)
            .start()
            .wait()
        )
        assert (ex.returncode, ex.stdout) == (0, OUTPUT), ex.stderr.decode()
    assert b"email to ops@example.com sent" not in ex.stderr  # the second run sent nothing


def test_the_how_to_page_s_shell_agent_runs_and_resumes(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "how-to" / "checkpoint-from-any-language.md").read_text()
    (code,) = re.findall(r"^```sh agent\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    script = tmp_path / "agent.sh"
    script.write_text(code)
    bindir = os.path.dirname(sys.executable)  # where `crashpoint` is installed
    env = base_env(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    errs = []
    for _ in range(2):
        ex = AgentProcess([SH, str(script)], env, cwd=str(tmp_path), timeout=120).start().wait()
        assert (ex.returncode, ex.stdout) == (0, b'{"sent": "ops@example.com"}\n'), ex.stderr
        errs.append(ex.stderr.decode())
    assert 'emailing ops@example.com: "hello from sh"' in errs[0]
    assert errs[1] == ""  # resumed a completed run: nothing sent, nothing said
    assert (tmp_path / "checkpoints" / "report-1").is_dir()


# slow: fast cover: test_the_fresh_key_twin_sends_twice_and_fails_exactly_once (the same sweep)
@pytest.mark.slow
def test_the_shell_agent_passes_a_kill_at_every_boundary(tmp_path: Path) -> None:
    result = campaign(agent(), KILL, tmp_path)
    golden = result.golden
    assert golden.steps == STEPS
    assert golden.output == OUTPUT
    assert [e["op"] for e in golden.events] == [
        "step_started",
        "step_completed",
        "step_started",
        "effect",
        "step_completed",
        "step_started",
        "step_completed",
    ]
    assert sum(golden.effects.values()) == 1
    assert len(result.trials) == 8  # 7 events killed before they act + the in-doubt window
    assert result.ok, why(result)
    assert all(t.attempts[0].signal == 9 for t in result.trials)
    (in_doubt,) = [t for t in result.trials if "in_doubt" in t.plan.describe()]
    assert in_doubt.duplicates == 1  # the retry reused the key: deduplicated


def test_the_fresh_key_twin_sends_twice_and_fails_exactly_once(tmp_path: Path) -> None:
    """The sweep's kill in the email's in-doubt window and the kill before it (the whole sweep
    of the agent passes: test_the_shell_agent_passes_a_kill_at_every_boundary, slow)."""
    result = campaign(agent(TWIN), KILL, tmp_path, near_in_doubt=True)
    assert len(result.trials) == 2
    assert not result.ok
    (bad,) = result.failures  # only the kill in the email's in-doubt window shows it
    assert "in_doubt" in bad.plan.describe()
    assert [c.name for c in bad.failed] == ["exactly_once"]
    assert "DUPLICATED send_email" in bad.failed[0].message
    assert "under 2 different keys" in bad.failed[0].message


def test_the_shell_agent_detects_or_repairs_a_damaged_store(tmp_path: Path) -> None:
    # 4 of the plan's 6 trials (seed 21): one per kind of damage drawn (zero, delete, truncate,
    # stale-copy), each exercised; the two left out are a second zero and a stale copy that
    # never fires (the agent finished before it)
    result = campaign(agent(), CORRUPT, tmp_path, seed=21, only=[0, 1, 4, 5])
    assert len(result.trials) == 4
    assert result.ok, why(result)
    exercised = [t for t in result.trials if t.status == "passed"]
    assert len(exercised) == 4, [t.status for t in result.trials]
    hows = {f.arg("how") for t in exercised for f in t.plan.faults if f.kind == "corrupt"}
    assert hows == {"zero", "delete", "truncate", "stale-copy"}, hows
    assert any("seg-" in str(o) for t in exercised for o in t.outcomes)  # the journal was hit
    for t in exercised:
        (c,) = [c for c in t.checks if c.name == "corruption_detected"]
        assert c.message.startswith(("repaired", "refused")), c.message


# slow: fast cover: test_another_live_agent_owns_the_run_until_it_dies; resumers: test_races.py
@pytest.mark.slow
def test_two_shell_agents_started_at_once_keep_one_writer(tmp_path: Path) -> None:
    result = campaign(agent(), family_from_spec({"resumers": {"count": 2}}), tmp_path)
    assert len(result.trials) == 2
    assert result.ok, why(result)
    for t in result.trials:
        codes = sorted(a.returncode for a in t.attempts[:2])
        assert codes == [0, 73], codes  # one ran, the other was refused: owned by the first
        refused = next(a for a in t.attempts if a.returncode == 73)
        assert b"is owned by another live agent (process group" in refused.stderr


@needs_strace
# slow: fast cover: test_power_loss.py's
# test_a_naive_json_agent_fails_and_the_torn_or_lost_state_...
@pytest.mark.slow
def test_the_shell_agent_survives_power_loss(tmp_path: Path) -> None:
    result = campaign(agent(), POWER, tmp_path)
    assert len(result.trials) == 4
    assert all(t.outcomes[0].fired for t in result.trials)
    assert result.ok, why(result)
