"""The OpenAI Agents SDK and Pydantic AI hooks (issue 27), run as shipped through the harness.

``examples/openai-agents/`` and ``examples/pydantic-ai/``: one billing assistant per runtime,
its conversation kept by the runtime's own means (a ``SQLiteSession``; a message history file
written after each node of ``agent.iter``), its model the LLM stand-in (a scripted tool call,
then a confirmation), its tool POSTing an invoice to the HTTP stand-in. The adapter reports
each model call and tool call: started, returned (before the conversation write) and
completed (once the write returned). Under ``kill: {at: every-boundary}``:

* the campaign plans one trial per boundary, the tool call's among them (started, the POST,
  returned, completed);
* killed after the tool posted and before the conversation write, the resumed run calls the
  tool again: without a key the invoice is applied twice (``exactly_once`` fails); with the
  tool call's id as the key the stand-in deduplicates it (the trial passes).

Each runtime's import costs seconds, so each runtime gets one zygote (fork mode: it also
pre-imports what the runtime imports lazily, ``LAZY``) and each scenario file one golden run for
the module; the quick tests run the golden run and the one trial that matters,
the whole sweeps are ``slow``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crashpoint.harness import Campaign, Golden, Plan, TrialResult, Zygote, load_scenario

ROOT = Path(__file__).resolve().parents[2]
POST = "POST /invoices"

#: runtime -> (example folder, module it needs, extra, the adapter's event prefix, model step)
RUNTIMES = {
    "openai-agents": ("agents", "openai-agents", "openai-agents", "model:billing"),
    "pydantic-ai": ("pydantic_ai", "pydantic-ai", "pydantic-ai", "model:gpt-4o-mini"),
}


def _runtime(name: str) -> object:
    module, extra = RUNTIMES[name][0], RUNTIMES[name][1]
    missing = importlib.util.find_spec(module) is None
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            missing, reason=f"the example needs {module} (pip install 'crashpoint[{extra}]')"
        ),
        id=name,
    )


RUNTIME_PARAMS = [_runtime(n) for n in RUNTIMES]

#: What each runtime imports lazily in a run (its model client, the HTTP stack), beyond the
#: script's top-level imports the zygote does: the modules learning would add after the first
#: golden run (``Zygote.learn``, on here: it learns what this list misses), listed so the
#: zygote has them before the first golden run (learned, they would be imported by that run,
#: the vetting child and the zygote). Pre-imported best-effort (``?``), they save each forked
#: attempt 0.5-3 s of CPU (pydantic-ai's model client imports ~470 modules of openai.types).
LAZY = {
    "openai-agents": (
        "sqlite3",
        "agents.memory.sqlite_session",
        "httpcore2",
        "h11",
        "truststore",
        "anyio._backends._asyncio",
        "anyio.streams.tls",
        "openai.resources.responses",
        "openai.lib.streaming.responses",
        "concurrent.futures.thread",
        "encodings.idna",
    ),
    "pydantic-ai": (
        "pydantic_ai.models.openai",
        "pydantic_ai.providers.openai",
        "openai.types",
        "openai.resources.responses.responses",
        "openai.lib.streaming.responses",
        "genai_prices.data",
        "genai_prices.validation",
        "genai_prices.decompose",
        "anyio._backends._asyncio",
        "anyio.streams.stapled",
        "concurrent.futures.thread",
        "encodings.idna",
        "queue",
    ),
}


@dataclass
class _Example:
    campaign: Campaign
    golden: Golden
    plans: list[Plan]

    def run(self, *labels: str) -> list[TrialResult]:
        """The trials whose kill is at one of ``labels`` (``op:name (phase)``), run by the
        campaign's trial runner against the module's golden run (``Campaign.run(golden=)``
        runs the golden run again: in fork mode a golden run does not record for kill
        replays, so the given one reads as not recorded for the kill family)."""
        plans = [p for p in self.plans if _label(p) in labels]
        assert len(plans) == len(labels), [_label(p) for p in self.plans]
        with self.campaign.runner() as runner:
            return [runner.run(p, self.golden) for p in plans]


def _label(plan: Plan) -> str:
    """``op:name (phase)``, with `` #N`` after the name from its second occurrence on."""
    (kill,) = plan.faults
    nth = int(kill.arg("nth", 1))
    return f"{kill.arg('label')}{f' #{nth}' if nth > 1 else ''} ({kill.arg('phase')})"


class _Examples:
    """One campaign and golden run per scenario file and one zygote per runtime (its two
    scenario files run one script), for the whole module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, _Example] = {}
        self.zygotes: dict[str, Zygote] = {}  # runtime -> its zygote (one script, two variants)

    def get(self, runtime: str, variant: str) -> _Example:
        key = f"{runtime}/{variant}"
        if key not in self.open:
            sc = load_scenario(ROOT / "examples" / runtime / f"{variant}.scenario.yaml")
            warm = (*(sc.agent.warm or ()), *(f"?{m}" for m in LAZY[runtime]))
            agent = dataclasses.replace(sc.agent, warm=warm)
            z = self.zygotes.get(runtime)
            if z is None:
                z = self.zygotes[runtime] = Zygote.for_agent(agent)
                z.__enter__()
            campaign = Campaign(
                agent,
                [f.family for f in sc.families],
                str(self.root / runtime / variant),
                name=sc.name,
                seed=sc.seed,
                restarts=sc.restarts,
                expect=sc.expect,
                launcher=z,
            )
            golden = campaign.run(only=[]).golden
            self.open[key] = _Example(campaign, golden, campaign.plans(golden))
        return self.open[key]

    def close(self) -> None:
        for z in self.zygotes.values():
            z.__exit__(None, None, None)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Examples]:
    ex = _Examples(tmp_path_factory.mktemp("sdk-hooks"))
    yield ex
    ex.close()


def _seen(golden: Golden) -> list[tuple[str, str]]:
    return [
        (str(e["op"]), str(e.get("step") or e.get("name") or e.get("kind"))) for e in golden.events
    ]


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_each_model_call_and_tool_call_is_a_boundary(runtime: str, examples: _Examples) -> None:
    prefix, model = RUNTIMES[runtime][2], RUNTIMES[runtime][3]
    ex = examples.get(runtime, "broken")
    seen = _seen(ex.golden)
    tool = [
        ("step_started", "tool:send_invoice"),
        ("effect", POST),
        ("event", f"{prefix}:tool:send_invoice:returned"),
    ]
    # two model calls (the tool call, the confirmation) around one tool call, in order
    assert [s for s in seen if s[0] == "step_started"] == [
        ("step_started", model),
        ("step_started", "tool:send_invoice"),
        ("step_started", model),
    ], seen
    i = seen.index(tool[0])
    assert seen[i : i + 3] == tool, seen
    assert seen.count(("event", f"{prefix}:{model}:returned")) == 2, seen
    # completed only after the conversation write: the tool after it returned, each model call
    # after it started; every step completed by the end
    done = [s for op, s in seen if op == "step_completed"]
    assert sorted(done) == sorted([model, "tool:send_invoice", model]), seen
    assert seen.index(("step_completed", "tool:send_invoice")) > i + 2
    assert ex.golden.output.startswith(b"Done: acme has been invoiced 4200 cents.")
    # kill at every boundary: one trial per boundary, the tool call's among them
    labels = [_label(p) for p in ex.plans]
    assert len(labels) == len(ex.golden.boundaries()) == len(set(labels)), labels
    for want in (
        "step_started:tool:send_invoice (before)",
        f"effect:{POST} (before)",
        f"effect:{POST} (in_doubt)",
        f"event:{prefix}:tool:send_invoice:returned (before)",
        "step_completed:tool:send_invoice (before)",
    ):
        assert want in labels, labels


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_a_keyless_effect_repeated_after_a_kill_before_the_write_is_caught(
    runtime: str, examples: _Examples
) -> None:
    prefix = RUNTIMES[runtime][2]
    kill = f"event:{prefix}:tool:send_invoice:returned (before)"
    (t,) = examples.get(runtime, "broken").run(kill)
    assert t.exercised, t.landed()
    assert t.root_cause is not None, t.to_json()
    assert t.root_cause.name == "exactly_once", t.to_json()
    assert f"DUPLICATED {POST}" in t.root_cause.message
    assert [c.name for c in t.failed] == ["exactly_once"], [str(c) for c in t.failed]
    posts = [bool(e["applied"]) for e in t.events if e.get("kind") == POST]
    assert posts == [True, True]  # the resumed run called the tool again


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_the_tool_call_id_as_key_passes_the_same_kill(runtime: str, examples: _Examples) -> None:
    prefix = RUNTIMES[runtime][2]
    kill = f"event:{prefix}:tool:send_invoice:returned (before)"
    (t,) = examples.get(runtime, "fixed").run(kill)
    assert t.exercised, t.landed()
    assert t.ok, [str(c) for c in t.failed]
    posts = [bool(e["applied"]) for e in t.events if e.get("kind") == POST]
    assert posts == [True, False]  # called again, deduplicated by its key


# slow: fast cover: the three tests above (the boundaries, the kill between effect and write)
@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
@pytest.mark.parametrize("variant", ["broken", "fixed"])
def test_the_whole_sweep(runtime: str, variant: str, examples: _Examples) -> None:
    """Every boundary: the broken agent fails only by a duplicated invoice, only in trials
    killed after the POST and before the conversation write; the fixed one passes them all,
    and no trial of either breaks resumes_from_last_completed (the hooks report completion
    only once the write returned)."""
    ex = examples.get(runtime, variant)
    result = ex.campaign.run(golden=ex.golden)
    assert len(result.trials) == len(ex.plans)
    assert all(t.exercised for t in result.trials)
    failing = [t for t in result.trials if not t.ok]
    for t in failing:
        assert [c.name for c in t.failed] == ["exactly_once"], [str(c) for c in t.failed]
    if variant == "fixed":
        assert result.ok, [str(c) for t in failing for c in t.failed]
        return
    prefix = RUNTIMES[runtime][2]
    labels = {_label(t.plan) for t in failing}
    assert {
        f"effect:{POST} (in_doubt)",
        f"event:{prefix}:tool:send_invoice:returned (before)",
    } <= labels, labels
    assert "step_started:tool:send_invoice (before)" not in labels
    assert not result.ok


DOC = ROOT / "docs" / "how-to" / "crash-test-an-agent-sdk.md"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_docs_show_the_examples_as_shipped() -> None:
    """The page's code is the shipped agents' (the SDK's block from examples/openai-agents,
    Pydantic AI's from examples/pydantic-ai), and its commands name the shipped scenarios,
    which the tests above run."""
    blocks = FENCE.findall(DOC.read_text(encoding="utf-8"))
    py = [body for tag, _info, body in blocks if tag == "python"]
    assert len(py) == 2
    for runtime, block in zip(("openai-agents", "pydantic-ai"), py, strict=True):
        agent = (ROOT / "examples" / runtime / "agent.py").read_text(encoding="utf-8")
        shipped = {line.strip() for line in agent.splitlines()}
        for line in block.splitlines():
            assert not line.strip() or line.strip() in shipped, f"{runtime}: {line}"
    commands = [line for tag, _i, body in blocks if tag == "console" for line in body.split("\n")]
    assert [c for c in commands if c] == [
        f"$ crashpoint run examples/{r}/{v}.scenario.yaml"
        for v in ("broken", "fixed")
        for r in ("openai-agents", "pydantic-ai")
    ]
