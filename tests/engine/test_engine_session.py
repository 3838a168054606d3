"""Scheduling: timeouts, repeats and pass@k, selection, focus, isolation between tests.

The engine runs in this process (``support.harness.run_suite``); what only the command line
does — exit codes, reporters — goes through it (``support.helpers``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from agent_health import cli
from support.harness import named, run_suite
from support.helpers import run_cli_sync


async def test_timeout_is_errored_and_teardown_still_runs(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_slow.py": """
            import asyncio
            from pathlib import Path
            from agent_health import test

            MARK = Path(__file__).with_name("torn-down")

            async def resource():
                yield 1
                MARK.write_text("yes")

            test = test.extend(resource=resource)

            @test("hangs", timeout=0.2)
            async def hangs(resource):
                await asyncio.Event().wait()
            """
        }
    )
    report = await run_suite(suite)
    entry = named(report, "hangs")
    assert entry["status"] == "errored"
    assert entry["error"] == "timed out after 0.2 s"
    assert (suite / "torn-down").read_text() == "yes"
    assert report.summary.errored == 1


FLAKY = """
from agent_health import test, expect

@test("always")
async def always(test_info):
    expect(test_info.repeat).to_be_less_than(10)

@test("sometimes")
async def sometimes(test_info):
    expect(test_info.repeat % 2).to_equal(0)

@test("never")
async def never():
    assert False, "nope"
"""


async def test_repeats_give_pass_at_k_and_flaky(write_suite: Any) -> None:
    suite = write_suite(**{"test_flaky.py": FLAKY})
    report = await run_suite(suite, repeat=4)
    summary = report.summary
    assert summary.total == 12
    assert summary.pass_at_k == round(2 / 3, 6)  # always, sometimes
    assert summary.pass_hat_k == round(1 / 3, 6)  # always
    assert summary.mixed == ["sometimes"]  # passed in some repeats only
    assert summary.flaky == []  # flaky: passed on a retry (--retries); none here
    repeats = sorted(t["repeat"] for t in report.tests if t["name"] == "sometimes")
    assert repeats == [0, 1, 2, 3]
    never = next(t for t in report.tests if t["name"] == "never")
    assert never["status"] == "failed"
    assert "nope" in never["signals"][0]["evidence"]["message"]


SELECTION = {
    "test_sel.py": "\n".join(
        [
            "from agent_health import test",
            *(
                f"@test('case {i}', labels=['{'even' if i % 2 == 0 else 'odd'}', 'all'])\n"
                f"async def c{i}():\n    pass\n"
                for i in range(10)
            ),
        ]
    )
}


async def test_grep_label_and_shards(write_suite: Any) -> None:
    suite = write_suite(**SELECTION)

    async def chosen(**selection: Any) -> list[dict[str, Any]]:
        return (await run_suite(suite, **selection)).tests

    assert len(await chosen(grep=[r"case [1-3]$"])) == 3
    assert len(await chosen(labels=["even"])) == 5
    assert len(await chosen(labels=["even", "all"])) == 5
    assert len(await chosen(labels=["even", "odd"])) == 0
    shards = [{t["id"] for t in await chosen(shard=(i, 3))} for i in (1, 2, 3)]
    assert sum(len(s) for s in shards) == 10
    assert shards[0] | shards[1] | shards[2] == {f"test_sel.py::case {i}" for i in range(10)}


def test_a_selection_that_cannot_be_made_or_selects_nothing_is_a_usage_error(
    write_suite: Any,
) -> None:
    suite = write_suite(**SELECTION)
    assert len(run_cli_sync(suite, "--grep", r"case [1-3]$").report["tests"]) == 3
    assert run_cli_sync(suite, "--shard", "4/3").code == 2
    assert run_cli_sync(suite, "--grep", "nothing matches").code == 2
    assert run_cli_sync(suite, "--grep", "nothing matches", "--pass-with-no-tests").code == 0


async def test_only_focuses_and_fixme_skips(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_focus.py": """
            from agent_health import test

            @test("ignored")
            async def ignored():
                raise AssertionError

            @test.only("focused")
            async def focused():
                pass
            """,
            "test_fixme.py": """
            from agent_health import test

            @test.fixme("broken", reason="tracked in INC-7")
            async def broken():
                raise AssertionError
            """,
        }
    )
    assert [t["name"] for t in (await run_suite(suite)).tests] == ["focused"]
    broken = named(await run_suite(suite / "test_fixme.py"), "broken")
    assert broken["status"] == "skipped"
    assert broken["skip_reason"] == "tracked in INC-7"


async def test_concurrent_tests_never_share_signals(write_suite: Any, triage_url: str) -> None:
    body = "\n".join(
        f"""
@test("t{i}")
async def t{i}(agent):
    result = await agent.run("check the {service} service")
    await asyncio.sleep({(i % 5) / 100})
    expect(result.output).to_contain("{service}")
    expect(result).to_have_called_tool("search_logs", {{"service": "{service}"}})
"""
        for i, service in enumerate(["payment", "auth", "inventory", "checkout", "search"] * 8)
    )
    suite = write_suite(
        **{"test_many.py": "import asyncio\nfrom agent_health import test, expect\n" + body}
    )
    report = await run_suite(suite, agent=f"rest+{triage_url}", concurrency=16)
    assert report.summary.passed == report.summary.total == 40
    for test in report.tests:
        assert test["status"] == "passed"
        assert len([s for s in test["signals"] if s["kind"] != "metric"]) == 2


async def test_default_prompt_and_prompt_capture(write_suite: Any, triage_url: str) -> None:
    suite = write_suite(
        **{
            "test_prompt.py": """
            from agent_health import test

            @test("default", default_prompt="check the auth service")
            async def default(agent):
                await agent.run()

            @test("explicit")
            async def explicit(agent):
                await agent.run("check the search service")

            @test("none")
            async def none(agent):
                await agent.run()

            @test("skips itself")
            async def skips(test_info):
                test_info.skip("no GPU here")
            """
        }
    )
    report = await run_suite(suite, agent=f"rest+{triage_url}")
    assert named(report, "default")["prompt"] == "check the auth service"
    assert named(report, "explicit")["prompt"] == "check the search service"
    none = named(report, "none")
    assert none["status"] == "errored"
    assert "no prompt and the test has no default_prompt" in none["error"]
    assert named(report, "skips itself")["status"] == "skipped"
    assert named(report, "skips itself")["skip_reason"] == "no GPU here"
    metrics = named(report, "default")["metrics"]
    assert metrics["tool_calls"] == 2
    assert metrics["tool_histogram"] == {"search_logs": 1, "service_status": 1}
    assert metrics["total_tokens"] > 0


def test_junit_report(write_suite: Any, tmp_path: Path) -> None:
    suite = write_suite(**{"test_flaky.py": FLAKY})
    out = tmp_path / "junit.xml"
    code = cli.main(["run", str(suite), "--reporter", f"junit:{out}"])
    assert code == 1
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    failure = cases["never"].find("failure")
    assert failure is not None
    assert "nope" in (failure.text or "")


def test_unknown_reporter_is_usage_error(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(**{"test_flaky.py": FLAKY})
    assert cli.main(["run", str(suite), "--reporter", "html5"]) == 2
    assert "unknown reporter 'html5'" in capsys.readouterr().err


async def test_a_timeout_error_raised_by_the_body_is_not_our_timeout(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_own_timeout.py": """
            import asyncio
            from agent_health import test

            @test("own timeout")
            async def own():
                await asyncio.wait_for(asyncio.Event().wait(), 0.01)
            """
        }
    )
    entry = named(await run_suite(suite), "own timeout")
    assert entry["status"] == "errored"
    assert entry["error"].startswith("TimeoutError")
    assert "timed out after" not in entry["error"]


async def test_scores_are_weighted_and_absent_when_nothing_was_scored(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_scores.py": """
            from agent_health import test

            @test("weighted")
            async def weighted(expect):
                expect(1).to_equal(1, weight=3)
                expect(1).to_equal(2)

            @test("nothing scored")
            async def nothing():
                pass
            """
        }
    )
    report = await run_suite(suite)
    assert named(report, "weighted")["score"] == 0.75
    assert named(report, "weighted")["status"] == "failed"
    assert named(report, "nothing scored")["score"] is None
    assert report.summary.score == 0.75


def test_a_run_id_is_a_uuid4_in_hex() -> None:
    """Run ids are made without the ``UUID`` object (issue #40) but read as ``uuid4().hex``:
    32 lowercase hex digits, version 4, the RFC 4122 variant, and never the same twice."""
    import uuid

    from agent_health.engine.running import runner

    made = [runner.new_run_id() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for run_id in made:
        parsed = uuid.UUID(hex=run_id)
        assert parsed.hex == run_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    # Every bit but the six uuid4 fixes is random: each is seen both ways.
    numbers = [int(run_id, 16) for run_id in made]
    fixed = (0xC000 << 48) | (0xF000 << 64)
    varying = ~fixed & ((1 << 128) - 1)
    seen_set = 0
    seen_clear = 0
    for number in numbers:
        seen_set |= number
        seen_clear |= ~number
    assert seen_set & varying == varying
    assert seen_clear & varying == varying
