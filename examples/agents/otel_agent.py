"""A small triage agent that reports what it did only as OpenTelemetry spans.

It speaks the REST agent protocol v1 (``POST /run``) but answers with its ``output`` alone:
no trajectory, no token usage. What it did — one ``invoke_agent`` span, a ``chat`` span per
model turn with its ``gen_ai.usage.*`` tokens, an ``execute_tool`` span per tool call — it
exports with the OpenTelemetry SDK's OTLP/HTTP exporter to ``$OTEL_EXPORTER_OTLP_ENDPOINT``,
which agent-health sets for agents it starts (and a cell sets to its gateway). The spans are
children of the W3C ``traceparent`` the request carried, so they join that run's trace, and
the agent flushes them before it answers, so they are there when the test reads
``result.traces``. Without the variable it exports nothing.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python otel_agent.py --port 8080
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re

import triage_agent
from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

PROVIDER = web.AppKey("provider", TracerProvider)
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
MODEL = "triage-rules-1"
OPERATION = "gen_ai.operation.name"


def provider() -> TracerProvider:
    """A tracer provider exporting over OTLP/HTTP when ``$OTEL_EXPORTER_OTLP_ENDPOINT`` is set
    (the exporter reads it, and posts to its ``/v1/traces``)."""
    made = TracerProvider(resource=Resource.create({"service.name": "otel-triage"}))
    if os.environ.get(ENDPOINT_ENV):
        made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return made


def _chat(tracer: trace.Tracer, prompt: str, answer: str) -> None:
    """One model turn, as the GenAI semantic conventions name it (tokens: words here)."""
    with tracer.start_as_current_span(f"chat {MODEL}") as span:
        span.set_attribute(OPERATION, "chat")
        span.set_attribute("gen_ai.request.model", MODEL)
        span.set_attribute("gen_ai.usage.input_tokens", len(prompt.split()))
        span.set_attribute("gen_ai.usage.output_tokens", len(answer.split()))


def _tool(tracer: trace.Tracer, name: str, args: dict[str, str], found: object) -> None:
    with tracer.start_as_current_span(f"execute_tool {name}") as span:
        span.set_attribute(OPERATION, "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(args))
        span.set_attribute("gen_ai.tool.call.result", json.dumps(found))


def triage(tracer: trace.Tracer, prompt: str) -> str:
    """Diagnose from the bundled incident data: a model turn before each tool call and one
    for the answer, each a span."""
    lowered = prompt.lower()
    service = next((s for s in triage_agent.SERVICES if s in lowered), None)
    if service is None:
        answer = "I could not tell which service you mean."
        _chat(tracer, prompt, answer)
        return answer
    _chat(tracer, prompt, f"search the logs of {service}")
    lines = [e["message"] for e in triage_agent.LOGS[service] if e["level"] == "error"]
    _tool(tracer, "search_logs", {"service": service, "level": "error"}, lines)
    cause = "shows no errors"
    for pattern, template in triage_agent.DIAGNOSES:
        match = next((m for line in lines if (m := re.search(pattern, line))), None)
        if match:
            cause = template.format(*match.groups())
            if match.groups():
                _chat(tracer, " ".join(lines), f"check the status of {match.group(1)}")
                status = triage_agent.STATUS.get(match.group(1), "unknown")
                _tool(tracer, "service_status", {"name": match.group(1)}, {"status": status})
                cause += f" (status: {status})"
            break
    answer = f"Root cause: the {service}-service {cause}."
    _chat(tracer, " ".join(lines), answer)
    return answer


async def run(request: web.Request) -> web.Response:
    body = await request.json()
    made = request.app[PROVIDER]
    tracer = made.get_tracer("otel-triage")
    parent = propagate.extract(dict(request.headers))  # the run's W3C traceparent
    with tracer.start_as_current_span("invoke_agent otel-triage", context=parent) as root:
        root.set_attribute(OPERATION, "invoke_agent")
        root.set_attribute("gen_ai.agent.name", "otel-triage")
        root.set_attribute("agent_health.run_id", str(body.get("run_id", "")))
        output = triage(tracer, str(body.get("prompt", "")))
    # Flushing exports over HTTP and blocks: off the event loop, before the answer.
    await asyncio.to_thread(made.force_flush)
    return web.json_response({"output": output})


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def app(made: TracerProvider | None = None) -> web.Application:
    served = web.Application()
    served[PROVIDER] = made or provider()
    served.router.add_post("/run", run)
    served.router.add_get("/healthz", healthz)

    async def shutdown(application: web.Application) -> None:
        await asyncio.to_thread(application[PROVIDER].shutdown)

    served.on_cleanup.append(shutdown)
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    web.run_app(app(), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
