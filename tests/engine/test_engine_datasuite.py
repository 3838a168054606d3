"""Case files in the TypeScript agent-health's format run as tests, through the real CLI:
their checks, labels as upstream builds them, their ids, their metadata in every report,
and failed checks that point at the case in its file."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from aiohttp import web
from support.helpers import run_cli, run_cli_sync
from support.loopback import serving

RCA = {"category": "RCA", "difficulty": "Hard"}
CASES = [
    {
        "name": "payment outage",
        "description": "RCA of the payment service",
        **RCA,
        "initialPrompt": "Diagnose why the payment service is failing.",
        "context": [{"description": "Error log", "value": "Connection refused"}],
        "expectedOutcomes": ["names db-primary"],
        "expectedTrajectory": [
            {"step": 1, "description": "logs", "requiredTools": ["search_logs"]},
            {"step": 2, "description": "status", "requiredTools": ["service_status"]},
        ],
    },
    {
        "name": "needs a tool it never calls",
        "labels": ["custom"],
        **RCA,
        "initialPrompt": "Is the search service healthy?",
        "expectedTrajectory": [{"step": 1, "description": "x", "requiredTools": ["restart_pod"]}],
    },
    {
        # The example agent searches the logs first, then checks the service status.
        "name": "steps in the wrong order",
        **RCA,
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [
            {"step": 2, "description": "logs", "requiredTools": ["search_logs"]},
            {"step": 1, "description": "status", "requiredTools": ["service_status"]},
        ],
    },
    {
        "name": "steps listed out of order but numbered right",
        **RCA,
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [
            {"step": 2, "description": "status", "requiredTools": ["service_status"]},
            {"step": 1, "description": "logs", "requiredTools": ["search_logs"]},
        ],
    },
    {
        "name": "nothing to check",
        **RCA,
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [{"step": 1, "description": "think it over"}],
    },
]


def line_of(text: str, name: str) -> int:
    """The line of the case named ``name`` (its opening brace, just above its name)."""
    lines = text.splitlines()
    return next(i for i, line in enumerate(lines, start=1) if f'"name": "{name}"' in line) - 1


async def test_cases_run_as_tests(write_suite: Any, triage_url: str, capsys: Any) -> None:
    text = json.dumps(CASES, indent=2)
    suite = write_suite(**{"suite.cases.json": text})
    junit = suite / "junit.xml"
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--reporter", f"junit:{junit}")
    payment = run.by_name("payment outage")
    assert payment["status"] == "passed"
    assert payment["labels"] == ["difficulty:Hard", "category:RCA"]  # upstream's, as written
    assert payment["prompt"] == "Diagnose why the payment service is failing."
    kinds = [(s["kind"], s["role"]) for s in payment["signals"] if s["kind"] != "metric"]
    assert kinds == [("deterministic", "gate")] * 3 + [("judge", "neutral")]
    order = payment["signals"][2]
    assert order["name"] == "to_have_called_tools_in_steps([['search_logs'], ['service_status']])"
    assert order["passed"] is True
    missing = run.by_name("needs a tool it never calls")
    assert missing["status"] == "failed"
    assert missing["labels"] == ["custom"]
    # One missing tool is one failure: no order signal counts it again.
    assert [s["passed"] for s in missing["signals"] if s["kind"] != "metric"] == [False]
    wrong = run.by_name("steps in the wrong order")
    assert wrong["status"] == "failed"
    failed = [s for s in wrong["signals"] if s["passed"] is False]
    assert [s["name"] for s in failed] == [
        "to_have_called_tools_in_steps([['service_status'], ['search_logs']])"
    ]
    assert failed[0]["evidence"]["broken_at"] == {"step": 2, "tool": "search_logs"}
    assert failed[0]["evidence"]["actual"] == ["search_logs", "service_status"]
    assert wrong["score"] == round(2 / 3, 6)
    assert run.by_name("steps listed out of order but numbered right")["status"] == "passed"
    # A case that checks nothing is not a pass: it is skipped, saying why, and never run.
    empty = run.by_name("nothing to check")
    assert (empty["status"], empty["signals"], empty["metrics"]) == ("skipped", [], {})
    assert "nothing to grade" in empty["skip_reason"]
    assert "no expectedOutcomes and no requiredTools" in empty["skip_reason"]
    assert run.report["summary"]["skipped"] == 1
    assert run.code == 1

    # A failed check points at the case in its file — in the JSON report, on the terminal
    # and in JUnit — not at the code that runs it.
    where = f"suite.cases.json:{line_of(text, 'steps in the wrong order')}"
    assert (wrong["line"], failed[0]["location"]) == (int(where.rsplit(":")[1]), where)
    assert f"({where})" in capsys.readouterr().out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    broken = cases["steps in the wrong order"]
    assert (broken.get("file"), broken.get("line")) == ("suite.cases.json", where.split(":")[1])
    assert where in (broken.findtext("failure") or "")


NIGHTLY = {
    "name": "nightly",
    "testCases": [
        {
            "id": "tc-42",
            "name": "payment outage",
            "category": "RCA",
            "subcategory": "database",
            "difficulty": "Medium",
            "initialPrompt": "Diagnose why the payment service is failing.",
            "tools": [
                {
                    "name": "search_logs",
                    "description": "Search a service's logs",
                    "parameters": {
                        "type": "object",
                        "properties": {"service": {"type": "string", "description": "name"}},
                        "required": ["service"],
                    },
                }
            ],
            "expectedPPL": "source=logs-* | where service = 'payment' | stats count() by level",
            "expectedOutcomes": ["names db-primary"],
            "currentVersion": 2,
            "versions": [{"version": 1, "createdAt": "2024-01-15T10:00:00.000Z"}],
            "isPromoted": True,
            "describePath": ["RCA", "payments"],
        }
    ],
}


def _recording_agent(bodies: list[dict[str, Any]]) -> Any:
    async def agent(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        return web.json_response({"output": "db-primary refuses connections"})

    return agent


def _judge_config(url: str) -> str:
    return (
        "from agent_health import define_config\n"
        "config = define_config(judge={'provider': 'openai', 'model': 'm', "
        f"'base_url': {url!r}, 'api_key_env': 'CASES_TEST_KEY', 'cache': False}})\n"
    )


async def test_every_field_reaches_the_agent_the_judge_and_the_reports(
    write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.judge_servers import Answer, ScriptedModel, prompt_text

    monkeypatch.setenv("CASES_TEST_KEY", "k")
    judge = await ScriptedModel.start("openai", default=Answer(True, 1.0, "named"))
    bodies: list[dict[str, Any]] = []
    try:
        suite = write_suite(
            **{"nightly-benchmark.json": json.dumps(NIGHTLY), "agent-health.config.py": ""}
        )
        (suite / "agent-health.config.py").write_text(_judge_config(judge.url))
        junit = suite / "junit.xml"
        async with serving(_recording_agent(bodies)) as url:
            run = await run_cli(
                suite, "--agent", f"rest+{url}", "--no-ledger", "--reporter", f"junit:{junit}"
            )
    finally:
        await judge.close()
    test = run.by_name("payment outage")
    assert test["status"] == "passed", test
    assert test["id"] == "nightly-benchmark.json::tc-42"  # the case's id, not its name
    case = NIGHTLY["testCases"][0]  # type: ignore[index]
    # tools reach the agent: the REST body carries them beside the prompt.
    [body] = bodies
    assert body["tools"] == case["tools"]
    # expectedPPL reaches the judge as the expected answer, apart from the evidence.
    [asked] = judge.requests
    said = prompt_text(asked.body)
    assert "## EXPECTED ANSWER" in said
    assert said.index(case["expectedPPL"]) < said.index("## EVIDENCE")
    # The rest is kept as the case's metadata, in the report (and the wrapper's name).
    kept = test["case"]
    for key in ("id", "subcategory", "currentVersion", "versions", "isPromoted"):
        assert kept[key] == case[key], key
    assert (kept["describePath"], kept["expectedPPL"]) == (
        case["describePath"],
        case["expectedPPL"],
    )
    assert kept["benchmarks"] == ["nightly"]
    assert test["labels"] == ["difficulty:Medium", "category:RCA", "subcategory:database"]
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert properties["case.expectedPPL"] == case["expectedPPL"]
    assert properties["case.id"] == "tc-42"


def test_an_id_is_the_identity_so_a_renamed_case_keeps_it(write_suite: Any, capsys: Any) -> None:
    def ids(name: str) -> list[str]:
        renamed = json.loads(json.dumps(NIGHTLY))
        renamed["testCases"][0]["name"] = name
        write_suite(**{"nightly-benchmark.json": json.dumps(renamed)})
        assert cli.main(["list", "--json", str(suite)]) == 0
        return [t["id"] for t in json.loads(capsys.readouterr().out)]

    suite = write_suite()
    assert (
        ids("payment outage") == ids("payment service outage") == ["nightly-benchmark.json::tc-42"]
    )


def test_cases_may_share_a_name_when_their_ids_differ(write_suite: Any, capsys: Any) -> None:
    same = {**RCA, "name": "twin", "initialPrompt": "Diagnose", "expectedOutcomes": ["x"]}
    suite = write_suite(
        **{"twins.cases.json": json.dumps([{**same, "id": "a"}, {**same, "id": "b"}])}
    )
    assert cli.main(["list", "--json", str(suite)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in listed] == ["twins.cases.json::a", "twins.cases.json::b"]
    write_suite(**{"twins.cases.json": json.dumps([same, same])})
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert run.code == 2
    assert run.report["summary"]["load_errors"] == [
        "twins.cases.json:1: case [1] 'twin': name 'twin' is also case [0] 'twin''s; give the "
        "cases distinct names, or each an id (cases with ids may share a name)"
    ]


LABELLED = [
    {
        **RCA,
        "difficulty": "Easy",
        "name": "easy one",
        "initialPrompt": "p",
        "expectedOutcomes": ["x"],
    },
    {
        **RCA,
        "name": "labelled one",
        "labels": ["Smoke", "difficulty:Hard"],
        "initialPrompt": "p",
        "expectedOutcomes": ["x"],
    },
]


def test_labels_are_upstreams_and_selection_ignores_letter_case(
    write_suite: Any, capsys: Any
) -> None:
    suite = write_suite(**{"labels.cases.json": json.dumps(LABELLED)})
    assert cli.main(["list", "--json", str(suite)]) == 0
    labels = {t["name"]: t["labels"] for t in json.loads(capsys.readouterr().out)}
    assert labels == {
        "easy one": ["difficulty:Easy", "category:RCA"],
        "labelled one": ["Smoke", "difficulty:Hard"],  # explicit labels, as written
    }
    for wanted in ("difficulty:Easy", "difficulty:easy", "DIFFICULTY:EASY"):
        assert cli.main(["list", "--label", wanted, str(suite)]) == 0
        assert capsys.readouterr().out.splitlines()[0].startswith("labels.cases.json::easy one")
    assert cli.main(["list", "--label", "smoke", str(suite)]) == 0
    assert "labelled one" in capsys.readouterr().out


async def test_follow_up_questions_run_as_the_later_turns_of_the_case(
    write_suite: Any, tmp_path: Path
) -> None:
    """followUpQuestions are turns of the case's one run: all ``always`` as scripted turns;
    by trigger, each asked when the turn before it allows (the example support agent)."""
    import support_agent

    scripted = {
        **RCA,
        "name": "asks again",
        "initialPrompt": "Where is my parcel?",
        "expectedTrajectory": [
            {"step": 1, "description": "look", "requiredTools": ["lookup_order"]}
        ],
        "followUpQuestions": [
            {"trigger": "always", "question": "It is order 1234", "businessValue": "number"},
            {"trigger": "always", "question": "thanks"},
        ],
    }
    triggered = {
        **scripted,
        "name": "by trigger",
        "followUpQuestions": [
            {"trigger": "error", "question": "Why did the lookup fail?"},
            {"trigger": "always", "question": "It is order 4444"},
            {"trigger": "results_available", "question": "So when does it come?"},
            {"trigger": "error", "question": "The number is 1234, sorry"},
            {"trigger": "results_available", "question": "thanks"},
        ],
    }
    suite = write_suite(**{"turns.cases.json": json.dumps([scripted, triggered])})
    runner, url = await support_agent.start()
    try:
        run = await run_cli(suite, "--agent", url)
    finally:
        await runner.cleanup()
    first = run.by_name("asks again")
    assert first["status"] == "passed", (first.get("error"), first["signals"])
    assert [t["user"] for t in first["turns"]] == [
        "Where is my parcel?",
        "It is order 1234",
        "thanks",
    ]
    assert first["ended"]["reason"] == "turns-done"
    by_trigger = run.by_name("by trigger")
    assert by_trigger["status"] == "passed", (by_trigger.get("error"), by_trigger["signals"])
    # Turn 1 only asks (no tool failed: "error" is passed over); 4444 is no order (the
    # lookup fails: "results_available" is passed over, "error" asked); 1234 is found.
    assert [t["user"] for t in by_trigger["turns"]] == [
        "Where is my parcel?",
        "It is order 4444",
        "The number is 1234, sorry",
        "thanks",
    ]
    assert by_trigger["ended"]["reason"] == "user-stopped"


async def test_a_case_file_check_never_points_into_agent_health(
    write_suite: Any, triage_url: str
) -> None:
    text = json.dumps(CASES[1:2], indent=2)
    suite = write_suite(**{"one.cases.json": text})
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--no-ledger")
    [signal] = [s for s in run.by_name("needs a tool it never calls")["signals"] if s["location"]]
    assert signal["location"] == f"one.cases.json:{line_of(text, 'needs a tool it never calls')}"
    assert Path(signal["location"].split(":")[0]).suffix == ".json"
