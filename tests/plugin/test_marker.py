"""``@pytest.mark.crashpoint(trials=, faults=, seed=, restarts=)``: registered with its
signature, changes the campaign, and is parsed strictly (a clear error at setup otherwise)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest_plugins = ["pytester"]

#: Builds (does not run) a campaign without faults/trials/seed arguments, so the marker (or
#: the defaults) decide them, and writes what the campaign got.
MARKED_TEST = """
import json

import pytest

{marker}
def test_marked(crash_harness):
    c = crash_harness.campaign(["agent"])
    with open("campaign.json", "w") as f:
        json.dump({{"seed": c.seed, "trials": c.trials, "restarts": c.restarts,
                   "families": [x.name for x in c.families]}}, f)
"""


def campaign_with(inner: Any, marker: str) -> dict[str, Any]:
    inner.pytester.makepyfile(test_marked=MARKED_TEST.format(marker=marker))
    result = inner.inprocess("--strict-markers")
    result.assert_outcomes(passed=1)
    got: dict[str, Any] = json.loads((inner.path / "campaign.json").read_text())
    return got


def test_marker_is_registered_with_its_signature(inner: Any) -> None:
    result = inner.inprocess("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.crashpoint(trials=None, faults=None, seed=None, restarts=None): *"]
    )


def test_without_marker_the_defaults_apply(inner: Any) -> None:
    got = campaign_with(inner, "")
    assert got == {"seed": 0, "trials": 20, "restarts": 3, "families": ["kill@every-boundary"]}


def test_marker_sets_trials_faults_seed_restarts(inner: Any) -> None:
    got = campaign_with(
        inner,
        "@pytest.mark.crashpoint(trials=4, seed=9, restarts=1, faults=["
        '{"kill": {"at": "random"}}, {"corrupt": {"how": ["bitflip"]}}])',
    )
    assert got == {
        "seed": 9,
        "trials": 4,
        "restarts": 1,
        "families": ["kill@random", "corrupt@bitflip"],
    }


def test_marker_takes_the_power_loss_family_and_its_chain(inner: Any) -> None:
    got = campaign_with(
        inner,
        '@pytest.mark.crashpoint(faults=[{"power_loss": {"model": '
        '"ext4-ordered"}}, [{"kill": {"at": "random"}}, {"power_loss": '
        '{"count": 2}}]])',
    )
    assert got["families"] == ["power_loss@ext4-ordered", "kill@random+power_loss@posix"]


def test_marker_on_the_module_applies_to_its_tests(inner: Any) -> None:
    got = campaign_with(inner, 'pytestmark = pytest.mark.crashpoint(seed=5, faults="hang")')
    assert (got["seed"], got["families"]) == (5, ["hang"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "trails=3",
            "crashpoint() got an unexpected keyword argument 'trails'; "
            "allowed: trials=, faults=, seed=, restarts=",
        ),
        (
            "3",
            "crashpoint() takes 0 positional arguments but 1 was given; "
            "allowed: trials=, faults=, seed=, restarts=",
        ),
    ],
)
def test_unknown_or_positional_arguments_are_errors(inner: Any, args: str, message: str) -> None:
    inner.pytester.makepyfile(f"""
        import pytest

        @pytest.mark.crashpoint({args})
        def test_bad(crash_harness):
            pass
    """)
    result = inner.inprocess("--strict-markers")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_bad*",
            "test_*.py::test_bad: bad @pytest.mark.crashpoint arguments (from marker): " + message,
        ]
    )
    # said once, not once more after "During handling of the above exception ..."
    assert "During handling" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "trials=-1",
            "@pytest.mark.crashpoint(trials=-1) (from marker): expected a whole number >= 0",
        ),
        (
            "seed='7'",
            "@pytest.mark.crashpoint(seed='7') (from marker): expected a whole number >= 0",
        ),
        (
            "restarts=True",
            "@pytest.mark.crashpoint(restarts=True) (from marker): expected a whole number >= 0",
        ),
        (
            "faults=[{'explode': {}}]",
            "@pytest.mark.crashpoint(faults=[{'explode': {}}]) (from "
            "marker): unknown fault kind 'explode'; use one of kill, ",
        ),
    ],
)
def test_bad_values_are_errors(inner: Any, args: str, message: str) -> None:
    inner.pytester.makepyfile(f"""
        import pytest

        @pytest.mark.crashpoint({args})
        def test_bad(crash_harness):
            pass

        def test_unmarked_still_runs():
            pass
    """)
    result = inner.inprocess("--strict-markers")
    result.assert_outcomes(errors=1, passed=1)
    assert f"test_bad_values_are_errors.py::test_bad: {message}" in result.stdout.str()


def test_bad_marker_is_an_error_even_without_the_fixture(inner: Any) -> None:
    inner.pytester.makepyfile("""
        import pytest

        @pytest.mark.crashpoint(trials=-2)
        def test_bad():
            pass
    """)
    result = inner.inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.crashpoint(trials=-2) (from marker)*"])
