"""A LlamaIndex workflow that fans out two checks and joins them, snapshotted as it goes.

A loan desk's workflow: ``receive`` registers the application (POST ``{http}/applications``)
and fans it out; ``check_credit`` and ``check_identity`` run side by side (the identity
provider takes half a second); ``decide`` joins their results with ``ctx.collect_events`` (it
reports each result it is still waiting on to the event stream) and files the decision (POST
``{http}/decisions``). Both requests carry an Idempotency-Key made of the application's id and
the step.

The worker streams the run's events and saves the run's ``Context`` (``ctx.to_dict()``, JSON)
to ``--state``/run.json on each progress event: the documented way to save a workflow mid-run
and restore it later. A worker that starts and finds run.json resumes that run
(``Context.from_dict(workflow, data)``, ``workflow.run(ctx=ctx)``). When the run ends, run.json
is removed and the decision is printed.

Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --state DIR --http URL [--application L-18304]
"""

# no `from __future__ import annotations`: LlamaIndex reads step signatures at class creation
import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any, Optional, Union

from llama_index.core.workflow import (
    Context,
    Event,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)

HTTP = ""


def _post(path: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        r.read()


class Applied(Event):
    application: str
    amount: int


class CreditChecked(Event):
    score: int


class IdentityChecked(Event):
    verified: bool


class Progress(Event):
    msg: str


class LoanDesk(Workflow):
    @step
    async def receive(self, ctx: Context, ev: StartEvent) -> Applied:
        app, amount = ev.application, ev.amount
        await ctx.set("application", app)
        _post("/applications", {"application": app, "amount": amount}, f"{app}:receive")
        return Applied(application=app, amount=amount)

    @step
    async def check_credit(self, ev: Applied) -> CreditChecked:
        return CreditChecked(score=710 if ev.amount < 50_000 else 640)

    @step
    async def check_identity(self, ev: Applied) -> IdentityChecked:
        await asyncio.sleep(0.5)  # the identity provider's answer
        return IdentityChecked(verified=True)

    @step
    async def decide(  # typing.Union/Optional: LlamaIndex 0.12 reads these at class creation
        self,
        ctx: Context,
        ev: Union[CreditChecked, IdentityChecked],  # noqa: UP007
    ) -> Optional[StopEvent]:  # noqa: UP045
        got = ctx.collect_events(ev, [CreditChecked, IdentityChecked])
        if got is None:
            ctx.write_event_to_stream(Progress(msg=f"{type(ev).__name__} in, waiting"))
            return None
        credit, identity = got
        app = await ctx.get("application")
        verdict = "approved" if credit.score >= 700 and identity.verified else "declined"
        _post("/decisions", {"application": app, "verdict": verdict}, f"{app}:decide")
        return StopEvent(result=f"application {app} {verdict}")


def _save(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def serve(state: str, application: str) -> str:
    wf = LoanDesk(timeout=60)
    snapshot = os.path.join(state, "run.json")
    if os.path.exists(snapshot):  # a run in progress: resume it from its snapshot
        with open(snapshot, encoding="utf-8") as f:
            handler = wf.run(ctx=Context.from_dict(wf, json.load(f)))
    else:
        handler = wf.run(application=application, amount=20_000)
    async for ev in handler.stream_events():
        if isinstance(ev, Progress):
            _save(snapshot, handler.ctx.to_dict())  # the run survives a crash from here
    result = str(await handler)
    os.remove(snapshot)
    return result


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the run's snapshot")
    ap.add_argument("--http", required=True, help="base URL of the loan services")
    ap.add_argument("--application", default="L-18304", help="the application's id")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    print(asyncio.run(serve(args.state, args.application)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
