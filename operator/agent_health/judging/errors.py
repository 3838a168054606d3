"""Errors of the judging package.

::

    JudgingError                    base: a judge call could not give a verdict
     ├── ProviderError              the model provider could not answer (message is the provider's)
     │    ├── AuthError             HTTP 401/403: never retried; names the env var to check
     │    └── RetryableError        429, 5xx, timeout, unreachable: retried, then surfaces
     ├── UnparseableAnswer          the model's answer is not a verdict, even when asked again
     ├── LoopExhausted              the agentic loop hit max_steps / max_tokens without a verdict
     ├── NoJudgeModel               a custom evaluator used ``llm`` but no judge model is configured
     ├── EvaluatorFailed            a custom evaluator raised, or returned no verdict
     ├── NotServed                  the judge service does not judge for this caller (403)
     └── UsageError (also sdk.errors.JudgeError)   raised into the test body, not a verdict
          ├── UnknownEvaluator      ``judge(evaluator="x")`` names no evaluator of the config
          └── UnknownTools          ``judge(tools=[...])`` names a tool pack that does not exist

    MissingKey (sdk.errors.ConfigError)  the variable that should hold the judge's key is unset:
                                    a local run goes on, each judge call errors with this
    JudgeCacheWarning (UserWarning) the cache file was corrupt and rebuilt, or cannot be used

Every ``JudgingError`` except ``UsageError`` becomes an ``errored`` verdict with its
message (the test errors with cause ``judge``); a ``UsageError`` is a bug in the test and
makes the test ``errored`` at once (cause ``test``).
"""

from __future__ import annotations

from agent_health import sdk


class JudgingError(Exception):
    """A judge call could not give a verdict."""

    error_cause: str = "judge"


class ProviderError(JudgingError):
    """The model provider could not answer."""


class NotServed(JudgingError):
    """The judge service does not judge for this caller: a live cell whose RunSpec names no
    judge (and the operator's own is not offered to all runs), or whose run skips judging.
    The service answers 403 with the message; the cell records an errored verdict."""


class AuthError(ProviderError):
    """The provider refused the credentials (not retried)."""


class RetryableError(ProviderError):
    """A failure that may heal by waiting (429, 5xx, timeout, connection refused)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnparseableAnswer(JudgingError):
    """The model's answer is not the structured verdict we asked for."""

    def __init__(self, raw: str, why: str) -> None:
        super().__init__(f"judge answer is not a valid verdict ({why}); raw answer: {raw[:1000]!r}")
        self.raw = raw
        self.why = why


class LoopExhausted(JudgingError):
    """The agentic judge ran out of steps or tokens before it gave a verdict."""


class NoJudgeModel(JudgingError):
    """A custom evaluator asked the ``llm`` helper, but no judge model is configured."""


class EvaluatorFailed(JudgingError):
    """A custom evaluator raised, or returned something that is not a verdict."""


class UsageError(JudgingError, sdk.JudgeError):
    """``judge()`` was called in a way that cannot work (a bug in the test)."""

    error_cause: str = "test"


class UnknownEvaluator(UsageError):
    """The named evaluator is not in ``define_config(evaluators={...})``."""


class UnknownTools(UsageError):
    """The named tool pack does not exist."""


class MissingKey(sdk.ConfigError):
    """The environment variable named for the judge's key is not set."""


class JudgeCacheWarning(UserWarning):
    """The judge cache was corrupt (and rebuilt) or cannot be used (judging goes on uncached)."""
