"""Every corpus entry's bug.yaml against the schema (benchmarks/corpus_schema.py): required
keys, pins well formed and listed in their freeze, the report's URL pointing at the named
repository and issue or pull request, the files it names present, an agent that imports no
crashpoint. And the checker itself: each kind of mistake is named with its key. No
environment is built and nothing is run here (that is tests/corpus/)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"corpus_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


schema = _load("corpus_schema")
ENTRIES = schema.entries(CORPUS)


def test_the_corpus_has_entries_across_runtimes() -> None:
    assert len(ENTRIES) >= 4, [e.name for e in ENTRIES]
    runtimes = {schema.load(e)["runtime"] for e in ENTRIES}
    assert len(runtimes) >= 2, runtimes


def test_an_entry_may_expect_any_check_of_the_gate() -> None:
    # expect.check names a check of the gate: the schema's list is the checker's own
    from crashpoint.harness._checker._checks import BUILTIN_CHECKS

    assert set(schema.CHECKS) == set(BUILTIN_CHECKS)


@pytest.mark.parametrize("folder", ENTRIES, ids=[e.name for e in ENTRIES])
def test_entry_matches_the_schema(folder: Path) -> None:
    assert schema.check_entry(folder) == []


@pytest.mark.parametrize("folder", ENTRIES, ids=[e.name for e in ENTRIES])
def test_entry_cites_a_report_on_github_and_its_sides_differ(folder: Path) -> None:
    doc = schema.load(folder)
    rep = doc["report"]
    assert rep["url"] == schema.issue_url(rep["repository"], rep["kind"], rep["number"])
    other = doc.get("fixed") or doc["control"]
    if "fixed" in doc:  # a fixed release is another release of the runtime
        assert other["pin"] != doc["broken"]["pin"]
        assert other["pin"].split("==")[0] == doc["broken"]["pin"].split("==")[0]
    else:  # a control is the same release with the workaround: the scenarios must differ
        assert other["scenario"] != doc["broken"]["scenario"]


@pytest.fixture
def entry(tmp_path: Path) -> Path:
    """A copy of a well-formed entry to break."""
    src = CORPUS / "langgraph-3668-retry-restarts"
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    assert schema.check_entry(dst) == []
    return dst


def _edit(folder: Path, old: str, new: str, name: str = "bug.yaml") -> None:
    path = folder / name
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("old", "new", "key", "fragment"),
    [
        ("/pull/3668\n  shows", "/pull/3669\n  shows", "report.url", "does not point at"),
        (
            "repository: langchain-ai/langgraph\n  kind",
            "repository: langgraph\n  kind",
            "report.repository",
            "is not owner/name",
        ),
        (
            "kind: pull\n  number: 3668\n  url",
            "kind: discussion\n  number: 3668\n  url",
            "report.kind",
            "must be one of",
        ),
        ("pin: langgraph==0.3.2", "pin: langgraph>=0.3.2", "broken.pin", "not an installable"),
        ("pin: langgraph==0.3.3", "pin: langgraph==0.3.9", "fixed.freeze", "does not pin"),
        (
            "scenario: fixed.scenario.yaml",
            "scenario: gone.scenario.yaml",
            "fixed.scenario",
            "does not exist",
        ),
        ("check: resumes_from_last_completed", "check: resumes", "expect.check", "one of"),
        ("bug: runtime", "bug: ours", "bug", "must be one of"),
        ("agent: agent.py", "agent: ../agent.py", "agent", "entry's own folder"),
        ("title: A retried", "titel: x\ntitle: A retried", "titel", "unknown key"),
        ("id: langgraph-3668-retry-restarts", "id: another-id", "id", "folder's name"),
    ],
)
def test_the_checker_names_each_mistake(
    entry: Path, old: str, new: str, key: str, fragment: str
) -> None:
    _edit(entry, old, new)
    errors = schema.check_entry(entry)
    assert any(f"(key '{key}')" in e and fragment in e for e in errors), errors
    assert all(e.startswith("corpus/langgraph-3668-retry-restarts/bug.yaml") for e in errors)


def test_the_checker_refuses_an_agent_importing_crashpoint(entry: Path) -> None:
    _edit(entry, "import argparse\n", "import argparse\nfrom crashpoint import probe\n", "agent.py")
    errors = schema.check_entry(entry)
    assert any("(key 'agent')" in e and "imports crashpoint" in e for e in errors), errors


def test_the_checker_refuses_a_freeze_that_is_not_pins(entry: Path) -> None:
    (entry / "broken.txt").write_text("langgraph==0.3.2\n-e git+https://x/y\n", encoding="utf-8")
    errors = schema.check_entry(entry)
    assert any("(key 'broken.freeze')" in e and "broken.txt:2" in e for e in errors), errors


def test_the_checker_wants_exactly_one_of_fixed_and_control(entry: Path) -> None:
    text = (entry / "bug.yaml").read_text(encoding="utf-8")
    (entry / "bug.yaml").write_text(text.replace("\nfixed:", "\ncontrol:"), encoding="utf-8")
    errors = schema.check_entry(entry)
    assert any("(key 'control.workaround')" in e and "missing" in e for e in errors), errors
    assert any("(key 'control.by')" in e and "unknown key" in e for e in errors), errors
    text = (entry / "bug.yaml").read_text(encoding="utf-8").split("\ncontrol:")[0]
    (entry / "bug.yaml").write_text(text + "\n", encoding="utf-8")
    errors = schema.check_entry(entry)
    assert any("exactly one of `fixed`" in e for e in errors), errors


def test_a_malformed_yaml_is_one_line_naming_the_file(entry: Path) -> None:
    (entry / "bug.yaml").write_text("id: [unclosed\n", encoding="utf-8")
    (err,) = schema.check_entry(entry)
    assert err.startswith("corpus/langgraph-3668-retry-restarts/bug.yaml: not valid YAML")
    assert "\n" not in err


def test_the_benchmark_refuses_a_malformed_entry_and_an_unknown_id(
    entry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load("corpus")
    assert bench.main(["--check", "--corpus", str(entry.parent)]) == 0
    assert bench.main(["--check", "--corpus", str(entry.parent), "--only", "nope"]) == 2
    assert "--only nope: no such entry" in capsys.readouterr().err
    _edit(entry, "number: 3668\n  url", "number: -1\n  url")
    assert bench.main(["--check", "--corpus", str(entry.parent)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err
    assert all(
        line.startswith("corpus: corpus/langgraph-3668-retry-restarts/bug.yaml") for line in err
    )
