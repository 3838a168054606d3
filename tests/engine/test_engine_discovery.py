"""Which files are test files: Playwright-style ``testMatch`` / ``testIgnore`` globs, with
defaults that cover upstream's case-file names."""

from __future__ import annotations

import pytest
from agent_health.engine.loading import discovery


@pytest.mark.parametrize(
    "path",
    [
        "test_triage.py",
        "suite/triage_test.py",
        "a/b/payments.test.py",
        "lib.cases.json",
        "lib.cases.jsonl",
        "test_rca.json",
        "otel-benchmark-test-cases.json",
        "holmesgpt-test-cases.json",
        "cli/demo/observability-agent-benchmark.json",
        "imported_test_cases.json",
    ],
)
def test_the_defaults_find_our_names_and_upstreams(path: str) -> None:
    assert discovery.Discovery().is_test_file(path)


@pytest.mark.parametrize(
    "path", ["conftest.py", "helpers.py", "cases.json", "package.json", "notes.cases.txt"]
)
def test_the_defaults_leave_other_files_alone(path: str) -> None:
    assert not discovery.Discovery().is_test_file(path)


def test_patterns_are_globs_matched_at_any_depth_unless_anchored() -> None:
    found = discovery.of(
        ["cases/*.json", "/top.json", "**/deep/**/x.json", "{a,b}[0-9].json"],
        ["cases/skip-*"],
        lenient=False,
        forbid_unknown=False,
    )
    assert found.is_test_file("cases/one.json")
    assert found.is_test_file("suite/cases/one.json")  # Playwright's implicit **/
    assert not found.is_test_file("cases/nested/one.json")  # * stays within a folder
    assert not found.is_test_file("cases/skip-me.json")  # test_ignore wins
    assert found.is_test_file("top.json")
    assert not found.is_test_file("sub/top.json")  # anchored at the folder searched
    assert found.is_test_file("deep/x.json")
    assert found.is_test_file("a/deep/b/c/x.json")
    assert found.is_test_file("a1.json")
    assert found.is_test_file("b7.json")
    assert not found.is_test_file("c1.json")


def test_forbid_unknown_is_on_in_ci_unless_told() -> None:
    def forbid(flag: bool | None, ci: str) -> bool:
        found = discovery.of(None, [], lenient=False, forbid_unknown=flag, environ={"CI": ci})
        return found.cases.forbid_unknown

    assert [forbid(None, ""), forbid(None, "true"), forbid(None, "0")] == [False, True, False]
    assert [forbid(False, "true"), forbid(True, "")] == [False, True]


def test_a_path_is_matched_only_against_the_patterns_it_ends_as() -> None:
    # Each pattern's regex is compiled when first matched: a suite's config file, checked
    # against the eleven defaults, compiled all eleven (3 M instructions of a run, issue
    # #40). A path that does not end as a pattern's literal end cannot match it.
    discovery._regex.cache_clear()
    defaults = discovery.Discovery()
    assert not defaults.is_test_file("agent-health.config.py")
    assert discovery._regex.cache_info().currsize == 1  # test_*.py, for its ".py"
    assert defaults.is_test_file("test_one.py")
    assert discovery._regex.cache_info().currsize == 1
    # "**/" may match nothing: the end after it is the file's name, not "/name"
    assert discovery.of(["**/b.py"], [], lenient=False, forbid_unknown=False).is_test_file("b.py")
