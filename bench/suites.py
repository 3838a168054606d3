"""The suites the benchmarks run: the same trivial tests written for agent-health and pytest.

Both sides get the same layout (``per_file`` tests in each of ``ceil(n / per_file)`` files)
and the same work per test: call an agent that answers "pong" at once, check the answer.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

# An agent-health config whose connector answers in-process, at once.
INPROC_CONFIG = '''\
"""Benchmark config: an in-process agent that answers "pong" at once."""

from agent_health import define_config
from agent_health.connectors import AgentReply


class InprocConnector:
    """Answers every request instantly, without leaving the process."""

    def __init__(self, spec):
        self.spec = spec

    async def run(self, request):
        return AgentReply(output="pong")

    async def aclose(self):
        return None


config = define_config(
    connectors={"inproc": InprocConnector},
    agents={"inproc": {"connector": "inproc"}},
    default_agent="inproc",
)
'''

# A diagnostic config: the same REST v1 agent reached through a minimal aiohttp client
# registered as a custom connector, to tell the engine's cost from the built-in client's.
AIOHTTP_CONFIG = '''\
"""Benchmark config: REST protocol v1 over a minimal aiohttp client (diagnostic)."""

import aiohttp

from agent_health import define_config
from agent_health.connectors import AgentReply


class AiohttpRest:
    """POSTs the request as JSON and validates the answer, on one shared session."""

    def __init__(self, spec):
        self.url = spec.url
        self.session = None

    async def run(self, request):
        if self.session is None:
            connector = aiohttp.TCPConnector(limit=0)
            self.session = aiohttp.ClientSession(connector=connector)
        headers = {{"content-type": "application/json", "X-Agent-Health-Run-Id": request.run_id}}
        body = request.model_dump_json()
        async with self.session.post(self.url, data=body, headers=headers) as response:
            response.raise_for_status()
            return AgentReply.model_validate_json(await response.read())

    async def aclose(self):
        if self.session is not None:
            await self.session.close()


config = define_config(
    connectors={{"aiohttp-rest": AiohttpRest}},
    agents={{"slow": {{"connector": "aiohttp-rest", "url": "{url}"}}}},
    default_agent="slow",
)
'''

OURS_HEADER = "from agent_health import test\n"

OURS_TEST = """

@test("ping {i}")
async def ping_{i}(agent, expect):
    result = await agent.run("ping")
    expect(result.output).to_equal("pong")
"""

# pytest's side: the equivalent instant agent as a plain async function.
PYTEST_AGENT = '''\
"""An in-process agent that answers "pong" at once (the pytest side of the benchmark)."""


class Reply:
    __slots__ = ("output",)

    def __init__(self, output):
        self.output = output


async def run_agent(prompt):
    return Reply("pong")
'''

PYTEST_HEADER = "from inproc_agent import run_agent\n"

PYTEST_TEST = """

async def test_ping_{i}():
    result = await run_agent("ping")
    assert result.output == "pong"
"""

PYTEST_INI = textwrap.dedent(
    """\
    [pytest]
    asyncio_mode = auto
    asyncio_default_fixture_loop_scope = function
    """
)


def _write_files(root: Path, n: int, per_file: int, header: str, body: str) -> None:
    for start in range(0, n, per_file):
        chunk = range(start, min(start + per_file, n))
        source = header + "".join(body.format(i=i) for i in chunk)
        (root / f"test_ping_{start // per_file:04d}.py").write_text(source)


def write_ours(root: Path, n: int, per_file: int, *, config: bool = True) -> Path:
    """An agent-health suite of ``n`` ping tests; with ``config``, the in-process agent."""
    root.mkdir(parents=True, exist_ok=True)
    if config:
        (root / "agent-health.config.py").write_text(INPROC_CONFIG)
    _write_files(root, n, per_file, OURS_HEADER, OURS_TEST)
    return root


def write_aiohttp_config(root: Path, url: str) -> Path:
    """Point the suite in ``root`` at ``url`` through the diagnostic aiohttp connector."""
    path = root / "agent-health.config.py"
    path.write_text(AIOHTTP_CONFIG.format(url=url))
    return path


def write_pytest(root: Path, n: int, per_file: int) -> Path:
    """The same ``n`` tests as pytest-asyncio functions against an in-process agent."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text(PYTEST_INI)
    (root / "inproc_agent.py").write_text(PYTEST_AGENT)
    _write_files(root, n, per_file, PYTEST_HEADER, PYTEST_TEST)
    return root
