"""The corpus benchmark: every entry under ``corpus/`` run on its broken and its fixed (or
control) side, each in a virtual environment of its own, and the scoreboard written.

For each entry (``corpus/<id>/bug.yaml``, checked against ``benchmarks/corpus_schema.py``) and
each side, this:

1. makes the side's virtual environment, cached under
   ``~/.cache/crashpoint/corpus/<hash of the freeze and the Python>/``: ``pip install --no-deps
   -r`` the side's freeze (its full pinned environment), then crashpoint's own dependencies and
   crashpoint itself from this checkout (editable, so a change here needs no new environment);
2. starts what the entry needs (``needs: [postgres]``: one throw-away PostgreSQL server for the
   run, a database of its own per side) and fills the scenario's ``{pg}`` (the database's URL,
   without a password), ``{pgpassfile}`` (the password file libpq reads) and ``{pgpassword}``
   (for clients that read only ``$PGPASSWORD``);
3. runs the gate, ``python -m crashpoint run SCENARIO``, with that environment's Python, and
   reads its ``gate.json``: the verdict, the checks that failed and their messages;
4. judges it: the broken side is **caught** when the gate fails with the entry's expected check
   and message (``expect``); a failure on another check, a pass, or an error is a **miss**,
   kept with its reason. The fixed or control side must pass: a failure is a **false alarm**.

Results go to ``benchmarks/results/corpus.json`` (written after each entry: the run is
resumable, and an entry already there for the same freezes is skipped unless ``--force``), the
table to ``docs/corpus.md`` and the scoreboard line to ``README.md`` (between their markers).

    python benchmarks/corpus.py                  # every entry (builds what is not cached)
    python benchmarks/corpus.py --only ID [--only ID2] [--force]
    python benchmarks/corpus.py --offline        # only cached environments; says what is missing
    python benchmarks/corpus.py --ground-truth   # also run each side's ground-truth script
    python benchmarks/corpus.py --check          # validate every bug.yaml, run nothing

Exit 0 when every entry run was caught on its broken side and passed on its fixed side, 1 when
one was missed or raised a false alarm, 2 for a malformed entry or a bad option, 3 when an
entry could not be run (its environment could not be built, or offline and not cached).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import corpus_schema as schema  # noqa: E402 (beside this file)

RESULTS = HERE / "results" / "corpus.json"
DOCS = ROOT / "docs" / "corpus.md"
README = ROOT / "README.md"
TABLE_START, TABLE_END = "<!-- corpus-table:start -->", "<!-- corpus-table:end -->"
BOARD_START, BOARD_END = "<!-- corpus-scoreboard:start -->", "<!-- corpus-scoreboard:end -->"
SIDES = ("broken", "fixed", "control")
GATE_TIMEOUT = 30 * 60  # seconds for one side's gate
_FAIL_LINE = re.compile(r"^([a-z_]+): FAIL: (.*)$", re.S)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "crashpoint" / "corpus"


def progress(text: str) -> None:
    print(f"[corpus] {text}", flush=True)


# -- environments ------------------------------------------------------------------------------


def crashpoint_requirements() -> list[str]:
    """crashpoint's own runtime dependencies, from this checkout's pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S)
    if block is None:
        raise SystemExit("corpus: pyproject.toml has no [project] dependencies list")
    return re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)


def freeze_key(freeze: Path) -> str:
    """The cache key of a side's environment: its freeze's pins and this Python's version."""
    pins = schema.read_freeze(freeze)
    text = "\n".join(f"{k}=={v}" for k, v in sorted(pins.items()))
    text += f"\npython {sys.version_info.major}.{sys.version_info.minor}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pip(venv: Path, *args: str, log: Path) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args]
    if args[0] == "install":  # bytecode is compiled on first import instead (faster builds)
        cmd.append("--no-compile")
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if r.returncode:
        raise RuntimeError(f"pip {args[0]} failed (exit {r.returncode}); see {log}")


def ensure_venv(freeze: Path, *, offline: bool) -> tuple[Path | None, str]:
    """The side's environment, built if needed: ``(path, how)``, or ``(None, why not)``.
    Two runs (a benchmark and a test) wanting the same one take turns: an flock per key."""
    key = freeze_key(freeze)
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f"{key}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_venv(freeze, key, offline=offline)


def _ensure_venv(freeze: Path, key: str, *, offline: bool) -> tuple[Path | None, str]:
    venv = cache_root() / key
    ready = venv / "corpus-ready.json"
    if ready.is_file():
        marker = json.loads(ready.read_text(encoding="utf-8"))
        if marker.get("checkout") != str(ROOT):  # built for another clone: re-point crashpoint
            if offline:
                return None, f"cached at {venv} for another checkout ({marker.get('checkout')})"
            log = venv / "corpus-build.log"
            _pip(venv, "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT), log=log)
            marker["checkout"] = str(ROOT)
            ready.write_text(json.dumps(marker, indent=1), encoding="utf-8")
        return venv, f"cached ({key})"
    if offline:
        return None, f"not cached: {freeze.relative_to(ROOT)} (key {key}; run without --offline)"
    if venv.exists():
        shutil.rmtree(venv)  # a build that did not finish
    venv.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log = venv / "corpus-build.log"
    try:
        _pip(venv, "install", "--no-deps", "-r", str(freeze), log=log)
        _pip(venv, "install", "setuptools>=77.0.1", "wheel", *crashpoint_requirements(), log=log)
        _pip(venv, "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT), log=log)
    except RuntimeError:
        keep = venv.with_name(venv.name + ".failed.log")
        shutil.copyfile(log, keep)
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(
            f"could not build the environment of {freeze.name}; see {keep}"
        ) from None
    marker = {"freeze": str(freeze.relative_to(ROOT)), "key": key, "checkout": str(ROOT)}
    ready.write_text(json.dumps(marker, indent=1), encoding="utf-8")
    return venv, f"built in {time.monotonic() - t0:.0f} s ({key})"


def build_envs(
    folder: Path, entry: dict[str, Any], sides: tuple[str, ...], *, offline: bool, head: str
) -> dict[str, tuple[Path | None, str]]:
    """Both sides' environments, built side by side (pip waits on the network most of the
    time): ``{side: (path or None, how or why not)}``."""

    def one(side: str) -> tuple[Path | None, str]:
        try:
            return ensure_venv(folder / entry[side]["freeze"], offline=offline)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            return None, f"could not build the environment: {e}"

    todo = [
        s
        for s in sides
        if not (
            cache_root() / freeze_key(folder / entry[s]["freeze"]) / "corpus-ready.json"
        ).is_file()
    ]
    if todo and not offline:
        progress(f"{head}: building the environment of {', '.join(todo)} (pip; cached after)")
    unique = {freeze_key(folder / entry[s]["freeze"]): s for s in sides}  # a control may share
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        built = dict(zip(unique, pool.map(one, unique.values()), strict=True))
    return {s: built[freeze_key(folder / entry[s]["freeze"])] for s in sides}


# -- services ----------------------------------------------------------------------------------


class Services:
    """What the entries need, started on first use and stopped at the end of the run."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._pg: Any = None

    def postgres(self) -> Any:
        if self._pg is None:
            sys.path.insert(0, str(ROOT / "src"))
            from crashpoint.harness._standins._postgres import PostgresServer, unavailable

            why = unavailable()
            if why:
                raise RuntimeError(f"PostgreSQL is needed and not available here: {why}")
            self._pg = self._stack.enter_context(PostgresServer.start())
        return self._pg


def render(scenario: Path, out: Path, fills: dict[str, str]) -> Path:
    """``scenario`` with ``{scenario_dir}`` and the service placeholders filled in, written
    to ``out`` (so the entry's files stay as they are)."""
    text = scenario.read_text(encoding="utf-8").replace("{scenario_dir}", str(scenario.parent))
    for name, value in fills.items():
        text = text.replace("{" + name + "}", value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def side_fills(entry: dict[str, Any], side: str, services: Services) -> dict[str, str]:
    fills: dict[str, str] = {}
    if "postgres" in entry.get("needs", []):
        pg = services.postgres()
        name = re.sub(r"[^a-z0-9_]", "_", f"corpus_{entry['id']}_{side}_{os.getpid()}")[:60]
        pg.create_database(name)
        fills["pg"] = pg.dsn(name, password=False)
        fills["pgpassfile"] = pg.client_env().get("PGPASSFILE", "")
        # for a client that ignores the password file (DBOS < 1 reads $PGPASSWORD)
        fills["pgpassword"] = urllib.parse.urlsplit(pg.dsn(name)).password or ""
    return fills


# -- one side ----------------------------------------------------------------------------------


def _agent_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # every attempt would recompile the runtime
    return env


def read_gate(report: Path) -> dict[str, Any]:
    """Trials, exercised, and the failed checks (name, message) from a gate's ``gate.json``."""
    try:
        gate = json.loads((report / "gate.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"trials": 0, "exercised": 0, "failed": [], "status": "no gate.json"}
    failed: list[tuple[str, str]] = []
    trials = exercised = 0
    for c in gate.get("campaigns", []):
        trials += int(c.get("ran", 0))
        exercised += int(c.get("exercised", 0))
        for f in c.get("failures", []):
            for line in f.get("checks", []):
                m = _FAIL_LINE.match(line)
                if m and (m.group(1), m.group(2)) not in failed:
                    failed.append((m.group(1), m.group(2)))
    return {
        "trials": trials,
        "exercised": exercised,
        "failed": failed,
        "status": str(gate.get("status", "")),
    }


def run_side(
    entry: dict[str, Any], folder: Path, side: str, venv: Path, work: Path, services: Services
) -> dict[str, Any]:
    spec = entry[side]
    scenario = render(
        folder / spec["scenario"],
        work / entry["id"] / f"{side}.scenario.yaml",
        side_fills(entry, side, services),
    )
    report = work / entry["id"] / f"{side}-report"
    log = work / entry["id"] / f"{side}.log"
    cmd = [str(venv / "bin" / "python"), "-m", "crashpoint", "run", str(scenario)]
    cmd += ["--report", str(report)]
    t0 = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        gate_proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=_agent_env(), cwd=str(folder)
        )
        try:
            code = gate_proc.wait(timeout=GATE_TIMEOUT)
        except subprocess.TimeoutExpired:  # SIGTERM: the gate kills its agents, then exits 143
            gate_proc.terminate()
            try:
                gate_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                gate_proc.kill()
                gate_proc.wait()
            code = -1
    seconds = round(time.monotonic() - t0, 1)
    gate = read_gate(report)
    verdict = {0: "pass", 1: "fail"}.get(code, "error")
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    said = [ln for ln in lines if ln.startswith("crashpoint: gate verdict")] or lines[-1:] or [""]
    if verdict == "fail" and not gate["failed"]:  # failed before any trial: a golden run, ...
        verdict = "error"
    expect = entry["expect"]
    hit = [
        (name, msg)
        for name, msg in gate["failed"]
        if name == expect["check"] and expect["message"] in msg
    ]
    shown = hit[0] if hit else (gate["failed"][0] if gate["failed"] else None)
    return {
        "pin": spec["pin"],
        "freeze": spec["freeze"],
        "freeze_key": freeze_key(folder / spec["freeze"]),
        "versions": schema.read_freeze(folder / spec["freeze"]),
        "verdict": verdict,
        "exit": code,
        "checks_fired": sorted({n for n, _ in gate["failed"]}),
        "check": shown[0] if shown else None,
        "message": shown[1][:400] if shown else None,
        "expected": bool(hit),
        "trials": gate["trials"],
        "exercised": gate["exercised"],
        "seconds": seconds,
        "error": "" if verdict != "error" else said[-1][:300],
        "report_dir": str(report),
    }


def judge(entry: dict[str, Any], broken: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The entry's outcome: caught / missed (with why) on the broken side, clean / false alarm
    on the other; error when a side could not be judged (the gate failed before any trial,
    e.g. its golden run, or did not run)."""
    exp = entry["expect"]
    if broken["verdict"] == "fail" and broken["expected"]:
        outcome, reason = "caught", f"{exp['check']}: {broken['message']}"
    elif broken["verdict"] == "fail":
        outcome = "missed"
        reason = (
            f"tripped {', '.join(broken['checks_fired'])} instead of {exp['check']} "
            f"({exp['message']!r}): {broken['message']}"
        )
    elif broken["verdict"] == "pass":
        outcome, reason = (
            "missed",
            f"the broken side passed: no check fired ({broken['trials']} trials)",
        )
    else:
        outcome, reason = "error", f"the broken side could not be judged: {broken['error']}"
    false_alarm = other["verdict"] == "fail"
    if other["verdict"] == "error" and outcome != "error":
        outcome, reason = "error", f"the other side could not be judged: {other['error']}"
    if false_alarm:
        reason += f"; FALSE ALARM on the other side: {other['check']}: {other['message']}"
    return {"outcome": outcome, "false_alarm": false_alarm, "reason": reason}


def run_ground_truth(
    entry: dict[str, Any], folder: Path, side: str, venv: Path, services: Services
) -> dict[str, Any]:
    """The side's ground-truth script (``exit 1``: the bug shown; ``0``: not shown), given
    ``--control`` on a control side and ``--database URL`` when the entry needs PostgreSQL."""
    cmd = [str(venv / "bin" / "python"), str(folder / entry["ground_truth"])]
    if side == "control":  # the same release: the script applies the workaround
        cmd.append("--control")
    env = _agent_env()
    if "postgres" in entry.get("needs", []):
        fills = side_fills(entry, side + "_gt", services)
        cmd += ["--database", fills["pg"]]
        env["PGPASSFILE"] = fills["pgpassfile"]
        env["PGPASSWORD"] = fills["pgpassword"]
    t0 = time.monotonic()
    r = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=str(folder), timeout=600, check=False
    )
    last = (r.stdout.strip().splitlines() or [""])[-1]
    return {
        "exit": r.returncode,
        "shows_bug": r.returncode == 1,
        "last_line": last[:200],
        "seconds": round(time.monotonic() - t0, 1),
    }


# -- the scoreboard ----------------------------------------------------------------------------


def scoreboard(results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    runtimes = sorted({r["runtime"] for r in results})
    caught = sum(1 for r in results if r["outcome"] == "caught")
    alarms = sum(1 for r in results if r["false_alarm"])
    line = (
        f"{n} entries, {len(runtimes)} runtimes: caught {caught}/{n} broken, "
        f"{alarms}/{n} false alarms on fixed"
    )
    return {
        "entries": n,
        "runtimes": runtimes,
        "caught": caught,
        "false_alarms": alarms,
        "line": line,
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| entry | runtime | report | broken | verdict on broken | other side | verdict on other "
        "| outcome |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r["broken"]
        o = r[r["other"]]
        rep = r["report"]
        ref = f"[{rep['repository']}#{rep['number']}]({rep['url']})"
        bv = f"{b['verdict'].upper()} ({b['check']})" if b["check"] else b["verdict"].upper()
        ov = f"{o['verdict'].upper()} ({o['check']})" if o["check"] else o["verdict"].upper()
        outcome = r["outcome"] + (" + FALSE ALARM" if r["false_alarm"] else "")
        if r["outcome"] != "caught":
            outcome += f": {r['reason']}"
        rows.append(
            f"| `{r['id']}` | {r['runtime']} | {ref} | `{b['pin']}` | {bv}, {b['trials']} trials, "
            f"{b['seconds']} s | {r['other']} `{o['pin']}` | {ov}, {o['trials']} trials, "
            f"{o['seconds']} s | {_cell(outcome)} |"
        )
    board = scoreboard(results)["line"]
    return "\n".join([f"**{board}.**", "", *rows])


def replace_between(path: Path, start: str, end: str, body: str) -> bool:
    """Put ``body`` between the ``start`` and ``end`` markers of ``path``; False if absent."""
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return False
    path.write_text(text[: i + len(start)] + "\n" + body + "\n" + text[j:], encoding="utf-8")
    return True


def write_outputs(data: dict[str, Any], out: Path) -> None:
    results = sorted(data["entries"].values(), key=lambda r: r["id"])
    data["scoreboard"] = scoreboard(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    if out == RESULTS:  # the repository's own results: refresh the docs and the README
        replace_between(DOCS, TABLE_START, TABLE_END, table(results))
        replace_between(README, BOARD_START, BOARD_END, data["scoreboard"]["line"] + ".")


# -- main --------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", action="append", default=[], metavar="ID", help="run this entry")
    ap.add_argument("--offline", action="store_true", help="use cached environments only")
    ap.add_argument("--force", action="store_true", help="re-run entries already in the JSON")
    ap.add_argument("--ground-truth", action="store_true", help="also run the ground truths")
    ap.add_argument("--check", action="store_true", help="validate the entries, run nothing")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the results JSON")
    ap.add_argument("--corpus", type=Path, default=ROOT / "corpus", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    folders = schema.entries(a.corpus)
    problems = [p for f in folders for p in schema.check_entry(f)]
    if problems:
        for p in problems:
            print(f"corpus: {p}", file=sys.stderr)
        return 2
    known = {f.name: f for f in folders}
    unknown = [i for i in a.only if i not in known]
    if unknown:
        print(
            f"corpus: --only {unknown[0]}: no such entry under corpus/ (entries: "
            f"{', '.join(known) or 'none'})",
            file=sys.stderr,
        )
        return 2
    if a.check:
        progress(f"{len(folders)} entries, all well formed")
        return 0
    chosen = [known[i] for i in a.only] if a.only else folders
    data: dict[str, Any] = {"entries": {}}
    if a.out.is_file():
        with contextlib.suppress(ValueError, OSError):
            data = json.loads(a.out.read_text(encoding="utf-8"))
            data.setdefault("entries", {})
    data["python"] = ".".join(map(str, sys.version_info[:3]))
    status = 0
    with contextlib.ExitStack() as stack:
        services = Services(stack)
        work = cache_root() / "runs"  # each entry's last reports and logs, kept to be read
        for n, folder in enumerate(chosen, 1):
            entry = schema.load(folder)
            other = "fixed" if "fixed" in entry else "control"
            head = f"[{n}/{len(chosen)}] {entry['id']}"
            keys = {s: freeze_key(folder / entry[s]["freeze"]) for s in ("broken", other)}
            old = data["entries"].get(entry["id"])
            if (
                old
                and not a.force
                and all(old.get(s, {}).get("freeze_key") == keys[s] for s in keys)
            ):
                progress(
                    f"{head}: already in {a.out.name} for these freezes ({old['outcome']}); "
                    "--force to re-run"
                )
                continue
            shutil.rmtree(work / entry["id"], ignore_errors=True)
            sides: dict[str, Any] = {}
            envs = build_envs(folder, entry, ("broken", other), offline=a.offline, head=head)
            for side in ("broken", other):
                venv, how = envs[side]
                if venv is None:
                    progress(f"{head} {side}: SKIPPED, environment missing: {how}")
                    status = max(status, 3)
                    break
                progress(f"{head} {side} ({entry[side]['pin']}): environment {how}; gate running")
                try:
                    sides[side] = run_side(entry, folder, side, venv, work, services)
                    if a.ground_truth:
                        sides[side]["ground_truth"] = run_ground_truth(
                            entry, folder, side, venv, services
                        )
                except RuntimeError as e:  # a service the entry needs could not start
                    progress(f"{head} {side}: SKIPPED: {e}")
                    status = max(status, 3)
                    break
                s = sides[side]
                fired = (
                    f" ({s['check']}{' as expected' if s['expected'] else ''})"
                    if s["check"]
                    else ""
                )
                progress(
                    f"{head} {side}: {s['verdict'].upper()}{fired}, {s['trials']} trials, "
                    f"{s['seconds']} s"
                )
            else:
                verdict = judge(entry, sides["broken"], sides[other])
                rep = entry["report"]
                data["entries"][entry["id"]] = {
                    "id": entry["id"],
                    "runtime": entry["runtime"],
                    "title": entry["title"],
                    "bug": entry["bug"],
                    "report": {k: rep[k] for k in ("repository", "kind", "number", "url")},
                    "expect": entry["expect"],
                    "other": other,
                    **sides,
                    **verdict,
                    "ran_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                        timespec="seconds"
                    ),
                }
                write_outputs(data, a.out)
                progress(
                    f"{head}: {verdict['outcome'].upper()}"
                    + (" + FALSE ALARM" if verdict["false_alarm"] else "")
                    + f" ({verdict['reason'][:160]})"
                )
                if verdict["outcome"] != "caught" or verdict["false_alarm"]:
                    status = max(status, 1)
    if data["entries"]:
        write_outputs(data, a.out)
        progress(scoreboard(list(data["entries"].values()))["line"])
    return status


if __name__ == "__main__":
    sys.exit(main())
