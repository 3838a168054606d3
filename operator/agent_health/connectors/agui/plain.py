"""Which AG-UI events are *plain*: ones the ``ag-ui-protocol`` models take exactly as they are,
so the fold can read them without running the models' validation.

Validating an event through the package's discriminated union costs about as much as the
rest of folding it, and a stream is mostly small events of a few strings
(``TEXT_MESSAGE_CONTENT``: a ``messageId`` and a ``delta``). For the event types folded most,
the fields are read once from the package's own models (aliases, annotations, bounds); an
event is plain when each key is either a declared field whose value that field keeps
unchanged (a ``str`` for a ``str``, an ``int`` within its bounds, one of a ``Literal``'s
values, anything for ``Any``) or an extra key (the models keep extras as they are), and no
required field is missing. Anything else (a field spelt by its Python name, a float for an
int, a nested model) goes through the package's validation as before, so what is accepted,
what is refused and the message saying why do not change.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import annotated_types
import pydantic
from ag_ui import core
from pydantic.fields import FieldInfo

Check = Callable[[Any], bool]
"""Whether a field keeps a value exactly as it is (no coercion, no error)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """The plain form of one event type: a check per wire key, the required keys, and the
    Python names that also populate a field (``populate_by_name``)."""

    checks: Mapping[str, Check]
    required: frozenset[str]
    names: frozenset[str]
    texts: frozenset[str] | None = None
    """The required keys (and ``type``) when every required field is a string: an event of
    exactly these keys with string values, the usual event, is plain at a glance."""

    def plain(self, raw: dict[str, Any]) -> bool:
        """Whether the model would take ``raw`` as it is."""
        if raw.keys() == self.texts:
            for key in self.required:  # noqa: SIM110 - all() builds a generator per event
                if type(raw[key]) is not str:
                    return False
            return True
        checks = self.checks
        for key, value in raw.items():
            check = checks.get(key)
            if check is None:
                if key in self.names:
                    return False  # the field by its Python name: leave it to the model
            elif not check(value):
                return False
        return self.required <= raw.keys()


MODELS: Mapping[str, type[pydantic.BaseModel]] = {
    "RUN_STARTED": core.RunStartedEvent,
    "RUN_FINISHED": core.RunFinishedEvent,
    "TEXT_MESSAGE_START": core.TextMessageStartEvent,
    "TEXT_MESSAGE_CONTENT": core.TextMessageContentEvent,
    "TEXT_MESSAGE_END": core.TextMessageEndEvent,
    "TOOL_CALL_START": core.ToolCallStartEvent,
    "TOOL_CALL_ARGS": core.ToolCallArgsEvent,
    "TOOL_CALL_END": core.ToolCallEndEvent,
    "REASONING_MESSAGE_START": core.ReasoningMessageStartEvent,
    "REASONING_MESSAGE_CONTENT": core.ReasoningMessageContentEvent,
    "REASONING_MESSAGE_END": core.ReasoningMessageEndEvent,
}
"""The event types the fold reads most, by their wire ``type``."""


def shapes() -> dict[str, Shape]:
    """The plain shapes of :data:`MODELS` (a type whose model does more than check types,
    say a validator, has none and is always validated)."""
    found = {kind: shape(model) for kind, model in MODELS.items()}
    return {kind: s for kind, s in found.items() if s is not None}


def shape(model: type[pydantic.BaseModel]) -> Shape | None:
    """``model``'s plain shape, or None when it has validators or refuses extra keys."""
    decorators = model.__pydantic_decorators__
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
        or model.model_config.get("extra") != "allow"
    ):
        return None
    checks: dict[str, Check] = {}
    required: set[str] = set()
    names: set[str] = set()
    all_text = True  # every required field is a plain string
    for name, info in model.model_fields.items():
        alias = info.validation_alias or info.alias or name
        if not isinstance(alias, str):
            return None  # AliasChoices / AliasPath: more than one spelling
        names.add(name)
        check = _check(info)
        if check is None:
            if info.is_required():
                return None
            check = _never  # a value for this field is the model's to read
        checks[alias] = check
        if info.is_required():
            required.add(alias)
            all_text = all_text and info.annotation is str and not info.metadata
    texts = frozenset({*required, "type"}) if all_text and "type" in checks else None
    return Shape(checks, frozenset(required), frozenset(names - checks.keys()), texts)


def _check(info: FieldInfo) -> Check | None:
    annotation = info.annotation
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        rest = [m for m in members if m is not type(None)]
        if len(rest) != 1 or len(members) != 2:
            return None
        annotation, optional = rest[0], True
    if annotation is Any:
        return _always
    base = _base_check(annotation, info.metadata)
    if base is None or not optional:
        return base
    return lambda value: value is None or base(value)


def _base_check(annotation: Any, metadata: list[Any]) -> Check | None:
    if annotation is int:
        low, high = -(2**63), 2**63
        for item in metadata:
            if isinstance(item, annotated_types.Ge) and isinstance(item.ge, int):
                low = max(low, item.ge)
            elif isinstance(item, annotated_types.Le) and isinstance(item.le, int):
                high = min(high, item.le)
            else:
                return None
        return lambda value: type(value) is int and low <= value <= high
    if metadata:
        return None
    if annotation is str:
        return lambda value: type(value) is str
    if typing.get_origin(annotation) is typing.Literal:
        values = [v.value if isinstance(v, enum.Enum) else v for v in typing.get_args(annotation)]
        if not all(isinstance(v, str) for v in values):
            return None
        allowed = frozenset(values)
        return lambda value: type(value) is str and value in allowed
    if annotation in (dict[str, Any], typing.Dict[str, Any]):  # noqa: UP006
        return lambda value: type(value) is dict  # JSON object keys are strings
    return None


def _always(value: Any) -> bool:
    return True


def _never(value: Any) -> bool:
    return False
