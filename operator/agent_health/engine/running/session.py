"""Running many tests: a pool of workers, per-file all-hooks, repeats, retries, a failure
limit, a budget (:mod:`.budget`) and clean interruption."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from agent_health import statuses
from agent_health.engine import outcome, reports
from agent_health.engine.running import capture, runner
from agent_health.sdk import declare, errors
from agent_health.sdk.results import Attempt, TestResult

if TYPE_CHECKING:  # loaded by a run with a budget (its meter), not by every run
    from agent_health.engine import budget as budget_mod


class Listener(Protocol):
    """Told about each finished test as it finishes (progress reporters)."""

    def on_test_end(self, result: TestResult) -> None: ...


class StartListener(Listener, Protocol):
    """A listener also told when each test starts (what a live page shows in flight)."""

    def on_test_start(self, test_id: str, title: str, repeat: int, agent: str | None) -> None: ...


class Outcome(NamedTuple):
    """What a session's run came to. A named tuple: a dataclass's generated methods are
    compiled one by one as its class is made (issue #40)."""

    results: list[TestResult]
    duration_ms: float
    interrupted: bool = False
    not_run: int = 0
    hook_errors: Sequence[str] = ()
    stopped: str | None = None  # why no more tests started (--max-failures, a budget), if so
    budget: budget_mod.Report | None = None
    """The run's budget and spend (None without a budget)."""
    rollup: reports.Rollup | None = None
    """The run-level insights rollup (None when no test has insights)."""
    misdirected: str | None = None
    """Why the run stopped as a usage error: an agent's first answers said the requests were
    not ones it takes (a wrong path or protocol; ``connectors.preflight.FirstAnswer``)."""

    def __repr__(self) -> str:
        # Short on purpose: when asyncio.run() restores the SIGINT handler it formats the
        # repr of its main task, result included (twice); a full repr of every TestResult
        # took ~30 ms per 2000 tests each time, only to be cut to 30 characters.
        return (
            f"Outcome(results=<{len(self.results)} results>, duration_ms={self.duration_ms!r}, "
            f"interrupted={self.interrupted!r}, not_run={self.not_run!r}, "
            f"hook_errors={self.hook_errors!r}, stopped={self.stopped!r})"
        )


@dataclass(eq=False, repr=False)
class Halt:
    """Told a reason (called), a run starts no more tests; those in flight end as they will.

    Unlike ``stop`` (Ctrl-C), which cuts the tests in flight short, a halt keeps each one's
    own result: the run's setup was found wrong by a test's own call, and that test's
    error is the evidence (``connectors.preflight.FirstAnswer``).
    """

    reason: str | None = None

    def __call__(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


class _FileHooks:
    """before_all once before the file's first test; after_all after its last one."""

    def __init__(self, file: str, hooks: Sequence[declare.Hook], total: int) -> None:
        self.file = file
        self.before = [h for h in hooks if h.kind == "before_all"]
        self.after = [h for h in hooks if h.kind == "after_all"]
        self.remaining = total
        self.lock = asyncio.Lock()
        self.started = False
        self.failure: errors.AgentHealthError | None = None

    async def enter(self) -> errors.AgentHealthError | None:
        if self.started:
            return self.failure
        async with self.lock:
            if not self.started:
                for hook in self.before:
                    try:
                        await runner.call_hook(hook)
                    except errors.AgentHealthError as err:
                        self.failure = err
                        break
                self.started = True
        return self.failure

    async def leave(self, hook_errors: list[str]) -> None:
        self.remaining -= 1
        if self.remaining or not self.started:
            return
        for hook in self.after:
            try:
                await runner.call_hook(hook)
            except errors.AgentHealthError as err:
                hook_errors.append(f"{self.file}: {err}")


SKIPPED_MODES = ("skip", "fixme")


def plan(cases: Sequence[declare.TestCase], repeat: int) -> list[tuple[declare.TestCase, int]]:
    """Every (case, repeat) to run, repeats outermost. A test marked skip or fixme is
    reported once, not once per repeat: nothing about it changes between repeats."""
    return [
        (case, r)
        for r in range(repeat)
        for case in cases
        if r == 0 or case.mode not in SKIPPED_MODES
    ]


class Policy(NamedTuple):
    """How a run goes on after a test did not pass.

    ``retries``: a failed or errored test runs again up to this many times; one that then
    passes is ``flaky``. ``max_failures``: after this many failed or errored tests no new
    test starts (the tests already running finish); ``None`` never stops.
    """

    retries: int = 0
    max_failures: int | None = None


async def run(
    cases: Sequence[declare.TestCase],
    hooks: dict[str, list[declare.Hook]],
    env: runner.RunEnv,
    *,
    concurrency: int = 4,
    repeat: int = 1,
    listener: Listener | None = None,
    stop: asyncio.Event | None = None,
    policy: Policy | None = None,
    meter: budget_mod.Meter | None = None,
    lanes: Sequence[runner.RunEnv] = (),
    halt: Halt | None = None,
) -> Outcome:
    """Run every (case, repeat) with at most ``concurrency`` at once.

    ``lanes`` (an agent matrix, ``--agent a --agent b``): one environment per agent, each
    with its ``lane`` name; every (case, repeat) runs once in each, interleaved test by test
    so that a budget or an interruption leaves the agents with the same tests. Each result
    names its agent (``TestResult.agent``).

    With a ``meter``, each test's spend is counted as it ends; once a budget is reached no new
    test starts and the tests never started are ``skipped`` with reason ``budget``.

    Setting ``stop`` (Ctrl-C) stops the workers; tests that finished are kept, tests cut
    short are ``errored`` ("interrupted", with the time they ran), tests never started are
    counted. A ``halt`` told a reason starts no more tests and lets those in flight end as
    they will (the reason is ``Outcome.stopped``). What each body prints is captured into
    its result (:mod:`.capture`).
    """
    with capture.installed():
        envs = list(lanes) or [env]
        pool = _Pool(cases, hooks, envs, repeat, listener, policy or Policy(), meter)
        pool.halt = halt
        return await pool.run(concurrency, stop)


class _Pool:
    """The workers of one run and what they share."""

    def __init__(
        self,
        cases: Sequence[declare.TestCase],
        hooks: dict[str, list[declare.Hook]],
        envs: list[runner.RunEnv],
        repeat: int,
        listener: Listener | None,
        policy: Policy,
        meter: budget_mod.Meter | None = None,
    ) -> None:
        self.planned = [(c, r, lane) for c, r in plan(cases, repeat) for lane in range(len(envs))]
        self.items = deque(self.planned)
        per_file: dict[str, int] = {}
        for case, _, _ in self.items:
            per_file[case.file] = per_file.get(case.file, 0) + 1
        self.files = {f: _FileHooks(f, hooks.get(f, []), n) for f, n in per_file.items()}
        self.envs = envs
        self.env = envs[0]
        self.listener = listener
        # A StartListener is told of each start too (looked up once, not per test).
        self.starting = getattr(listener, "on_test_start", None)
        self.policy = policy
        self.results: list[TestResult] = []
        # slot → (case, repeat, lane, wall-clock start, perf_counter start) of its test
        self.running: dict[int, tuple[declare.TestCase, int, int, float, float]] = {}
        self.hook_errors: list[str] = []
        self.failures = 0
        self.stopped: str | None = None
        self.meter = meter
        self.stop: asyncio.Event | None = None  # set: no new test starts (see run)
        self.halt: Halt | None = None  # told a reason: no new test starts (see run)

    async def run(self, concurrency: int, stop: asyncio.Event | None) -> Outcome:
        started = time.perf_counter()
        self.stop = stop
        workers = [
            asyncio.ensure_future(self.worker(i))
            for i in range(max(1, min(concurrency, len(self.items))))
        ]
        stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
        pending: set[asyncio.Future[Any]] = {*workers, *([stopper] if stopper else [])}
        interrupted = False
        while not all(w.done() for w in workers):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if stopper is not None and stopper in done:
                interrupted = True
                break
            if any(w.done() and not w.cancelled() and w.exception() for w in workers):
                break  # a bug in the engine itself: stop the others, then surface it below
        for worker in workers:
            worker.cancel()
        # Every worker's end is retrieved here, so a cancelled one is never logged as an
        # exception nobody retrieved.
        ended = await asyncio.gather(*workers, return_exceptions=True)
        if stopper is not None:
            stopper.cancel()
            await asyncio.gather(stopper, return_exceptions=True)
        for end in ended:
            if isinstance(end, Exception):
                raise end  # a bug in the engine itself must surface, not vanish
        now = time.perf_counter()
        for case, r, lane, wall, perf in self.running.values():
            result = runner.errored_result(
                case,
                r,
                "interrupted before it finished",
                "infra",
                started_at=wall,
                duration_ms=(now - perf) * 1000,
            )
            self._done(self._of(lane, result))
        if not interrupted:
            self._skip_for_budget()
        await self._after_all_of_started_files()
        names = [env.lane for env in self.envs]
        order = {(c.id, r, names[lane]): i for i, (c, r, lane) in enumerate(self.planned)}
        self.results.sort(key=lambda res: order.get((res.id, res.repeat, res.agent), 0))
        duration_ms = (time.perf_counter() - started) * 1000
        # One question to the judge model over every test's insights (grouped without one, or
        # after Ctrl-C: an interrupted run asks nothing more).
        llm = None if interrupted else self.env.insights_llm
        return Outcome(
            results=self.results,
            duration_ms=duration_ms,
            interrupted=interrupted,
            not_run=len(self.items),
            hook_errors=self.hook_errors,
            stopped=self.stopped or (self.halt.reason if self.halt is not None else None),
            # no test's insights, nothing to roll up: the rollup's module is not loaded
            rollup=await reports.synthesise_rollup(self.results, llm)
            if any(r.insights for r in self.results)
            else None,
            budget=self.meter.report() if self.meter is not None else None,
        )

    async def worker(self, slot: int) -> None:
        while (
            self.items and self.stopped is None and (self.meter is None or not self._over_budget())
        ):
            if self.halt is not None and self.halt.reason is not None:
                return  # halted (an agent not where it was said): start nothing more
            if self.stop is not None and self.stop.is_set():
                return  # stopping (Ctrl-C, a closed output): start nothing more
            case, r, lane = self.items.popleft()
            self.running[slot] = (case, r, lane, time.time(), time.perf_counter())
            if self.starting is not None:
                self.starting(case.id, case.title, r, self.envs[lane].lane)
            state = self.files[case.file]
            # The file's before_all hooks ran (or failed) for its first test: its others
            # take the outcome without a coroutine each.
            failure = state.failure if state.started else await state.enter()
            if failure is not None:
                # Blamed by cause, as a failed teardown is: a before_all the agent broke.
                result = runner.errored_result(case, r, str(failure), outcome.cause_of(failure))
            else:
                result = await self.attempts(slot, case, r, self.envs[lane])
            del self.running[slot]
            self._done(self._of(lane, result))
            if state.remaining > 1 or not state.after:
                state.remaining -= 1  # not the file's last test, or no after_all to run
            else:
                await state.leave(self.hook_errors)

    async def attempts(
        self, slot: int, case: declare.TestCase, r: int, env: runner.RunEnv
    ) -> TestResult:
        """The test, then its retries while it fails and retries are left."""
        lane = self.envs.index(env)
        result = await runner.run_case(case, r, env)
        if self.meter is not None:  # a run without budgets has nothing to count
            self._spent(result)
        tries = [result]
        while (
            result.status in statuses.NOT_PASSED
            and len(tries) <= self.policy.retries
            and not self._over_budget()
        ):
            self.running[slot] = (case, r, lane, time.time(), time.perf_counter())
            result = await runner.run_case(case, r, env, retry=len(tries))
            self._spent(result)
            tries.append(result)
        return retried(tries) if len(tries) > 1 else result

    def _spent(self, result: TestResult) -> None:
        """Count what one try spent, then stop starting tests if a budget is reached."""
        if self.meter is not None:
            self.meter.add_result(result)
            self._over_budget()

    def _over_budget(self) -> bool:
        """Whether a budget is reached (then no new test or retry starts)."""
        if self.meter is None or self.meter.check() is None:
            return False
        if self.stopped is None:
            self.stopped = f"budget: {self.meter.reason}"
        return True

    def _skip_for_budget(self) -> None:
        """Every test a budget kept from starting is ``skipped``, reason ``budget``."""
        while self.items and self.meter is not None and self.meter.exhausted is not None:
            from agent_health.engine import budget as budget_mod

            case, r, lane = self.items.popleft()
            self.meter.skipped += 1
            skipped = runner.skipped_result(case, r, budget_mod.SKIP_REASON)
            self._done(self._of(lane, skipped))

    def _of(self, lane: int, result: TestResult) -> TestResult:
        """The result, naming its agent in a matrix run."""
        name = self.envs[lane].lane
        return result if name is None else result.model_copy(update={"agent": name})

    def _done(self, result: TestResult) -> None:
        self.results.append(result)
        if self.listener is not None:
            self.listener.on_test_end(result)
        if result.status in statuses.NOT_PASSED:
            self.failures += 1
            limit = self.policy.max_failures
            if limit is not None and self.failures >= limit and self.stopped is None:
                self.stopped = (
                    f"stopped after {self.failures} failed or errored "
                    f"test{'s' if self.failures != 1 else ''} (--max-failures {limit})"
                )

    async def _after_all_of_started_files(self) -> None:
        """after_all hooks of files whose tests did not all run (stopped, interrupted): they
        clean up what before_all made, as a fixture's teardown does."""
        for state in self.files.values():
            if state.started and state.remaining > 0:
                state.remaining = 1
                await state.leave(self.hook_errors)


def retried(tries: Sequence[TestResult]) -> TestResult:
    """One result for a test tried several times: the last try, with every try listed.

    It is ``flaky`` when the last try passed. Its score is the mean of the tries' scores
    (an errored try has none): a retry shows what the agent does on average, not its best.
    """
    last = tries[-1]
    scores = [t.score for t in tries if t.score is not None]
    return last.model_copy(
        update={
            "status": "flaky" if last.status == "passed" else last.status,
            "score": round(sum(scores) / len(scores), 6) if scores else None,
            "duration_ms": sum(t.duration_ms for t in tries),
            "attempts": tuple(
                Attempt(
                    status=t.status,
                    reason=_reason(t),
                    cause=t.cause,
                    score=t.score,
                    duration_ms=t.duration_ms,
                    run_id=t.run_id,
                )
                for t in tries
            ),
        }
    )


def _reason(result: TestResult) -> str | None:
    """Why a try did not pass, in a line: the checks that failed (and the error that came
    after them, if one did), or its error."""
    failed = [s.name for s in result.gates() if s.passed is False]
    if failed:
        then = f"; then: {result.error}" if result.error else ""
        return f"failed: {', '.join(failed)}{then}"
    return result.error
