"""``crashpoint init``: a starter scenario with boundary kills, file-operation kills and power
loss, which the gate accepts as written; an existing file is never overwritten."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crashpoint.cli import main
from crashpoint.harness import load_scenario


def test_init_writes_the_recipe_and_the_gate_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.js").write_text("// the agent\n")
    code = main(["init", "--command", "sh agent.js --state {state_dir} --hook {http}/hook"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "wrote agent.scenario.yaml" in out
    assert "crashpoint run agent.scenario.yaml" in out
    text = (tmp_path / "agent.scenario.yaml").read_text()
    assert "NEEDS STRACE" in text  # power loss says what it needs, in the file itself
    sc = load_scenario(tmp_path / "agent.scenario.yaml")
    assert [f.family.to_json() for f in sc.families] == [
        [{"kill": {"at": "every-boundary"}}],
        [{"kill": {"at": "fileop"}}],
        [{"power_loss": {"model": "posix", "count": 20}}],
    ]
    # the script named by a relative path runs from anywhere: it is taken from the file's folder
    assert sc.agent.command[:2] == ("sh", "{scenario_dir}/agent.js")
    assert sc.name == "agent.js survives kills, torn writes and power loss"
    assert sc.agent.timeout == 60


def test_init_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "mine.scenario.yaml"
    target.write_text("name: mine\n")
    assert main(["init", str(target), "--command", "true {state_dir}"]) == 2
    assert "exists" in capsys.readouterr().err
    assert target.read_text() == "name: mine\n"
    # a link is not followed either
    os.symlink(tmp_path / "elsewhere.txt", tmp_path / "link.scenario.yaml")
    assert main(["init", "link.scenario.yaml", "--command", "true {state_dir}"]) == 2
    assert not (tmp_path / "elsewhere.txt").exists()


def test_init_into_a_folder_and_the_name_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    cmd = ["--command", "true {state_dir}", "--name", "my agent", "--timeout", "2m"]
    assert main(["init", str(folder), *cmd]) == 0
    sc = load_scenario(folder / "agent.scenario.yaml")
    assert (sc.name, sc.agent.timeout) == ("my agent", 120)
    assert main(["init", str(tmp_path / "x.yaml"), *cmd]) == 2
    assert "ends in .scenario.yaml" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_init_says_when_the_gate_would_refuse_the_file_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a.scenario.yaml"
    assert main(["init", str(target), "--command", "no-such-agent-program-xyz"]) == 1
    err = capsys.readouterr().err
    assert "names no {state_dir}" in err
    assert "the gate would refuse it" in err
    assert "'no-such-agent-program-xyz' not found on PATH" in err
    assert target.exists()
