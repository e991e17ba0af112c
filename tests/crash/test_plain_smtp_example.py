"""``examples/plain-smtp/``: an agent that mails through plain ``smtplib`` without a login,
run as shipped. The mail stand-in knows the trial's own processes by their connection, so the
agent needs no credentials: the fixed twin passes every kill, the one with random Message-IDs
fails on the duplicated digest (and only there)."""

from __future__ import annotations

from pathlib import Path

from _forked import run_forked
from crashpoint.harness import CampaignResult, HarnessResult, load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plain-smtp"


def run(name: str, tmp_path: Path) -> CampaignResult:
    sc = load_scenario(EXAMPLE / name)
    families = [f.family for f in sc.families if f.family.name == "kill@every-boundary"]
    # forked from a warm zygote: the verdicts are about the Message-IDs, not spawning
    return run_forked(
        sc.agent,
        families,
        str(tmp_path / "report"),
        name=name,
        seed=sc.seed,
        restarts=sc.restarts,
        expect=sc.expect,
    )


def test_the_fixed_mailer_passes_without_a_login(tmp_path: Path) -> None:
    result = run("fixed.scenario.yaml", tmp_path)
    assert result.ok, HarnessResult(result).report()
    fam = result.families()["kill@every-boundary"]
    assert fam["exercised"] == fam["planned"] == 6
    assert [e.get("kind") for e in result.golden.events] == ["mail"] * 3
    # nothing of the agent's was refused: it never logged in and never needed to
    refused = [t.ledger_refused for t in result.trials]
    assert not any(refused), refused


def test_random_message_ids_are_caught_as_duplicated_mail(tmp_path: Path) -> None:
    result = run("broken.scenario.yaml", tmp_path)
    assert not result.ok
    assert {t.plan.faults[0].arg("phase") for t in result.failures} == {"in_doubt"}
    for t in result.failures:
        assert t.root_cause is not None
        assert t.root_cause.name == "exactly_once"
        assert "DUPLICATED mail" in t.root_cause.message
