"""A campaign's result and its reports: summary.json, verdicts.json and JUnit XML.

:class:`CampaignResult` holds the golden run and every trial of one campaign; it judges each
fault family (a family whose faults never fired proved nothing: it fails) and writes its
reports safely (0700 folder, 0600 files, temp + rename). The HTML report of a whole gate is
``_html``; a failing trial's own folder is written by the engine (``_evidence`` helpers).
"""

from __future__ import annotations

import os
import re
import statistics
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from crashpoint.harness._report._crashmap import crash_map
from crashpoint.harness._report._safe import redact_json, secure_dir, write_file
from crashpoint.harness._spec import Attempt, Golden, Plan, TrialResult, dumps

__all__ = ["CampaignResult"]


@dataclass
class CampaignResult:
    """One campaign's outcome: its golden run, every trial that ran (in index order), how long
    it took, its seed and report folder, and why it stopped early if it did (``incomplete``,
    ``interrupted_by``, the plans of the trials that never ran). :attr:`ok` is the verdict."""

    name: str
    golden: Golden
    trials: list[TrialResult]
    duration: float
    seed: int
    report_dir: str
    #: why the campaign stopped before its last trial ("": it ran them all); such a campaign
    #: never passes
    incomplete: str = ""
    interrupted_by: str = ""  # "SIGINT" / "SIGTERM" when a signal stopped it
    not_run: list[Plan] = field(default_factory=list)  # the trials that never ran (or stopped)
    #: what the campaign planned differently from what its families asked, and why (e.g. a
    #: file-operation kill's ``count`` above the operations recorded: each runs once)
    notes: list[str] = field(default_factory=list)
    #: name -> value of what reports must not hold (the golden run's canary, agent.env):
    #: redacted from what the summary quotes of the golden run (its crash map)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    #: where the attempts' bytecode was cached: ``{"path": ..., "note": ...}`` (None: none)
    bytecode_cache: dict[str, str | None] = field(default_factory=dict)
    #: the checks its scenario asked for by name (``Expect.required``)
    required_checks: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Complete, no failing trial, and every family that ran has an exercised trial (a
        family whose faults never fired proved nothing: it fails, see :meth:`unexercised`)."""
        return not self.incomplete and all(t.ok for t in self.trials) and not self.unexercised()

    @property
    def failures(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.ok]

    def families(self) -> dict[str, dict[str, Any]]:
        """Per family (in plan order): trials planned, run, exercised, passed, failed, not
        exercised, skipped; and why trials were not exercised (the commonest reasons)."""
        out: dict[str, dict[str, Any]] = {}
        examples: dict[str, str] = {}
        for p in [*(t.plan for t in self.trials), *self.not_run]:
            out.setdefault(
                p.family,
                {
                    "planned": 0,
                    "ran": 0,
                    "exercised": 0,
                    "passed": 0,
                    "failed": 0,
                    "not_exercised": 0,
                    "skipped": 0,
                    "not_fired": Counter(),
                },
            )["planned"] += 1
        for t in self.trials:
            d = out[t.plan.family]
            status = t.status
            d["skipped" if status == "skipped" else "ran"] += 1
            d["exercised"] += t.exercised
            d[
                {
                    "passed": "passed",
                    "failed": "failed",
                    "not exercised": "not_exercised",
                    "skipped": "skipped",
                }[status]
            ] += 0 if status == "skipped" else 1
            for o in t.not_fired:  # like reasons grouped; the first one's text shown
                key = _reason(o.why_not)
                d["not_fired"][key] += 1
                examples.setdefault(key, o.why_not)
        for d in out.values():
            d["not_fired"] = [
                f"{examples[key]} ({n} trial{'s' if n > 1 else ''})"
                for key, n in d["not_fired"].most_common(3)
            ]
        return out

    def unexercised(self) -> list[str]:
        """One message per family that ran trials none of which was exercised: why, and how
        to make its faults fire."""
        msgs = []
        for name, d in self.families().items():
            if d["ran"] and not d["exercised"] and not d["failed"]:
                why = "; ".join(d["not_fired"]) or "no fault was planned"
                msgs.append(
                    f"family {name}: none of its {d['ran']} trial(s) was exercised "
                    f"(a fault that does not fire proves nothing): {why}"
                )
        return msgs

    def summary(self) -> dict[str, Any]:
        ran = [t for t in self.trials if not t.skipped]
        by_kind: Counter[str] = Counter()
        for t in ran:
            for f in t.plan.faults:
                by_kind[f.kind] += 1
        checks: dict[str, dict[str, Any]] = {}
        for t in ran:
            for c in t.checks:
                d = checks.setdefault(c.name, {"passed": 0, "failed": 0, "skipped": 0})
                d["skipped" if c.skipped else "passed" if c.ok else "failed"] += 1
                if c.ok and c.warning:  # passed, with something to report
                    d["warned"] = d.get("warned", 0) + 1
                if c.skipped and "why_skipped" not in d:  # what it had nothing to judge by
                    d["why_skipped"] = c.message[:300]
        refused = {
            t.plan.index
            for t in ran
            for c in t.checks
            if c.ok
            and (
                (c.name == "corruption_detected" and c.message.startswith("refused"))
                # gave up under a fault on every attempt: what it never sent is not lost
                or (c.name == "crash_loop" and not c.skipped and c.message.startswith("stopped"))
            )
        }
        lost = sum(
            max(0, n - t.applied.get(k, 0))
            for t in ran
            if t.plan.index not in refused
            for k, n in self.golden.effects.items()
        )  # a clear refusal (or give-up) loses nothing
        dup = sum(
            max(0, t.applied.get(k, 0) - n) for t in ran for k, n in self.golden.effects.items()
        )
        resumes = [r for t in ran for r in t.resume_times]
        fams = self.families()
        return {
            "families": {k: dict(v) for k, v in fams.items()},
            "exercised": sum(d["exercised"] for d in fams.values()),
            "not_exercised": sum(d["not_exercised"] for d in fams.values()),
            "unexercised": self.unexercised(),
            "notes": list(self.notes),
            "bytecode_cache": dict(self.bytecode_cache) or None,
            "name": self.name,
            "seed": self.seed,
            "ok": self.ok,
            "incomplete": bool(self.incomplete),
            "stopped": self.incomplete,
            "interrupted_by": self.interrupted_by or None,
            "not_run": len(self.not_run),
            "trials": len(self.trials) + len(self.not_run),
            "ran": len(ran),
            "passed": sum(t.status == "passed" for t in ran),
            "failed": len(self.failures),
            "skipped": len(self.trials) - len(ran),
            "skip_reasons": sorted({t.skipped for t in self.trials if t.skipped}),
            "faults_by_kind": dict(sorted(by_kind.items())),
            "checks": checks,
            "required_checks": list(self.required_checks),
            "duplicate_effects": dup,
            "lost_effects": lost,
            "dedup_hits": sum(t.duplicates for t in ran),
            "median_resume_ms": round(statistics.median(resumes) * 1000, 1) if resumes else None,
            "golden": {
                "steps": self.golden.steps,
                "events": len(self.golden.events),
                "duration_s": round(self.golden.duration, 3),
            },
            "duration_s": round(self.duration, 3),
            "outside_writes": self._outside_writes(ran),
            "evidence": {
                "bytes": sum(t.evidence_bytes for t in self.trials),
                "trials_cut": sum(1 for t in self.trials if t.evidence_omitted),
                "omitted": [
                    f"trial {t.plan.index}: {m}" for t in self.trials for m in t.evidence_omitted
                ][:10],
            },
            "ledger_refused": dict(
                sorted(sum((Counter(t.ledger_refused) for t in ran), Counter()).items())
            ),
            "failures": [
                {
                    "index": t.plan.index,
                    "plan": t.plan.describe(),
                    "landed": t.landed(),
                    "root_cause": str(t.root_cause) if t.root_cause else "",
                    "checks": [str(c) for c in t.failed],
                    "folder": t.folder,
                    "replay": f"crashpoint replay {t.folder}",
                    "attempt_durations": [round(a.duration, 4) for a in t.attempts],
                    **_stderr_tail(t.attempts),
                }
                for t in self.failures
            ],
            # where each trial's fault landed along the golden run (see _crashmap)
            "crash_map": redact_json(crash_map(self.golden, self.trials), self.secrets),
            # trials that passed with a warning (e.g. LLM calls re-billed): shown, not failed
            "warned": sum(1 for t in ran if t.ok and t.warnings),
            "warnings": [
                {
                    "index": t.plan.index,
                    "plan": t.plan.describe(),
                    "checks": [str(c) for c in t.warnings],
                    "folder": t.folder,
                }
                for t in ran
                if t.ok and t.warnings
            ][:20],
        }

    def write_reports(self) -> dict[str, str]:
        """summary.json, verdicts.json and junit.xml in the report folder; return their paths.

        The folder is created 0700 without following a link, and refused if another user owns
        it or can write in it; each file is written whole (temp + rename), 0600."""
        secure_dir(self.report_dir)
        paths = {
            "json": os.path.join(self.report_dir, "summary.json"),
            "verdicts": os.path.join(self.report_dir, "verdicts.json"),
            "junit": os.path.join(self.report_dir, "junit.xml"),
        }
        write_file(
            paths["json"],
            dumps({**self.summary(), "trial_results": [t.to_json() for t in self.trials]}),
        )
        write_file(paths["verdicts"], dumps([t.verdict() for t in self.trials]))
        write_file(
            paths["junit"], ET.tostring(self.junit(), encoding="utf-8", xml_declaration=True)
        )
        return paths

    @staticmethod
    def _outside_writes(ran: list[TrialResult]) -> dict[str, Any]:
        """What the trials wrote outside their folders: bytes in their private TMPDIRs; the
        paths their own processes wrote in the system temp folders (one a path, at most 20;
        each trial's entry says its size), each with how that is known (``system_tmp_by``:
        ``syscall trace``, ``writer's process`` or ``owner and time``), and how many there were
        in all; and how many changes by other processes were seen there during the trials
        (counted per trial, not listed)."""
        by: dict[str, str] = {}
        for t in ran:  # each entry: "/tmp/x (1.0 MiB, new; by syscall trace)"
            for o in t.outside_writes:
                path, _, rest = o.rpartition(" (")
                how = rest.rpartition("; by ")[2].removesuffix(")") if "; by " in rest else ""
                if by.get(path) != "syscall trace":  # the trace is the stronger word
                    by[path] = how
        paths = sorted(by)[:20]
        return {
            "tmp_bytes": sum(t.tmp_bytes for t in ran),
            "tmp_bytes_max_trial": max((t.tmp_bytes for t in ran), default=0),
            "system_tmp": paths,
            "system_tmp_by": {p: by[p] for p in paths},
            "system_tmp_paths": len(by),
            "trials_writing_system_tmp": sum(1 for t in ran if t.outside_writes),
            "unattributed": sum(t.outside_unattributed for t in ran),
        }

    def junit(self) -> ET.Element:
        unexercised = self.unexercised()
        suite = ET.Element(
            "testsuite",
            name=f"crashpoint.{self.name}",
            tests=str(len(self.trials) + len(self.not_run) + len(unexercised)),
            failures=str(len(self.failures) + len(unexercised)),
            # a trial the campaign never finished (a signal, its budget) is an error: a CI must
            # never read a cut-short campaign as green
            errors=str(len(self.not_run)),
            skipped=str(sum(1 for t in self.trials if t.status in ("skipped", "not exercised"))),
            time=f"{self.duration:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for name, d in self.families().items():
            ET.SubElement(
                props,
                "property",
                name=f"exercised[{name}]",
                value=f"{d['exercised']}/{d['planned']}",
            )
        ow = self._outside_writes([t for t in self.trials if not t.skipped])
        for key in ("system_tmp_paths", "unattributed"):  # what the agent wrote in /tmp
            ET.SubElement(props, "property", name=f"outside_writes[{key}]", value=str(ow[key]))
        for msg in unexercised:  # the family's verdict: a failure of its own
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"family {msg.split(':', 1)[0].removeprefix('family ')} exercised",
                time="0.000",
            )
            ET.SubElement(case, "failure", message="no trial was exercised").text = msg
        for t in self.trials:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"trial-{t.plan.index:04d} {t.plan.describe()}",
                time=f"{t.duration:.3f}",
            )
            if t.skipped:
                ET.SubElement(case, "skipped", message=t.skipped)
            elif not t.ok:
                root = t.root_cause
                fail = ET.SubElement(
                    case,
                    "failure",
                    message=root.name if root else "; ".join(c.name for c in t.failed),
                )
                fail.text = (
                    f"landed: {t.landed()}\n"
                    + "\n".join(str(c) for c in t.failed)
                    + f"\nreplay: crashpoint replay {t.folder}"
                )
            elif not t.exercised:
                ET.SubElement(case, "skipped", message=f"not exercised: {t.landed()}")
        for p in self.not_run:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"trial-{p.index:04d} {p.describe()}",
                time="0.000",
            )
            message = (
                "interrupted before this trial finished"
                if self.interrupted_by
                else f"not run: {self.incomplete}"
            )
            ET.SubElement(case, "error", message=message).text = self.incomplete
        return suite


#: The failing attempt's stderr kept in a summary: at most this many lines and bytes.
STDERR_TAIL_LINES = 20
STDERR_TAIL_BYTES = 2048


def _stderr_tail(attempts: list[Attempt]) -> dict[str, Any]:
    """The tail of the stderr that tells most: of the attempts that wrote any, the last one
    that failed by itself (a non-zero exit the harness did not cause), else the last one
    (already redacted: the runner redacts every attempt's output). ``{"stderr_tail": text,
    "stderr_attempt": n, "stderr_cut": bool}``, or {} when no attempt wrote to stderr."""
    said = [a for a in attempts if a.stderr.strip()]
    bad = [
        a
        for a in said
        if a.signal is None and not a.timed_out and not a.killed_by and a.returncode != 0
    ]
    pick = (bad or said)[-1:] if said else []
    if not pick:
        return {}
    a = pick[0]
    full = a.stderr.rstrip()
    raw = full[-STDERR_TAIL_BYTES:]
    lines = raw.decode("utf-8", "replace").splitlines()
    if len(raw) < len(full) and len(lines) > 1:
        lines = lines[1:]  # cut inside a line: start at the next one
    lines = lines[-STDERR_TAIL_LINES:]
    cut = len(lines) < len(full.splitlines())
    return {"stderr_tail": "\n".join(lines), "stderr_attempt": a.number, "stderr_cut": cut}


def _reason(why: str) -> str:
    """A not-fired reason without the attempt's own numbers, so like reasons group."""
    return re.sub(r"\d+\.\d+s", "Ns", re.sub(r"after \d+ event\(s\)", "after N event(s)", why))[
        :300
    ]
