"""Discovery: one loader, static declaration, clear load errors, ids and content hashes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agent_health import cli
from agent_health.engine.loading import loader
from support.helpers import run_cli_sync

GOOD = """
from agent_health import test

@test("answers", labels=["category:RCA", "smoke"], default_prompt="Why is auth down?",
      description="checks auth", timeout=30, expected_outcomes=["names the certificate"])
async def answers(agent):
    await agent.run()

@test.skip("later", reason="agent v2 only")
async def later():
    raise AssertionError("never runs")
"""


def test_syntax_and_import_errors_are_reported_and_others_run(write_suite: Any) -> None:
    suite = write_suite(
        **{
            # takes no agent, so the run needs none (docs/writing-tests.md)
            "test_good.py": GOOD.replace("(agent):\n    await agent.run()", "():\n    pass"),
            "test_syntax.py": "from agent_health import test\n\n@test('x')\nasync def x(:\n",
            "test_import.py": "import not_a_module_anywhere\n",
            "test_dup.py": (
                "from agent_health import test\n@test('same')\nasync def a():\n    pass\n"
                "@test('same')\nasync def b():\n    pass\n"
            ),
        }
    )
    run = run_cli_sync(suite)
    assert run.code == 2
    errors = run.report["summary"]["load_errors"]
    assert any(e.startswith("test_syntax.py:4: SyntaxError") for e in errors), errors
    assert any(
        e.startswith("test_import.py:1: ModuleNotFoundError") and "not_a_module_anywhere" in e
        for e in errors
    ), errors
    assert any("test_dup.py:5" in e and "duplicate test name 'same'" in e for e in errors), errors
    assert run.by_name("answers")["status"] == "passed"
    assert run.by_name("later")["status"] == "skipped"
    assert run.by_name("later")["skip_reason"] == "agent v2 only"


def test_list_json_discovers_without_running(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(**{"sub__test_rca.py": GOOD.replace("pass", "raise SystemExit")})
    code = cli.main(["list", str(suite), "--json"])
    assert code == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in listed] == ["sub/test_rca.py::answers", "sub/test_rca.py::later"]
    first = listed[0]
    assert first["labels"] == ["category:RCA", "smoke"]
    assert first["default_prompt"] == "Why is auth down?"
    assert first["expected_outcomes"] == ["names the certificate"]
    assert first["timeout"] == 30
    assert listed[1]["mode"] == "skip"


def test_content_hash_tracks_the_body(tmp_path: Path) -> None:
    path = tmp_path / "test_h.py"
    path.write_text(GOOD)
    before = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    path.write_text(GOOD.replace("await agent.run()", "await agent.run('other')"))
    after = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    assert before.keys() == after.keys()
    assert before["test_h.py::answers"] != after["test_h.py::answers"]
    assert before["test_h.py::later"] == after["test_h.py::later"]


def test_a_file_edited_within_the_second_to_the_same_length_runs_as_edited(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Python's own bytecode cache is checked by the source's modification time in whole
    seconds and its size: the loader's is checked by the source's hash."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # whatever this machine says
    path = tmp_path / "test_edit.py"
    path.write_text(GOOD)
    stat = path.stat()
    [first, *_] = loader.load([tmp_path]).cases
    path.write_text(GOOD.replace("auth down", "mail down"))  # the same length
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same second
    [again, *_] = loader.load([tmp_path]).cases
    assert first.default_prompt == "Why is auth down?"
    assert again.default_prompt == "Why is mail down?"
    assert list(tmp_path.glob("__pycache__/test_edit.*.pyc"))  # the cache is kept, not skipped


def test_loading_keeps_each_bodys_source_and_not_the_whole_file(tmp_path: Path) -> None:
    """The loader reads a file's lines to cut each body's source (for content_hash); the
    run keeps those, not the file's lines in linecache for as long as it runs."""
    import inspect
    import linecache

    path = tmp_path / "test_h.py"
    path.write_text(GOOD)
    [case, *_] = loader.load([tmp_path]).cases
    assert not [name for name in linecache.cache if Path(name).parent.name == tmp_path.name]
    assert case.source == inspect.getsource(case.fn)


def test_loading_completes_each_declared_case_in_place(tmp_path: Path, monkeypatch: Any) -> None:
    """The loader fills in each case's id, file and hooks on the case the file declared:
    a copy of each (``dataclasses.replace``) cost a test about as much as declaring it
    (issue #40), and what was declared once (its title) is not worked out again."""
    from agent_health.sdk import declare

    made: list[declare.Collector] = []
    collecting = declare.collecting

    def kept(file: str) -> Any:
        block = collecting(file)
        made.append(block.__enter__())

        class Block:
            def __enter__(self) -> declare.Collector:
                return made[-1]

            def __exit__(self, *exc: object) -> None:
                block.__exit__(*exc)

        return Block()

    monkeypatch.setattr(declare, "collecting", kept)
    (tmp_path / "test_h.py").write_text(GOOD)
    suite = loader.load([tmp_path])
    [collector] = made
    assert [id(c) for c in suite.cases] == [id(c) for c in collector.cases]
    assert [c.id for c in suite.cases] == ["test_h.py::answers", "test_h.py::later"]
    assert {c.file for c in suite.cases} == {"test_h.py"}


def test_every_file_binds_the_same_sdk(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_one.py": """
            import agent_health
            from agent_health import test
            SDK = agent_health

            @test("one")
            async def one(expect):
                import sys
                expect(SDK is sys.modules["agent_health"]).to_be_truthy()
            """,
            "test_two.py": """
            import agent_health.sdk.declare as declare
            from agent_health import test

            @test("two")
            async def two(expect):
                expect(test is declare.test).to_be_truthy()
            """,
        }
    )
    run = run_cli_sync(suite)
    assert run.code == 0, run.report


def test_config_that_does_not_import(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": (
                "from agent_health import define_config\nraise KeyError('x')\n"
            ),
            "test_a.py": "from agent_health import test\n@test('a')\nasync def a():\n    pass\n",
        }
    )
    run = run_cli_sync(suite)
    assert run.code == 2
    err = capsys.readouterr().err
    assert "agent-health.config.py:2: KeyError" in err


def test_config_with_bad_field(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": (
                "from agent_health import define_config\n"
                "config = define_config(agents={'a': {'connector': 'rest', 'urll': 'x'}})\n"
            ),
            "test_a.py": "from agent_health import test\n@test('a')\nasync def a():\n    pass\n",
        }
    )
    assert run_cli_sync(suite).code == 2
    err = capsys.readouterr().err
    assert "agents.a.urll" in err


def test_non_async_body_is_rejected(write_suite: Any) -> None:
    suite = write_suite(
        **{"test_sync.py": "from agent_health import test\n@test('s')\ndef s():\n    pass\n"}
    )
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert "must be an `async def`" in run.report["summary"]["load_errors"][0]


def test_a_label_prompt_or_skip_reason_that_is_no_string_is_a_load_error_naming_the_test(
    write_suite: Any,
) -> None:
    # An int label crashed the run with a traceback (in the content hash), and a skipped
    # test's int prompt or reason with pydantic's ValidationError.
    head = "from agent_health import test\n"
    suite = write_suite(
        **{
            "test_label.py": head + "@test('l', labels=['a', 1])\nasync def l():\n    pass\n",
            "test_prompt.py": head + "@test.skip('p', default_prompt=3)\nasync def p():\n pass\n",
            "test_reason.py": head + "@test.skip('r', reason=5)\nasync def r():\n    pass\n",
            "test_fine.py": head + "@test('f', labels=['a'])\nasync def f():\n    pass\n",
        }
    )
    run = run_cli_sync(suite, "--no-ledger", "--no-history")
    assert run.code == 2
    assert sorted(run.report["summary"]["load_errors"]) == [
        "test_label.py:2: test 'l': labels are strings; 1 is not",
        "test_prompt.py:2: test 'p': default_prompt= is the prompt, a string; got int",
        "test_reason.py:2: test 'r': reason= says why it is skipped, a string; got int",
    ]
    assert [t["status"] for t in run.report["tests"]] == ["passed"]
