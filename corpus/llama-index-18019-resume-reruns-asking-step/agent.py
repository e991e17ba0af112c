"""A LlamaIndex workflow that pauses for a human's approval and survives a restart while paused.

The refund desk's workflow, written the way LlamaIndex's human-in-the-loop docs and the report
show it: ``hold_refund`` places a hold on the refund (POST ``{http}/holds``) and returns an
``InputRequiredEvent`` asking the reviewer to approve it; ``pay_refund`` takes the reviewer's
``HumanResponseEvent`` and pays the refund (POST ``{http}/refunds``). Both requests carry an
Idempotency-Key made of the refund's id and the step.

The worker streams the run's events. When the workflow asks for input, it saves the run's
``Context`` (``ctx.to_dict()``, JSON) to ``--state``/paused.json before it waits for the answer:
a reviewer can take hours, and a worker that dies meanwhile must not lose the run. Then it
passes the reviewer's answer (``--answer``; in production a message from the review queue) to
the run. A worker that starts and finds paused.json resumes the paused run the documented way:
``Context.from_dict(workflow, data)``, ``workflow.run(ctx=ctx)``, and sends the answer. When the
run ends, paused.json is removed and the result is printed.

Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --state DIR --http URL [--refund R-18019] [--answer yes]
"""

# no `from __future__ import annotations`: LlamaIndex < 0.12.27 reads step signatures eagerly
import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any

from llama_index.core.workflow import (
    Context,
    HumanResponseEvent,
    InputRequiredEvent,
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


class RefundDesk(Workflow):
    @step
    async def hold_refund(self, ctx: Context, ev: StartEvent) -> InputRequiredEvent:
        refund, amount = ev.refund, ev.amount
        await ctx.set("refund", refund)
        await ctx.set("amount", amount)
        _post("/holds", {"refund": refund, "amount": amount}, f"{refund}:hold_refund")
        return InputRequiredEvent(prefix=f"Approve refund {refund} of {amount} EUR? ")

    @step
    async def pay_refund(self, ctx: Context, ev: HumanResponseEvent) -> StopEvent:
        refund, amount = await ctx.get("refund"), await ctx.get("amount")
        if ev.response.strip().lower() != "yes":
            return StopEvent(result=f"refund {refund} declined")
        _post("/refunds", {"refund": refund, "amount": amount}, f"{refund}:pay_refund")
        return StopEvent(result=f"refund {refund} of {amount} EUR paid")


def _save(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def serve(state: str, refund: str, answer: str) -> str:
    wf = RefundDesk(timeout=60)
    paused = os.path.join(state, "paused.json")
    if os.path.exists(paused):  # a paused run: resume it from its saved context
        with open(paused, encoding="utf-8") as f:
            ctx = Context.from_dict(wf, json.load(f))
        handler = wf.run(ctx=ctx)
        handler.ctx.send_event(HumanResponseEvent(response=answer))
    else:
        handler = wf.run(refund=refund, amount=120)
    async for ev in handler.stream_events():
        if isinstance(ev, InputRequiredEvent):
            _save(paused, handler.ctx.to_dict())  # the pause survives a crash
            handler.ctx.send_event(HumanResponseEvent(response=answer))
    result = str(await handler)
    os.remove(paused)
    return result


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the paused run's context")
    ap.add_argument("--http", required=True, help="base URL of the payments service")
    ap.add_argument("--refund", default="R-18019", help="the refund's id")
    ap.add_argument("--answer", default="yes", help="the reviewer's answer")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    print(asyncio.run(serve(args.state, args.refund, args.answer)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
