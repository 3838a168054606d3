"""Where a run's spans go: ``--otlp URL``, the standard ``OTEL_EXPORTER_OTLP_*`` variables, or
``otlp={...}`` in ``agent-health.config.py`` — in that order of precedence.

Example::

    define_config(otlp={
        "endpoint": "http://otel-collector:4318",   # the base URL; /v1/traces is added
        "headers_env": "HONEYCOMB_OTLP_HEADERS",    # a variable holding "k=v,k2=v2"
        "capture_content": False,                   # what the agent said: opt-in
    })

Secrets never live in the file: headers come from ``OTEL_EXPORTER_OTLP_HEADERS`` (or
``_TRACES_HEADERS``) or from the variable ``headers_env`` names. Nothing here imports
OpenTelemetry.
"""

import os
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from agent_health import timeouts

Protocol = Literal["http/protobuf", "http/json"]
PROTOCOLS: tuple[Protocol, ...] = ("http/protobuf", "http/json")
Compression = Literal["none", "gzip"]
COMPRESSIONS: tuple[Compression, ...] = ("none", "gzip")
TRACES_PATH = "v1/traces"
DEFAULT_TIMEOUT = 10.0
DEFAULT_QUEUE = 8192
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class SettingsError(ValueError):
    """An OTLP setting that cannot be used; the message names it and says what to do."""


class OtlpConfig(BaseModel):
    """``otlp={...}`` of ``define_config``."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    endpoint: str | None = Field(
        default=None, description="base URL of an OTLP/HTTP receiver (…:4318); /v1/traces is added"
    )
    traces_endpoint: str | None = Field(default=None, description="the full URL, used as given")
    headers_env: str | None = Field(
        default=None, description='a variable holding export headers, "k=v,k2=v2" (URL-encoded)'
    )
    protocol: Protocol = "http/protobuf"
    compression: Compression = Field(default="none", description="gzip: compress each request")
    timeout: timeouts.Seconds = Field(default=DEFAULT_TIMEOUT, description="seconds per export")
    capture_content: bool = Field(
        default=False,
        description="put content on the spans: tool call arguments and results, checks' "
        "evidence, the judge's reasoning, error texts",
    )
    max_queue: int = Field(
        default=DEFAULT_QUEUE, ge=1, description="ended tests waiting to be exported at most"
    )
    service_name: str = "agent-health"


# A named tuple's defaults are shared by every instance: an empty mapping no one can change.
_NONE: Mapping[str, str] = MappingProxyType({})


class Settings(NamedTuple):
    """Export resolved: where, with which headers, and what to capture."""

    endpoint: str
    headers: Mapping[str, str] = _NONE
    protocol: Protocol = "http/protobuf"
    compression: Compression = "none"
    timeout: float = DEFAULT_TIMEOUT
    capture_content: bool = False
    max_queue: int = DEFAULT_QUEUE
    service_name: str = "agent-health"
    resource: Mapping[str, str] = _NONE
    """``OTEL_RESOURCE_ATTRIBUTES``: the resource's attributes beside ``service.name``."""


def traces_url(base: str) -> str:
    """The signal URL of a base endpoint, as the OTLP exporter spec builds it: ``/v1/traces``
    appended, unless the URL already ends with it."""
    if base.rstrip("/").endswith("/" + TRACES_PATH):
        return base
    return base.rstrip("/") + "/" + TRACES_PATH


def parse_headers(text: str, where: str) -> dict[str, str]:
    """``k=v,k2=v2`` (values URL-encoded), the format of ``OTEL_EXPORTER_OTLP_HEADERS``."""
    headers: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise SettingsError(
                f"{where}: {part.strip()!r} is not key=value (the format is k=v,k2=v2, values "
                "URL-encoded)"
            )
        headers[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return headers


def _check_url(url: str, where: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(
            f"{where}: {url!r} is not an http(s) URL of an OTLP/HTTP receiver, e.g. "
            "http://127.0.0.1:4318"
        )
    return url


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def resolve(
    flag: str | None,
    config: OtlpConfig | None,
    environ: Mapping[str, str] | None = None,
    *,
    capture_content: bool = False,
) -> Settings | None:
    """The export settings, or ``None`` when nothing asks for export.

    ``flag`` (``--otlp URL``) wins over ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as
    given), then ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` added), then the config.
    ``OTEL_SDK_DISABLED=true`` turns export off unless ``--otlp`` asks for it.
    """
    env = os.environ if environ is None else environ
    cfg = config or OtlpConfig.model_construct()  # the defaults, without building a validator
    endpoint: str | None = None
    if flag:
        endpoint = traces_url(_check_url(flag, "--otlp"))
    elif _truthy(env.get("OTEL_SDK_DISABLED")):
        return None
    elif env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        endpoint = _check_url(
            env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = traces_url(
            _check_url(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "OTEL_EXPORTER_OTLP_ENDPOINT")
        )
    elif cfg.traces_endpoint:
        endpoint = _check_url(cfg.traces_endpoint, "agent-health.config.py otlp.traces_endpoint")
    elif cfg.endpoint:
        endpoint = traces_url(_check_url(cfg.endpoint, "agent-health.config.py otlp.endpoint"))
    if endpoint is None:
        return None
    protocol = _traces_variable(env, "PROTOCOL") or cfg.protocol
    if protocol not in PROTOCOLS:
        raise SettingsError(
            f"OTLP protocol {protocol!r} is not supported: agent-health exports OTLP/HTTP "
            "(http/protobuf or http/json); set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and "
            "point the endpoint at the receiver's HTTP port (4318 by default)"
        )
    compression = _traces_variable(env, "COMPRESSION") or cfg.compression
    if compression not in COMPRESSIONS:
        raise SettingsError(
            f"OTLP compression {compression!r} is not supported: set "
            "OTEL_EXPORTER_OTLP_COMPRESSION to gzip or none"
        )
    headers: dict[str, str] = {}
    if cfg.headers_env:
        if cfg.headers_env not in env:
            raise SettingsError(
                f"agent-health.config.py otlp.headers_env names ${cfg.headers_env}, which is not "
                "set; export it (k=v,k2=v2) or remove headers_env"
            )
        headers.update(parse_headers(env[cfg.headers_env], f"${cfg.headers_env}"))
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        if env.get(name):
            headers.update(parse_headers(env[name], name))
    timeout = cfg.timeout
    for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        if env.get(name):
            try:
                timeout = float(env[name]) / 1000  # the spec's unit: milliseconds
            except ValueError as err:
                raise SettingsError(f"{name}={env[name]!r} is not a number of ms") from err
            wrong = timeouts.problem(timeout)
            if wrong is not None:
                raise SettingsError(
                    f"{name}={env[name]!r}: in seconds it {wrong}; give a number of ms"
                )
    resource: dict[str, str] = {}
    if env.get("OTEL_RESOURCE_ATTRIBUTES"):
        resource = parse_headers(env["OTEL_RESOURCE_ATTRIBUTES"], "OTEL_RESOURCE_ATTRIBUTES")
    return Settings(
        endpoint=endpoint,
        headers=headers,
        protocol=protocol,
        compression=compression,
        timeout=timeout,
        capture_content=(
            capture_content or cfg.capture_content or _truthy(env.get(CONTENT_VARIABLE))
        ),
        max_queue=cfg.max_queue,
        service_name=(
            env.get("OTEL_SERVICE_NAME") or resource.pop("service.name", "") or cfg.service_name
        ),
        resource=resource,
    )


def _traces_variable(env: Mapping[str, str], name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>`` (the signal's
    own variable wins, as the specification says)."""
    return env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}")
