"""Fast start: each command imports what it uses and nothing else.

These tests check *which* modules a command leaves in ``sys.modules`` (never how long it took):
a module that is not imported costs nothing, and an import added by accident shows up here as
a name, on any machine. ``bench/defaults.py`` measures what the difference is worth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import INPROC_CONFIG, ONE_TEST

# Never needed by `run` or `list` on a laptop: the servers, the cluster, the judge's providers.
SERVER_SIDE = (
    "aiohttp.web",
    "kopf",
    "kubernetes",
    "agent_health.cluster",
    "agent_health.gateway",
    "agent_health.peers",  # a run's MCP peers: only when its config has some
    "mcp_types",
    "agent_health.judging",
    "tenacity",
    "yaml",
    # OTLP export: loaded only when a run exports (and never the SDK: test_otel_encode.py).
    "opentelemetry",
    "google.protobuf",
    "requests",
    "agent_health.otel.encode",
    "agent_health.otel.exporter",
    "agent_health.otel.spans",
    "agent_health.otel.export",
)


def imported_by(argv: list[str], cwd: Path) -> set[str]:
    """The modules in ``sys.modules`` after ``agent-health ARGV`` ran in a fresh interpreter."""
    out = cwd / "modules.json"
    code = (
        "import json, sys\n"
        "from agent_health.cli import app\n"
        f"code = app.main({argv!r})\n"
        f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return set(json.loads(out.read_text()))


def loaded(modules: set[str], *names: str) -> list[str]:
    """Those of ``names`` (packages included with their submodules) that were imported."""
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_one.py").write_text(ONE_TEST)
    (tmp_path / "agent-health.config.py").write_text(INPROC_CONFIG)
    return tmp_path


def test_list_imports_the_loader_and_no_client_server_reporter_or_ledger(suite: Path) -> None:
    modules = imported_by(["list", str(suite)], suite)
    assert (
        "agent_health.engine.loading.loader" in modules
    )  # the check would pass on a crash otherwise
    assert not loaded(
        modules,
        *SERVER_SIDE,
        "aiohttp",
        "httpx",
        "rich",
        "xml",
        "asyncio",
        "ag_ui",
        "agent_health.ledger",
        "agent_health.engine.running.runner",
        "agent_health.engine.reporters",
        "agent_health.traces.metrics",
        # The history is recorded by run, never read by list.
        "agent_health.history",
        "sqlalchemy",
        "alembic",
    )


def test_run_with_the_local_ledger_loads_no_server_xml_or_unused_connector(suite: Path) -> None:
    modules = imported_by(["run", str(suite)], suite)
    assert "agent_health.engine.running.runner" in modules
    assert "agent_health.ledger.chain" in modules  # the default local ledger recorded the run
    assert not loaded(
        modules,
        *SERVER_SIDE,
        "xml",
        "ag_ui",
        "httpx_sse",
        "agent_health.connectors.rest",
        "agent_health.connectors.agui",
        "agent_health.engine.reporters.junit",
        "agent_health.ledger.configmap",
        "agent_health.ledger.objectstore",
        # The local recorder seals JSON objects: the record models, the verifier and the
        # backends' registry are for readers and other stores.
        "agent_health.ledger.records",
        "agent_health.ledger.audit",
        "agent_health.ledger.backends",
        # Loaded by the first test that reads run.traces.
        "agent_health.traces.view",
        "agent_health.traces.opensearch",
        # The OTLP receiver is for agents the run starts; protobuf only once a span comes.
        "agent_health.engine.recording.receiver",
        "agent_health.ledger.otlp",
        "opentelemetry",
        "google.protobuf",
        # A terminal's progress bar; this run's output is not one.
        "rich.progress",
        # The consoles read no ":name:" as an emoji code (test_run_basics.py).
        "rich._emoji_codes",
    )


def test_a_reporter_loads_when_it_is_asked_for(suite: Path) -> None:
    report = suite / "junit.xml"
    modules = imported_by(["run", str(suite), "--reporter", f"junit:{report}"], suite)
    assert "agent_health.engine.reporters.junit" in modules
    assert report.read_text().startswith("<?xml")


async def test_a_rest_run_loads_the_aiohttp_client_and_not_httpx(suite: Path) -> None:
    from aiohttp import web
    from support.loopback import serving

    async def agent(request: web.Request) -> web.Response:
        return web.json_response({"output": "pong"})

    async with serving(agent, path="/run") as url:
        modules = await asyncio.to_thread(
            imported_by, ["run", str(suite), "--agent", f"rest+{url}"], suite
        )
    assert "agent_health.connectors.rest" in modules
    assert "aiohttp.client" in modules
    assert not loaded(modules, *SERVER_SIDE, "httpx", "httpx_sse", "xml", "ag_ui")


@pytest.mark.parametrize("url", ["rest+http://127.0.0.1:9/run", "openai+http://127.0.0.1:9/v1"])
def test_an_http_connector_loads_its_client_when_made_so_no_test_pays_for_it(url: str) -> None:
    # A run makes its connector before the first test starts: the first test's duration
    # (and the session's) must not include importing the HTTP client.
    code = (
        "import json, sys\n"
        "from agent_health import connectors\n"
        "before = 'aiohttp.client' in sys.modules\n"
        f"connectors.create(connectors.ConnectorSpec.parse({url!r}))\n"
        "print(json.dumps([before, 'aiohttp.client' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == [False, True]


BUILT_FIRST = """
from agent_health import test
from agent_health.connectors import protocol
from agent_health.sdk import results, turns


@test("the models are built before the first test starts")
async def built(agent, expect):
    # their parts first, so that each model takes its parts' schemas as they are
    models = (protocol.Step, protocol.TokenUsage, results.Signal, protocol.ContextItem,
              turns.Turn, protocol.AgentRequest, protocol.AgentReply, results.RunResult,
              results.TestResult)
    expect([m.__name__ for m in models if not m.__pydantic_complete__]).to_equal([])
"""


def test_a_run_builds_the_models_every_test_uses_before_its_first_test(tmp_path: Path) -> None:
    # Deferred by the SDK (`list` never builds them); left to their first use, the first
    # tests' durations (and the session's) would include building them.
    (tmp_path / "test_built.py").write_text(BUILT_FIRST)
    (tmp_path / "agent-health.config.py").write_text(INPROC_CONFIG)
    modules = imported_by(["run", str(tmp_path), "--no-ledger"], tmp_path)  # exit 0: passed
    assert "agent_health.engine.running.runner" in modules


CLASSES = """
import dataclasses, json, sys
import pydantic
from agent_health.cli import app
code = app.main(sys.argv[1:])
ours = [
    m
    for name, module in list(sys.modules.items())
    if name.startswith("agent_health.")
    for m in vars(module).values()
    if isinstance(m, type) and m.__module__ == name
]
models = [m for m in ours if issubclass(m, pydantic.BaseModel)]
json.dump(
    {
        "built": sorted(f"{m.__module__}.{m.__qualname__}" for m in models
                        if m.__pydantic_complete__),
        "made": sorted(f"{m.__module__}.{m.__qualname__}" for m in ours
                       if m in models or dataclasses.is_dataclass(m)
                       or (issubclass(m, tuple) and hasattr(m, "_fields"))),
        "compared": sorted(f"{m.__module__}.{m.__qualname__}" for m in ours
                           if dataclasses.is_dataclass(m) and m.__dataclass_params__.eq),
        "shown": sorted(f"{m.__module__}.{m.__qualname__}" for m in ours
                        if dataclasses.is_dataclass(m) and m.__dataclass_params__.repr),
        "parsed": sorted(f"{m.__module__}.{m.__qualname__}.{name}" for m in models
                         for name, field in m.__pydantic_fields__.items()
                         if getattr(field.default_factory, "__text_signature__", None)
                         is not None),
        "strings": sorted(f"{m.__module__}.{m.__qualname__}.{name}" for m in models
                          for name, annotation in vars(m).get("__annotations__", {}).items()
                          if isinstance(annotation, str)),
    },
    open("classes.json", "w"),
)
sys.exit(code)
"""


def classes_of(argv: list[str], suite: Path) -> dict[str, set[str]]:
    """The models, dataclasses and named tuples of ours a command makes (``made``), the
    models whose validator and serializer it built (``built``), the dataclasses with a
    generated ``__eq__`` (``compared``) or ``__repr__`` (``shown``), and of its models the
    fields whose default factory's signature pydantic parses from text (``parsed``) and those
    whose annotation is a string (``strings``), run in a fresh interpreter in ``suite``."""
    done = subprocess.run(
        [sys.executable, "-c", CLASSES, *argv],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads((suite / "classes.json").read_text())
    return {kind: set(names) for kind, names in found.items()}


# What a passing run of one test validates: the user's config, and what every test's agent
# and result go through. The report's models are filled by our own code, so a run that
# writes no report file builds none of their validators (loading a saved report does).
RUN_BUILDS = {
    "agent_health.connectors.protocol.AgentReply",
    "agent_health.connectors.protocol.AgentRequest",
    "agent_health.connectors.protocol.ContextItem",
    "agent_health.connectors.protocol.Step",
    "agent_health.connectors.protocol.TokenUsage",
    "agent_health.sdk.config.Config",
    "agent_health.sdk.results.RunResult",
    "agent_health.sdk.results.Signal",
    "agent_health.sdk.results.TestResult",
    "agent_health.sdk.turns.Turn",
}


def test_a_passing_run_builds_no_validator_of_the_report(suite: Path) -> None:
    built = classes_of(["run", str(suite), "--no-history", "--no-ledger"], suite)["built"]
    assert "agent_health.sdk.config.Config" in built  # the check would pass on a crash otherwise
    assert built <= RUN_BUILDS, f"a passing run built {', '.join(sorted(built - RUN_BUILDS))}"


def test_a_run_without_a_history_loads_no_sqlalchemy_and_one_with_an_up_to_date_history_no_alembic(
    suite: Path,
) -> None:
    modules = imported_by(["run", str(suite), "--no-history", "--no-ledger"], suite)
    assert "agent_health.engine.running.runner" in modules
    assert not loaded(modules, "sqlalchemy", "alembic", "agent_health.history.database")
    first = imported_by(["run", str(suite), "--no-ledger"], suite)  # makes the history
    assert "alembic" in first
    again = imported_by(["run", str(suite), "--no-ledger"], suite)
    assert "agent_health.history.ingest" in again  # it recorded the run
    assert not loaded(again, "alembic")


def _commands(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_a_command_line_is_built_up_to_its_commands_group_and_parses_as_the_whole_one() -> None:
    from agent_health.cli import app

    whole = _commands(app.parser())
    for name, full in whole.items():
        alone = _commands(app.parser(name))
        assert alone[name].format_help() == full.format_help(), name
        assert set(alone) <= set(whole)
    assert "serve" not in _commands(app.parser("run"))  # a run builds no other group's flags
    assert set(_commands(app.parser("--help"))) == set(whole)
    assert set(_commands(app.parser("rnu"))) == set(whole)  # a typo is told every command


# The start-up guard (issue #40): what `agent-health list` of one test and `run` of one
# trivial test may import, by name — each module of ours, each other package by its
# top-level name (the standard library's own imports differ from one Python to the next, so
# only the heavy ones are named, as ones `list` must not load). A change that pulls a module
# past these into start-up fails here with its name; bench/defaults.py measures what start-up
# costs ("list" and "run" rows). Add a name only when the command needs it at start-up.
LIST_ALLOWED = frozenset(
    {
        "agent_health",
        "agent_health.cli",
        "agent_health.cli.app",
        "agent_health.cli.common",
        "agent_health.cli.run",
        "agent_health.cli.run.catalog",
        "agent_health.cli.run.flags",
        "agent_health.cli.run.suite",
        "agent_health.connectors",
        "agent_health.connectors.base",
        "agent_health.connectors.environment",
        "agent_health.connectors.errors",
        "agent_health.connectors.protocol",
        "agent_health.connectors.readonly",
        "agent_health.engine",
        "agent_health.engine.loading",
        "agent_health.engine.loading.discovery",
        "agent_health.engine.loading.listing",
        "agent_health.engine.loading.loader",
        "agent_health.engine.loading.select",
        "agent_health.engine.visible",
        "agent_health.faces",
        "agent_health.sdk",
        "agent_health.sdk.config",
        "agent_health.sdk.declare",
        "agent_health.sdk.declared",
        "agent_health.sdk.deferred",
        "agent_health.sdk.errors",
        "agent_health.sdk.otlpconfig",
        "agent_health.sdk.sources",
        "agent_health.sdk.tracesconfig",
        "agent_health.timeouts",
    }
)
RUN_ALLOWED = LIST_ALLOWED | {
    # Not the report's optional parts (a budget, the insights rollup, an agent matrix): their
    # modules are loaded as the report's serializer is first built, and the history's
    # recording reads a live report's summary without serializing it (issue #40).
    "agent_health.cli.run.archive",
    "agent_health.cli.run.execution",
    "agent_health.cli.run.handler",
    "agent_health.cli.run.reporting",
    "agent_health.cli.run.request",
    "agent_health.connectors.partial",
    "agent_health.connectors.transport",
    "agent_health.connectors.wire",
    "agent_health.engine.loading.lastfailed",
    "agent_health.engine.outcome",
    "agent_health.engine.outcome.grading",
    "agent_health.engine.recording",
    "agent_health.engine.recording.peerroutes",
    "agent_health.engine.recording.recording",
    "agent_health.engine.recording.runrecord",
    "agent_health.engine.reporters",
    "agent_health.engine.reporters.terminal",
    "agent_health.engine.reporters.terminal_failures",
    "agent_health.engine.reporters.terminal_style",
    "agent_health.engine.reporters.terminal_tables",
    "agent_health.engine.reports",
    "agent_health.engine.reports.bounds",
    "agent_health.engine.reports.entries",
    "agent_health.engine.reports.offtrack",
    "agent_health.engine.reports.provenance",
    "agent_health.engine.reports.report",
    "agent_health.engine.running",
    "agent_health.engine.running.agent_process",
    "agent_health.engine.running.capture",
    "agent_health.engine.running.fixtures",
    "agent_health.engine.running.feedtarget",
    "agent_health.engine.running.runner",
    "agent_health.engine.running.session",
    "agent_health.engine.statistics",
    "agent_health.engine.statistics.pairing",  # the history's trend line (cli/run/archive.py)
    "agent_health.engine.statistics.stats",
    "agent_health.engine.statistics.uncertainty",
    "agent_health.history",
    "agent_health.history.ci",
    "agent_health.history.database",
    "agent_health.history.errors",
    "agent_health.history.facts",
    "agent_health.history.ingest",
    "agent_health.history.location",
    "agent_health.history.migrations",
    "agent_health.history.tables",
    # A run records its trend and says its line (trends): never the history command's
    # queries or the answers they make (issue #40, the history's fixed cost).
    "agent_health.history.trends",
    "agent_health.ledger",
    "agent_health.ledger.chain",
    "agent_health.ledger.encoding",
    "agent_health.ledger.errors",
    "agent_health.ledger.objects",
    "agent_health.ledger.observation",
    "agent_health.ledger.runfile",
    "agent_health.ledger.store",
    "agent_health.ledger.strictjson",
    "agent_health.sdk.agent",
    "agent_health.sdk.check",
    "agent_health.sdk.context",
    "agent_health.sdk.conversation",
    "agent_health.sdk.matchers",
    "agent_health.sdk.matchers.run",
    "agent_health.sdk.matchers.talk",
    "agent_health.sdk.matchers.value",
    "agent_health.sdk.results",
    "agent_health.sdk.traces",
    "agent_health.sdk.turns",
    "agent_health.statuses",
    "agent_health.suitehome",
    "agent_health.traces",
    "agent_health.traces.errors",
    "agent_health.traces.metrics",
    "agent_health.traces.traceparent",
}
LIST_PACKAGES = frozenset(
    {"pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"}
)
# A run records its history (SQLAlchemy, whose compiled parts register cython_runtime) and
# writes to the terminal (rich).
RUN_PACKAGES = LIST_PACKAGES | {"rich", "sqlalchemy", "cython_runtime"}
LIST_NEVER_STDLIB = (
    "asyncio",
    "concurrent",
    "ssl",
    "http",
    "sqlite3",
    "xml",
    "logging",
    # A config's mistakes ("did you mean") and a command given as one string: their errors.
    "difflib",
    "shlex",
)


def beyond(modules: set[str], ours: frozenset[str], packages: frozenset[str]) -> list[str]:
    """The modules past an allow-list: ours by name, others by their top-level package (the
    standard library and private C modules aside; test files load under their own names)."""
    past = []
    for name in sorted(modules):
        top = name.split(".")[0]
        if name.startswith("agent_health_suite_") or top in sys.stdlib_module_names:
            continue
        if top == "agent_health":
            if name not in ours:
                past.append(name)
        elif not top.startswith("_") and top not in packages:
            past.append(name)
    return past


def test_list_of_one_test_imports_only_its_allow_list(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text(ONE_TEST)  # no config: the bench's list row
    modules = imported_by(["list", str(tmp_path)], tmp_path)
    assert "agent_health.engine.loading.loader" in modules  # it listed
    past = beyond(modules, LIST_ALLOWED, LIST_PACKAGES)
    assert not past, f"agent-health list imported past its allow-list: {', '.join(past)}"
    heavy = loaded(modules, *LIST_NEVER_STDLIB)
    assert not heavy, f"agent-health list imported {', '.join(heavy)}"


def test_run_of_one_trivial_test_imports_only_its_allow_list(suite: Path) -> None:
    first = imported_by(["run", str(suite)], suite)  # makes the history (Alembic's schema)
    assert "agent_health.history.ingest" in first
    modules = imported_by(["run", str(suite)], suite)  # as every later run: defaults on
    assert "agent_health.history.ingest" in modules  # it recorded the run
    assert "agent_health.ledger.chain" in modules  # and sealed its ledger
    past = beyond(modules, RUN_ALLOWED, RUN_PACKAGES)
    assert not past, f"agent-health run imported past its allow-list: {', '.join(past)}"


# Without the history (the bench's `run --no-history`): neither its recording, nor the command
# line's side of it (cli/run/archive.py), nor what its trend line reads (the paired test), nor
# its location (the suite's own folder is `suitehome`'s), nor the live feed's models when the
# run streams nowhere.
RUN_NO_HISTORY_ALLOWED = RUN_ALLOWED - {
    "agent_health.cli.run.archive",
    "agent_health.engine.statistics.pairing",
    "agent_health.history",
    "agent_health.history.ci",
    "agent_health.history.database",
    "agent_health.history.errors",
    "agent_health.history.facts",
    "agent_health.history.ingest",
    "agent_health.history.location",
    "agent_health.history.migrations",
    "agent_health.history.tables",
    "agent_health.history.trends",
}
RUN_NO_HISTORY_PACKAGES = LIST_PACKAGES | {"rich"}


def test_run_of_one_trivial_test_without_the_history_imports_only_its_allow_list(
    suite: Path,
) -> None:
    modules = imported_by(["run", str(suite), "--no-history"], suite)
    assert "agent_health.ledger.chain" in modules  # it sealed its ledger
    past = beyond(modules, RUN_NO_HISTORY_ALLOWED, RUN_NO_HISTORY_PACKAGES)
    assert not past, (
        f"agent-health run --no-history imported past its allow-list: {', '.join(past)}"
    )
    # a config's "did you mean": only when it has a mistake; the report's serializer is the
    # field's own schema, not pydantic's @field_serializer module (8 M instructions)
    heavy = loaded(modules, "difflib", "pydantic.functional_serializers")
    assert not heavy, f"agent-health run --no-history imported {', '.join(heavy)}"


# The models, dataclasses and named tuples of ours a passing `run --no-history` of one trivial
# test makes: each costs its making (a few million instructions: its fields collected, a
# dataclass's methods compiled one by one; a named tuple's, about 1 M) whether or not the run
# uses it. A class a run of one passing
# test needs neither makes nor reads (a report file's entry shape, the insights rollup, a
# budget, an agent matrix, trace spans, a refused cell) is made where it is first used.
RUN_NO_HISTORY_CLASSES = frozenset(
    {
        "agent_health.cli.run.execution.Executed",
        "agent_health.cli.run.request.RunRequest",
        "agent_health.connectors.base.ConnectorSpec",
        "agent_health.connectors.base.Conversations",
        "agent_health.connectors.environment.FromEnv",
        "agent_health.connectors.partial.Partial",
        "agent_health.connectors.protocol.AgentReply",
        "agent_health.connectors.protocol.AgentRequest",
        "agent_health.connectors.protocol.ContextItem",
        "agent_health.connectors.protocol.FileItem",
        "agent_health.connectors.protocol.Message",
        "agent_health.connectors.protocol.ModelUsage",
        "agent_health.connectors.protocol.Step",
        "agent_health.connectors.protocol.TokenUsage",
        "agent_health.connectors.protocol.ToolDefinition",
        "agent_health.connectors.readonly.ReadOnlyModel",
        "agent_health.engine.loading.discovery.Discovery",
        "agent_health.engine.loading.lastfailed.Cache",
        "agent_health.engine.loading.loader.LoadError",
        "agent_health.engine.loading.loader.Suite",
        "agent_health.engine.recording.recording._Cell",
        "agent_health.engine.reporters.terminal_tables._Group",
        "agent_health.engine.reports.bounds.Bounded",
        "agent_health.engine.reports.provenance.AgentInfo",
        "agent_health.engine.reports.provenance.GitState",
        "agent_health.engine.reports.provenance.JudgeInfo",
        "agent_health.engine.reports.provenance.Provenance",
        "agent_health.engine.reports.provenance.Selection",
        "agent_health.engine.reports.provenance.SuiteInfo",
        "agent_health.engine.reports.report.LabelStats",
        "agent_health.engine.reports.report.RunReport",
        "agent_health.engine.reports.report.Summary",
        "agent_health.engine.reports.report._WithParts",
        "agent_health.engine.running.runner.RunEnv",
        "agent_health.engine.running.session.Halt",
        "agent_health.engine.running.session.Outcome",
        "agent_health.engine.running.session.Policy",
        "agent_health.engine.statistics.uncertainty.Interval",
        "agent_health.engine.statistics.uncertainty.PassAtK",
        "agent_health.engine.statistics.uncertainty.Tally",
        "agent_health.ledger.objects.Written",
        "agent_health.ledger.observation.Observation",
        "agent_health.ledger.runfile.Parsed",
        "agent_health.ledger.runfile._Cell",
        "agent_health.sdk.config.Config",
        "agent_health.sdk.context.TestContext",
        "agent_health.sdk.context.TestInfo",
        "agent_health.sdk.declare.Collector",
        "agent_health.sdk.declared.FixtureDef",
        "agent_health.sdk.declared.Hook",
        "agent_health.sdk.declared.TestCase",
        "agent_health.sdk.otlpconfig.OtlpConfig",
        "agent_health.sdk.otlpconfig.Settings",
        "agent_health.sdk.results.Attempt",
        "agent_health.sdk.results.RunResult",
        "agent_health.sdk.results.Signal",
        "agent_health.sdk.results.TestResult",
        "agent_health.sdk.tracesconfig.OtlpSettings",
        "agent_health.sdk.tracesconfig.Price",
        "agent_health.sdk.tracesconfig.TracesSettings",
        "agent_health.sdk.turns.ConversationEnd",
        "agent_health.sdk.turns.Turn",
        "agent_health.traces.metrics.ToolStats",
    }
)


def test_run_of_one_trivial_test_without_the_history_makes_only_its_classes(suite: Path) -> None:
    made = classes_of(["run", str(suite), "--no-history"], suite)["made"]
    assert "agent_health.sdk.results.TestResult" in made  # it ran its test
    past = sorted(made - RUN_NO_HISTORY_CLASSES)
    assert not past, f"agent-health run --no-history made {', '.join(past)}"


def test_the_dataclasses_a_run_makes_compare_by_identity_but_the_documented_one(
    suite: Path,
) -> None:
    # A generated __eq__ is one more method compiled as its module is imported (issue #40).
    # What a run keeps and changes as it goes is never compared by value: identity is its
    # equality. TestInfo is the SDK's documented `test_info` fixture, left as it was.
    compared = classes_of(["run", str(suite), "--no-history"], suite)["compared"]
    assert compared == {"agent_health.sdk.context.TestInfo"}


def test_the_run_s_own_working_objects_have_no_generated_repr_but_the_documented_one(
    suite: Path,
) -> None:
    # A generated __repr__ is one more method compiled as its module is imported (issue #40,
    # about 0.6 M instructions a class): the suite, a declared test, a cell being recorded,
    # the report's cutter, a terminal group, the halt, the running test's context, its tool
    # counts, a run file read back and a file's collector are never shown (object's repr is
    # theirs), as identity is their equality. TestInfo is the documented test_info fixture.
    shown = classes_of(["run", str(suite), "--no-history"], suite)["shown"]
    assert shown == {"agent_health.sdk.context.TestInfo"}


COUNTED = """
import gc
import json
from pathlib import Path

from agent_health import test


@test("counts the collections before it")
async def counted(agent, expect):
    collections = [generation["collections"] for generation in gc.get_stats()]
    Path("collections.json").write_text(json.dumps([collections, gc.isenabled()]))
    expect(gc.isenabled()).to_equal(True)
"""


def test_start_up_is_not_walked_by_the_collector_and_the_run_is(tmp_path: Path) -> None:
    # What the program imports and loads lives as long as the run: the collector is off
    # until the run starts, then on. Counted from where the program starts (Python's own
    # start-up collects too, more or less with the site's packages).
    (tmp_path / "test_counted.py").write_text(COUNTED)
    (tmp_path / "agent-health.config.py").write_text(INPROC_CONFIG)
    argv = ["agent-health", "run", str(tmp_path), "--no-ledger", "--no-history"]
    code = (
        "import gc, json, sys\n"
        "counted = [generation['collections'] for generation in gc.get_stats()]\n"
        "open('started.json', 'w').write(json.dumps(counted))\n"
        f"sys.argv = {argv!r}\n"
        "from agent_health.cli import console\n"  # as the console script starts
        "sys.exit(console())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    started = json.loads((tmp_path / "started.json").read_text())
    by_then, enabled = json.loads((tmp_path / "collections.json").read_text())
    assert enabled
    young, middle, old = (b - s for b, s in zip(by_then, started, strict=True))
    # It was 44 young and 3 middle collections (now 4 and none): those of parsing the
    # command line and of the run's own start (its engine's imports, as the run begins).
    assert young <= 10, young
    assert middle <= 1, middle
    assert old == 0, old


@pytest.mark.parametrize("collecting", [True, False])
def test_a_run_inside_another_program_leaves_its_collector_as_it_was(
    suite: Path, collecting: bool
) -> None:
    code = (
        "import gc, sys\n"
        "from agent_health.cli import app\n"
        f"gc.enable() if {collecting!r} else gc.disable()\n"
        f"code = app.main(['run', {str(suite)!r}, '--no-ledger', '--no-history'])\n"
        "print(gc.isenabled())\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == str(collecting)


def test_no_model_a_run_makes_has_a_default_factory_whose_signature_is_parsed_from_text(
    suite: Path,
) -> None:
    # pydantic reads each default factory's signature (does it take the validated data?) as
    # it builds a model and as model_construct fills one; a builtin's (`list`, `tuple`) is
    # parsed from its text by the tokenizer, whose regular expressions the first such read
    # compiles: 18.6 M instructions of a run of one test (issue #40). An empty list is a
    # lambda's.
    parsed = classes_of(["run", str(suite), "--no-history"], suite)["parsed"]
    assert not parsed, f"default factories whose signature is parsed: {', '.join(sorted(parsed))}"


# Annotations a run's models leave as strings on purpose: the report's optional parts and the
# summary's breakdowns, resolved when the report is first serialized (report._WithParts), and
# the traces settings' OpenSearch part, resolved as a config's traces are first validated.
STRING_ANNOTATIONS = {
    "agent_health.engine.reports.report.RunReport.matrix",
    "agent_health.engine.reports.report.Summary.budget",
    "agent_health.engine.reports.report.Summary.insights",
    "agent_health.engine.reports.report.Summary.per_test",
    "agent_health.engine.reports.report.Summary.quarantined",
    "agent_health.engine.reports.report.Summary.recommendations",
    "agent_health.engine.reports.report.Summary.unpriced_models",
    "agent_health.sdk.tracesconfig.TracesSettings.opensearch",
}


def test_the_models_a_run_makes_have_their_annotations_evaluated_as_python_makes_the_class(
    suite: Path,
) -> None:
    # A field's annotation left as a string (`from __future__ import annotations`) is compiled
    # by pydantic as it makes the class: about 70 K instructions a field, 17 M of a run of one
    # test (issue #40). The modules of the models a run makes do without the future import.
    strings = classes_of(["run", str(suite), "--no-history"], suite)["strings"]
    assert "agent_health.engine.reports.report.Summary.budget" in strings  # the probe works
    extra = sorted(strings - STRING_ANNOTATIONS)
    assert not extra, f"annotations a run's models leave as strings: {', '.join(extra)}"
