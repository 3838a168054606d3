"""Fixtures: setup order, teardown LIFO in finally, exactly one yield, all errors collected."""

from __future__ import annotations

from typing import Any

from support.helpers import run_cli_sync

FIXTURES = """
from agent_health import test

LOG = []

async def first():
    LOG.append("setup first")
    yield "one"
    LOG.append("teardown first")

def second(first):
    LOG.append("setup second")
    yield first + "+two"
    LOG.append("teardown second")

async def plain(second):
    return second + "+plain"

async def broken_teardown_a():
    yield 1
    raise RuntimeError("teardown A exploded")

async def broken_teardown_b():
    yield 2
    raise ValueError("teardown B exploded")

async def no_yield():
    if False:
        yield 0

async def two_yields():
    yield 1
    yield 2

test = test.extend(first=first, second=second, plain=plain, a=broken_teardown_a,
                   b=broken_teardown_b, no_yield=no_yield, two_yields=two_yields)

@test("dependencies resolve and teardown runs LIFO")
async def order(expect, plain):
    expect(plain).to_equal("one+two+plain")

@test("teardown runs after a failing body")
async def fails(expect, first):
    raise RuntimeError("body broke")

@test("every teardown error is collected")
async def both(a, b):
    pass

@test("a fixture that never yields is an error")
async def never(no_yield):
    pass

@test("a fixture that yields twice is an error")
async def twice(two_yields):
    pass

@test("the log shows the order")
async def check_log(expect):
    expect(LOG[:5]).to_equal(
        ["setup first", "setup second", "teardown second", "teardown first", "setup first"]
    )
    expect(LOG[5]).to_equal("teardown first")
"""


def test_fixture_lifecycle(write_suite: Any) -> None:
    suite = write_suite(**{"test_fx.py": FIXTURES})
    run = run_cli_sync(suite, "-j", "1")
    assert run.by_name("dependencies resolve and teardown runs LIFO")["status"] == "passed"
    fails = run.by_name("teardown runs after a failing body")
    assert fails["status"] == "errored"
    assert "RuntimeError: body broke" in fails["error"]
    both = run.by_name("every teardown error is collected")
    assert both["status"] == "errored"
    # LIFO: b was set up last, so its teardown error comes first; both are kept.
    assert both["error"].index("teardown B exploded") < both["error"].index("teardown A exploded")
    assert "did not yield" in run.by_name("a fixture that never yields is an error")["error"]
    assert (
        "yielded more than once" in run.by_name("a fixture that yields twice is an error")["error"]
    )
    assert run.by_name("the log shows the order")["status"] == "passed", run.by_name(
        "the log shows the order"
    )


def test_unknown_fixture_is_a_discovery_error(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{
            "test_bad.py": """
            from agent_health import test

            @test("asks for nothing real")
            async def body(agent, databse):
                pass
            """,
            "test_good.py": """
            from agent_health import test

            @test("still runs")
            async def body(expect):
                expect(1).to_equal(1)
            """,
        }
    )
    run = run_cli_sync(suite)
    assert run.code == 2
    errors = run.report["summary"]["load_errors"]
    assert len(errors) == 1
    assert "test_bad.py:4" in errors[0]
    assert "'asks for nothing real'" in errors[0]
    assert "'databse'" in errors[0]
    assert run.by_name("still runs")["status"] == "passed"


def test_fixture_cycle_is_reported(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_cycle.py": """
            from agent_health import test

            def a(b):
                return 1

            def b(a):
                return 2

            test = test.extend(a=a, b=b)
            """
        }
    )
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert run.code == 2
    assert "cycle" in run.report["summary"]["load_errors"][0]


def test_a_teardown_error_is_blamed_on_whoever_caused_it(write_suite: Any) -> None:
    """A teardown that fails because the agent failed (the agent's error, raised on) errors the
    test with cause ``agent``, as the body's would; a teardown's own bug stays the test's."""
    suite = write_suite(
        **{
            "test_td.py": """
            from agent_health import test
            from agent_health.connectors import errors

            async def session():
                yield "s"
                raise errors.ConnectorError("agent at http://127.0.0.1:1 reset the connection")

            async def buggy():
                yield "b"
                raise KeyError("oops")

            test = test.extend(session=session, buggy=buggy)

            @test("the agent broke the session a teardown closes")
            async def agent_fault(session):
                pass

            @test("the teardown's own bug")
            async def own_bug(buggy):
                pass
            """
        }
    )
    run = run_cli_sync(suite, "-j", "1")
    by_agent = run.by_name("the agent broke the session a teardown closes")
    assert (by_agent["status"], by_agent["cause"]) == ("errored", "agent")
    assert "teardown of fixture 'session' failed: ConnectorError: agent at" in by_agent["error"]
    own = run.by_name("the teardown's own bug")
    assert (own["status"], own["cause"]) == ("errored", "test")
    assert "teardown of fixture 'buggy' failed: KeyError" in own["error"]


async def test_a_body_gets_the_built_in_fixtures_and_values_without_a_setup_each() -> None:
    """What a body takes that is at hand — a built-in (``agent``, ``expect``) or a
    test.each value — is given as it is, no ``get`` coroutine each (issue #40); a fixture
    of test.extend is still set up by ``get``, once."""
    from agent_health.engine.running import fixtures
    from agent_health.sdk import declare

    asked: list[str] = []

    class Scope(fixtures.FixtureScope):
        async def get(self, name: str) -> Any:
            asked.append(name)
            return await super().get(name)

    async def made() -> str:
        return "made"

    defs = {"made": declare.FixtureDef("made", made, ())}
    scope = Scope({"agent": lambda: "the agent", "made": lambda: "not this"}, defs, {"row": 3})

    async def body(agent: str, row: int, made: str) -> tuple[str, int, str]:
        return agent, row, made

    assert await scope.call(body, ("agent", "row", "made")) == ("the agent", 3, "made")
    assert asked == ["made"]
    assert await scope.call(body, ("agent", "row", "made")) == ("the agent", 3, "made")
    assert asked == ["made"]  # each fixture once a test, the built-ins too


def test_a_test_that_takes_a_built_in_asks_for_it_without_its_fixtures_walked() -> None:
    """``asks_for`` (which tests need an agent, before a run starts) answers a body that
    takes the built-in itself without walking the test's fixtures; one that takes it
    through a fixture, or shadows it, is still found by the walk."""
    from agent_health.engine.running import fixtures
    from agent_health.sdk import declare

    class Unwalked(dict[str, declare.FixtureDef]):
        def get(self, *_: Any) -> Any:
            raise AssertionError("the fixtures were walked")

    async def body(agent: Any) -> None:
        return None

    case = declare.TestCase("t", (), body, ("agent",), Unwalked(), "f.py", 1)
    assert fixtures.asks_for(case, "agent")

    async def uses(agent: Any) -> None:
        return None

    through = {"helper": declare.FixtureDef("helper", uses, ("agent",))}
    assert fixtures.asks_for(
        declare.TestCase("t", (), body, ("helper",), through, "f.py", 1), "agent"
    )
    shadowed = {"agent": declare.FixtureDef("agent", body, ())}
    assert not fixtures.asks_for(
        declare.TestCase("t", (), body, ("agent",), shadowed, "f.py", 1), "agent"
    )
    valued = declare.TestCase("t", (), body, ("agent",), {}, "f.py", 1, values={"agent": 1})
    assert not fixtures.asks_for(valued, "agent")
