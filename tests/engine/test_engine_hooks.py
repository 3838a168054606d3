"""Hooks run around the body (so around the agent call); describe scopes them."""

from __future__ import annotations

from typing import Any

from support.helpers import run_cli, run_cli_sync


async def test_hooks_wrap_the_agent_call(write_suite: Any, triage_url: str) -> None:
    suite = write_suite(
        **{
            "test_hooks.py": """
            from agent_health import test

            EVENTS = []

            @test.before_all
            async def start():
                EVENTS.append("before_all")

            @test.after_all
            def finish():
                EVENTS.append("after_all")

            @test.before_each
            async def setup(test_info):
                EVENTS.append(f"before_each {test_info.name}")

            @test.after_each
            async def teardown(test_info, agent):
                EVENTS.append(f"after_each {test_info.name}")

            @test("outer")
            async def outer(agent, expect):
                await agent.run("check the auth service")
                EVENTS.append("body outer")

            with test.describe("group", labels=["grouped"]):
                @test.before_each
                def inner_setup():
                    EVENTS.append("group before_each")

                @test("inner")
                async def inner(agent, expect, test_info):
                    await agent.run("check the auth service")
                    EVENTS.append("body inner")
                    expect(test_info.title).to_equal("group > inner")
                    expect(test_info.labels).to_equal(("grouped", "x"))

            # Registered last so it runs last, after the other tests of the file.
            with test.describe("zz"):
                @test("events")
                async def events(expect):
                    expect(EVENTS).to_equal([
                        "before_all",
                        "before_each outer", "body outer", "after_each outer",
                        "before_each inner", "group before_each", "body inner",
                        "after_each inner",
                        "before_each events",
                    ])
            """.replace('("grouped", "x")', '("grouped",)')
        }
    )
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "-j", "1")
    assert run.code == 0, run.report
    assert run.by_name("group > inner")["labels"] == ["grouped"]


def test_before_all_failure_errors_the_file(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_broken.py": """
            from agent_health import test

            @test.before_all
            def boom():
                raise ConnectionError("database for fixtures is down")

            @test("one")
            async def one():
                pass

            @test("two")
            async def two():
                pass
            """,
            "test_fine.py": """
            from agent_health import test

            @test("fine")
            async def fine():
                pass
            """,
        }
    )
    run = run_cli_sync(suite)
    assert run.code == 3
    for name in ("one", "two"):
        entry = run.by_name(name)
        assert entry["status"] == "errored"
        assert "before_all hook boom failed: ConnectionError" in entry["error"]
    assert run.by_name("fine")["status"] == "passed"


def test_a_hook_is_blamed_as_a_body_would_be(write_suite: Any) -> None:
    """Every hook is called one way (runner.call_hook), its exception kept: a before_all
    the agent's failure broke errors its file's tests with cause ``agent``, as that failure
    in a body or a teardown would; a before_all's own bug stays the test's."""
    suite = write_suite(
        **{
            "test_agent_down.py": """
            from agent_health import test
            from agent_health.connectors import errors

            @test.before_all
            async def warm_up():
                raise errors.ConnectorError("agent at http://127.0.0.1:1 refused the connection")

            @test("after the warm-up")
            async def one():
                pass
            """,
            "test_own_bug.py": """
            from agent_health import test

            @test.before_all
            def setup():
                {}["missing"]

            @test("after the setup")
            async def two():
                pass
            """,
        }
    )
    run = run_cli_sync(suite)
    agent = run.by_name("after the warm-up")
    assert (agent["status"], agent["cause"]) == ("errored", "agent")
    assert "before_all hook warm_up failed: agent at http://127.0.0.1:1 refused" in agent["error"]
    own = run.by_name("after the setup")
    assert (own["status"], own["cause"]) == ("errored", "test")
    assert "before_all hook setup failed: KeyError" in own["error"]


def test_failing_after_each_makes_the_test_errored(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_after.py": """
            from agent_health import test

            @test.after_each
            def cleanup():
                raise OSError("could not delete workspace")

            @test("body passes")
            async def body(expect):
                expect(1).to_equal(1)
            """
        }
    )
    run = run_cli_sync(suite)
    entry = run.by_name("body passes")
    assert entry["status"] == "errored"
    assert "after_each hook cleanup failed: OSError: could not delete workspace" in entry["error"]


def test_all_hooks_take_no_fixtures(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_h.py": """
            from agent_health import test

            @test.before_all
            def needs(agent):
                pass
            """
        }
    )
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert run.code == 2
    assert "take no fixtures" in run.report["summary"]["load_errors"][0]


def test_a_files_before_all_outcome_is_taken_by_its_later_tests_without_entering_again(
    write_suite: Any, monkeypatch: Any
) -> None:
    """A file's before_all hooks run once, for its first test; its later tests take their
    outcome, and a file without after_all hooks has nothing to do as each test leaves —
    neither costs a coroutine a test (issue #40). The last test of a file with after_all
    hooks still runs them."""
    from agent_health.engine.running import session

    calls: list[str] = []
    enter, leave = session._FileHooks.enter, session._FileHooks.leave

    async def entered(self: Any) -> Any:
        calls.append(f"enter {self.file}")
        return await enter(self)

    async def left(self: Any, hook_errors: list[str]) -> None:
        calls.append(f"leave {self.file}")
        await leave(self, hook_errors)

    monkeypatch.setattr(session._FileHooks, "enter", entered)
    monkeypatch.setattr(session._FileHooks, "leave", left)
    three = "".join(f"\n@test('t{i}')\nasync def t{i}():\n    pass\n" for i in range(3))
    suite = write_suite(
        **{
            "test_plain.py": "from agent_health import test\n" + three,
            "test_after.py": "from agent_health import test\n"
            + three
            + "\n@test.after_all\ndef done():\n    print('after_all ran')\n",
        }
    )
    run = run_cli_sync(suite, "-j", "1")
    assert run.code == 0
    assert sorted(calls) == ["enter test_after.py", "enter test_plain.py", "leave test_after.py"]
