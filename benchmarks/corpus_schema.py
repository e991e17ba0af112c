"""The schema of a corpus entry's ``bug.yaml`` (``corpus/<id>/bug.yaml``), and its checker.

Used by ``benchmarks/corpus.py`` (a malformed entry is refused with one line naming the file
and the key) and by ``tests/contract/test_corpus_schema.py`` (every entry, on every test run).
Stdlib and PyYAML only. The format is documented in ``docs/corpus.md``; in short::

    id: dbos-544-concurrent-start          # the folder's name
    runtime: dbos                          # the package family under test
    title: one line
    report:                                # the public report this entry reproduces
      repository: dbos-inc/dbos-transact-py
      kind: issue                          # issue | pull
      number: 544
      url: https://github.com/dbos-inc/dbos-transact-py/issues/544
      shows: what the report shows
    also: [...]                            # optional: more references (same keys, or url + shows)
    bug: runtime                           # runtime (in the runtime's code) | pattern (documented)
    agent: agent.py                        # the minimal agent (imports no crashpoint)
    ground_truth: ground_truth.py          # shows the bug without crashpoint
    needs: [postgres]                      # optional: services benchmarks/corpus.py provides
    expect: {check: exactly_once, message: "DUPLICATED POST /charges"}
    broken: {pin: dbos==2.7.0, freeze: broken.txt, scenario: broken.scenario.yaml}
    fixed:                                 # or control: (with `workaround` and `why`, no `by`)
      pin: dbos==2.8.0
      freeze: fixed.txt
      scenario: fixed.scenario.yaml
      by: {repository: dbos-inc/dbos-transact-py, kind: pull, number: 545, url: ...}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

CHECKS = (
    "completes",
    "same_output",
    "exactly_once",
    "resumes_from_last_completed",
    "single_writer",
    "no_secret_leak",
    "within_disk_budget",
    "no_orphans",
    "corruption_detected",
    "no_repeated_llm_calls",
    "no_retry_storm",
    "crash_loop",
    "replay_divergence",
    "no_silent_failure",
)
NEEDS = ("postgres",)
KINDS = {"issue": "issues", "pull": "pull"}
BUG_KINDS = ("runtime", "pattern")

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,63}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_PIN = re.compile(rf"^({_NAME})==([0-9][0-9A-Za-z.+!-]*)$")
_FREEZE_LINE = re.compile(rf"^({_NAME})(\[[A-Za-z0-9,._-]+\])?==([0-9][0-9A-Za-z.+!-]*)$")
_IMPORTS_CRASHPOINT = re.compile(r"^\s*(import|from)\s+crashpoint\b", re.M)

_TOP = {
    "id": True,
    "runtime": True,
    "title": True,
    "report": True,
    "also": False,
    "bug": True,
    "agent": True,
    "ground_truth": True,
    "needs": False,
    "expect": True,
    "broken": True,
    "fixed": False,
    "control": False,
    "notes": False,
}
_REF = {"repository": True, "kind": True, "number": True, "url": True, "shows": False}
_DOC_REF = {"url": True, "shows": True}
_SIDE = {"pin": True, "freeze": True, "scenario": True}
_FIXED = {**_SIDE, "by": False}
_CONTROL = {**_SIDE, "workaround": True, "why": True}
_EXPECT = {"check": True, "message": True}


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def issue_url(repository: str, kind: str, number: int) -> str:
    """The address of issue or pull request ``number`` of ``repository`` on GitHub."""
    return f"https://github.com/{repository}/{KINDS[kind]}/{number}"


def read_freeze(path: Path) -> dict[str, str]:
    """``{normalized name: version}`` from a freeze file (``name==version`` lines; ``#``
    comments and blank lines skipped). Raises ValueError naming the line otherwise."""
    pins: dict[str, str] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _FREEZE_LINE.match(line)
        if not m:
            raise ValueError(f"{path.name}:{n}: {raw.strip()!r} is not a `name==version` pin")
        pins[normalize(m.group(1))] = m.group(3)
    return pins


class _Checker:
    def __init__(self, folder: Path, where: str) -> None:
        self.folder = folder
        self.where = where
        self.errors: list[str] = []

    def err(self, key: str, text: str) -> None:
        self.errors.append(f"{self.where} (key '{key}'): {text}")

    def mapping(self, value: Any, key: str, spec: dict[str, bool]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.err(key, f"must be a mapping with keys {', '.join(spec)}")
            return {}
        for k in value:
            if k not in spec:
                self.err(f"{key}.{k}" if key else str(k), f"unknown key (known: {', '.join(spec)})")
        for k, required in spec.items():
            if required and k not in value:
                self.err(f"{key}.{k}" if key else k, "missing")
        return value

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.err(key, "must be a non-empty string")
            return ""
        return value

    def file(self, value: Any, key: str, suffix: str = "") -> Path | None:
        name = self.text(value, key)
        if not name:
            return None
        if "/" in name or name.startswith("."):
            self.err(key, f"{name!r} must name a file in the entry's own folder")
            return None
        if suffix and not name.endswith(suffix):
            self.err(key, f"{name!r} must end with {suffix}")
        path = self.folder / name
        if not path.is_file():
            self.err(key, f"{name!r} does not exist in {self.folder}")
            return None
        return path

    def ref(self, value: Any, key: str) -> None:
        if isinstance(value, dict) and "repository" not in value and "number" not in value:
            ref = self.mapping(value, key, _DOC_REF)  # a documentation page
            url = self.text(ref.get("url"), f"{key}.url")
            if url and not url.startswith("https://"):
                self.err(f"{key}.url", f"{url!r} must be an https:// address")
            self.text(ref.get("shows"), f"{key}.shows")
            return
        ref = self.mapping(value, key, _REF)
        repo = self.text(ref.get("repository"), f"{key}.repository")
        if repo and not _REPO.match(repo):
            self.err(f"{key}.repository", f"{repo!r} is not owner/name")
        kind = ref.get("kind")
        if kind not in KINDS:
            self.err(f"{key}.kind", f"{kind!r}: must be one of {', '.join(KINDS)}")
        number = ref.get("number")
        if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
            self.err(f"{key}.number", f"{number!r}: must be a positive integer")
        url = self.text(ref.get("url"), f"{key}.url")
        if url and repo and kind in KINDS and isinstance(number, int):
            want = issue_url(repo, kind, number)
            if url.rstrip("/") != want:
                self.err(f"{key}.url", f"{url!r} does not point at {repo} {kind} {number} ({want})")
        if "shows" in ref:
            self.text(ref["shows"], f"{key}.shows")

    def side(self, value: Any, key: str, spec: dict[str, bool]) -> None:
        side = self.mapping(value, key, spec)
        pin = self.text(side.get("pin"), f"{key}.pin")
        m = _PIN.match(pin) if pin else None
        if pin and not m:
            self.err(f"{key}.pin", f"{pin!r} is not an installable `name==version` pin")
        freeze = self.file(side.get("freeze"), f"{key}.freeze", ".txt")
        if freeze is not None:
            try:
                pins = read_freeze(freeze)
            except (ValueError, UnicodeDecodeError) as e:
                self.err(f"{key}.freeze", str(e))
            else:
                if m and pins.get(normalize(m.group(1))) != m.group(2):
                    self.err(f"{key}.freeze", f"{freeze.name} does not pin {pin} (it must list it)")
                if len(pins) < 2:
                    self.err(f"{key}.freeze", f"{freeze.name} must list every transitive pin")
        self.file(side.get("scenario"), f"{key}.scenario", ".scenario.yaml")
        if "by" in side:
            self.ref(side["by"], f"{key}.by")
        for k in ("workaround", "why"):
            if k in spec:
                self.text(side.get(k), f"{key}.{k}")


def check_entry(folder: Path) -> list[str]:
    """Every problem of the entry in ``folder`` (empty: it is well formed), one line each, each
    naming the file and the key."""
    path = folder / "bug.yaml"
    where = f"corpus/{folder.name}/bug.yaml"
    if not path.is_file():
        return [f"{where}: missing (each corpus entry needs a bug.yaml)"]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return [f"{where}: not valid YAML: {str(e).splitlines()[0]}"]
    c = _Checker(folder, where)
    doc = c.mapping(data, "", _TOP)
    if not doc:
        return c.errors
    ident = c.text(doc.get("id"), "id")
    if ident and (not _ID.match(ident) or ident != folder.name):
        c.err("id", f"{ident!r} must equal the folder's name ({folder.name!r}), a-z 0-9 and -")
    runtime = c.text(doc.get("runtime"), "runtime")
    if runtime and not re.match(r"^[a-z0-9][a-z0-9-]*$", runtime):
        c.err("runtime", f"{runtime!r}: lower case letters, digits and -")
    c.text(doc.get("title"), "title")
    if "report" in doc:
        c.ref(doc["report"], "report")
        if isinstance(doc["report"], dict) and "repository" not in doc["report"]:
            c.err("report", "the report must be an issue or pull request (repository, number)")
    also = doc.get("also", [])
    if not isinstance(also, list):
        c.err("also", "must be a list of references")
    else:
        for i, ref in enumerate(also):
            c.ref(ref, f"also[{i}]")
    if doc.get("bug") not in BUG_KINDS:
        c.err("bug", f"{doc.get('bug')!r}: must be one of {', '.join(BUG_KINDS)}")
    agent = c.file(doc.get("agent"), "agent", ".py")
    if agent is not None and _IMPORTS_CRASHPOINT.search(agent.read_text(encoding="utf-8")):
        c.err(
            "agent", f"{agent.name} imports crashpoint: a corpus agent is written the ordinary way"
        )
    c.file(doc.get("ground_truth"), "ground_truth")
    needs = doc.get("needs", [])
    if not isinstance(needs, list) or any(n not in NEEDS for n in needs):
        c.err("needs", f"{needs!r}: a list of {', '.join(NEEDS)}")
    expect = c.mapping(doc.get("expect"), "expect", _EXPECT)
    if expect and expect.get("check") not in CHECKS:
        c.err("expect.check", f"{expect.get('check')!r}: one of {', '.join(CHECKS)}")
    if expect:
        c.text(expect.get("message"), "expect.message")
    c.side(doc.get("broken"), "broken", _SIDE)
    if ("fixed" in doc) == ("control" in doc):
        c.err(
            "fixed",
            "exactly one of `fixed` (a release with the fix) and `control` "
            "(the documented workaround)",
        )
    elif "fixed" in doc:
        c.side(doc["fixed"], "fixed", _FIXED)
    else:
        c.side(doc["control"], "control", _CONTROL)
    return c.errors


def entries(root: Path) -> list[Path]:
    """The entry folders under ``root`` (``corpus/``), sorted by name."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def load(folder: Path) -> dict[str, Any]:
    """The parsed ``bug.yaml`` of a well-formed entry."""
    data: dict[str, Any] = yaml.safe_load((folder / "bug.yaml").read_text(encoding="utf-8"))
    return data
