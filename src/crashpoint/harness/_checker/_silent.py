"""``no_silent_failure``: an attempt that exits 0 has done its work.

Exit 0 is what a supervisor, a queue and a CI job take for "done". An agent that catches a
failed write (``sqlite3.OperationalError: database is locked``, a psycopg
``OperationalError`` after its server restarted), prints it, and returns normally ends its run
with work missing and nobody restarts it: the failure is silent. Judged from the ledger alone:

- a step the exiting attempt started and never completed (counted by occurrence, per name),
  where the golden run completes every start of that name (a step the golden run itself leaves
  open, such as an ``interrupt()``, is not counted); or
- a step the golden run completed that no attempt of the trial reported completed, unless an
  attempt that crashed had started it (its completion may have been durable and only the
  report lost: a later attempt rightly skips it).

Attempts started at once (``resumers``) are not judged by the first rule: a second resumer may
start a step, find the run taken, and stop cleanly.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._spec import CheckResult, event_name

__all__ = ["HINT_SILENT_FAILURE", "check_no_silent_failure"]

NAME = "no_silent_failure"
HINT_SILENT_FAILURE = (
    "a step that failed must not end the run with exit 0: let the error end the process with "
    "a non-zero exit (the restart resumes from the last completed step), or retry the write "
    "(SQLite: a busy timeout, e.g. sqlite3.connect(path, timeout=30); PostgreSQL: reconnect "
    "and run the transaction again with backoff) before reporting the step completed"
)


def _counts(events: list[dict[str, Any]], op: str) -> Counter[str]:
    return Counter(event_name(e) for e in events if e["op"] == op)


def check_no_silent_failure(f: TrialFacts) -> CheckResult:
    fin = f.final
    if fin is None or fin.returncode != 0 or not f.golden.steps:
        return CheckResult(NAME, True)
    g_start = _counts(f.golden.events, "step_started")
    g_done = _counts(f.golden.events, "step_completed")
    balanced = {n for n in g_start if g_done.get(n, 0) >= g_start[n]}
    err = fin.error_line()
    said = f"; its stderr: {err[:160]!r}" if err.strip() else " (nothing on stderr)"
    group = set((f.extra.get("race") or {}).get("attempts") or ())
    if fin.number not in group:
        mine = [e for e in f.events if int(e["attempt"]) == fin.number]
        started, done = _counts(mine, "step_started"), _counts(mine, "step_completed")
        open_ = [n for n in started if n in balanced and started[n] > done.get(n, 0)]
        if open_:
            name = open_[0]
            at = [e for e in mine if e["op"] == "step_started" and event_name(e) == name][-1]
            return CheckResult(
                NAME,
                False,
                f"attempt {fin.number} exited 0 but never completed step {name!r}, which it "
                f"started at event #{at['i']} (the golden run completes every {name!r} it "
                f"starts){said}: a failed step reported as success",
                hint=HINT_SILENT_FAILURE,
            )
    crashed = {a.number for a in f.attempts if a.returncode != 0}
    done_all = _counts(f.events, "step_completed")
    excused: Counter[str] = Counter()  # steps a crashed attempt started and did not report
    for a in crashed:
        mine = [e for e in f.events if int(e["attempt"]) == a]
        started, done = _counts(mine, "step_started"), _counts(mine, "step_completed")
        for n in started:
            excused[n] += max(0, started[n] - done.get(n, 0))
    missing = [
        (n, g_done[n] - done_all.get(n, 0))
        for n in g_done
        if g_done[n] - done_all.get(n, 0) > excused.get(n, 0)
    ]
    if missing:
        text = ", ".join(f"{n!r}" + (f" x{k}" if k > 1 else "") for n, k in missing[:4])
        return CheckResult(
            NAME,
            False,
            f"attempt {fin.number} exited 0, but step(s) {text} of the golden run were never "
            f"reported completed by any attempt{said}: the run ended with its work undone",
            hint=HINT_SILENT_FAILURE,
        )
    return CheckResult(NAME, True)
