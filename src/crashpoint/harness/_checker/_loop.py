"""``crash_loop``: under a fault that hits every attempt, the agent stops instead of looping.

A persistent fault (a family's ``every_attempt: true``) hits every attempt of the trial at the
same point: a poison step, a command that takes the host down with it (an agent that reboots
its own machine, then re-runs the interrupted reboot after every restart). No restart can get
past it, so the agent must stop: give up with a non-zero exit that says why, dead-letter the
run, or refuse to start again; and, started again after that, refuse again without repeating
its effects. :func:`loop_of` tells each attempt's story from the trial's facts (what it did,
how it ended, whether the fault hit it) and finds where the agent stopped;
:func:`check_crash_loop` judges it, and :func:`gave_up` is what ``completes``,
``same_output`` and ``exactly_once`` accept as a clear stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._spec import Attempt, CheckResult, canonical, event_name

__all__ = ["Loop", "Story", "check_crash_loop", "gave_up", "loop_of", "loop_text"]

NAME = "crash_loop"
#: The reference library's exit code for a dead-lettered run (crashpoint.checkpoint's
#: ``EXIT_CODES["dead"]``, EX_UNAVAILABLE): a stop even in an attempt the fault hit.
DEAD_LETTER_CODE = 69
#: At most this many attempts are told in a message (the first ones and the last one); the
#: trial folder's loop.txt tells them all.
_TOLD = 4
#: At most this many things an attempt did are named in its story.
_DID = 4

HINT_LOOP = (
    "cap the attempts: count them in the run's durable state (crashpoint.checkpoint counts "
    "them: run.attempt) and, after K, stop with a non-zero exit and a message on stderr "
    "saying it gave up, or dead-letter the run (the library's RunDeadLettered, exit 69; or "
    "restart it under crashpoint.checkpoint.Supervisor(max_attempts=K)); never re-send an "
    "interrupted command blindly after a restart: record its intent first, and on restart "
    "reconcile it (did it happen?) instead of sending it again"
)
HINT_STICK = (
    "the give-up did not stick: record it durably before exiting (dead-letter the run: the "
    "library then refuses to open it again, raising RunDeadLettered, exit 69), so that every "
    "later start refuses at once without doing anything"
)
HINT_SILENT = (
    "say why on stderr when giving up (e.g. 'gave up after 3 attempts: step reboot kills the "
    "process every time; run dead-lettered'): a silent non-zero exit cannot be told from a crash"
)
HINT_REPEAT = (
    "when giving up, do not repeat the effects an earlier attempt applied: check the run's "
    "attempt count (or its dead letter) first, before any step or effect"
)


@dataclass(frozen=True)
class Story:
    """One attempt under the persistent fault: ``end`` is ``hit`` (the fault hit it),
    ``stopped`` (it exited non-zero on its own with a message: gave up, dead-lettered,
    refused), ``silent`` (exited non-zero on its own, saying nothing), ``completed`` (exit 0)
    or ``crashed`` (killed or hung, not by the fault); ``how``: how it ended, in words;
    ``did``: what it did (steps, effects, model calls), ``again``: the effects it applied
    that an earlier attempt had applied too."""

    number: int
    end: str
    how: str
    did: tuple[str, ...]
    again: tuple[str, ...] = ()
    said: str = ""  # its stderr's error line (a stop's message)

    def text(self) -> str:
        did = ", ".join(self.did[:_DID]) + (
            f", +{len(self.did) - _DID} more" if len(self.did) > _DID else ""
        )
        return f"attempt {self.number}: {did or 'no event'}; {self.how}"


@dataclass
class Loop:
    """The attempts from the first one the persistent fault is planned for (``first``) on,
    the attempt by which the agent must have stopped (``within``), and each attempt's story."""

    first: int
    within: int
    stories: list[Story] = field(default_factory=list)
    faults: tuple[str, ...] = ()

    @property
    def hit(self) -> list[Story]:
        return [s for s in self.stories if s.end == "hit"]

    def stop(self) -> Story | None:
        """The first attempt that ended the loop (stopped, silent or completed), or None."""
        return next((s for s in self.stories if s.end != "hit" and s.end != "crashed"), None)


def _persistent(f: TrialFacts) -> list[Any]:
    return [x for x in f.plan.faults if x.arg("every")]


def _what(ev: dict[str, Any]) -> str:
    op = ev["op"]
    if op == "effect":
        return f"{ev.get('kind')} {canonical(ev.get('payload'))[:48]}"
    if op == "llm_call":
        return f"LLM call {str(ev.get('fingerprint', ''))[:12]}".rstrip()
    return f"step {event_name(ev)}"


def _did(f: TrialFacts, number: int, applied: set[str]) -> tuple[list[str], list[str]]:
    """What attempt ``number`` did (its steps started, effects, model calls; each effect with
    its fate), and which of its applied effects were applied by an earlier attempt too
    (``applied``: the contents applied so far; updated)."""
    did: list[str] = []
    again: list[str] = []
    mine: list[str] = []
    for ev in f.events:
        if int(ev["attempt"]) != number or ev["op"] not in ("step_started", "effect", "llm_call"):
            continue
        what = _what(ev)
        if ev["op"] == "effect":
            content = f"{ev.get('kind')} {canonical(ev.get('payload'))}"
            if ev.get("applied"):
                if content in applied:
                    what += " applied again"
                    again.append(_what(ev))
                else:
                    what += " applied"
                mine.append(content)
            elif ev.get("killed") == "before":
                what += " (killed before it was applied)"
            else:
                what += " (not applied: deduplicated or failed)"
        if ev.get("killed"):
            what += (
                f", killed {'in its in-doubt window' if ev['killed'] == 'in_doubt' else 'there'}"
            )
        did.append(what)
    applied.update(mine)
    return did, again


def _how(a: Attempt) -> str:
    if a.timed_out:
        return f"hung until its timeout ({a.duration:.1f}s)"
    if a.signal is not None:
        return f"killed by signal {a.signal}"
    return f"exit {a.returncode}"


def _end(a: Attempt, hits: dict[int, str] | None, expect_codes: tuple[int, ...]) -> str:
    """How attempt ``a`` ended the loop (see :class:`Story`)."""
    on_its_own = a.signal is None and not a.timed_out and a.returncode is not None
    said = bool(a.stderr.strip())
    if on_its_own and a.returncode and said and a.returncode in expect_codes:
        return "stopped"  # a documented stop, even in an attempt the fault reached
    hit = (a.number in hits) if hits is not None else not on_its_own
    if hit:
        return "hit"
    if on_its_own and a.returncode == 0:
        return "completed"
    if on_its_own:
        return "stopped" if said else "silent"
    return "crashed"


def loop_of(f: TrialFacts) -> Loop | None:
    """The attempts' stories under the trial's persistent fault, or None without one.

    The fault hit an attempt when it took effect there (the engine's accounting, in
    ``facts.extra["hits"]``; without it, an attempt killed or hung counts as hit)."""
    persistent = _persistent(f)
    if not persistent:
        return None
    first = min(int(x.attempt) for x in persistent)
    hits = f.extra.get("hits")
    hits = {int(k): str(v) for k, v in hits.items()} if isinstance(hits, dict) else None
    codes = (*f.expect.fail_stop_codes, DEAD_LETTER_CODE)
    loop = Loop(first, first, faults=tuple(str(x) for x in persistent))
    applied: set[str] = set()
    for a in f.attempts:
        did, again = _did(f, a.number, applied)
        if a.number < first:
            continue
        end = _end(a, hits, codes)
        how = _how(a)
        if end == "hit":
            # where it landed, unless its events say so already (a kill at an event)
            landed = (hits or {}).get(a.number, "")
            told = any(", killed " in d for d in did)
            how += f" (the fault hit it{': ' + landed if landed and not told else ''})"
        elif end in ("stopped", "silent"):
            line = a.error_line()
            how += f", stderr: {line[:160]!r}" if line else ", nothing on stderr"
        elif end == "completed":
            how += " (completed)"
        loop.stories.append(Story(a.number, end, how, tuple(did), tuple(again), a.error_line()))
    # the attempt by which it must stop (expect.crash_loop_within counts from the first
    # attempt the fault is planned for); by default the last one the restarts allow
    if f.expect.crash_loop_within is not None:
        loop.within = first - 1 + f.expect.crash_loop_within
    elif isinstance(f.extra.get("restarts"), int):
        loop.within = 1 + int(f.extra["restarts"])
    else:
        loop.within = max((s.number for s in loop.stories), default=first)
    return loop


def loop_text(f: TrialFacts) -> str:
    """Every attempt's story, one per line (the trial folder's ``loop.txt``); "" without a
    persistent fault."""
    loop = loop_of(f)
    if loop is None:
        return ""
    lines = [
        f"persistent fault: {'; '.join(loop.faults)}",
        f"the agent must have stopped by attempt {loop.within}",
        "",
    ]
    for s in loop.stories:
        lines.append(f"attempt {s.number} [{s.end}]: {s.how}")
        lines += [f"    {d}" for d in s.did] or ["    (no event)"]
    return "\n".join(lines) + "\n"


def _told(stories: list[Story]) -> str:
    if len(stories) <= _TOLD:
        return "; ".join(s.text() for s in stories)
    head = "; ".join(s.text() for s in stories[: _TOLD - 1])
    return f"{head}; ... ; {stories[-1].text()} (all in loop.txt)"


def _blind(hit: list[Story]) -> str:
    """ "" or why the hit attempts re-ran blindly: each did what the first did again."""
    if len(hit) < 2:
        return ""
    again = [s for s in hit[1:] if s.again]
    same = all(s.did == hit[0].did for s in hit[1:])
    if again:
        names = sorted({x for s in again for x in s.again})
        return (
            f"; a blind re-run: {len(again)} of the later attempts applied again what an earlier "
            f"one had applied ({', '.join(names[:3])})"
        )
    if same and hit[0].did:
        return f"; a blind re-run: every attempt did the same ({', '.join(hit[0].did[:2])})"
    return ""


def check_crash_loop(f: TrialFacts) -> CheckResult:
    """Under a persistent fault the agent stops by attempt ``within`` and stays stopped.

    It stops when an attempt exits non-zero on its own (not killed, not hung) with a message
    on stderr and without the fault hitting it (it gave up, dead-lettered, or refused to
    start), or exits with a documented stop code (``expect.fail_stop_codes``, or 69: the
    library's dead letter) even where the fault reached it; or completes (exit 0: it got past
    the fault). It fails when every attempt up to ``within`` was hit (the loop, each attempt
    told: what it did and how it ended), when its stop said nothing, when it repeated an
    earlier attempt's effect on its way out, or when, started again after stopping, it ran
    into the fault again."""
    loop = loop_of(f)
    if loop is None:
        return CheckResult(NAME, True, "no fault on every attempt in this trial", skipped=True)
    hit = loop.hit
    if not hit:
        return CheckResult(
            NAME,
            True,
            "not judged: the fault on every attempt never hit an attempt (the trial is not "
            "exercised)",
            skipped=True,
        )
    stop = loop.stop()
    before = [s for s in loop.stories if stop is None or s.number < stop.number]
    if stop is None or stop.number > loop.within:
        looped = [s for s in loop.stories if s.number <= loop.within]
        if stop is None and loop.stories[-1].number < loop.within:
            return CheckResult(
                NAME,
                True,
                f"not judged: only {len(loop.stories)} attempt(s) ran, all hit, and the agent "
                f"had until attempt {loop.within} to stop (the trial ended first: restarts, or "
                "the budget)",
                skipped=True,
            )
        n = len([s for s in looped if s.end == "hit"])
        return CheckResult(
            NAME,
            False,
            f"crash loop: the fault on every attempt hit {n} of {len(looped)} attempts up to "
            f"attempt {loop.within}, and the agent never stopped (it was started again each "
            f"time and ran into the same fault){_blind(hit)}: {_told(looped)}",
            hint=HINT_LOOP,
        )
    if stop.end == "silent":
        return CheckResult(
            NAME,
            False,
            f"attempt {stop.number} stopped ({stop.how}) after {len(before)} attempt(s) the fault "
            f"hit, but said nothing: a give-up must say why: {_told([*before, stop])}",
            hint=HINT_SILENT,
        )
    after = [s for s in loop.stories if s.number > stop.number]
    for s in [stop, *after]:
        if s.again:
            return CheckResult(
                NAME,
                False,
                f"attempt {s.number} stopped ({s.how}), but on its way out applied again "
                f"{', '.join(s.again[:3])}, which an earlier attempt had applied: "
                f"{_told([*before, stop, *after])}",
                hint=HINT_REPEAT,
            )
    back = next((s for s in after if s.end in ("hit", "crashed")), None)
    if back is not None:
        return CheckResult(
            NAME,
            False,
            f"attempt {stop.number} stopped ({stop.how}), but started again, attempt "
            f"{back.number} ran into the fault again ({back.how}): {_told(loop.stories)}",
            hint=HINT_STICK,
        )
    what = "completed" if stop.end == "completed" else "stopped"
    stayed = (
        f"; started again, it refused each time (attempt{'s' if len(after) > 1 else ''} "
        f"{', '.join(str(s.number) for s in after)})"
        if after and stop.end != "completed"
        else ""
    )
    return CheckResult(
        NAME,
        True,
        f"{what} at attempt {stop.number} (by attempt {loop.within}) after the fault hit "
        f"{len(before)} attempt(s): {stop.how}{stayed}",
    )


def gave_up(f: TrialFacts) -> str:
    """How the agent stopped cleanly under a persistent fault (it gave up, dead-lettered or
    refused, and :func:`check_crash_loop` passes), or "" (no such fault, no clean stop, or
    ``expect.crash_loop`` off: then a stop is judged as any other exit)."""
    if not f.expect.crash_loop:
        return ""
    loop = loop_of(f)
    if loop is None or not f.attempts or f.attempts[-1].returncode == 0:
        return ""
    verdict = check_crash_loop(f)
    if not verdict.ok or verdict.skipped:
        return ""
    stop = loop.stop()
    if stop is None or stop.end != "stopped":
        return ""
    return f"attempt {stop.number} stopped under a fault on every attempt: {stop.how}"
