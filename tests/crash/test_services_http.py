"""An agent with no crashpoint import, judged from its HTTP calls alone.

tests/agents/webhook_agent.py POSTs a webhook per item to ``$CRASHPOINT_HTTP/hook`` (urllib
only). Every request is a boundary: killed before it, and in its in-doubt window. Without an
Idempotency-Key the retry after an in-doubt kill is a duplicate that exactly_once names; with
a key derived from its own state, the service deduplicates it and the campaign passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _forked import forking, warm
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    Fault,
    Plan,
    TrialRunner,
    Zygote,
    family_from_spec,
)

AGENT = Path(__file__).resolve().parents[1] / "agents" / "webhook_agent.py"


def agent(*args: str, **kw: Any) -> AgentSpec:
    return AgentSpec(command=("{python}", str(AGENT), "{state_dir}", *args), timeout=30, **kw)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """The webhook agent's golden runs and attempts in the verdict tests below fork from one
    zygote (they are about the verdicts on its requests, not about spawning; the placeholder,
    token and failure tests spawn it)."""
    with forking(warm(agent())) as z:
        yield z


def campaign(spec: AgentSpec, tmp_path: Path, zygote: Zygote | None = None) -> CampaignResult:
    """Kill at every boundary; forked from ``zygote`` if given (the webhook agent only)."""
    return Campaign(
        warm(spec) if zygote is not None else spec,
        [family_from_spec({"kill": {"at": "every-boundary"}})],
        str(tmp_path / "report"),
        name="webhook",
        seed=3,
        launcher=zygote,
    ).run()


def test_every_boundary_catches_the_unkeyed_webhook_retry(zygote: Zygote, tmp_path: Path) -> None:
    result = campaign(agent(), tmp_path, zygote)
    golden = result.golden
    assert [(e["op"], e["kind"]) for e in golden.events] == [("effect", "POST /hook")] * 3
    assert golden.effects[("POST /hook", '{"item":0,"text":"item 0 is ready"}')] == 1
    # 3 requests, each killed before and in doubt
    assert [
        (t.plan.faults[0].arg("phase"), t.plan.faults[0].arg("nth")) for t in result.trials
    ] == [(p, n) for n in (1, 2, 3) for p in ("before", "in_doubt")]
    assert not result.ok
    failed = {t.plan.faults[0].arg("phase") for t in result.failures}
    assert failed == {"in_doubt"}  # killed before it: nothing applied, the retry is the first
    for t in result.failures:
        root = t.root_cause
        assert root is not None
        assert root.name == "exactly_once"
        assert "DUPLICATED POST /hook" in root.message
        assert "2 sends of the same payload, no key" in root.message


def test_a_webhook_keyed_from_the_agents_state_passes_every_boundary(
    zygote: Zygote, tmp_path: Path
) -> None:
    result = campaign(agent("--keyed"), tmp_path, zygote)
    assert result.ok, [str(c) for t in result.failures for c in t.failed]
    assert len(result.trials) == 6
    assert all(t.exercised for t in result.trials)


def test_an_in_doubt_kill_leaves_the_keyed_webhook_applied_once(
    zygote: Zygote, tmp_path: Path
) -> None:
    with TrialRunner(
        warm(agent("--keyed")), str(tmp_path / "trials"), keep_passing=True, launcher=zygote
    ) as runner:
        golden = runner.golden()
        kill = Fault.make("kill", 1, op="effect", name="POST /hook", nth=2, phase="in_doubt")
        t = runner.run(Plan((kill,), "kill", 3, 0), golden)
    assert t.ok, [str(c) for c in t.failed]
    hooks = [e for e in t.events if e.get("kind") == "POST /hook"]
    # item 1 applied, killed in doubt; attempt 2 sent it again with its key: deduplicated
    assert [(e["attempt"], e["payload"]["item"], e["applied"], e.get("killed")) for e in hooks] == [
        (1, 0, True, None),
        (1, 1, True, "in_doubt"),
        (2, 1, False, None),
        (2, 2, True, None),
    ]
    assert all(n == 1 for n in t.applied.values())
    assert len(t.applied) == 3


def test_the_http_placeholder_and_a_stranger_without_the_token(tmp_path: Path) -> None:
    # the agent gets its base URL from {http} in its command; meanwhile another local process
    # (a thread here) hammers the same port without the token: 403, never the agent's effect
    spec = AgentSpec(
        command=(
            "sh",
            "-c",
            'CRASHPOINT_HTTP="$0" exec "$1" "$2" "$3" --keyed',
            "{http}",
            "{python}",
            str(AGENT),
            "{state_dir}",
        ),
        timeout=30,
    )
    stop = threading.Event()
    codes: list[int] = []
    with TrialRunner(spec, str(tmp_path / "trials")) as runner:
        ledger = runner.ledger(str(tmp_path / "probe-history.jsonl"))
        assert ledger.token not in " ".join(ledger.urls().values())  # nothing to steal

        def stranger() -> None:
            while not stop.is_set():
                req = urllib.request.Request(  # noqa: S310 - loopback
                    ledger.urls()["http"] + "/hook", data=b'{"item": 0}', method="POST"
                )
                try:
                    urllib.request.urlopen(req, timeout=5).close()  # noqa: S310 - loopback
                except urllib.error.HTTPError as err:
                    codes.append(err.code)
                    err.close()
                stop.wait(0.02)

        t = threading.Thread(target=stranger)
        t.start()
        try:
            golden = runner.golden()
        finally:
            deadline = time.monotonic() + 10  # its first answer may come after the run
            while not codes and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            t.join(10)
        hist = (tmp_path / "trials" / "golden" / "history.jsonl").read_text().splitlines()
    assert codes
    assert set(codes) == {403}
    assert [e["kind"] for e in golden.events] == ["POST /hook"] * 3  # only the agent's
    assert sum(golden.effects.values()) == 3
    ops = [json.loads(x)["op"] for x in hist]
    assert [o for o in ops if o != "forbidden"] == ["effect"] * 3
    # the stranger's requests were refused and logged (in the history while the golden run
    # was on; its first answer may come after the run, when only the ledger's list has it)
    assert ledger.forbidden


@pytest.mark.parametrize("how", ["reset", "timeout"])
def test_a_reset_or_timeout_without_retries_fails_the_agent_cleanly(
    tmp_path: Path, how: str
) -> None:
    spec = agent("--timeout", "1", services={"http": {"routes": {"POST /hook": {"fail": how}}}})
    from crashpoint.errors import GoldenRunFailed

    with (
        TrialRunner(spec, str(tmp_path / "trials")) as runner,
        pytest.raises(GoldenRunFailed) as info,
    ):
        runner.golden()
    err = str(info.value)
    assert "item 0: failed" in err
    assert (
        ("reset" in err.lower() or "closed" in err.lower())
        if how == "reset"
        else "timed out" in err
    )


def test_the_smtp_placeholder_starts_the_sink_with_the_token(tmp_path: Path) -> None:
    spec = AgentSpec(
        command=(
            "{python}",
            "-c",
            "import os, sys; print(sys.argv[1], "
            "os.environ['CRASHPOINT_SMTP_PORT'], "
            "os.environ['CRASHPOINT_SMTP_PASSWORD'])",
            "{smtp}",
        ),
        timeout=30,
    )
    with TrialRunner(spec, str(tmp_path / "trials")) as runner:
        try:
            golden = runner.golden()
        except NotImplementedError:
            pytest.skip(
                "the SMTP sink (crashpoint.harness._standins._smtp) is not implemented here yet"
            )
        ledger = runner._ledger
        assert ledger is not None
        assert ledger.smtp is not None
        hostport, port, password = golden.output.decode().split()
        assert hostport == f"127.0.0.1:{ledger.smtp.port}"
        assert port == str(ledger.smtp.port)
        assert password == ledger.token == ledger.smtp.token


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("keyed", [False, True])
def test_a_curl_agent_against_http_is_judged_the_same_way(tmp_path: Path, keyed: bool) -> None:
    script = str(AGENT.parent / "curl_webhook.sh")
    spec = AgentSpec(
        command=("sh", script, "{http}", "{state_dir}", *(["--keyed"] if keyed else [])), timeout=30
    )
    result = campaign(spec, tmp_path)
    assert [e["kind"] for e in result.golden.events] == ["POST /hook"] * 3
    assert len(result.trials) == 6
    if keyed:
        assert result.ok, [str(c) for t in result.failures for c in t.failed]
        return
    assert not result.ok
    assert {t.plan.faults[0].arg("phase") for t in result.failures} == {"in_doubt"}
    root = result.failures[0].root_cause
    assert root is not None
    assert root.name == "exactly_once"
    assert 'DUPLICATED POST /hook {"item":' in root.message
    assert "Idempotency-Key header" in root.hint


ATTACKER = r"""
import os, re, signal, sys, time, urllib.request, urllib.error
port = sys.argv[1]
hexes, codes = set(), []
def done(*_):
    print(len(hexes), " ".join(map(str, sorted(set(codes)))), len(codes), flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    for pid in os.listdir("/proc"):  # every token-looking string another user can read
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    hexes.update(re.findall(rb"[0-9a-f]{32}", fh.read()))
            except OSError:
                pass
    tries = [("/http/hook", {})]
    for tok in sorted(hexes)[:20]:  # as a header, and as the first segment of the path
        tries += [("/http/hook", {"X-Crashpoint-Token": tok.decode()}),
                  (f"/{tok.decode()}/http/hook", {})]
    for path, headers in tries:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=b'{"item": 0}', method="POST",
            headers=headers)
        try:
            urllib.request.urlopen(req, timeout=5).close()
            codes.append(200)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
            e.close()
        except OSError:
            codes.append(0)
    time.sleep(0.05)
"""


def test_another_user_cannot_read_the_token_or_change_a_verdict(tmp_path: Path) -> None:
    # while a campaign of a keyed agent runs, a process of user nobody reads every /proc
    # cmdline and environ it can and posts the agent's effect, with and without each
    # token-looking string it found: it is refused every time, and the campaign still passes
    if os.geteuid() != 0:
        pytest.skip("needs root to run the attacker as another user (CI runs as root)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not found: cannot run the attacker as another user")
    nobody = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if subprocess.run([*nobody, sys.executable, "-c", ""], check=False).returncode != 0:
        pytest.skip("cannot run Python as user nobody here")
    spec = AgentSpec(  # the base URL in its command line, as {http} is meant to be used
        command=(
            "sh",
            "-c",
            'CRASHPOINT_HTTP="$0" "$1" "$2" "$3" --keyed',  # sh stays, its argv too
            "{http}",
            "{python}",
            str(AGENT),
            "{state_dir}",
        ),
        timeout=30,
    )
    with TrialRunner(spec, str(tmp_path / "warm")) as runner:  # the port the campaign uses
        port = str(urllib.parse.urlsplit(runner.ledger(str(tmp_path / "warm.jsonl")).http_url).port)
        attacker = subprocess.Popen(
            [*nobody, sys.executable, "-c", ATTACKER, port],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            golden = runner.golden()
            trials = [
                runner.run(Plan((Fault.make("kill", 1, op="effect", phase=ph),), "k", 1, i), golden)
                for i, ph in enumerate(("before", "in_doubt"))
            ]
        finally:
            time.sleep(0.3)  # at least one more round against the last trial's token
            attacker.terminate()
            out, _ = attacker.communicate(timeout=60)
    codes, tries = out.split()[1:-1], int(out.split()[-1])
    assert tries > 0, out
    assert codes == ["403"], out  # every injection refused, none applied
    assert [e["kind"] for e in golden.events] == ["POST /hook"] * 3  # only the agent's
    assert all(t.ok for t in trials), [str(c) for t in trials for c in t.failed]


HOLDER = r"""
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = []
for port in map(int, sys.argv[1:]):
    for i in range(300):
        s = socket.create_connection(("127.0.0.1", port))
        if i % 3 == 1:
            s.sendall(b"POST /http/publish HTTP/1.1\r\nContent-Length: 99\r\n")  # half-sent
        elif i % 3 == 2:
            s.sendall(b"EHLO outsider\r\n")
        held.append(s)
print(len(held), flush=True)
while True:  # keep them open; reopen what the stand-ins closed, as a flood would
    time.sleep(0.2)
    for k, s in enumerate(held):
        try:
            s.setblocking(False)
            if s.recv(4096) == b"":
                raise OSError
        except BlockingIOError:
            continue
        except OSError:
            s.close()
            try:
                held[k] = socket.create_connection(("127.0.0.1", int(sys.argv[1 + k // 300])))
            except OSError:
                pass
"""


def test_300_idle_outside_connections_to_each_stand_in_do_not_change_a_verdict(
    tmp_path: Path,
) -> None:
    spec = AgentSpec(
        command=(
            "{python}",
            "-m",
            "crashpoint.agents.demo",
            "--state",
            "{state_dir}",
            "--smtp",
            "{smtp}",
            "--webhook",
            "{http}/publish",
        ),
        timeout=60,
    )
    with TrialRunner(spec, str(tmp_path / "trials")) as runner:
        ledger = runner.ledger(str(tmp_path / "warm.jsonl"))
        assert ledger.smtp is not None
        ports = [str(urllib.parse.urlsplit(ledger.http_url).port), str(ledger.smtp.port)]
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, *ports],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "600"
            deadline = time.monotonic() + 30  # the flood is there: the HTTP front turns it away
            while ledger.refused["guests"] < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ledger.refused["guests"] >= 200, dict(ledger.refused)
            golden = runner.golden()
            trials = [
                runner.run(Plan((Fault.make("kill", 1, op="effect", phase=ph),), "k", 1, i), golden)
                for i, ph in enumerate(("before", "in_doubt"))
            ]
            smtp_refused = dict(ledger.smtp.refused)
        finally:
            os.killpg(holder.pid, 9)
            holder.wait()
            holder.stdout.close()  # type: ignore[union-attr]
    kinds = sorted({str(e.get("kind")) for e in golden.events if e["op"] == "effect"})
    assert kinds == ["POST /publish", "mail"], kinds
    assert all(t.ok for t in trials), [str(c) for t in trials for c in t.failed]
    # the flood was there at the mail stand-in too (it never was the agent)
    assert smtp_refused.get("guests", 0) > 200, smtp_refused
