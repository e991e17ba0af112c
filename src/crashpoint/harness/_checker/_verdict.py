"""One root cause per failing trial, with a fix hint drawn from the evidence.

The checks of Contract 2 are judged independently, so one bug often fails several: an agent
that never finishes also has no output and "loses" every effect it did not reach. This module
marks each failure that follows from another as its consequence (``CheckResult.cause``) and
gives every failure a hint (``CheckResult.hint``) built from what the trial recorded: the keys
of a duplicated effect, the kill that left it in doubt, a full disk on an earlier attempt's
stderr. :attr:`TrialResult.root_cause` is then the first failure, in :data:`ROOT_ORDER`, that
is not a consequence.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._checker._silent import HINT_SILENT_FAILURE
from crashpoint.harness._spec import CheckResult, canonical

__all__ = ["disk_trouble", "explain"]

_DISK = re.compile(
    r"No space left on device|ENOSPC|File too large|EFBIG|Disk quota exceeded"
    r"|EDQUOT",
    re.IGNORECASE,
)

_HINTS = {
    "single_writer": "take an exclusive OS lock (flock) on the run's state before doing any "
    "work and hold it until exit; a second resumer must wait or refuse",
    "no_secret_leak": "a secret from the agent's environment reached its state folder: never "
    "persist os.environ or a config object holding secrets "
    "(crashpoint.checkpoint keeps Secret values off disk)",
    "within_disk_budget": "the state kept growing: snapshot and delete the segments a "
    "snapshot covers, and prune old runs",
    "no_orphans": "a process the agent started outlived it: wait for child processes before "
    "exiting and do not detach them (setsid, double fork)",
    "corruption_detected": "check the state when loading it (checksums) and either roll back "
    "to the last good checkpoint or refuse with a clear error (a "
    "message saying the state is corrupt, or exit 65)",
    "no_silent_failure": HINT_SILENT_FAILURE,
    "no_retry_storm": "cap the retries of a failing request (e.g. 3 tries) and back off "
    "between them (exponential, with jitter; honour Retry-After), then "
    "give up with an error: a restart resumes the run",
    "resumes_from_last_completed": "on restart, load the last checkpoint first and start at "
    "the first step not completed; report step_completed only "
    "once the step's result is durable (written and fsynced)",
    "no_repeated_llm_calls": "the model was asked again after a restart and billed again: "
    "save each model reply in the checkpoint before the next call and "
    "reuse it on resume; if re-asking is by design, set "
    "expect.no_repeated_llm_calls to warn or a token budget",
}

#: The hint when the crash-free run itself asked the model the same thing twice.
_GOLDEN_LLM_HINT = (
    "the crash-free run asked the model the same thing twice: a node run again (on resume "
    "after interrupt(), or a retry) re-asks unless the reply is kept in its state; call the "
    "model after the interrupt, or in a node of its own; if asking twice is by design, set "
    "expect.no_repeated_llm_calls to warn or a token budget"
)

#: The hint when resume was judged from calls (the agent names no step).
_RESUME_BY_CALLS_HINT = (
    "on restart, load the last checkpoint and go on after the last call "
    "whose result it holds: save each call's result (a model reply, an "
    "effect's acknowledgement) before making the next call"
)


def disk_trouble(facts: TrialFacts) -> str:
    """The first attempt whose stderr says the disk was full (or a file too large): where
    and its line, or ""."""
    for a in facts.attempts:
        text = a.stderr[-65536:].decode("utf-8", "replace")
        m = _DISK.search(text)
        if m:
            line = next((ln for ln in text.splitlines() if m.group(0) in ln), m.group(0))
            return f"attempt {a.number} hit a full disk (its stderr: {line.strip()[:160]!r})"
    return ""


def _problems(c: CheckResult, tag: str) -> bool:
    return f"{tag} " in c.message


def _sends(facts: TrialFacts, payload_text: str) -> list[dict[str, Any]]:
    return [
        e
        for e in facts.events
        if e["op"] == "effect"
        and f"{e.get('kind')} {canonical(e.get('payload'))[:80]}" == payload_text
    ]


def _changed_payload(facts: TrialFacts, kind_payload: str) -> str:
    """For an effect ``kind_payload`` (as a LOST message names it): how it was lost if its key
    had already been applied with another payload (the service deduplicated the key), else
    ""."""
    first: dict[str, dict[str, Any]] = {}
    for e in facts.events:
        if e["op"] != "effect" or e.get("keyless") or e.get("key") is None:
            continue
        key = str(e.get("key"))
        if e.get("applied"):
            first.setdefault(key, e)
            continue
        text = f"{e.get('kind')} {canonical(e.get('payload'))[:80]}"
        was = first.get(key)
        if text == kind_payload and was is not None:
            return (
                f"key {key[:40]!r} was applied with payload "
                f"{canonical(was.get('payload'))[:60]} (attempt {was['attempt']}) and sent "
                f"again after the restart with a different payload "
                f"{canonical(e.get('payload'))[:60]} (attempt {e['attempt']}), so the service "
                "deduplicated it and the new payload was never applied: build the payload "
                "only from saved state (no time, attempt number or random value in it), so a "
                "retry sends the same thing"
            )
    return ""


def _exactly_once_hint(facts: TrialFacts, c: CheckResult) -> str:
    msg = c.message
    if "DUPLICATED in the golden run" in msg:
        return (
            "the crash-free run itself applied it twice: the step that sends it ran again "
            "after an earlier run of it did not complete (LangGraph runs a node again from its "
            "start when it resumes after interrupt(); a retried node does too): send it after "
            "the interrupt, or give it a key from the run id and the step so the re-run is "
            "deduplicated"
        )
    if "LOST in the golden run" in msg:
        return (
            "the crash-free run sent one key with two payloads: the service keeps the first; "
            "give each distinct effect its own key, and keep a retried effect's payload "
            "identical"
        )
    if "no key" in msg:
        http = (
            " (an HTTP call: send it as the Idempotency-Key header)"
            if re.search(r"DUPLICATED (POST|PUT|PATCH|DELETE) /", msg)
            else ""
        )
        return (
            "the effect has no key, so its retry after the crash was applied again: pass "
            "a key derived from the run id ($CRASHPOINT_RUN_ID) and the step, e.g. "
            f'f"{{run_id}}:{{step}}:send_email"{http}'
        )
    m = re.search(r"under \d+ different keys (.*?)(?:;|\. Effects seen)", msg)
    if m:
        return (
            f"the key changes between attempts ({m.group(1)}): derive it from the run id "
            "and the step, never from the time, a counter in memory or a random value"
        )
    if "DUPLICATED" in msg:
        return "the effect was applied again after a restart: give it a stable key"
    if "LOST" in msg:
        lost = re.search(r"LOST (.+?) applied", msg)
        changed = _changed_payload(facts, lost.group(1)) if lost else ""
        if changed:
            return changed
        sends = _sends(facts, lost.group(1)) if lost else []
        killed = [e for e in sends if e.get("killed") == "before"]
        if killed:
            e = killed[-1]
            return (
                f"attempt {e['attempt']} was killed just before this effect was applied and "
                "no later attempt sent it again: on restart, retry an effect whose result "
                "was not recorded (with the same key)"
            )
        if lost and "UNEXPECTED " + lost.group(1).split(" ", 1)[0] + " " in msg:
            kind = lost.group(1).split(" ", 1)[0]
            return (
                f"a {kind} effect was applied with a payload the golden run never had, and "
                "the golden run's payload was never applied: what the effect carries changed "
                "after the restart (state the crash or a retry lost, or rebuilt differently): "
                "build the payload only from durable state, so a resumed run sends what a "
                "crash-free run sends"
            )
        if facts.completed:
            return (
                "the run completed without sending it: the step was recorded as done "
                "before its effect was applied (record the intent, apply the effect, then "
                "complete the step)"
            )
        return "the run ended before it sent the effect"
    if "UNEXPECTED" in msg:
        return (
            "an effect whose payload the golden run never had: keep payloads "
            "deterministic (no timestamps, random ids or attempt numbers in them)"
        )
    return ""


def _completes_hint(facts: TrialFacts, disk: str) -> str:
    fin = facts.final
    if fin is None:
        return ""
    if disk:
        return (
            f"{disk}: on ENOSPC/EFBIG stop with a documented exit code "
            "(expect.fail_stop_codes) and resume once space is freed"
        )
    if fin.timed_out:
        return (
            f"attempt {fin.number} hung until its timeout: a lock never released, or a "
            "wait on something the crash took away?"
        )
    if facts.plan.corrupts:
        return (
            "after a corruption, exit non-zero with a message saying the state is "
            "corrupt (a clear refusal: expect.refuse_patterns) or repair and finish"
        )
    return "its last attempt failed: see its stderr (attempt-N.stderr in the trial folder)"


def _same_output_hint(facts: TrialFacts, message: str = "") -> str:
    if not facts.completed:
        return ""
    if "cut a streamed reply" in message or "streamed reply(ies) cut" in message:
        return (
            "a cut stream ends without a finish_reason (chat: choices[0].finish_reason; "
            "responses: no response.completed event) and without data: [DONE] (Anthropic "
            "messages: without message_stop); the OpenAI and Anthropic SDKs end the "
            "iteration without an error there: check it, throw the partial text away and ask "
            "again (a retry after a cut is not a re-billed call)"
        )
    got = facts.attempts[-1].stdout.decode("utf-8", "replace").splitlines()
    want = facts.golden.output.decode("utf-8", "replace").splitlines()
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return (
                f"line {k + 1} differs ({g[:60]!r}, golden {w[:60]!r}): is it built from "
                "state lost in the crash, or from the time or randomness?"
            )
    return f"{len(got)} lines, golden {len(want)}: part of the output was lost or repeated"


def explain(facts: TrialFacts, results: list[CheckResult]) -> list[CheckResult]:
    """``results`` with causes and hints filled in (see the module docstring)."""
    by = {c.name: c for c in results}
    failed = {n for n, c in by.items() if not c.ok}
    cause: dict[str, str] = {}
    eo = by.get("exactly_once")
    only_lost = (
        eo is not None
        and not eo.ok
        and _problems(eo, "LOST")
        and not (_problems(eo, "DUPLICATED") or _problems(eo, "UNEXPECTED"))
    )
    dups = eo is not None and not eo.ok and _problems(eo, "DUPLICATED")
    # a crash after a corruption: no clear refusal is the root, not finishing follows
    top = "completes"
    if (
        "completes" in failed
        and "corruption_detected" in failed
        and "neither repaired nor refused" in by["corruption_detected"].message
    ):
        cause["completes"] = top = "corruption_detected"
    # a crash loop: not finishing is what looping until the restarts ran out looks like
    if "crash_loop" in failed and "completes" in failed and "completes" not in cause:
        cause["completes"] = "crash_loop"
    if "completes" in failed:
        if "same_output" in failed and "did not complete" in by["same_output"].message:
            cause["same_output"] = top
        if only_lost:
            cause["exactly_once"] = top
    # a duplicate needs a key that changed (or none): that, not the corruption, is the bug
    if (
        dups
        and "corruption_detected" in failed
        and "wrong effects" in by["corruption_detected"].message
    ):
        cause["corruption_detected"] = "exactly_once"
    # exit 0 with work undone: the missing output and effects follow from it
    if "no_silent_failure" in failed:
        if "same_output" in failed:
            cause.setdefault("same_output", "no_silent_failure")
        if only_lost:
            cause.setdefault("exactly_once", "no_silent_failure")
    # a step reported completed ran again: its effects ran again with it
    rerun = "resumes_from_last_completed" in failed and any(
        w in by["resumes_from_last_completed"].message
        for w in ("re-ran a completed step", "re-made a completed call")
    )
    if dups and rerun:
        cause["exactly_once"] = "resumes_from_last_completed"
    # an upstream step re-run re-asks the model: the resume point is the bug
    if rerun and "no_repeated_llm_calls" in failed:
        cause["no_repeated_llm_calls"] = "resumes_from_last_completed"
    disk = disk_trouble(facts)
    out = []
    for c in results:
        if c.ok and not c.warning:
            out.append(c)
            continue
        if c.name == "exactly_once":
            hint = _exactly_once_hint(facts, c)
        elif c.name == "completes":
            hint = _completes_hint(facts, disk)
        elif c.name == "same_output":
            hint = _same_output_hint(facts, c.message)
        elif c.name in ("crash_loop", "replay_divergence"):
            hint = c.hint  # the check knows which way it went wrong
        elif c.name == "resumes_from_last_completed" and "re-made a completed call" in c.message:
            hint = _RESUME_BY_CALLS_HINT
        elif c.name == "no_repeated_llm_calls" and "in the golden run (crash-free)" in c.message:
            hint = _GOLDEN_LLM_HINT
        elif c.name == "single_writer" and (m := re.search(r"both changed (\S+)", c.message)):
            hint = (
                f"two live processes changed {m.group(1)} at once: take an exclusive OS lock "
                "(flock) on the run's state before doing any work and hold it until exit, so a "
                "second resumer waits or refuses (LangGraph's SqliteSaver takes none: two "
                "processes on one thread both write its database)"
            )
        else:
            hint = _HINTS.get(c.name, "")
        power = facts.extra.get("power")
        if power and not cause.get(c.name):
            if c.name == "resumes_from_last_completed" and "re-ran a completed step" in c.message:
                c = dataclasses.replace(c, message="acknowledged but not durable: " + c.message)
            why = power.get("explain") or "the power cut lost data that was not fsynced"
            hint = f"after the power cut ({power.get('label')}): {why}" + (
                f"; then: {hint}" if hint else ""
            )
        backing = [o for o in facts.extra.get("backing") or [] if o.get("where")]
        if (
            backing
            and c.name == "resumes_from_last_completed"
            and "re-ran a completed step" in c.message
            and not cause.get(c.name)
        ):
            o = backing[0]
            c = dataclasses.replace(c, message="acknowledged but not durable: " + c.message)
            hint = (
                f"after the {o['what']} at {o['where']}: a step whose write failed meanwhile "
                "was reported completed; report step_completed only once its write committed: "
                "retry the write (SQLite: a busy timeout, e.g. sqlite3.connect(path, "
                "timeout=30); PostgreSQL: reconnect and run the transaction again, with "
                "backoff) or let the error end the attempt with a non-zero exit"
            )
        if disk and c.name != "completes" and disk not in hint:
            hint = f"{hint}; note: {disk}" if hint else f"note: {disk}"
        out.append(dataclasses.replace(c, cause=cause.get(c.name, ""), hint=hint))
    return out
