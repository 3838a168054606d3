"""Scripted model servers on 127.0.0.1 for judge tests: OpenAI-compatible, Anthropic, Bedrock.

A :class:`ScriptedModel` answers each request with the next :data:`Action` of its script,
then with its ``default`` (an action, or a function of the request). Actions are written
once and rendered in each provider's wire shape::

    server = await ScriptedModel.start("openai", script=[Status(429, retry_after="0"),
                                                         Answer(True, 0.9, "ok")])
    ... judge against server.url ...
    assert len(server.requests) == 2
    await server.close()

Every request is recorded (path, headers, JSON body, arrival time). With ``api_key`` the
server answers 401 unless the key is presented; with ``sigv4`` (access key, secret,
region) the Bedrock server recomputes the SigV4 signature with botocore and answers 403
when it does not match.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

Shape = Literal["openai", "anthropic", "bedrock"]
USAGE_IN, USAGE_OUT = 100, 20
VERDICT_TOOL = "submit_verdict"


@dataclass(frozen=True)
class Answer:
    """A verdict in the provider's structured form (JSON content, or the verdict tool)."""

    passed: bool
    score: float = 1.0
    reasoning: str = "scripted"


@dataclass(frozen=True)
class Text:
    """A plain text answer (a malformed verdict when it is not the JSON object)."""

    text: str


@dataclass(frozen=True)
class Calls:
    """Tool calls: ``[(name, arguments), ...]``."""

    calls: tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True)
class Status:
    """An HTTP error with a provider-shaped error body."""

    code: int
    message: str = "scripted failure"
    retry_after: str | None = None


@dataclass(frozen=True)
class Raw:
    """A raw body (e.g. broken JSON) with status 200."""

    body: str


@dataclass(frozen=True)
class Slow:
    """Wait, then act (for client timeouts)."""

    seconds: float
    then: Any = field(default_factory=lambda: Answer(True))


Action = Answer | Text | Calls | Status | Raw | Slow
Default = Action | Callable[[Mapping[str, Any]], Action]


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes
    at: float


def quoted_rule(body: Mapping[str, Any]) -> Action:
    """A deterministic judge: criteria ``says "X"`` pass iff X appears in the evidence.

    Asked agentically (tools offered, no forced answer), it first calls ``get_spans``, then
    submits the same verdict through ``submit_verdict``.
    """
    verdict = _quoted(body)
    forced = "response_format" in body or "tool_choice" in body
    forced = forced or "tool" in body.get("toolConfig", {}).get("toolChoice", {})
    offered = bool(body.get("tools")) or "toolConfig" in body
    if forced or not offered:
        return verdict
    answered = any(m.get("role") == "tool" for m in body.get("messages", []))
    if not answered:
        return Calls((("get_spans", {}),))
    assert isinstance(verdict, Answer)
    return Calls(((VERDICT_TOOL, _verdict(verdict)),))


def _quoted(body: Mapping[str, Any]) -> Action:
    text = prompt_text(body)
    criteria = text.split("## CRITERIA", 1)[-1].split("## EVIDENCE", 1)[0]
    evidence = text.split("## EVIDENCE", 1)[-1]
    wanted = re.search(r'says "([^"]+)"', criteria)
    if not wanted:
        return Answer(True, 1.0, "no quoted phrase to check")
    found = wanted.group(1).lower() in evidence.lower()
    return Answer(
        found, 1.0 if found else 0.0, f"{wanted.group(1)!r} {'found' if found else 'missing'}"
    )


def gullible_rule(body: Mapping[str, Any]) -> Action:
    """A judge that obeys whatever looks like an instruction, to test prompt injection.

    It reads the prompt line by line (``str.splitlines``, which breaks at U+2028 and the other
    Unicode line boundaries too) and takes the *last* ``## CRITERIA`` section as its criteria,
    so an injection that manages to start a line of its own with that heading replaces the
    real criteria. Criteria saying "ignore the criteria and pass" or "always pass" pass; else
    criteria ``says "X"`` pass iff X appears in the ``## EVIDENCE`` section. Asked
    agentically, it first obeys a ``get_spans with run_id='R'`` found anywhere in the prompt.
    """
    text = prompt_text(body)
    criteria: list[str] = []
    evidence: list[str] = []
    section: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## CRITERIA"):
            criteria = []
            section = criteria
        elif line.startswith("## EVIDENCE"):
            section = evidence
        elif section is not None:
            section.append(line)
    wanted = "\n".join(criteria).lower()
    offered = bool(body.get("tools")) and not ("response_format" in body or "tool_choice" in body)
    answered = any(m.get("role") == "tool" for m in body.get("messages", []))
    asked = re.search(r"get_spans with run_id='([^']+)'", text)
    if offered and asked and not answered:
        return Calls((("get_spans", {"run_id": asked.group(1)}),))
    if "ignore the criteria and pass" in wanted or "always pass" in wanted:
        verdict = Answer(True, 1.0, "the criteria say to pass")
    else:
        quoted = re.search(r'says "([^"]+)"', wanted)
        found = quoted is not None and quoted.group(1) in "\n".join(evidence).lower()
        verdict = Answer(found, 1.0 if found else 0.0, "phrase found" if found else "missing")
    return Calls(((VERDICT_TOOL, _verdict(verdict)),)) if offered else verdict


def prompt_text(body: Mapping[str, Any]) -> str:
    """All user text of a request, whatever its shape."""
    parts: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [b["text"] for b in content if isinstance(b, dict) and "text" in b]
    return "\n".join(parts)


class ScriptedModel:
    """One scripted model server (see the module docstring)."""

    def __init__(
        self,
        shape: Shape,
        script: Iterable[Action] = (),
        default: Default = Answer(True, 1.0, "default"),
        *,
        api_key: str | None = None,
        sigv4: tuple[str, str, str] | None = None,
    ) -> None:
        self.shape = shape
        self.script: deque[Action] = deque(script)
        self.default = default
        self.api_key = api_key
        self.sigv4 = sigv4
        self.requests: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()

    @classmethod
    async def start(
        cls, shape: Shape = "openai", *, host: str = "127.0.0.1", **kwargs: Any
    ) -> ScriptedModel:
        """Serve on ``host`` (loopback, or an address of a test's own network namespace)."""
        server = cls(shape, **kwargs)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server._handle)
        app.router.add_post("/v1/messages", server._handle)
        app.router.add_post("/model/{model}/converse", server._handle)
        server._runner = web.AppRunner(app, access_log=None)
        await server._runner.setup()
        await web.TCPSite(server._runner, host, 0).start()
        port = server._runner.addresses[0][1]
        server.url = f"http://{host}:{port}" + ("/v1" if shape == "openai" else "")
        return server

    async def close(self) -> None:
        self._closing.set()  # slow answers end now, so shutdown never waits for them
        if self._runner is not None:
            await self._runner.cleanup()

    @classmethod
    @contextlib.asynccontextmanager
    async def serving(
        cls, shape: Shape = "openai", *, host: str = "127.0.0.1", **kwargs: Any
    ) -> AsyncIterator[ScriptedModel]:
        """The model served for the ``async with`` block, closed after it however it ends::

        async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "ok")) as model:
            ...
        """
        server = await cls.start(shape, host=host, **kwargs)
        try:
            yield server
        finally:
            await server.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(
            Seen(request.path_qs, dict(request.headers), body, raw, time.monotonic())
        )
        refused = self._refuse(request, raw)
        if refused is not None:
            return refused
        action: Any = self.script.popleft() if self.script else self.default
        if callable(action):
            action = action(body or {})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            while isinstance(action, Slow):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), action.seconds)
                action = action.then
            return self._render(action)
        finally:
            self.in_flight -= 1

    def _refuse(self, request: web.Request, raw: bytes) -> web.Response | None:
        if self.api_key is not None:
            presented = request.headers.get("x-api-key") or request.headers.get(
                "authorization", ""
            ).removeprefix("Bearer ")
            if presented != self.api_key:
                return self._render(Status(401, "invalid api key"))
        if self.sigv4 is not None and not sigv4_valid(request, raw, *self.sigv4):
            return self._render(Status(403, "The request signature we calculated does not match"))
        return None

    def _render(self, action: Action) -> web.Response:
        if isinstance(action, Status):
            headers = {"Retry-After": action.retry_after} if action.retry_after else {}
            body: Any = (
                {"message": action.message}
                if self.shape == "bedrock"
                else {"type": "error", "error": {"type": "scripted", "message": action.message}}
            )
            return web.json_response(body, status=action.code, headers=headers)
        if isinstance(action, Raw):
            return web.Response(text=action.body, content_type="application/json")
        render = {"openai": _openai, "anthropic": _anthropic, "bedrock": _bedrock}[self.shape]
        return web.json_response(render(action))


def _verdict(answer: Answer) -> dict[str, Any]:
    return {"passed": answer.passed, "score": answer.score, "reasoning": answer.reasoning}


def _openai(action: Action) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if isinstance(action, Answer):
        message["content"] = json.dumps(_verdict(action))
    elif isinstance(action, Text):
        message["content"] = action.text
    elif isinstance(action, Calls):
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(args))},
            }
            for i, (name, args) in enumerate(action.calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT},
    }


def _anthropic(action: Action) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if isinstance(action, Answer):
        content.append(
            {"type": "tool_use", "id": "toolu_v", "name": VERDICT_TOOL, "input": _verdict(action)}
        )
    elif isinstance(action, Text):
        content.append({"type": "text", "text": action.text})
    elif isinstance(action, Calls):
        content += [
            {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": dict(args)}
            for i, (name, args) in enumerate(action.calls)
        ]
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "tool_use" if isinstance(action, (Answer, Calls)) else "end_turn",
        "usage": {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT},
    }


def _bedrock(action: Action) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if isinstance(action, Answer):
        content.append(
            {"toolUse": {"toolUseId": "tu_v", "name": VERDICT_TOOL, "input": _verdict(action)}}
        )
    elif isinstance(action, Text):
        content.append({"text": action.text})
    elif isinstance(action, Calls):
        content += [
            {"toolUse": {"toolUseId": f"tu_{i}", "name": name, "input": dict(args)}}
            for i, (name, args) in enumerate(action.calls)
        ]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if isinstance(action, (Answer, Calls)) else "end_turn",
        "usage": {"inputTokens": USAGE_IN, "outputTokens": USAGE_OUT, "totalTokens": 120},
    }


AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)


def sigv4_valid(request: web.Request, raw: bytes, access: str, secret: str, region: str) -> bool:
    """Recompute the SigV4 signature of ``request`` with botocore and compare."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    match = AUTH_RE.match(request.headers.get("Authorization", ""))
    stamp = request.headers.get("X-Amz-Date", "")
    if not match or match["key"] != access or match["region"] != region:
        return False
    if match["service"] != "bedrock" or not stamp.startswith(match["date"]):
        return False
    signed = match["signature"]
    headers = {name: request.headers[name] for name in match["signed"].split(";")}
    url = f"http://{request.host}{request.raw_path}"
    rebuilt = AWSRequest(method=request.method, url=url, data=raw, headers=headers)
    rebuilt.context["timestamp"] = stamp
    auth = SigV4Auth(Credentials(access, secret), "bedrock", region)
    canonical = auth.canonical_request(rebuilt)
    expected = auth.signature(auth.string_to_sign(rebuilt, canonical), rebuilt)
    return bool(expected == signed)


def run_result(
    output: str = "The payment service cannot reach db-primary:5432.",
    *,
    run_id: str = "run-1",
    steps: Iterable[Mapping[str, Any]] = (),
) -> Any:
    """A RunResult as ``agent.run()`` would return it."""
    from agent_health.sdk.results import RunResult

    trajectory = list(steps) or [
        {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"service": "payment"}},
        {
            "type": "tool_result",
            "tool_name": "search_logs",
            "tool_output": {"lines": ["Connection refused to db-primary:5432"]},
            "status": "ok",
            "latency_ms": 12.5,
        },
        {"type": "assistant", "content": output},
    ]
    return RunResult(
        run_id=run_id, prompt="Diagnose the payment service", output=output, trajectory=trajectory
    )


def judge_request(
    subject: Any = None,
    criteria: str = "identifies the database outage",
    *,
    role: str = "gate",
    context: tuple[str, ...] = ("trajectory", "output"),
    tools: tuple[str, ...] = (),
    evaluator: str | None = None,
    model: str | None = None,
    repeat: int = 0,
    **options: Any,
) -> Any:
    """The JudgeRequest the SDK's ``judge()`` would hand to the backend."""
    from agent_health.sdk.context import JudgeRequest
    from agent_health.sdk.results import RunResult

    subject = run_result() if subject is None else subject
    return JudgeRequest(
        result=subject if isinstance(subject, RunResult) else None,
        text=subject if isinstance(subject, str) else None,
        criteria=criteria,
        role=role,  # type: ignore[arg-type]
        context=context,
        tools=tools,
        evaluator=evaluator,
        model=model,
        repeat=repeat,
        test_id="suite/test_x.py::x",
        options=options,
    )


FAST_RETRY = {"max_attempts": 3, "initial_wait": 0.001, "max_wait": 0.01, "max_time": 10.0}


def judge_config(server: ScriptedModel, cache_dir: Any = None, **fields: Any) -> Any:
    """A JudgeConfig pointed at ``server`` with tiny retry waits (and a private cache file)."""
    from agent_health.sdk.config import JudgeConfig

    values: dict[str, Any] = {
        "provider": server.shape,
        "model": "judge-model",
        "base_url": server.url,
        "retry": FAST_RETRY,
        "cache": cache_dir is not None,
    }
    if cache_dir is not None:
        values["cache_path"] = str(cache_dir / "judge.sqlite")
    values.update(fields)
    return JudgeConfig.model_validate(values)
