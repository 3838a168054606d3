"""An agent served behind an OpenAI-compatible chat-completions endpoint.

The prompt goes as one user message (the context items as a system message before it) to
``<url>/chat/completions`` (or to ``url`` itself when it already ends so); the model name is
``spec.options["model"]``. The answer becomes an :class:`AgentReply`:

* the tool calls of ``choices[0].message.tool_calls`` are ``tool_call`` steps;
* an agent that ran a tool loop may also return the messages of that loop, either as a
  top-level ``messages`` list or as ``choices[0].message.messages``: their assistant tool
  calls and ``role: "tool"`` results become ``tool_call`` / ``tool_result`` steps, in order;
* ``reasoning_content`` (vLLM, DeepSeek) is a ``thinking`` step, the final content is the
  output (and an ``assistant`` step), ``usage`` gives the token counts and the answer's
  ``model`` the model they were spent on (the one that answered, which may not be the one
  asked for).

``spec.options`` may also give ``api_key_env`` (an environment variable holding a bearer
token; never the key itself) and ``extra_body`` (merged into the request body).
``agent.run(env=...)`` travels as the request's ``metadata``; ``provisioned=`` and ``files=``
as top-level ``provisioned`` / ``files`` fields of the body, only when given; ``tools=`` (a
case's ``tools``) as chat-completions ``tools`` (``{"type": "function", "function": ...}``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pydantic_core

from agent_health.connectors import errors, wire
from agent_health.connectors import transport as http
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest, Step, TokenUsage


def endpoint(url: str) -> str:
    """Where an OpenAI-compatible agent given by ``url`` is called: ``URL/chat/completions``,
    or ``URL`` itself when it already ends so."""
    base = url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


class OpenAIChatConnector:
    """POSTs a chat-completions request and reads the agent's tool calls and answer; a
    conversation sends the growing ``messages``, as a chat client does."""

    holds_conversations = True

    def __init__(
        self,
        spec: ConnectorSpec,
        *,
        transport: http.Transport | None = None,
        observe: wire.Observer | None = None,
    ) -> None:
        self.url = endpoint(wire.require_url(spec, "openai"))
        self.spec = spec
        self.model = str(spec.options.get("model", "agent"))
        key_env = spec.options.get("api_key_env")
        self._auth: dict[str, str] = {}
        if key_env:
            key = os.environ.get(str(key_env))
            if not key:
                raise errors.ConnectorConfigError(
                    f"the openai connector reads its API key from ${key_env}, which is not set"
                )
            self._auth = {"authorization": f"Bearer {key}"}
        self._http = wire.Http(spec, transport, observe)

    def body(self, request: AgentRequest) -> dict[str, Any]:
        """The chat-completions request body for ``request``."""
        messages: list[dict[str, Any]] = []
        if request.context:
            lines = "\n".join(f"- {c.description}: {c.value}" for c in request.context)
            messages.append({"role": "system", "content": f"Context:\n{lines}"})
        messages.extend(request.history())
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.env:  # chat-completions metadata is a map of strings, as env is
            body["metadata"] = dict(request.env)
        # Structured values do not fit metadata (strings only): top-level fields, for the
        # agent behind the endpoint to read. Only when given: OpenAI's own API refuses them.
        body.update(request.provisioning())
        if request.tools:
            body["tools"] = [{"type": "function", "function": t} for t in request.tool_list()]
        return {**body, **self.spec.options.get("extra_body", {})}

    async def run(self, request: AgentRequest) -> AgentReply:
        # Compact UTF-8, 5x json.dumps' speed; a NaN (a tool's schema) is written null.
        body = pydantic_core.to_json(self.body(request), inf_nan_mode="null")
        headers = {"content-type": "application/json", **self._auth}
        timeout = wire.timeout_of(request, self.spec)
        received = http.Received()  # what came, should the agent stop halfway
        status, data = await self._http.call(
            request, self.url, body, headers, timeout, received.read, received.partial
        )
        wire.ensure_success(status, data, self.url)
        return self.reply(wire.json_body(data, self.url))

    def reply(self, body: Any) -> AgentReply:
        """Turn a chat-completions answer into an :class:`AgentReply` (raises on bad shape)."""
        if isinstance(body, dict) and isinstance(body.get("error"), dict | str):
            error = body["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise errors.AgentRunFailed(f"agent at {self.url} answered an error: {message}")
        try:
            message = body["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (KeyError, IndexError, TypeError) as err:
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered JSON without choices[0].message: "
                f"{wire.snippet(json.dumps(body))}"
            ) from err
        transcript = body.get("messages") or message.get("messages") or []
        steps = _Steps(self.url)
        final_calls = message.get("tool_calls") or []
        pending = {c.get("id"): c for c in final_calls if isinstance(c, dict)}
        for item in transcript:
            steps.message(item, pending)
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            steps.add(Step(type="thinking", content=reasoning))
        for call in final_calls:
            steps.call(call)
        content = _text(message.get("content"))
        if content:
            steps.add(Step(type="assistant", content=content))
        usage = TokenUsage.from_counts(body.get("usage")) or TokenUsage()
        fields = {
            "output": content,
            "trajectory": steps.steps,
            "token_usage": usage,
            "response": body,  # the whole answer, as RunResult.raw["response"]
        }
        model = body.get("model")
        if isinstance(model, str) and model:
            fields["model"] = model  # what prices the tokens (RunResult.raw["model"])
        return AgentReply.model_validate(fields)

    async def aclose(self) -> None:
        await self._http.aclose()


class _Steps:
    """Collects steps, emitting each tool call once even when both the transcript and the
    final message name it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.steps: list[Step] = []
        self._seen: set[str] = set()
        self._names: dict[str, str] = {}

    def add(self, step: Step) -> None:
        self.steps.append(step)

    def call(self, call: Any) -> None:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered a tool call without a function: {call!r:.120}"
            )
        cid = str(call.get("id") or f"call-{len(self.steps)}")
        if cid in self._seen:
            return
        self._seen.add(cid)
        function = call["function"]
        name = str(function.get("name", ""))
        self._names[cid] = name
        self.add(
            Step.model_validate(
                {
                    "type": "tool_call",
                    "tool_name": name,
                    "tool_args": _arguments(function.get("arguments")),
                    "tool_call_id": cid,
                }
            )
        )

    def message(self, item: Any, pending: dict[Any, Any]) -> None:
        if not isinstance(item, dict):
            return
        role = item.get("role")
        if role == "assistant":
            for call in item.get("tool_calls") or []:
                self.call(call)
            if _text(item.get("content")):
                self.add(Step(type="assistant", content=_text(item.get("content"))))
        elif role == "tool":
            cid = str(item.get("tool_call_id", ""))
            if cid in pending:  # the final message names the call; place it before its result
                self.call(pending[cid])
            self.add(
                Step.model_validate(
                    {
                        "type": "tool_result",
                        "tool_name": item.get("name") or self._names.get(cid),
                        "tool_output": _output(item.get("content")),
                        "status": "error" if item.get("is_error") or item.get("error") else "ok",
                        "tool_call_id": cid,
                    }
                )
            )


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.strip():
        return {}
    try:
        parsed = wire.parse_json(value)
    except ValueError:  # not JSON, or not JSON we could record (NaN): kept as sent
        return {"_raw": value}  # what the model sent, so a matcher can show it
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _output(content: Any) -> Any:
    text = _text(content)
    try:
        return wire.parse_json(text)
    except ValueError:
        return text
