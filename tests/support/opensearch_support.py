"""A loopback stand-in for OpenSearch: recorded-shape ``_search`` replies on 127.0.0.1.

There is no OpenSearch server on these machines: the real opensearch-py ``AsyncOpenSearch``
client talks HTTP to an aiohttp server that records each query and answers with documents
in the shape Data Prepper indexes OTel spans (``otel-v1-apm-span-*``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from agent_health.sdk import tracesconfig
from aiohttp import web

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
Docs = list[dict[str, Any]]


def span_doc(span_id: str, name: str, parent: str, **attrs: Any) -> dict[str, Any]:
    """One span as Data Prepper stores it (attribute dots written as '@')."""
    status = attrs.pop("status_code", 0)
    doc = {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "traceState": "",
        "parentSpanId": parent,
        "name": name,
        "kind": "SPAN_KIND_INTERNAL",
        "startTime": attrs.pop("start", "2026-01-05T10:00:00.000000000Z"),
        "endTime": attrs.pop("end", "2026-01-05T10:00:01.250000000Z"),
        "durationInNanos": 1_250_000_000,
        "serviceName": "triage-agent",
        "events": [],
        "links": [],
        "droppedAttributesCount": 0,
        "traceGroup": "invoke_agent triage",
        "traceGroupFields.endTime": "2026-01-05T10:00:03.000000000Z",
        "traceGroupFields.statusCode": 0,
        "traceGroupFields.durationInNanos": 3_000_000_000,
        "resource.attributes.service@name": "triage-agent",
        "status.code": status,
    }
    for key, value in attrs.items():
        doc["span.attributes." + key.replace("__", "@")] = value
    return doc


TRACE: Docs = [
    span_doc(
        "a1",
        "invoke_agent triage",
        "00f067aa0ba902b7",
        gen_ai__operation__name="invoke_agent",
        agent_health__run_id="run-42",
        start="2026-01-05T10:00:00.000000000Z",
        end="2026-01-05T10:00:03.000000000Z",
    ),
    span_doc(
        "c1",
        "chat gpt-4o-mini",
        "a1",
        gen_ai__operation__name="chat",
        gen_ai__request__model="gpt-4o-mini",
        gen_ai__usage__input_tokens=120,
        gen_ai__usage__output_tokens="30",
    ),
    span_doc(
        "t1",
        "execute_tool search_logs",
        "a1",
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name="search_logs",
        status_code=2,
    ),
    span_doc(
        "c2",
        "chat gpt-4o-mini",
        "a1",
        gen_ai__request__model="gpt-4o-mini",
        gen_ai__usage__input_tokens=200,
        gen_ai__usage__output_tokens=50,
        start="2026-01-05T10:00:02.123456789Z",
        end="2026-01-05T10:00:02.623456789Z",
    ),
]


@dataclass
class FakeOpenSearch:
    """Answers each ``_search`` with the next page of ``answers`` (the last one repeats)."""

    url: str = ""
    answers: list[Callable[[dict[str, Any]], Docs]] = field(default_factory=list)
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def search(self, request: web.Request) -> web.Response:
        body = json.loads(await request.text() or "{}")
        self.requests.append(
            {
                "method": request.method,
                "index": request.match_info["index"],
                "body": body,
                "auth": request.headers.get("Authorization"),
            }
        )
        if self.status != 200:
            return web.json_response(
                {"error": {"type": "security_exception", "reason": "no"}, "status": self.status},
                status=self.status,
            )
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        docs = answer(body)
        return web.json_response(
            {
                "took": 4,
                "timed_out": False,
                "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                "hits": {
                    "total": {"value": len(docs), "relation": "eq"},
                    "max_score": 1.0 if docs else None,
                    "hits": [
                        {
                            "_index": "otel-v1-apm-span-000001",
                            "_id": d.get("spanId", str(i)),
                            "_score": 1.0,
                            "_source": d,
                        }
                        for i, d in enumerate(docs)
                    ],
                },
            }
        )


@contextlib.asynccontextmanager
async def serving(*answers: Callable[[dict[str, Any]], Docs]) -> AsyncIterator[FakeOpenSearch]:
    """A :class:`FakeOpenSearch` on a free loopback port (default answer: :data:`TRACE`)."""
    server = FakeOpenSearch(answers=list(answers) or [lambda body: TRACE])
    app = web.Application()
    app.router.add_route("*", "/{index}/_search", server.search)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


def queried(body: dict[str, Any], docs: Docs) -> Docs:
    """``docs`` moved into the trace and run the query asks for (as the agent would send)."""
    terms = [c["term"] for c in body["query"]["bool"]["should"]]
    trace_id = next(t["traceId"] for t in terms if "traceId" in t)
    run_id = next(v for t in terms for k, v in t.items() if k.endswith("run_id"))
    run_key = "span.attributes.agent_health@run_id"
    return [
        {**doc, "traceId": trace_id} | ({run_key: run_id} if run_key in doc else {}) for doc in docs
    ]


def cfg(url: str, **kw: Any) -> tracesconfig.OpenSearchSettings:
    return tracesconfig.OpenSearchSettings(
        hosts=[url], **{"wait_seconds": 2, "poll_seconds": 0.05, **kw}
    )
