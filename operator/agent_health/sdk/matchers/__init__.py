"""``expect(value).to_*`` — deterministic checks that record gate signals.

A failed check does not raise: it records a failed gate signal with evidence (what was
expected, what was seen) on the running test's own context, and the body goes on, so one
run reports every broken expectation. ``.or_throw()`` on the returned signal stops the body.
A check that cannot be made (``to_have_called_tool`` on a string) raises
:class:`~agent_health.sdk.errors.MatcherUsageError`: that is a bug in the test.

No silent zeros: a check on something the agent did not report — its token usage, or its
steps when it sent no trajectory at all — fails, and its evidence says what was missing
(``{"missing": ...}``). A zero it did not report would pass any "at most" gate.
"""

from __future__ import annotations

from typing import Any

from agent_health.sdk import context
from agent_health.sdk.matchers import run, talk, value


class Expectation(run.RunMatchers, talk.TalkMatchers, value.ValueMatchers):
    """Checks on one value, recorded on one test's context.

    Its matchers come in three families: :mod:`.run` (what ``agent.run()``
    returned), :mod:`.talk` (a conversation's turns and its user's goal) and
    :mod:`.value` (any value, and judges' verdicts); :mod:`.check` records them.
    """

    __slots__ = ()


class Expect:
    """The ``expect`` entry point; stateless, it finds the running test's context."""

    __slots__ = ()

    def __call__(self, value: Any) -> Expectation:
        return Expectation(value, context.current("expect()"))


class BoundExpect:
    """The ``expect`` fixture: bound to one test's context."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: context.TestContext) -> None:
        self._ctx = ctx

    def __call__(self, value: Any) -> Expectation:
        return Expectation(value, self._ctx)


expect = Expect()
