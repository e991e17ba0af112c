"""benchmarks/corpus.py's judging and scoreboard, on made-up gate results: a catch needs the
expected check and message; a pass or another check on the broken side is a miss with its
reason; a failure on the fixed side is a false alarm. No environment is built here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_bench", ROOT / "benchmarks" / "corpus.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ENTRY = {"id": "x", "expect": {"check": "exactly_once", "message": "DUPLICATED POST /charges"}}


def _side(verdict: str, fired: list[tuple[str, str]], *, expected: bool = False) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "checks_fired": sorted({n for n, _ in fired}),
        "check": fired[0][0] if fired else None,
        "message": fired[0][1] if fired else None,
        "expected": expected,
        "trials": 3,
        "error": "boom" if verdict == "error" else "",
    }


def test_caught_needs_the_expected_check(bench: ModuleType) -> None:
    hit = _side("fail", [("exactly_once", "DUPLICATED POST /charges ...")], expected=True)
    v = bench.judge(ENTRY, hit, _side("pass", []))
    assert v == {
        "outcome": "caught",
        "false_alarm": False,
        "reason": "exactly_once: DUPLICATED POST /charges ...",
    }


def test_another_check_or_a_pass_is_a_miss_with_its_reason(bench: ModuleType) -> None:
    other = _side("fail", [("completes", "exit 1")])
    v = bench.judge(ENTRY, other, _side("pass", []))
    assert v["outcome"] == "missed"
    assert "tripped completes instead of exactly_once" in v["reason"]
    v = bench.judge(ENTRY, _side("pass", []), _side("pass", []))
    assert v["outcome"] == "missed"
    assert "the broken side passed" in v["reason"]
    v = bench.judge(ENTRY, _side("error", []), _side("pass", []))
    assert v["outcome"] == "error"
    v = bench.judge(ENTRY, other, _side("error", []))  # the fixed side's golden run failed
    assert v["outcome"] == "error"
    assert v["false_alarm"] is False


def test_a_failure_on_the_fixed_side_is_a_false_alarm(bench: ModuleType) -> None:
    hit = _side("fail", [("exactly_once", "DUPLICATED POST /charges")], expected=True)
    v = bench.judge(ENTRY, hit, _side("fail", [("exactly_once", "DUPLICATED POST /x")]))
    assert v["outcome"] == "caught"
    assert v["false_alarm"] is True
    assert "FALSE ALARM" in v["reason"]


def test_read_gate_collects_every_failed_check(bench: ModuleType, tmp_path: Path) -> None:
    gate = {
        "status": "fail",
        "campaigns": [
            {
                "ran": 3,
                "exercised": 3,
                "failures": [
                    {
                        "checks": [
                            "single_writer: FAIL: attempts 1 and 2",
                            "exactly_once: FAIL: DUPLICATED x",
                        ]
                    },
                    {"checks": ["exactly_once: FAIL: DUPLICATED x"]},
                ],
            }
        ],
    }
    (tmp_path / "gate.json").write_text(json.dumps(gate), encoding="utf-8")
    got = bench.read_gate(tmp_path)
    assert got["trials"] == 3
    assert got["failed"] == [
        ("single_writer", "attempts 1 and 2"),
        ("exactly_once", "DUPLICATED x"),
    ]
    assert bench.read_gate(tmp_path / "nope")["status"] == "no gate.json"


def test_scoreboard_line_and_table_keep_misses(bench: ModuleType) -> None:
    def result(i: str, runtime: str, outcome: str, alarm: bool) -> dict[str, Any]:
        side = {"pin": "p==1", "verdict": "fail", "check": "completes", "trials": 2, "seconds": 1.0}
        return {
            "id": i,
            "runtime": runtime,
            "outcome": outcome,
            "false_alarm": alarm,
            "reason": "the broken side passed",
            "other": "fixed",
            "broken": side,
            "fixed": {**side, "verdict": "pass", "check": None},
            "report": {"repository": "o/r", "number": 1, "url": "https://github.com/o/r/issues/1"},
        }

    rs = [result("a", "dbos", "caught", False), result("b", "langgraph", "missed", False)]
    assert bench.scoreboard(rs)["line"] == (
        "2 entries, 2 runtimes: caught 1/2 broken, 0/2 false alarms on fixed"
    )
    table = bench.table(rs)
    assert "| `b` | langgraph |" in table
    assert "missed: the broken side passed" in table


def test_offline_names_what_is_not_cached_and_runs_nothing(
    bench: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "corpus.json"
    argv = ["--offline", "--only", "langgraph-3668-retry-restarts", "--out", str(out)]
    assert bench.main(argv) == 3
    text = capsys.readouterr().out
    assert "broken: SKIPPED, environment missing: not cached: " in text
    assert "corpus/langgraph-3668-retry-restarts/broken.txt" in text
    assert not out.exists()
    assert not (tmp_path / "cache" / "crashpoint" / "corpus" / "runs").exists() or not any(
        (tmp_path / "cache" / "crashpoint" / "corpus" / "runs").iterdir()
    )
