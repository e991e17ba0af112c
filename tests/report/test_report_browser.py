"""A failing gate's report.html as a person gets it: downloaded to another folder, opened in a
browser. No absolute path of the machine in it, every evidence link works in the copy, the
crash map is there with a failing mark, and at 1,280 px the page does not scroll sideways
(measured by headless Chromium's own layout; skipped with the reason where it is absent)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from _reaped import run_reaped

REPO = Path(__file__).resolve().parents[2]

AGENT = '''\
"""Three steps, progress in one JSON file; each step is reported completed *before* it is
saved (the bug the report has to show), and the agent says on stderr where it resumes."""
import json
import os
import sys

from crashpoint import probe

state = sys.argv[1]
path = os.path.join(state, "progress.json")
done = json.load(open(path)) if os.path.exists(path) else []
print(f"resuming after {done or 'nothing'}", file=sys.stderr, flush=True)
for step in ("fetch", "summarise", "publish"):
    if step in done:
        continue
    probe.step_started(step)
    if step == "publish":
        probe.effect("publish", {"post": 1}, key="run-1:publish")
    probe.step_completed(step)  # BUG: reported done before it is durable
    done.append(step)
    with open(path + ".tmp", "w") as f:
        json.dump(done, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
print("finished", file=sys.stderr)
print(json.dumps(done))
'''

SCENARIO = """\
name: report demo
agent:
  command: ["{python}", "{scenario_dir}/agent.py", "{state_dir}"]
  timeout: 30s
faults:
  - kill: {at: every-boundary}
  - kill: {at: fileop, count: 2}
  - power_loss: {model: posix, count: 2}
restarts: 2
seed: 29
"""

#: Writes the page's own width into its title (only in the test's copy: the report has no
#: script), once layout is done.
MEASURE = (
    "<script>document.title = 'W=' + document.documentElement.scrollWidth + "
    "';V=' + window.innerWidth;</script>"
)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _browser(exe: str, *args: str) -> subprocess.CompletedProcess[str]:
    # its renderer and GPU helpers too: the browser's whole session is killed after it
    return run_reaped(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        timeout=120,
    )


def _page_width(exe: str, page: Path, scratch: Path) -> tuple[int, int]:
    """(scrollWidth, innerWidth) of ``page`` laid out in a 1,280 px window."""
    probe = scratch / f"measure-{page.stem}.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    run = _browser(
        exe,
        "--window-size=1280,900",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=3000",
        "--dump-dom",
        probe.as_uri(),
    )
    m = re.search(r"<title>W=(\d+);V=(\d+)</title>", run.stdout)
    assert m, f"chromium did not lay out {probe}: {run.stderr[-2000:]}"
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def downloaded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing gate's report folder, copied elsewhere, the original removed."""
    tmp = tmp_path_factory.mktemp("gate")
    project = tmp / "project"
    (project / "scenarios").mkdir(parents=True)
    (project / "scenarios" / "agent.py").write_text(AGENT)
    (project / "scenarios" / "demo.scenario.yaml").write_text(SCENARIO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = run_reaped(
        [sys.executable, "-m", "crashpoint", "run", "scenarios", "--report", "report"],
        env=env,
        timeout=300,
        cwd=project,
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    copy = tmp / "downloads" / "crashpoint-report"
    shutil.copytree(project / "report", copy)
    shutil.rmtree(project / "report")  # only the copy is there to be read
    return copy


def test_the_copied_report_has_no_machine_path_and_every_link_works(downloaded: Path) -> None:
    page = (downloaded / "report.html").read_text()
    machine = {
        str(downloaded.parent.parent),  # the gate's folder (and the copy's)
        str(REPO),
        sys.prefix,
        os.path.expanduser("~"),
    }
    for path in machine:
        assert path not in page, f"{path} appears in report.html"
    assert "<script" not in page

    hrefs = re.findall(r'href="([^"]*)"', page)
    ids = set(re.findall(r'id="([^"]*)"', page))
    local = [h for h in hrefs if not h.startswith("#")]
    assert local, "no evidence link in the report"
    for h in hrefs:
        if h.startswith("#"):
            assert h[1:] in ids, f"link {h} has no target"
            continue
        parts = urlsplit(h)
        assert not parts.scheme, f"{h}: not a relative link"
        assert not h.startswith("/"), f"{h}: an absolute path"
        assert (downloaded / unquote(parts.path)).exists(), f"{h} does not resolve in the copy"
    # a trial folder link holds what the report quotes
    trial = downloaded / unquote(local[0])
    assert (trial / "history.jsonl").is_file()

    # a crash map per campaign, and a failing mark that links to its trial's section
    assert page.count('class="crashmap-svg"') == 3
    fail = re.search(r'<a href="#(c\d+-t\d+)"><g class="point p-fail"', page)
    assert fail, "no failing mark on the crash map"
    assert fail.group(1) in ids
    assert "crashpoint replay scenarios/" in page  # relative, run from the report folder
    assert "resuming after" in page  # the failing attempt's stderr, inline
    assert 'class="time"' in page  # a time axis on the timelines


def test_the_report_lays_out_at_1280_px_in_chromium(downloaded: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        pytest.skip("no headless Chromium here (apt-get install chromium)")
    shot = tmp_path / "report-1280.png"
    run = _browser(
        exe,
        f"--screenshot={shot}",
        "--window-size=1280,2400",
        (downloaded / "report.html").as_uri(),
    )
    assert shot.is_file(), run.stderr[-2000:]
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")

    width, viewport = _page_width(exe, downloaded / "report.html", tmp_path)
    assert viewport == 1280
    assert width <= viewport, f"the page is {width} px wide at a {viewport} px window"
    # the measure itself can fail: a page wider than the window is seen as such
    wide = tmp_path / "wide.html"
    wide.write_text(
        textwrap.dedent(
            """\
            <!DOCTYPE html><html><head><title>x</title></head>
            <body><div style="width:2000px">wide</div></body></html>
            """
        )
    )
    assert _page_width(exe, wide, tmp_path)[0] > 1280
