"""Custom evaluators: called in-process with what they ask for, with or without a judge model."""

from __future__ import annotations

from typing import Any

import pytest
from agent_health import judging
from agent_health.sdk import errors
from agent_health.sdk.config import define_config
from agent_health.sdk.verdict import Verdict
from support.judge_servers import Answer, ScriptedModel, judge_config, judge_request


async def cites_host(result: Any, criteria: str, tools: Any) -> dict[str, Any]:
    spans = await tools.get_spans(kind="tool_call")
    ok = "db-primary" in result.output and bool(spans)
    return {"passed": ok, "score": 1.0 if ok else 0.0, "reasoning": f"{len(spans)} tool calls"}


async def asks_llm(result: Any, criteria: str, llm: Any) -> Any:
    return await llm.judge(criteria, {"output": result.output})


async def free_form(result: Any, llm: Any) -> bool:
    return "yes" in (await llm("Is this fine? " + result)).lower()


def sync_bool(result: Any) -> bool:
    return "db-primary" in result.output


async def returns_junk() -> int:
    return 42


async def crashes(result: Any) -> None:
    raise KeyError("missing field")


async def returns_verdict(criteria: str) -> Verdict:
    return Verdict(criteria=criteria, passed=False, score=0.1, reasoning="explicit")


EVALUATORS = {
    "cites_host": cites_host,
    "asks_llm": asks_llm,
    "free_form": free_form,
    "sync_bool": sync_bool,
    "returns_junk": returns_junk,
    "crashes": crashes,
    "returns_verdict": returns_verdict,
}


async def test_evaluators_work_without_a_judge_model() -> None:
    config = define_config(evaluators=EVALUATORS)
    async with judging.backend(None, config) as backend:
        assert backend is not None
        cited = await backend(judge_request(evaluator="cites_host"))
        plain = await backend(judge_request(evaluator="sync_bool"))
        explicit = await backend(judge_request(evaluator="returns_verdict"))
        llm_needed = await backend(judge_request(evaluator="asks_llm"))
        no_judge = await backend(judge_request())
    assert (cited.passed, cited.score, cited.reasoning) == (True, 1.0, "1 tool calls")
    assert cited.model is None
    assert (plain.passed, plain.score) == (True, 1.0)
    assert (explicit.passed, explicit.score, explicit.reasoning) == (False, 0.1, "explicit")
    assert llm_needed.errored
    assert "evaluator 'asks_llm' used llm, but no judge model is configured" in (
        llm_needed.error or ""
    )
    assert no_judge.skipped
    assert no_judge.role == "neutral"


async def test_unknown_evaluator_is_a_clear_error_raised_into_the_test() -> None:
    config = define_config(evaluators={"cites_host": cites_host})
    async with judging.backend(None, config) as backend:
        assert backend is not None
        with pytest.raises(errors.JudgeError, match=r"unknown evaluator 'nope'.*cites_host"):
            await backend(judge_request(evaluator="nope"))


async def test_broken_evaluators_give_errored_verdicts() -> None:
    config = define_config(evaluators=EVALUATORS)
    async with judging.backend(None, config) as backend:
        assert backend is not None
        junk = await backend(judge_request(evaluator="returns_junk"))
        crash = await backend(judge_request(evaluator="crashes"))
    assert junk.errored
    assert "returned int" in (junk.error or "")
    assert crash.errored
    assert "evaluator 'crashes' raised KeyError" in (crash.error or "")


async def test_llm_helper_uses_the_configured_judge_and_counts_tokens() -> None:
    async with ScriptedModel.serving(
        "openai", script=[Answer(True, 0.6, "llm says so"), Answer(True)]
    ) as server:
        config = define_config(evaluators=EVALUATORS)
        async with judging.backend(judge_config(server), config) as backend:
            assert backend is not None
            verdict = await backend(judge_request(evaluator="asks_llm"))
            text = await backend(judge_request("the agent said yes", evaluator="free_form"))
    assert (verdict.passed, verdict.score, verdict.reasoning) == (True, 0.6, "llm says so")
    assert verdict.model == "judge-model"
    assert verdict.input_tokens == 100
    assert "db-primary" in server.requests[0].body["messages"][-1]["content"]
    # free_form got the model's raw text (the scripted JSON contains "passed": true, no "yes")
    assert text.passed is False
    assert server.requests[1].body["messages"][-1]["content"].startswith("Is this fine?")


async def test_an_evaluator_that_asks_for_the_expected_answer_gets_it() -> None:
    import dataclasses

    async def matches_reference(result: Any, expected: str | None) -> bool:
        return expected is not None and expected in result.output

    config = define_config(evaluators={"matches_reference": matches_reference})
    async with judging.backend(None, config) as backend:
        assert backend is not None
        asked = judge_request(evaluator="matches_reference")
        given = await backend(dataclasses.replace(asked, expected="db-primary"))
        none = await backend(asked)
    assert (given.passed, none.passed) == (True, False)
