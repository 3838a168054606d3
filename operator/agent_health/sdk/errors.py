"""Errors of the test SDK.

::

    AgentHealthError
     ├── DefinitionError        a test, fixture or hook is declared wrongly (found at discovery)
     ├── FixtureError           a fixture failed its contract (no yield, two yields)
     ├── AgentRunError          agent.run() was misused (second call, no prompt, no agent)
     ├── MatcherUsageError      a matcher got a value it cannot check (a bug in the test)
     ├── JudgeError             the judge could not be asked (unknown evaluator, bad arguments)
     ├── ConfigError            the config file is wrong
     └── TestSkipped            test_info.skip() was called in the body

    AssertionError
     └── ExpectationFailed      a hard failure the body cannot continue from
          └── JudgeFailed       verdict.to_pass() / verdict.or_throw() on a failed verdict

Errors that are not ``AssertionError`` make a test ``errored``; ``AssertionError`` (a
plain ``assert`` too) makes it ``failed``. An error's ``error_cause`` (``agent``, ``judge``,
``test``, ``infra``; see :data:`agent_health.sdk.results.Cause`) says whom it blames; an
exception without one is the test's own.
"""


class AgentHealthError(Exception):
    """Base of the SDK's own errors."""

    error_cause: str = "test"


class DefinitionError(AgentHealthError):
    """A test, fixture or hook is declared wrongly."""


class FixtureError(AgentHealthError):
    """A fixture broke its contract."""


class AgentRunError(AgentHealthError):
    """``agent.run()`` was called in a way that cannot work."""


class MatcherUsageError(AgentHealthError, TypeError):
    """A matcher was given a value it cannot check."""


class JudgeError(AgentHealthError):
    """The judge could not be asked (a bug in the test), or an errored verdict was asserted."""

    def __init__(self, message: str, *, cause: str = "test") -> None:
        super().__init__(message)
        self.error_cause = cause  # per instance: who failed this call


class ConfigError(AgentHealthError):
    """The config file is wrong."""


class TestSkipped(AgentHealthError):
    """Raised by ``test_info.skip(reason)`` to skip the running test."""

    __test__ = False


class ExpectationFailed(AssertionError):
    """A check failed and the body cannot go on.

    ``recorded``: the failure is already a failed gate signal of the test (``or_throw()`` on
    a matcher's signal, ``to_pass()`` on a gate verdict), so the engine does not count it a
    second time; a plain ``assert`` or an unrecorded failure becomes one ``assert`` signal.
    """

    def __init__(self, message: str = "", *, recorded: bool = False) -> None:
        super().__init__(message)
        self.recorded = recorded


class JudgeFailed(ExpectationFailed):
    """A verdict that did not pass was asserted."""
