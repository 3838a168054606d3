"""The wire models every connector speaks: the REST agent protocol v1 (docs/agent-protocol.md).

Other connectors (AG-UI, OpenAI-compatible, subprocess) translate their protocol into
these same models, so the rest of the harness sees one shape of trajectory.
"""

import base64
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_health.connectors import readonly

StepType = Literal["tool_call", "tool_result", "assistant", "thinking", "user"]


class Step(readonly.ReadOnlyModel):
    """One step of an agent's trajectory; read-only all the way down (its arguments and
    output too: see :mod:`~agent_health.connectors.readonly`)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    type: StepType
    content: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_output: Any = None
    status: Literal["ok", "error"] | None = None
    latency_ms: float | None = None

    @model_validator(mode="after")
    def _read_only(self) -> "Step":
        # One validator for the three mutable parts: it runs for every step of every run.
        fields = self.__dict__
        if fields["tool_args"] is not None:
            fields["tool_args"] = readonly.freeze(fields["tool_args"])
        if fields["tool_output"] is not None:
            fields["tool_output"] = readonly.freeze(fields["tool_output"])
        extra = self.__pydantic_extra__
        if extra:
            object.__setattr__(self, "__pydantic_extra__", readonly.freeze(extra))
        return self

    @property
    def failed(self) -> bool:
        """Whether this tool result is an error: its ``status`` says so, or its output is an
        MCP tool result (``CallToolResult``) that says ``isError`` — an MCP server's answer
        the agent passed on as it came, whatever status it gave the step."""
        if self.status == "error":
            return True
        output = self.tool_output
        return isinstance(output, Mapping) and output.get("isError") is True

    @property
    def server(self) -> str | None:
        """The MCP server the step's tool came from, when the agent says (an extra
        ``server`` field: ``time`` or ``peer:time``); ``None`` when it does not."""
        extra = self.__pydantic_extra__
        value = extra.get("server") if extra else None
        return value if isinstance(value, str) else None

    @property
    def turn(self) -> int | None:
        """The turn of a conversation this step was taken in (``None`` in a single run)."""
        extra = self.__pydantic_extra__
        value = extra.get("turn") if extra else None
        return value if type(value) is int else None


class TokenUsage(readonly.ReadOnlyModel):
    """Token counts reported by the agent (or summed from its LLM calls).

    A count the agent did not report is ``None``, never ``0``: ``TokenUsage()`` means "no
    usage reported", and a gate on tokens then fails saying so instead of passing on a zero.
    ``total`` is the sum when only ``prompt`` and ``completion`` were reported.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    prompt: int | None = Field(default=None, ge=0)
    completion: int | None = Field(default=None, ge=0)
    total: int | None = Field(default=None, ge=0)

    def model_post_init(self, __context: Any) -> None:
        prompt, completion = self.prompt, self.completion
        if self.total is None and prompt is not None and completion is not None:
            object.__setattr__(self, "total", prompt + completion)
        elif self.total == 0 and (prompt or completion):
            object.__setattr__(self, "total", (prompt or 0) + (completion or 0))

    @property
    def reported(self) -> bool:
        """Whether the agent reported any count at all."""
        return self.total is not None or self.prompt is not None or self.completion is not None

    @classmethod
    def from_counts(cls, value: Any) -> "TokenUsage | None":
        """Read token counts in any of the usual spellings, or ``None`` when there are none.

        Accepts this protocol's ``prompt``/``completion``/``total``, OpenAI's
        ``prompt_tokens``/``completion_tokens``/``total_tokens`` and AG-UI's
        ``inputTokens``/``outputTokens``/``totalTokens`` (or their snake_case forms).
        """
        if not isinstance(value, dict):
            return None
        counts = {}
        for field, names in _COUNT_NAMES.items():
            found = next((value[n] for n in names if isinstance(value.get(n), int)), None)
            if found is not None and found >= 0:
                counts[field] = found
        return cls(**counts) if counts else None


_COUNT_NAMES = {
    "prompt": ("prompt", "prompt_tokens", "input_tokens", "inputTokens"),
    "completion": ("completion", "completion_tokens", "output_tokens", "outputTokens"),
    "total": ("total", "total_tokens", "totalTokens"),
}


class ModelUsage(TokenUsage):
    """Token counts spent on one model: a part of a run's :class:`TokenUsage` when the agent
    used several (``model`` ``None``: one it did not name). Each part is priced at its own
    model's price."""

    model: str | None = None


def added(parts: Iterable[TokenUsage]) -> TokenUsage:
    """The sum of ``parts``; a count is unknown (``None``) when any part left it out."""
    prompt: int | None = 0
    completion: int | None = 0
    total: int | None = 0
    for part in parts:
        prompt = None if prompt is None or part.prompt is None else prompt + part.prompt
        completion = (
            None if completion is None or part.completion is None else completion + part.completion
        )
        total = None if total is None or part.total is None else total + part.total
    return TokenUsage(prompt=prompt, completion=completion, total=total)


def by_model(parts: Iterable[ModelUsage]) -> tuple[ModelUsage, ...]:
    """``parts`` added up per model, in the order each model first appears; parts that
    report no count are left out."""
    grouped: dict[str | None, list[ModelUsage]] = {}
    for part in parts:
        if part.reported:
            grouped.setdefault(part.model, []).append(part)
    return tuple(
        ModelUsage(model=model, **added(same).model_dump()) for model, same in grouped.items()
    )


class ContextItem(readonly.ReadOnlyModel):
    """A piece of context handed to the agent with the prompt."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    description: str
    value: str


class FileItem(BaseModel):
    """A file ``agent.run(files=...)`` provisions for the run: a relative path and its bytes.

    Text travels as is (``encoding: "utf-8"``); bytes as base64 (``encoding: "base64"``).
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"

    def data(self) -> bytes:
        """The file's bytes."""
        if self.encoding == "base64":
            return base64.b64decode(self.content)
        return self.content.encode("utf-8")


class ToolDefinition(BaseModel):
    """A tool the client offers the agent (``agent.run(tools=...)``, a case's ``tools``): the
    AG-UI / CopilotKit shape, which each connector sends in its own protocol's form."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Message(BaseModel):
    """One message of a conversation so far: what the user said, what the agent answered."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    content: str


_OPTIONAL = ("files", "provisioned", "tools", "messages")
_NOTHING_GIVEN = frozenset((*_OPTIONAL, "turn"))


class AgentRequest(BaseModel):
    """What ``agent.run()`` sends (the body of a REST v1 request).

    ``files`` and ``provisioned`` (structured provisioning, next to the string-only ``env``)
    and ``tools`` (tool definitions offered to the agent) are on the wire only when the test
    gave them (:meth:`wire`), so an agent that never uses them sees the same body as before
    they existed.

    In a conversation (``agent.run(turns=...)`` or ``user=...``) every turn is one request:
    ``prompt`` is this turn's user message, ``messages`` the conversation before it (user
    and assistant messages, oldest first) and ``turn`` its number from 1; both are on the
    wire from the second turn on. ``conversation`` says, from the first turn on, that more
    turns may follow (a subprocess agent then keeps reading its stdin).
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    prompt: str
    context: tuple[ContextItem, ...] = ()
    run_id: str
    env: dict[str, str] = Field(default_factory=dict)
    files: tuple[FileItem, ...] = ()
    provisioned: dict[str, Any] = Field(default_factory=dict)
    tools: tuple[ToolDefinition, ...] = ()
    messages: tuple[Message, ...] = ()
    turn: int = Field(default=1, ge=1)
    traceparent: str | None = Field(default=None, exclude=True)
    tracestate: str | None = Field(default=None, exclude=True)
    timeout_s: float | None = Field(default=None, exclude=True)
    conversation: bool = Field(default=False, exclude=True)

    def wire(self) -> dict[str, Any]:
        """The REST v1 body as JSON data: ``files`` / ``provisioned`` / ``tools`` /
        ``messages`` and ``turn`` only when given."""
        return self.model_dump(mode="json", exclude=self._unset())

    def wire_json(self) -> str:
        """:meth:`wire` as a JSON string."""
        return self.model_dump_json(exclude=self._unset())

    def wire_bytes(self) -> bytes:
        """:meth:`wire_json` encoded, straight from the serializer (once per agent call: the
        ``model_dump_json`` wrapper and the str round trip cost twice the serializing)."""
        given = self.files or self.provisioned or self.tools or self.messages
        unset = self._unset() if given else _NOTHING_GIVEN
        # The serializer takes any set; its stub names only the mutable kind.
        return self.__pydantic_serializer__.to_json(self, exclude=cast("set[str]", unset))

    def _unset(self) -> set[str]:
        unset = {name for name in _OPTIONAL if not getattr(self, name)}
        if not self.messages:
            unset.add("turn")  # the first turn of a conversation is a single run's body
        return unset

    def history(self) -> list[dict[str, str]]:
        """The conversation before this turn as ``[{"role", "content"}]``."""
        return [{"role": m.role, "content": m.content} for m in self.messages]

    def tool_list(self) -> list[dict[str, Any]]:
        """The offered tools as JSON data: ``[{"name", "description", "parameters"}]``."""
        return [t.model_dump(mode="json") for t in self.tools]

    def provisioning(self) -> dict[str, Any]:
        """What a connector without a body of its own forwards: ``provisioned`` and
        ``files`` (as JSON data), each only when given."""
        if not self.files and not self.provisioned:
            return {}  # the usual case, without the serializer (once per agent call)
        return self.model_dump(mode="json", include={"provisioned", "files"} - self._unset())


class AgentReply(BaseModel):
    """What the agent answers (the body of a REST v1 response). ``output`` is required: a
    reply without it is not an empty answer but a broken one (the test errors, cause agent).
    A reply without ``trajectory`` or ``token_usage`` did not report them (see
    :attr:`unreported`): that is not an empty trajectory or zero tokens.

    ``model`` (an extra field) names the model the tokens were spent on; ``usage_by_model``
    splits them between several, and must add up to ``token_usage`` (which it gives when
    the reply has no ``token_usage``)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    output: str
    trajectory: tuple[Step, ...] = ()
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    usage_by_model: tuple[ModelUsage, ...] = ()

    @model_validator(mode="after")
    def _parts_add_up(self) -> "AgentReply":
        if not self.usage_by_model:
            return self
        whole, given = added(self.usage_by_model), self.token_usage
        if not given.reported:
            self.__dict__["token_usage"] = whole
            return self
        for count in ("prompt", "completion", "total"):
            part, stated = getattr(whole, count), getattr(given, count)
            if part is not None and stated is not None and part != stated:
                raise ValueError(
                    f"usage_by_model adds up to {part} {count} tokens; token_usage.{count} "
                    f"is {stated}"
                )
        return self

    @property
    def parts_by_model(self) -> tuple[ModelUsage, ...]:
        """The token usage per model: ``usage_by_model``, else the whole usage on the model
        the reply names (``None`` when it names none)."""
        if self.usage_by_model:
            return self.usage_by_model
        named = (self.model_extra or {}).get("model")
        model = named if isinstance(named, str) and named else None
        return (ModelUsage(model=model, **self.token_usage.model_dump()),)

    def extra_fields(self) -> dict[str, Any]:
        """What ``RunResult.raw`` keeps: the fields beyond the protocol's, and
        ``usage_by_model`` (as JSON data) when the reply gave it."""
        extra = self.model_extra or {}
        if not self.usage_by_model:
            return extra
        return {**extra, "usage_by_model": usage_json(self.usage_by_model)}

    @property
    def unreported(self) -> frozenset[str]:
        """The protocol's optional fields the agent left out: ``trajectory``, ``token_usage``."""
        missing = {"trajectory"} - self.model_fields_set
        if not self.token_usage.reported:
            missing.add("token_usage")
        return frozenset(missing)


def usage_json(parts: Iterable[ModelUsage]) -> list[dict[str, Any]]:
    """``usage_by_model`` as ``RunResult.raw`` and the ledger keep it (JSON data)."""
    return [{"model": u.model, **u.model_dump(exclude_none=True, exclude={"model"})} for u in parts]
