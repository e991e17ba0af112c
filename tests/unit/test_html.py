"""The gate's HTML report: one self-contained page, a timeline per failing trial, all escaped."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from crashpoint.harness._report import render_html, timeline_svg

XSS = "<script>alert('x')</script>"
SVG_NS = "{http://www.w3.org/2000/svg}"

HISTORY = [
    {"op": "step_started", "step": "fetch", "attempt": 1, "i": 0},
    {"op": "step_completed", "step": "fetch", "attempt": 1, "i": 1},
    {"op": "step_started", "step": XSS, "attempt": 1, "i": 2},
    {
        "op": "effect",
        "kind": "send_email",
        "key": "k1",
        "payload": {"to": XSS},
        "applied": True,
        "killed": "in_doubt",
        "attempt": 1,
        "i": 3,
    },
    {"op": "step_started", "step": XSS, "attempt": 2, "i": 4},
    {
        "op": "effect",
        "kind": "send_email",
        "key": "k1",
        "payload": {"to": XSS},
        "applied": False,
        "attempt": 2,
        "i": 5,
    },
    {"op": "effect", "kind": "publish", "key": "k2", "applied": None, "attempt": 2, "i": 6},
]
ATTEMPTS = [
    "attempt 1: killed by signal 9 (killed at event #3 effect (in_doubt))",
    "attempt 2: exit 0",
    "attempt 3: exit 65",
]


def _summary(ok: bool, folder: str = "", **extra: Any) -> dict[str, Any]:
    trial = {
        "index": 7,
        "family": "kill@every-boundary",
        "ok": ok,
        "seed": 42,
        "plan": f"kill attempt 1 at event #3 {XSS}; corrupt(attempt 3, how=bitflip)",
        "attempts": ATTEMPTS,
        "folder": folder,
        "corruptions": [
            {"how": "bitflip", "path": f"/s/{XSS}", "offset": 12, "length": 1, "detail": "bit 3"}
        ],
        "checks": {"exactly_once": ok, "completes": True},
        "failures": [] if ok else [f"exactly_once: FAIL: DUPLICATED {XSS}"],
        "rerun_steps": [],
        "skipped": "",
    }
    s = {
        "name": "demo-kill",
        "scenario": f"demo {XSS}",
        "family": "kill@every-boundary",
        "seed": 42,
        "ok": ok,
        "trials": 1,
        "ran": 1,
        "passed": int(ok),
        "failed": int(not ok),
        "skipped": 0,
        "skip_reasons": [],
        "faults_by_kind": {"kill": 1},
        "checks": {
            "exactly_once": {"passed": int(ok), "failed": int(not ok), "skipped": 0},
            "corruption_detected": {"passed": 0, "failed": 0, "skipped": 1},
        },
        "duplicate_effects": 0 if ok else 1,
        "lost_effects": 0,
        "dedup_hits": 1,
        "median_resume_ms": 12.4,
        "failures": []
        if ok
        else [
            {
                "index": 7,
                "plan": trial["plan"],
                "folder": folder,
                "checks": [f"exactly_once: FAIL: DUPLICATED {XSS}"],
                "replay": f"crashpoint replay {folder}",
            }
        ],
        "trial_results": [trial],
    }
    s.update(extra)
    return s


def _svgs(page: str) -> list[ET.Element]:
    found = re.findall(
        r'<svg xmlns="http://www\.w3\.org/2000/svg" class="timeline-svg".*?'
        r"</svg>",
        page,
        re.DOTALL,
    )
    # parsing also proves the SVG is well-formed XML
    return [ET.fromstring(s) for s in found]  # noqa: S314 - our own output, not untrusted


def _groups(svg: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG_NS}g") if css in (g.get("class") or "").split()]


def test_failing_summary_has_a_timeline_with_lanes_markers_and_escapes(tmp_path: Path) -> None:
    folder = tmp_path / "trial-0007"
    folder.mkdir()
    (folder / "history.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in HISTORY) + "not json\n"
    )
    page = render_html([_summary(False, str(folder))])

    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page  # no script at all, and the payload is escaped
    assert "&lt;script&gt;" in page
    assert "FAIL" in page
    assert "crashpoint replay " + str(folder) in page
    assert "DUPLICATED &lt;script&gt;" in page  # the failing check's message
    assert "bitflip" in page  # the corruption listed
    assert "bit 3" in page
    assert "src=" not in page  # self-contained: no external asset
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")

    (svg,) = _svgs(page)
    lanes = [g.get("data-attempt") for g in _groups(svg, "attempt")]
    assert lanes == ["1", "2", "3"]  # one lane per attempt, an attempt without events too
    kills = _groups(svg, "kill-point")
    assert [k.get("data-phase") for k in kills] == ["in_doubt"]
    assert len(_groups(svg, "effect-applied")) == 1
    assert len(_groups(svg, "effect-dedup")) == 1
    assert len(_groups(svg, "effect-not-applied")) == 1
    assert len(_groups(svg, "step_started")) == 3
    assert len(_groups(svg, "step_completed")) == 1
    ends = {g.get("data-attempt"): (g.get("class") or "") for g in _groups(svg, "end")}
    assert ends == {"1": "end end-sig", "2": "end end-ok", "3": "end end-exit"}
    texts = "".join(svg.itertext())
    for outcome in ("SIGKILL", "exit 0", "exit 65"):
        assert outcome in texts
    assert len(_groups(svg, "corruption")) == 1  # drawn on attempt 3's lane


def test_passing_summary_has_a_table_and_no_timeline() -> None:
    page = render_html([_summary(True)])
    assert 'crashpoint gate: <span class="verdict-pass">PASS</span>' in page
    assert "Failing trials" not in page
    assert _svgs(page) == []
    assert "kill: 1" in page  # faults by kind
    assert "12 ms" in page  # median resume
    assert "&lt;script&gt;" in page
    assert "<script" not in page


def test_missing_history_says_so_instead_of_a_timeline(tmp_path: Path) -> None:
    page = render_html([_summary(False, str(tmp_path / "gone"))])
    assert "no history.jsonl" in page
    assert _svgs(page) == []


def test_skipped_campaign_and_empty_gate() -> None:
    skipped = _summary(
        True,
        ran=0,
        skipped=3,
        trial_results=[],
        skip_reasons=["disk_full via tmpfs skipped: <no unshare>"],
    )
    page = render_html([skipped])
    assert "SKIP" in page
    assert "&lt;no unshare&gt;" in page
    assert "NO CAMPAIGNS" in render_html([])


def test_timeline_svg_alone_is_well_formed() -> None:
    svg = ET.fromstring(timeline_svg(HISTORY, ATTEMPTS[:2], plan=XSS))  # noqa: S314 - ours
    assert svg.tag == f"{SVG_NS}svg"
    assert XSS in (svg.findtext(f"{SVG_NS}title") or "")  # escaped in the markup, intact here


def _gate_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A report folder as the gate leaves it: one failing trial's evidence under scenarios/."""
    report = tmp_path / "ci-run" / "report"
    trial = report / "scenarios" / "demo-kill" / "trials" / "trial-0007"
    trial.mkdir(parents=True)
    (trial / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in HISTORY))
    return report, trial


def _with_map(s: dict[str, Any]) -> dict[str, Any]:
    s["crash_map"] = {
        "axis": [
            {"kind": "step_started", "label": "step_started:fetch", "step": "fetch", "event": 0},
            {"kind": "effect", "label": "effect:send_email", "step": None, "event": 1},
        ],
        "points": [{"trial": 7, "at": 1, "verdict": "fail", "phase": "in_doubt", "where": "x"}],
    }
    return s


def test_evidence_is_linked_relative_to_the_report_folder(tmp_path: Path) -> None:
    report, trial = _gate_folder(tmp_path)
    s = _with_map(_summary(False, str(trial), file=str(tmp_path / "ci-run" / "s.scenario.yaml")))
    s["failures"][0].update(
        stderr_tail=f"Traceback\nValueError: bad state in {trial}/state/x.json",
        stderr_attempt=2,
        attempt_durations=[0.021, 1.5],
        landed=f"fired: attempt 1 event #3 {XSS}",
    )
    # a failpoint's landing quotes the file it hit: the crash map's title must not
    cut = f"refused (locked; waited 0.0s for {str(report)[:-3]}"  # a message cut mid-path
    s["crash_map"]["points"][0]["where"] = (
        f"failpoint journal.write (enospc on {trial}/state/j); {cut}"
    )
    page = render_html([s], report_dir=str(report))

    assert str(tmp_path) not in page  # no absolute path of this machine
    rel = "scenarios/demo-kill/trials/trial-0007"
    assert f'<a href="{rel}/">' in page
    assert f"crashpoint replay {rel}</code>" in page
    assert "run from the report folder" in page
    assert "<code>s.scenario.yaml</code>" in page  # relative to the gate's working folder
    assert f"bad state in {rel}/state/x.json" in page  # the stderr tail, its path made relative
    assert "stderr of attempt 2" in page
    assert "ran 1.50 s" in page  # the attempt's duration
    (svg,) = _svgs(page)  # the history was read from the report folder
    assert len(_groups(svg, "kill-point")) == 1
    assert 'class="crashmap-svg"' in page
    assert '<a href="#c0-t7">' in page  # the failing mark links to the trial's section
    assert 'id="c0-t7"' in page


def test_a_report_drawn_again_elsewhere_reads_and_links_the_copy(tmp_path: Path) -> None:
    report, trial = _gate_folder(tmp_path)
    copy = tmp_path / "downloaded"
    shutil.copytree(report, copy)
    shutil.rmtree(report)  # the machine's folder is gone: only the copy is read
    page = render_html([_summary(False, str(trial))], report_dir=str(copy), origin_dir=str(report))
    assert str(tmp_path) not in page
    assert '<a href="scenarios/demo-kill/trials/trial-0007/">' in page
    assert len(_svgs(page)) == 1  # the history read from the copy


def test_a_path_outside_the_report_folder_is_shown_by_its_name_only(tmp_path: Path) -> None:
    report, _trial = _gate_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere" / "trial-0007"
    page = render_html(
        [_summary(False, str(elsewhere), file="/opt/x/other.scenario.yaml")],
        report_dir=str(report),
    )
    assert str(tmp_path) not in page
    assert "/opt/x" not in page
    assert "<code>trial-0007</code>" in page
    assert "outside the report folder" in page
    assert "<code>other.scenario.yaml</code>" in page


def test_sections_come_right_after_the_verdict_and_every_campaign_has_a_map() -> None:
    extra = '<section id="changes"><h2>What changed</h2></section>'
    page = render_html([_with_map(_summary(True))], sections=[extra])
    assert page.index("crashpoint gate:") < page.index(extra) < page.index("<h2>Campaigns</h2>")
    assert 'class="crashmap-svg"' in page  # a passing campaign gets its map too
    assert '<div class="scroll"><table class="checks">' in page  # wide tables scroll alone


def test_timeline_has_a_time_axis_from_the_events_clock() -> None:
    timed = [{**e, "t": 100.0 + 0.004 * k} for k, e in enumerate(HISTORY)]
    svg = ET.fromstring(timeline_svg(timed, ATTEMPTS[:2], durations=[0.25, 2.0]))  # noqa: S314
    times = [t.text for t in svg.iter(f"{SVG_NS}text") if t.get("class") == "time"]
    # attempt 1 starts at +0 ms; attempt 2's clock starts at its own first event
    assert times[0] == "+0 ms"
    assert "+12 ms" in times
    assert times.count("+0 ms") == 2
    texts = "".join(svg.itertext())
    assert "ran 250 ms" in texts
    assert "ran 2.00 s" in texts


def test_a_power_cut_attempt_ends_as_a_power_cut() -> None:
    attempts = [
        "attempt 1: exit None (power loss (posix) after op 2 (create {state_dir}/x), it was lost)",
        "attempt 2: exit 0",
    ]
    svg = ET.fromstring(timeline_svg(HISTORY[:2], attempts, durations=[0.0, 0.5]))  # noqa: S314
    ends = {g.get("data-attempt"): g for g in _groups(svg, "end")}
    assert "end-sig" in (ends["1"].get("class") or "")
    assert [t.text for t in ends["1"].iter(f"{SVG_NS}text")] == ["power cut"]
    assert "ran 0 ms" not in "".join(svg.itertext())  # an attempt that did not run has no duration


def test_a_campaigns_notes_are_on_its_section() -> None:
    """How a campaign was run (kills replayed from the recorded state, or why not) is said on
    the page, not only in the terminal and gate.json."""
    note = "3 of 4 kill(s) of attempt 1 replayed from the golden run's recorded state <x>"
    page = render_html([_summary(True, notes=[note])])
    assert "note: 3 of 4 kill(s) of attempt 1 replayed" in page
    assert "&lt;x&gt;" in page  # escaped
    assert "note:" not in render_html([_summary(True)])
