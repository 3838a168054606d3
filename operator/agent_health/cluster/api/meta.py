"""Shared pieces of the custom resources: API identity, field types, conditions, parsing.

Every model here is the single source of its CRD schema (see :mod:`.crds`): field
constraints become OpenAPI keywords, and rules that span fields are declared once as
CEL (``x-kubernetes-validations``) and mirrored by a pydantic validator with the same
message, so ``kubectl apply`` and the operator reject the same objects.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal, TypeVar

import pydantic
from pydantic import alias_generators

from agent_health.cluster import errors

# A container image reference as the distribution spec draws it: [host[:port]/]path[:tag][@digest].
# RE2-compatible (the API server's regex engine): no look-arounds, no back-references.
_HOST = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (
    rf"^(?:{_HOST}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
DIGEST_PATTERN = r"^sha256:[a-f0-9]{64}$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

Image = Annotated[str, pydantic.Field(pattern=IMAGE_PATTERN, max_length=512)]
DnsLabel = Annotated[str, pydantic.Field(pattern=DNS_LABEL_PATTERN, max_length=63)]
DnsSubdomain = Annotated[str, pydantic.Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]
Port = Annotated[int, pydantic.Field(ge=1, le=65535)]

PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """``x-kubernetes-validations`` for ``json_schema_extra``: (CEL rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


def list_map(*keys: str) -> dict[str, Any]:
    """Mark a list as a map keyed by ``keys`` (server-side apply merges items by key)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class Model(pydantic.BaseModel):
    """Base of every CRD model: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    def wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SecretKeyRef(Model):
    """One key of a Secret in the object's namespace."""

    name: DnsSubdomain
    key: Annotated[str, pydantic.Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class ConfigMapKeyRef(Model):
    """One key of a ConfigMap in the object's namespace."""

    name: DnsSubdomain
    key: Annotated[str, pydantic.Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class EnvVarSource(Model):
    """Where an environment variable's value comes from (exactly one source)."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=cel(
            (
                "has(self.secretKeyRef) != has(self.configMapKeyRef)",
                "valueFrom needs exactly one of secretKeyRef or configMapKeyRef",
            )
        )
    )

    secret_key_ref: SecretKeyRef | None = None
    config_map_key_ref: ConfigMapKeyRef | None = None

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("valueFrom needs exactly one of secretKeyRef or configMapKeyRef")
        return self


class EnvVar(Model):
    """An environment variable of a container: a literal ``value`` or a ``valueFrom`` reference."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=cel(
            ("!(has(self.value) && has(self.valueFrom))", "env: set value or valueFrom, not both")
        )
    )

    name: Annotated[str, pydantic.Field(pattern=ENV_NAME_PATTERN, max_length=256)]
    value: Annotated[str, pydantic.Field(max_length=32768)] | None = None
    value_from: EnvVarSource | None = None

    @pydantic.model_validator(mode="after")
    def _value_or_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("env: set value or valueFrom, not both")
        return self


EnvList = Annotated[list[EnvVar], pydantic.Field(max_length=64, json_schema_extra=list_map("name"))]
Resources = Annotated[
    dict[str, Any],
    pydantic.Field(
        description="Container resources (requests, limits), as in a Pod spec; what is left "
        "out comes from the operator's defaults, and limits may not exceed its cap.",
        json_schema_extra={PRESERVE_UNKNOWN: True},
    ),
]


class Condition(Model):
    """A metav1.Condition: the latest observation of one aspect of the object's state."""

    type: Annotated[str, pydantic.Field(pattern=CONDITION_TYPE_PATTERN, max_length=316)]
    status: Literal["True", "False", "Unknown"]
    observed_generation: Annotated[int, pydantic.Field(ge=0)] | None = None
    last_transition_time: datetime.datetime
    reason: Annotated[str, pydantic.Field(pattern=REASON_PATTERN, min_length=1, max_length=1024)]
    message: Annotated[str, pydantic.Field(max_length=32768)]


Conditions = Annotated[
    list[Condition], pydantic.Field(max_length=16, json_schema_extra=list_map("type"))
]

M = TypeVar("M", bound=pydantic.BaseModel)


def parse(model: type[M], body: Any, *, what: str) -> M:
    """Validate ``body`` as ``model``; a failure is one :class:`SpecError` line per bad field.

    ``what`` names the object for the message, e.g. ``"EvaluationRun default/nightly"``.
    """
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(object)'}: {e['msg']}" for e in err.errors()
        )
        raise errors.SpecError(f"{what} is invalid: {problems}") from err
