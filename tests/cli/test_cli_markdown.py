"""``--reporter markdown`` from the command line, with a real history: the comparison with
the agent's last run by default, with ``--baseline`` (gating) when given, the flaky tests the
history knows, ``$GITHUB_STEP_SUMMARY``, and a run without a history."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from agent_health import cli

SUITE = textwrap.dedent(
    """
    from pathlib import Path

    from agent_health import test

    HERE = Path(__file__).parent


    @test("steady")
    async def steady(expect):
        expect(1).to_equal(1)


    @test("wobbly")
    async def wobbly(expect):
        expect((HERE / "outcome.txt").read_text()).to_equal("pass")
    """
)


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_wobbly.py").write_text(SUITE)
    (folder / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_HEALTH_HISTORY", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return folder


def run(suite: Path, outcome: str, *args: str) -> int:
    (suite / "outcome.txt").write_text(outcome)
    return cli.main(["run", str(suite), "--no-ledger", *args])


def test_the_summary_compares_with_the_last_run_and_names_the_flaky_tests(
    suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    assert run(suite, "pass", "--reporter", f"markdown:{summary}") == 0
    first = summary.read_text()
    assert first.startswith("## agent-health: ✅ all 2 passed\n")
    assert "No comparison with the history's last run: no run" in first
    assert "None in the history: no test flipped over the last 50 runs" in first
    assert "history suite/.agent-health/history.db" in first
    assert f"markdown report: {summary}" in capsys.readouterr().out
    run(suite, "fail")
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    # no --baseline: compared with the agent's last run for information, the exit code its own
    assert run(suite, "pass", "--reporter", f"markdown:{summary}") == 0
    text = summary.read_text()
    assert step.read_text() == text + "\n"
    assert "Baseline: last = run " in text
    assert "pass rate 50% → 100% (+50.0 pts)" in text
    assert "**Newly passing (1)**" in text
    assert "- `test_wobbly.py::wobbly` — failed → passed" in text
    assert "_For information: the run is not gated on it" in text
    # the history, this run included: wobbly flipped pass → fail → pass
    assert "| `test_wobbly.py::wobbly` |     2 |    3 | 33.3% (" in text


def test_with_a_baseline_the_summary_says_the_gates_word_and_the_run_fails(
    suite: Path, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    run(suite, "pass")
    code = run(suite, "fail", "--baseline", "last-green", "--reporter", f"markdown:{summary}")
    assert code == 1
    text = summary.read_text()
    assert text.startswith("## agent-health: ❌ 1 of 2 results did not pass\n")
    assert "Baseline: last-green = run " in text
    assert "**Newly failing (1)**" in text
    assert "**Gate: regression** — " in text
    assert "- `test_wobbly.py::wobbly` — failed: `✗ to_equal('pass')`" in text


def test_without_a_history_the_summary_says_so_and_a_saved_report_renders_too(
    suite: Path, tmp_path: Path
) -> None:
    summary, saved = tmp_path / "summary.md", tmp_path / "r.json"
    args = ("--no-history", "--reporter", f"markdown:{summary}", "--reporter", f"json:{saved}")
    assert run(suite, "fail", *args) == 1
    text = summary.read_text()
    assert "No history for this run (--no-history or --replay)" in text
    # no history beside the config (the --last-failed cache lives there too, and may be)
    assert not (suite / ".agent-health" / "history.db").exists()
    again = tmp_path / "again.md"
    assert cli.main(["report", str(saved), "--reporter", f"markdown:{again}"]) == 0
    rendered = again.read_text()
    assert rendered.startswith("## agent-health: ❌ 1 of 2 results did not pass\n")
    assert "### Against the baseline" not in rendered


async def test_a_run_that_never_reached_its_agent_still_writes_its_summary(
    suite: Path, tmp_path: Path
) -> None:
    """The agent answers its first call 404 (the URL names no endpoint of it): the run stops
    as a usage error, is not recorded, and the summary still says what its report holds."""
    from aiohttp import web
    from support.helpers import run_cli

    (suite / "test_agent.py").write_text(
        "from agent_health import test\n\n\n@test('asks')\nasync def asks(agent):\n"
        "    await agent.run('hello')\n"
    )

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"output": "hi"})

    app = web.Application()
    app.router.add_post("/run", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/runn"  # 404: not its endpoint
    summary = tmp_path / "summary.md"
    try:
        (suite / "outcome.txt").write_text("pass")
        args = ("--agent", f"rest+{url}", "--no-ledger", "--reporter", f"markdown:{summary}")
        done = await run_cli(suite, *args)
    finally:
        await runner.cleanup()
    assert done.code == 2
    text = summary.read_text()
    # halted (not interrupted: the test whose call was answered keeps its own error), and the
    # headline says so first, as the terminal's last line does
    assert text.startswith(
        "## agent-health: ❌ stopped early; 1 of 3 results did not pass — rest+http://127.0.0.1:"
    )
    assert "stopped early: the agent (rest) at http://127.0.0.1:" in text
    assert "- `test_agent.py::asks` — errored (agent): `agent at " in text
    assert "### Against the baseline" not in text
