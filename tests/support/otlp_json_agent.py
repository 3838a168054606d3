"""A REST agent that exports OTLP JSON by hand (no OpenTelemetry package): its own trace's
spans, and spans that claim another trace or another run; answers with where it was told
to export (``$OTEL_EXPORTER_OTLP_ENDPOINT``) and what the receiver answered.

    python otlp_json_agent.py PORT [--quiet]    # --quiet: export nothing
    python otlp_json_agent.py PORT --hostile KIND

``--hostile``: the trace of an agent that called ``search_logs`` (its root, a model call and
the tool call), and one hostile span of its own trace beside them: ``start`` (a start time
of 400 digits), ``infinity`` (a token count of ``Infinity``) or ``negative`` (a negative token
count); nothing of another trace or run.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

QUIET = "--quiet" in sys.argv
HOSTILE = sys.argv[sys.argv.index("--hostile") + 1] if "--hostile" in sys.argv else None


def _span(trace_id: str, name: str, parent: str | None, **attributes: Any) -> dict[str, Any]:
    now = time.time_ns()
    return {
        "traceId": trace_id,
        "spanId": secrets.token_hex(8),
        **({"parentSpanId": parent} if parent else {}),
        "name": name,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 1_000_000),
        "status": {"code": 1},
        "attributes": [
            {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
            for k, v in attributes.items()
        ],
    }


def _hostile(trace_id: str, root: dict[str, Any]) -> list[dict[str, Any]]:
    chat = _span(trace_id, "chat m", root["spanId"], **{"gen_ai.operation.name": "chat"})
    tool = _span(
        trace_id,
        "execute_tool search_logs",
        root["spanId"],
        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_logs"},
    )
    bad = _span(trace_id, "chat hostile", root["spanId"], **{"gen_ai.operation.name": "chat"})
    if HOSTILE == "start":
        bad["startTimeUnixNano"] = "9" * 400
    elif HOSTILE == "infinity":
        bad["attributes"].append(
            {"key": "gen_ai.usage.input_tokens", "value": {"doubleValue": "Infinity"}}
        )
    elif HOSTILE == "negative":
        bad["attributes"].append(
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "-1000000"}}
        )
    return [root, chat, tool, bad]


def _export(endpoint: str, traceparent: str, run_id: str) -> Any:
    _, trace_id, parent, _ = traceparent.split("-")
    root = _span(trace_id, "invoke_agent json", parent, **{"gen_ai.operation.name": "invoke_agent"})
    spans = (
        _hostile(trace_id, root)
        if HOSTILE
        else [
            root,
            _span(
                trace_id,
                "chat m",
                root["spanId"],
                **{
                    "gen_ai.operation.name": "chat",
                    "gen_ai.usage.input_tokens": 7,
                    "gen_ai.usage.output_tokens": 3,
                },
            ),
            # Another trace (no run of this receiver has it) and another run named in ours.
            _span(
                secrets.token_hex(16), "chat other-trace", None, **{"gen_ai.operation.name": "chat"}
            ),
            _span(
                trace_id, "chat other-run", root["spanId"], **{"agent_health.run_id": run_id + "x"}
            ),
        ]
    )
    body = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    request = urllib.request.Request(
        endpoint.rstrip("/") + "/v1/traces",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        return {"status": err.code}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._reply({"ok": True})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        answer = None
        if endpoint and not QUIET:
            answer = _export(endpoint, self.headers["traceparent"], body["run_id"])
        self._reply({"output": json.dumps({"endpoint": endpoint, "answer": answer})})

    def _reply(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
