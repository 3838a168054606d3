"""Which httpx clients load the CA bundle: those that may speak TLS, and no other."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from agent_health import tls
from agent_health.engine.controller import cell
from aiohttp import web


def test_a_plain_http_url_gets_a_context_that_trusts_no_ca(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in tls.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    context = tls.for_url("http://127.0.0.1:15000")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0


def test_https_or_a_proxy_keeps_httpx_own_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in tls.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tls.for_url("https://judge.example") is True
    monkeypatch.setenv("HTTP_PROXY", "https://proxy.example:3128")
    assert tls.for_url("http://127.0.0.1:15000") is True


async def test_a_unix_socket_transport_needs_no_ca_to_carry_requests(tmp_path: Path) -> None:
    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"assigned": True})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = str(tmp_path / "admin.sock")
    await web.UnixSite(runner, socket).start()
    try:
        assert cell.through(None) is None
        async with httpx.AsyncClient(transport=cell.through(socket)) as client:
            answer = await client.get("http://gateway/healthz")
        assert answer.json() == {"assigned": True}
    finally:
        await runner.cleanup()
