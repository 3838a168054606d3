"""Running many tests: a pool of workers, per-file all-hooks, repeats, clean interruption."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_health.engine import rollup as rollup_mod
from agent_health.engine import runner
from agent_health.sdk import declare
from agent_health.sdk.results import TestResult


class Listener(Protocol):
    """Told about each finished test as it finishes (progress reporters)."""

    def on_test_end(self, result: TestResult) -> None: ...


@dataclass(repr=False)
class Outcome:
    results: list[TestResult]
    duration_ms: float
    interrupted: bool = False
    not_run: int = 0
    hook_errors: list[str] = field(default_factory=list)
    rollup: rollup_mod.Rollup | None = None
    """The run-level insights rollup (None when no test has insights)."""

    def __repr__(self) -> str:
        # Short on purpose: when asyncio.run() restores the SIGINT handler it formats the
        # repr of its main task, result included (twice); a full repr of every TestResult
        # took ~30 ms per 2000 tests each time, only to be cut to 30 characters.
        return (
            f"Outcome(results=<{len(self.results)} results>, duration_ms={self.duration_ms!r}, "
            f"interrupted={self.interrupted!r}, not_run={self.not_run!r}, "
            f"hook_errors={self.hook_errors!r})"
        )


class _FileHooks:
    """before_all once before the file's first test; after_all after its last one."""

    def __init__(self, file: str, hooks: Sequence[declare.Hook], total: int) -> None:
        self.file = file
        self.before = [h for h in hooks if h.kind == "before_all"]
        self.after = [h for h in hooks if h.kind == "after_all"]
        self.remaining = total
        self.lock = asyncio.Lock()
        self.started = False
        self.failure: str | None = None

    async def enter(self) -> str | None:
        if self.started:
            return self.failure
        async with self.lock:
            if not self.started:
                for hook in self.before:
                    try:
                        await _call_hook(hook)
                    except Exception as err:
                        self.failure = (
                            f"before_all hook {hook.fn.__qualname__} failed: "
                            f"{runner.describe_error(err)}"
                        )
                        break
                self.started = True
        return self.failure

    async def leave(self, errors: list[str]) -> None:
        self.remaining -= 1
        if self.remaining or not self.started:
            return
        for hook in self.after:
            try:
                await _call_hook(hook)
            except Exception as err:
                errors.append(
                    f"{self.file}: after_all hook {hook.fn.__qualname__} failed: "
                    f"{runner.describe_error(err)}"
                )


async def _call_hook(hook: declare.Hook) -> None:
    value = hook.fn()
    if asyncio.iscoroutine(value):
        await value


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


async def run(
    cases: Sequence[declare.TestCase],
    hooks: dict[str, list[declare.Hook]],
    env: runner.RunEnv,
    *,
    concurrency: int = 4,
    repeat: int = 1,
    listener: Listener | None = None,
    stop: asyncio.Event | None = None,
) -> Outcome:
    """Run every (case, repeat) with at most ``concurrency`` at once.

    Setting ``stop`` (Ctrl-C) stops the workers; tests that finished are kept,
    tests cut short are ``errored`` ("interrupted"), tests never started are counted.
    """
    planned = plan(cases, repeat)
    items = deque(planned)
    per_file: dict[str, int] = {}
    for case, _ in items:
        per_file[case.file] = per_file.get(case.file, 0) + 1
    files = {f: _FileHooks(f, hooks.get(f, []), n) for f, n in per_file.items()}
    results: list[TestResult] = []
    running: dict[int, tuple[declare.TestCase, int]] = {}
    hook_errors: list[str] = []
    started = time.perf_counter()

    async def worker(slot: int) -> None:
        while items:
            case, r = items.popleft()
            running[slot] = (case, r)
            state = files[case.file]
            failure = await state.enter()
            if failure is not None:
                result = runner.errored_result(case, r, failure, "test")
            else:
                result = await runner.run_case(case, r, env)
            del running[slot]
            results.append(result)
            if listener is not None:
                listener.on_test_end(result)
            await state.leave(hook_errors)

    workers = [
        asyncio.ensure_future(worker(i)) for i in range(max(1, min(concurrency, len(items))))
    ]
    everything = asyncio.gather(*workers)
    waiters: list[asyncio.Future[Any]] = [everything]
    if stop is not None:
        waiters.append(asyncio.ensure_future(stop.wait()))
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    interrupted = not everything.done()
    if interrupted:
        everything.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for case, r in running.values():
            result = runner.errored_result(case, r, "interrupted before it finished", "infra")
            results.append(result)
            if listener is not None:
                listener.on_test_end(result)
    else:
        everything.result()  # a bug in the engine itself must surface, not vanish
    for waiter in waiters[1:]:
        waiter.cancel()
    order = {(c.id, r): i for i, (c, r) in enumerate(planned)}
    results.sort(key=lambda res: order.get((res.id, res.repeat), 0))
    duration_ms = (time.perf_counter() - started) * 1000
    # One question to the judge model over every test's insights (grouped without one, or
    # after Ctrl-C: an interrupted run asks nothing more).
    llm = None if interrupted else env.insights_llm
    return Outcome(
        results=results,
        duration_ms=duration_ms,
        interrupted=interrupted,
        not_run=len(items),
        hook_errors=hook_errors,
        rollup=await rollup_mod.synthesise(results, llm),
    )
