"""A campaign: a golden run, then N trials drawn from fault families by a seed.

Every trial is reproducible from (seed, index): its plan is a pure function of the golden run,
the families, the seed and the index. Systematic families cover every boundary of the golden
run at least once; random families draw ``count`` trials each (or share ``trials``).
"""

from __future__ import annotations

import os
import random
import statistics
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint._units import parse_duration, parse_size
from crashpoint.faults._files import CORRUPTIONS
from crashpoint.harness._checks import TrialFacts
from crashpoint.harness._model import (
    AgentSpec,
    CheckResult,
    Expect,
    Fault,
    Golden,
    Plan,
    TrialResult,
    dumps,
)
from crashpoint.harness._reportfs import secure_dir, write_file
from crashpoint.harness._trial import (
    EVIDENCE_PER_CAMPAIGN,
    EVIDENCE_PER_TRIAL,
    TrialRunner,
    load_json,
    replay_inputs,
)

__all__ = [
    "FAMILY_KINDS",
    "Campaign",
    "CampaignResult",
    "FaultFamily",
    "family_from_spec",
    "replay",
]

FAMILY_KINDS = ("kill", "signal", "corrupt", "disk_full", "resumers", "hang")
#: The options each fault family accepts (``count`` everywhere).
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "kill": ("at", "count", "names", "max"),
    "signal": ("sig", "grace", "pause", "count"),
    "corrupt": ("how", "path", "count"),
    "disk_full": ("capacity", "mechanism", "nth", "count"),
    "resumers": ("count",),
    "hang": ("count",),
}
DISK_MECHANISMS = ("auto", "tmpfs", "rlimit", "failpoint")
KILL_AT = ("every-boundary", "random", "time", "failpoint", "fileop", "recovery")
_KILL_FAILPOINTS = ("journal.after_write", "journal.after_sync", "atomic.after_temp",
                    "atomic.after_rename", "effect.after_call", "step.after_complete")


@dataclass(frozen=True)
class FaultFamily:
    """One ``faults:`` item of a scenario: a fault kind with its options, or a chain of them
    applied in order within one trial (item j hits attempt j + 1)."""

    chain: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

    @property
    def name(self) -> str:
        parts = []
        for kind, opts in self.chain:
            o = dict(opts)
            tag = o.get("at") or o.get("how") or o.get("sig") or o.get("mechanism") or ""
            if isinstance(tag, (list, tuple)):
                tag = "|".join(map(str, tag))
            parts.append(f"{kind}@{tag}" if tag else kind)
        return "+".join(parts)

    @property
    def systematic(self) -> bool:
        return len(self.chain) == 1 and self.chain[0][0] == "kill" and \
            dict(self.chain[0][1]).get("at", "random") == "every-boundary"

    @property
    def count(self) -> int | None:
        c = dict(self.chain[-1][1]).get("count")
        return int(c) if c is not None else None

    def to_json(self) -> list[dict[str, Any]]:
        return [{kind: dict(opts)} for kind, opts in self.chain]


def family_from_spec(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> FaultFamily:
    """``{"kill": {"at": "random"}}`` or a list of such items -> a FaultFamily (validated)."""
    items = [spec] if isinstance(spec, Mapping) else list(spec)
    chain = []
    for item in items:
        if not isinstance(item, Mapping) or len(item) != 1:
            raise ValueError(f"a fault is a mapping with one key (the fault kind), got {item!r}")
        (kind, opts), = item.items()
        if kind not in FAMILY_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; use one of {', '.join(FAMILY_KINDS)}")
        if opts is not None and not isinstance(opts, Mapping):
            raise ValueError(f"{kind}: options must be a mapping, e.g. {{{kind}: {{count: 3}}}}")
        opts = dict(opts or {})
        unknown = sorted(set(opts) - set(FAMILY_OPTIONS[kind]))
        if unknown:
            raise ValueError(f"{kind}: unknown option(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(FAMILY_OPTIONS[kind])}")
        for key in ("grace", "pause"):
            if key in opts:
                opts[key] = parse_duration(opts[key], what=f"{kind}.{key}")
        if kind == "disk_full" and opts.get("mechanism", "auto") not in DISK_MECHANISMS:
            raise ValueError(f"disk_full: mechanism must be one of {', '.join(DISK_MECHANISMS)}")
        if kind == "kill" and opts.get("at", "random") not in KILL_AT:
            raise ValueError(f"kill: unknown at={opts.get('at')!r}; use one of "
                             f"{', '.join(KILL_AT)}")
        if kind == "corrupt":
            hows = opts.get("how", list(CORRUPTIONS))
            hows = [hows] if isinstance(hows, str) else list(hows)
            bad = [h for h in hows if h not in CORRUPTIONS]
            if bad:
                raise ValueError(f"corrupt: unknown how {bad}; use {', '.join(CORRUPTIONS)}")
            opts["how"] = tuple(hows)
        if "capacity" in opts:
            opts["capacity"] = parse_size(opts["capacity"], what=f"{kind}.capacity")
        if "count" in opts and (isinstance(opts["count"], bool)
                                or not isinstance(opts["count"], int) or opts["count"] < 0):
            raise ValueError(f"{kind}.count must be a whole number >= 0, got {opts['count']!r}")
        if kind == "signal" and str(opts.get("sig", "TERM")).upper() not in ("TERM", "STOP"):
            raise ValueError("signal: sig must be TERM or STOP")
        chain.append((kind, tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                         for k, v in opts.items()))))
    return FaultFamily(tuple(chain))


def _draw(kind: str, opts: dict[str, Any], attempt: int, golden: Golden, rng: random.Random,
          boundary: int | None, mode: str | None) -> list[Fault]:
    """The faults for one chain item."""
    bs = golden.boundaries()
    if not bs and (kind == "corrupt" or (kind == "kill" and opts.get("at", "random") in
                                          ("every-boundary", "random", "recovery"))):
        raise ValueError(
            f"{kind} faults at event boundaries need an agent that reports events through the "
            "probe (crashpoint.probe, the reference library, or the wire protocol); its golden "
            "run reported none. Use kill at time, failpoint or fileop for a silent agent.")
    if kind == "kill":
        at = opts.get("at", "random")
        if mode == "random" and at == "every-boundary":
            at = "random"
        if at in ("every-boundary", "random", "recovery"):
            b = bs[boundary] if boundary is not None else rng.choice(bs)
            out = [Fault.make("kill", attempt, index=b.index, phase=b.phase, label=b.label)]
            if at == "recovery":  # a second crash while recovering from the first
                out.append(Fault.make("kill", attempt + 1, index=rng.randrange(
                    max(1, len(golden.events) - b.index)), phase="before", label="recovery"))
            return out
        if at == "time":
            return [Fault.make("kill_at_time", attempt,
                               seconds=round(rng.uniform(0.0, max(golden.duration, 0.01)), 4))]
        if at == "failpoint":
            names = list(opts.get("names", _KILL_FAILPOINTS))
            return [Fault.make("failpoint", attempt,
                               spec=f"{rng.choice(names)}=kill@{rng.randint(1, 3)}")]
        if at == "fileop":
            return [Fault.make("fileop", attempt, n=rng.randint(1, int(opts.get("max", 40))))]
    if kind == "signal":
        sig = str(opts.get("sig", "TERM")).upper()
        at_s = round(rng.uniform(0.0, max(golden.duration, 0.01)), 4)
        if sig == "TERM":
            return [Fault.make("signal", attempt, sig="TERM", seconds=at_s,
                               grace=float(opts.get("grace", 2.0)))]
        return [Fault.make("signal", attempt, sig="STOP", seconds=at_s,
                           pause=float(opts.get("pause", 0.3)))]
    if kind == "corrupt":
        hows = opts.get("how", CORRUPTIONS)
        how = rng.choice(list(hows))
        path = str(opts.get("path", "{state_dir}/**"))
        b1 = rng.choice(bs)
        out = [Fault.make("kill", attempt, index=b1.index, phase=b1.phase, label=b1.label)]
        nxt = attempt + 1
        if how == "stale-copy":  # needs an older copy: crash twice, roll back to the first
            later = [b for b in bs if b.index > b1.index] or [bs[-1]]
            b2 = rng.choice(later)
            out.append(Fault.make("kill", nxt, index=max(0, b2.index - b1.index - 1),
                                  phase="before", label="second crash"))
            nxt += 1
        out.append(Fault.make("corrupt", nxt, how=how, path=path, seed=rng.randrange(1 << 30)))
        return out
    if kind == "disk_full":
        from crashpoint.faults._disk import capabilities

        mech = opts.get("mechanism", "auto")
        if mech == "auto":
            caps = capabilities()
            mech = "tmpfs" if caps.tmpfs else "rlimit" if caps.rlimit else "failpoint"
        cap = int(opts.get("capacity", 65536))
        return [Fault.make("disk_full", attempt, capacity=cap, mechanism=mech,
                           nth=rng.randint(2, 6))]
    if kind == "resumers":
        return [Fault.make("resumers", attempt)]
    if kind == "hang":
        return [Fault.make("signal", attempt, sig="STOP", seconds=0.05, pause=1e6)]
    raise ValueError(f"cannot draw faults of kind {kind!r}")


def plan_for(family: FaultFamily, golden: Golden, seed: int, index: int, *,
             boundary: int | None = None, mode: str | None = None) -> Plan:
    """The plan of trial ``index``: a pure function of its inputs."""
    rng = random.Random(f"crashpoint:{seed}:{family.name}:{index}")
    faults: list[Fault] = []
    attempt = 1
    for kind, opts in family.chain:
        drawn = _draw(kind, dict(opts), attempt, golden, rng, boundary, mode)
        faults += drawn
        attempt = max(f.attempt for f in drawn) + 1
    return Plan(tuple(faults), family.name, seed, index)


@dataclass
class CampaignResult:
    name: str
    golden: Golden
    trials: list[TrialResult]
    duration: float
    seed: int
    report_dir: str

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.trials)

    @property
    def failures(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.ok]

    def summary(self) -> dict[str, Any]:
        ran = [t for t in self.trials if not t.skipped]
        by_kind: Counter[str] = Counter()
        for t in ran:
            for f in t.plan.faults:
                by_kind[f.kind] += 1
        checks: dict[str, dict[str, int]] = {}
        for t in ran:
            for c in t.checks:
                d = checks.setdefault(c.name, {"passed": 0, "failed": 0, "skipped": 0})
                d["skipped" if c.skipped else "passed" if c.ok else "failed"] += 1
        refused = {t.plan.index for t in ran for c in t.checks
                   if c.name == "corruption_detected" and c.ok and c.message.startswith("refused")}
        lost = sum(max(0, n - t.applied.get(k, 0)) for t in ran if t.plan.index not in refused
                   for k, n in self.golden.effects.items())  # a clear refusal loses nothing
        dup = sum(max(0, t.applied.get(k, 0) - n) for t in ran
                  for k, n in self.golden.effects.items())
        resumes = [r for t in ran for r in t.resume_times]
        return {
            "name": self.name, "seed": self.seed, "ok": self.ok,
            "trials": len(self.trials), "ran": len(ran),
            "passed": sum(t.ok for t in ran), "failed": len(self.failures),
            "skipped": len(self.trials) - len(ran),
            "skip_reasons": sorted({t.skipped for t in self.trials if t.skipped}),
            "faults_by_kind": dict(sorted(by_kind.items())),
            "checks": checks, "duplicate_effects": dup, "lost_effects": lost,
            "dedup_hits": sum(t.duplicates for t in ran),
            "median_resume_ms": round(statistics.median(resumes) * 1000, 1) if resumes else None,
            "golden": {"steps": self.golden.steps, "events": len(self.golden.events),
                       "duration_s": round(self.golden.duration, 3)},
            "duration_s": round(self.duration, 3),
            "outside_writes": {
                "tmp_bytes": sum(t.tmp_bytes for t in ran),
                "tmp_bytes_max_trial": max((t.tmp_bytes for t in ran), default=0),
                "system_tmp": sorted({o for t in ran for o in t.outside_writes})[:20],
                "trials_writing_system_tmp": sum(1 for t in ran if t.outside_writes)},
            "evidence": {
                "bytes": sum(t.evidence_bytes for t in self.trials),
                "trials_cut": sum(1 for t in self.trials if t.evidence_omitted),
                "omitted": [f"trial {t.plan.index}: {m}" for t in self.trials
                            for m in t.evidence_omitted][:10]},
            "ledger_refused": dict(sorted(sum((Counter(t.ledger_refused) for t in ran),
                                              Counter()).items())),
            "failures": [{"index": t.plan.index, "plan": t.plan.describe(),
                          "checks": [str(c) for c in t.failed], "folder": t.folder,
                          "replay": f"crashpoint replay {t.folder}"} for t in self.failures],
        }

    def write_reports(self) -> dict[str, str]:
        """summary.json, verdicts.json and junit.xml in the report folder; return their paths.

        The folder is created 0700 without following a link, and refused if another user owns
        it or can write in it; each file is written whole (temp + rename), 0600."""
        secure_dir(self.report_dir)
        paths = {"json": os.path.join(self.report_dir, "summary.json"),
                 "verdicts": os.path.join(self.report_dir, "verdicts.json"),
                 "junit": os.path.join(self.report_dir, "junit.xml")}
        write_file(paths["json"], dumps({**self.summary(), "trial_results": [
            t.to_json() for t in self.trials]}))
        write_file(paths["verdicts"], dumps([t.verdict() for t in self.trials]))
        write_file(paths["junit"], ET.tostring(self.junit(), encoding="utf-8",
                                               xml_declaration=True))
        return paths

    def junit(self) -> ET.Element:
        suite = ET.Element("testsuite", name=f"crashpoint.{self.name}",
                           tests=str(len(self.trials)), failures=str(len(self.failures)),
                           skipped=str(sum(1 for t in self.trials if t.skipped)),
                           time=f"{self.duration:.3f}")
        for t in self.trials:
            case = ET.SubElement(suite, "testcase", classname=f"crashpoint.{self.name}",
                                 name=f"trial-{t.plan.index:04d} {t.plan.describe()}",
                                 time=f"{t.duration:.3f}")
            if t.skipped:
                ET.SubElement(case, "skipped", message=t.skipped)
            elif not t.ok:
                fail = ET.SubElement(case, "failure", message="; ".join(c.name for c in t.failed))
                fail.text = "\n".join(str(c) for c in t.failed) + \
                    f"\nreplay: crashpoint replay {t.folder}"
        return suite


ProgressFn = Callable[[int, int, int, TrialResult], None]


@dataclass
class Campaign:
    """Run ``families`` against ``agent``; see the module docstring."""

    agent: AgentSpec
    families: list[FaultFamily]
    report_dir: str
    name: str = "campaign"
    trials: int = 50
    seed: int = 0
    restarts: int = 3
    mode: str | None = None  # None (as the families say) | systematic | random
    expect: Expect = field(default_factory=Expect)
    shard: tuple[int, int] | None = None  # (i, n), 1-based
    keep_passing: bool = False
    extra_checks: dict[str, Callable[[TrialFacts], CheckResult]] = field(default_factory=dict)
    launcher: Any = None
    plan_hook: Callable[[FaultFamily, Golden, int, int], Plan | None] | None = None
    evidence_per_trial: int = EVIDENCE_PER_TRIAL  # bytes a kept trial folder may hold
    evidence_per_campaign: int = EVIDENCE_PER_CAMPAIGN  # bytes all kept trial folders may hold
    source: str = ""  # the scenario file (runner.json names it: replay reads agent.env there)

    def __post_init__(self) -> None:
        self.report_dir = os.path.abspath(self.report_dir)

    def runner(self) -> TrialRunner:
        return TrialRunner(self.agent, os.path.join(self.report_dir, "trials"),
                           restarts=self.restarts, expect=self.expect,
                           keep_passing=self.keep_passing, extra_checks=self.extra_checks,
                           launcher=self.launcher, evidence_per_trial=self.evidence_per_trial,
                           evidence_per_campaign=self.evidence_per_campaign,
                           source=self.source)

    def plans(self, golden: Golden) -> list[Plan]:
        """Every plan of the campaign, in index order (before sharding)."""
        plans: list[Plan] = []
        nb = len(golden.boundaries())
        systematic = [f for f in self.families if self.mode != "random" and (
            f.systematic or (self.mode == "systematic" and len(f.chain) == 1
                             and f.chain[0][0] == "kill"
                             and dict(f.chain[0][1]).get("at", "random") == "random"))]
        randoms = [f for f in self.families if f not in systematic]
        for fam in systematic:
            for b in range(nb):
                plans.append(self._plan(fam, golden, len(plans), boundary=b))
        if randoms:
            explicit = sum(f.count or 0 for f in randoms)
            shared = [f for f in randoms if f.count is None]
            left = max(0, self.trials - explicit)
            for j, fam in enumerate(randoms):
                n = fam.count if fam.count is not None else \
                    left // len(shared) + (1 if j < left % len(shared) else 0)
                for _ in range(n):
                    plans.append(self._plan(fam, golden, len(plans)))
        return plans

    def _plan(self, fam: FaultFamily, golden: Golden, index: int,
              boundary: int | None = None) -> Plan:
        if self.plan_hook is not None:
            custom = self.plan_hook(fam, golden, self.seed, index)
            if custom is not None:
                return custom
        return plan_for(fam, golden, self.seed, index, boundary=boundary, mode=self.mode)

    def selected(self, plans: list[Plan]) -> list[Plan]:
        if self.shard is None:
            return plans
        i, n = self.shard
        return [p for p in plans if p.index % n == i - 1]

    def run(self, progress: ProgressFn | None = None, only: Sequence[int] | None = None,
            golden: Golden | None = None) -> CampaignResult:
        """Run the golden run (unless given) and every selected trial, in index order."""
        t0 = time.monotonic()
        runner = self.runner()
        try:
            if golden is None:
                golden = runner.golden()
            plans = self.selected(self.plans(golden))
            if only is not None:
                plans = [p for p in plans if p.index in set(only)]
            results: list[TrialResult] = []
            failures = 0
            for k, plan in enumerate(plans):
                res = runner.run(plan, golden)
                failures += 0 if res.ok else 1
                results.append(res)
                if progress is not None:
                    progress(k + 1, len(plans), failures, res)
        finally:
            runner.close()
        result = CampaignResult(self.name, golden, results, time.monotonic() - t0, self.seed,
                                self.report_dir)
        return result


def replay(folder: str) -> TrialResult:
    """Re-run exactly the trial whose evidence is in ``folder`` (same plan, same golden)."""
    for name in ("plan.json", "runner.json", "golden.json"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(
                f"{folder} is not a crashpoint trial folder: {name} is missing (a failing "
                "trial's folder holds plan.json, runner.json, golden.json and REPLAY)")
    plan = Plan.from_json(load_json(os.path.join(folder, "plan.json")))
    agent, golden, runner_cfg = replay_inputs(folder)  # agent.env values are redacted there
    out = os.path.join(folder, "replays", time.strftime("%Y%m%dT%H%M%S"))
    with TrialRunner(agent, out, restarts=int(runner_cfg["restarts"]),
                     expect=Expect.from_json(runner_cfg["expect"]), keep_passing=True,
                     source=str(runner_cfg.get("scenario") or "")) as runner:
        return runner.run(plan, golden)
