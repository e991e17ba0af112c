"""A trial's folder as evidence: what it keeps, within its limit, with every secret redacted.

A failing trial (or a kept one) leaves a folder a person or ``crashpoint replay`` can use:
``plan.json``, ``golden.json``, ``runner.json`` (the agent and the runner's settings; agent.env
values redacted), ``REPLAY`` (the one-line command that replays exactly this trial),
``history.jsonl`` (the ledger's events), ``result.json`` (the checks, where each fault landed,
what was left out), each attempt's stdout and stderr, and a copy of the state folder at each
crash. Everything is written safely (0600, temp + rename, no link followed) and bounded by the
trial's evidence limit: the essential files first, then attempt outputs, crash copies in order,
the final state and work folders; a file that does not fit is deleted and listed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from crashpoint.harness._report._safe import (
    EvidenceBudget,
    redact_json,
    redact_text,
    scrub_tree,
    tree_size,
    write_file,
)
from crashpoint.harness._spec import TrialResult, dumps

__all__ = ["ESSENTIAL", "bound_folder", "redact_history", "replay_command", "write_trial_folder"]

#: The files of a trial folder that are always kept (small; the history is capped).
ESSENTIAL = ("result.json", "golden.json", "runner.json", "REPLAY", "plan.json", "history.jsonl")


def replay_command(folder: str) -> str:
    """The one-line command that replays the trial whose folder is ``folder``."""
    return f"{sys.executable} -m crashpoint replay {folder}"


def write_trial_folder(
    tdir: str,
    result: TrialResult,
    *,
    golden: dict[str, Any],
    runner: dict[str, Any],
    budget: EvidenceBudget,
    secrets: dict[str, str],
) -> None:
    """Write ``result``'s folder ``tdir`` as evidence: ``golden`` and ``runner`` (already
    redacted) as golden.json and runner.json, REPLAY, then the folder bounded by ``budget`` and
    scrubbed of ``secrets``, then result.json (what was left out listed in it). Sets
    ``result.evidence_omitted`` and ``result.evidence_bytes``."""
    write_file(os.path.join(tdir, "golden.json"), dumps(golden))
    write_file(os.path.join(tdir, "runner.json"), dumps(runner))
    replay = replay_command(tdir)
    write_file(os.path.join(tdir, "REPLAY"), replay + "\n")
    bound_folder(tdir, budget, secrets)
    result.evidence_omitted = budget.messages()
    summary = result.to_json()
    summary["checks_detail"] = [str(c) for c in result.checks]
    summary["replay"] = replay
    write_file(os.path.join(tdir, "result.json"), dumps(summary))
    result.evidence_bytes = tree_size(tdir)


def bound_folder(folder: str, budget: EvidenceBudget, secrets: dict[str, str]) -> None:
    """Keep ``folder`` within ``budget`` (the essential files first, then
    attempt outputs, crash copies in order, the final state and work folders: a file that
    does not fit is deleted and listed), then redact every secret in what is left."""
    used = sum(tree_size(os.path.join(folder, n)) for n in ESSENTIAL)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return

    def rank(name: str) -> tuple[int, int, str]:
        num = int("".join(c for c in name if c.isdigit()) or 0)
        if name.startswith("attempt-"):
            return (0, num, name)
        if name.startswith("crash-"):
            return (1, num, name)
        return (2 if name == "state" else 3 if name == "work" else 4, 0, name)

    for name in sorted((n for n in names if n not in ESSENTIAL), key=rank):
        path = os.path.join(folder, name)
        entry = name + "/" if os.path.isdir(path) and not os.path.islink(path) else name
        for fpath, size in _files(path):
            if used + size <= budget.limit:
                used += size
                continue
            with contextlib.suppress(OSError):
                os.unlink(fpath)
            budget.leave_out(entry, size)
    redact_history(os.path.join(folder, "history.jsonl"), secrets)
    scrub_tree(folder, secrets, skip=ESSENTIAL)


def _files(path: str) -> list[tuple[str, int]]:
    """(path, size) of the regular files at or under ``path``, in a stable order."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if not os.path.isdir(path) or os.path.islink(path):
        return [(path, st.st_size)] if os.path.isfile(path) and not os.path.islink(path) else []
    out = []
    for dirpath, dirs, files in os.walk(path):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(dirpath, n)
            with contextlib.suppress(OSError):
                fst = os.lstat(p)
                if os.path.isfile(p) and not os.path.islink(p):
                    out.append((p, fst.st_size))
    return out


def redact_history(path: str, secrets: dict[str, str]) -> None:
    """Rewrite a history.jsonl with the secrets redacted inside each event's strings (so a
    value escaped in JSON is found too); lines that are not JSON are redacted as text."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    out = []
    for line in lines:
        try:
            out.append(
                json.dumps(redact_json(json.loads(line), secrets), sort_keys=True, default=str)
            )
        except ValueError:
            out.append(redact_text(line, secrets))
    write_file(path, "".join(x + "\n" for x in out))
