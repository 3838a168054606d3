"""The ConfigMap backend against a small fake Kubernetes API served on loopback by aiohttp.

The fake implements what the backend uses of ``/api/v1/namespaces/NS/configmaps``: GET,
POST (409 AlreadyExists) and a JSON merge PATCH (404 when the ConfigMap is gone), bearer-token
auth, and the 1 MiB size validation (422).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_health.ledger import audit, backends, chain, configmap, errors, records, store
from aiohttp import web

TOKEN = "t0ken"
KEY = b"c" * 32
LIMIT = 1024 * 1024
_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
            "message": message, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


@dataclass
class FakeKube:
    """ConfigMaps by (namespace, name), with a resourceVersion counter."""

    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    version: int = 0
    conflicts: int = 0
    rival_writes: int = 0  # PATCHes to answer by first writing as a rival (a concurrent writer)
    methods: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=8 * LIMIT)
        base = "/api/v1/namespaces/{ns}/configmaps"
        app.router.add_get(base + "/{name}", self.get)
        app.router.add_post(base, self.post)
        app.router.add_patch(base + "/{name}", self.patch)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.methods.append(request.method)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return status(403, "Forbidden", "configmaps is forbidden")
        response: web.StreamResponse = await handler(request)
        return response

    def _invalid(self, body: dict[str, Any]) -> web.Response | None:
        binary = body.get("binaryData") or {}
        total = sum(len(v.encode()) for v in (body.get("data") or {}).values())
        for key, value in binary.items():
            if not _KEY_RE.match(key):
                return status(422, "Invalid", f"bad key {key}")
            total += len(base64.b64decode(value, validate=True))
        if total > LIMIT:
            return status(422, "Invalid", 'ConfigMap "" is invalid: []: Too long')
        return None

    def _save(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"] = {**body["metadata"], "namespace": ns,
                            "resourceVersion": str(self.version)}  # fmt: skip
        self.objects[(ns, name)] = body
        return body

    async def get(self, request: web.Request) -> web.Response:
        found = self.objects.get((request.match_info["ns"], request.match_info["name"]))
        if found is None:
            return status(404, "NotFound", "configmaps not found")
        return web.json_response(found)

    async def post(self, request: web.Request) -> web.Response:
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.objects:
            self.conflicts += 1
            return status(409, "AlreadyExists", f"configmaps {name!r} already exists")
        return self._invalid(body) or web.json_response(self._save(ns, name, body), status=201)

    async def patch(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if request.content_type != "application/merge-patch+json":
            return status(415, "UnsupportedMediaType", request.content_type)
        patch = await request.json()
        current = self.objects.get((ns, name))
        if current is None:
            return status(404, "NotFound", "configmaps not found")
        if self.rival_writes:
            self.rival_writes -= 1
            rival = json.loads(json.dumps(current))
            rival.setdefault("binaryData", {})[f"rival.jsonl.gz.{self.version:04d}"] = (
                base64.b64encode(gzip.compress(b"rival\n")).decode()
            )
            current = self._save(ns, name, rival)
        merged = json.loads(json.dumps(current))
        for key, value in (patch.get("binaryData") or {}).items():
            merged.setdefault("binaryData", {})[key] = value
        return self._invalid(merged) or web.json_response(self._save(ns, name, merged))

    def cell_keys(self, cell: str) -> list[str]:
        data = self.objects[("agents", "ledger")].get("binaryData") or {}
        return sorted(k for k in data if k.startswith(f"{cell}.jsonl.gz."))


@pytest.fixture
async def kube() -> AsyncIterator[tuple[FakeKube, str]]:
    fake = FakeKube()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield fake, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def options(api: str, token: str = TOKEN, **more: Any) -> store.Options:
    return store.Options(kube_api_url=api, kube_token=token, **more)


async def test_round_trip_through_the_api(kube: tuple[FakeKube, str]) -> None:
    fake, api = kube
    backend = backends.from_url("configmap://agents/ledger", options(api))
    assert backend.url == "configmap://agents/ledger"
    assert await backend.cells() == []
    assert await backend.read("c1") == []
    writer = chain.Writer(backend, "c1", KEY)
    await writer.append(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    await writer.append(records.SignalRecord(signal={"ok": True}))
    await writer.append(records.CellEnd(status="passed"))
    await backend.append("c2", ["x"])
    assert await backend.cells() == ["c1", "c2"]
    lines = await backend.read("c1")
    assert chain.verify(lines, KEY).ok
    stored = fake.objects[("agents", "ledger")]
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "agent-health"}
    assert fake.cell_keys("c1") == ["c1.jsonl.gz.0000"]
    raw = gzip.decompress(base64.b64decode(stored["binaryData"]["c1.jsonl.gz.0000"]))
    assert raw.decode().split("\n")[:-1] == lines
    assert fake.methods.count("POST") == 1
    await backend.close()

    report = await audit.verify_url("configmap://agents/ledger", KEY, options=options(api),
                                    complete=False)  # fmt: skip
    assert [c.cell for c in report.cells] == ["c1", "c2"]
    assert report.cells[0].result.ok


async def test_cells_are_chunked_across_keys(kube: tuple[FakeKube, str]) -> None:
    fake, api = kube
    backend = configmap.ConfigMapBackend("agents", "ledger", options(api), chunk_bytes=64)
    expected = [f"line-{i:03d}-" + "z" * 20 for i in range(12)]
    for line in expected:
        await backend.append("c", [line])
    assert len(fake.cell_keys("c")) > 3
    assert await backend.read("c") == expected
    await backend.close()


async def test_a_rival_writer_between_the_read_and_the_write_is_kept_without_a_retry(
    kube: tuple[FakeKube, str],
) -> None:
    fake, api = kube
    backend = backends.from_url("configmap://agents/ledger", options(api))
    await backend.append("c", ["first"])
    fake.rival_writes = 3
    await backend.append("c", ["second"])
    await backend.append("c", ["third"])
    assert fake.conflicts == 0
    assert fake.methods.count("PATCH") == 2  # one write per append, whatever the rivals do
    assert await backend.read("c") == ["first", "second", "third"]
    rivals = [k for k in fake.objects[("agents", "ledger")]["binaryData"] if k.startswith("rival")]
    assert len(rivals) == 2
    await backend.close()


async def test_a_write_the_api_server_finds_too_large_is_the_overflow_error(
    kube: tuple[FakeKube, str],
) -> None:
    # Two cells' appends can pass the size check each and exceed the limit together: the
    # API server refuses the second (422), and it is LedgerTooLarge all the same.
    _, api = kube
    backend = backends.from_url(
        "configmap://agents/ledger", options(api, configmap_max_bytes=4 * LIMIT)
    )
    await backend.append("c", ["small"])
    big = [os.urandom(300 * 1024).hex() for _ in range(4)]
    with pytest.raises(errors.LedgerTooLarge, match="refused the write as over the ConfigMap"):
        await backend.append("c", big)
    assert await backend.read("c") == ["small"]
    await backend.close()


async def test_concurrent_writers_of_one_configmap(kube: tuple[FakeKube, str]) -> None:
    # Racing writers patch their own cells' chunks; the create race is a 409, read again.
    _, api = kube
    writers = [backends.from_url("configmap://agents/ledger", options(api)) for _ in range(4)]

    async def write(index: int, backend: store.Backend) -> None:
        for n in range(5):
            await backend.append(f"cell-{index}", [f"{index}:{n}"])

    await asyncio.gather(*(write(i, b) for i, b in enumerate(writers)))
    for index in range(4):
        assert await writers[0].read(f"cell-{index}") == [f"{index}:{n}" for n in range(5)]
    for backend in writers:
        await backend.close()


async def test_overflow_is_an_explicit_error_and_nothing_is_truncated(
    kube: tuple[FakeKube, str],
) -> None:
    fake, api = kube
    backend = backends.from_url("configmap://agents/ledger", options(api))
    await backend.append("c", ["small"])
    before = fake.version
    # Random hex compresses to about half: 2.4 MiB of it gzips well past 1 MiB.
    big = [os.urandom(300 * 1024).hex() for _ in range(4)]
    with pytest.raises(errors.LedgerTooLarge) as info:
        await backend.append("c", big)
    message = str(info.value)
    assert "configmap://agents/ledger would hold" in message
    assert "over the ConfigMap limit of 1048576 bytes" in message
    assert "use an object store ledger (s3://BUCKET/PREFIX" in message
    assert fake.version == before
    assert await backend.read("c") == ["small"]
    await backend.close()


async def test_forbidden_names_the_permission(kube: tuple[FakeKube, str]) -> None:
    _, api = kube
    backend = backends.from_url("configmap://agents/ledger", options(api, token="wrong"))
    with pytest.raises(errors.BackendError, match=r"refused to read the ConfigMap \(403.*grant"):
        await backend.read("c")
    await backend.close()


async def test_token_from_the_service_account_mount(
    kube: tuple[FakeKube, str], tmp_path: Path
) -> None:
    _, api = kube
    (tmp_path / "token").write_text(TOKEN + "\n")
    mounted = store.Options(kube_api_url=api, kube_service_account_dir=str(tmp_path))
    backend = backends.from_url("configmap://agents/ledger", mounted)
    await backend.append("c", ["via the mounted token"])
    assert await backend.read("c") == ["via the mounted token"]
    await backend.close()

    unmounted = store.Options(kube_api_url=api, kube_service_account_dir=str(tmp_path / "no"))
    with pytest.raises(errors.BackendConfigError, match=r"no Kubernetes token given and .*token"):
        await backends.from_url("configmap://agents/ledger", unmounted).cells()


async def test_unreachable_api_is_a_backend_error() -> None:
    backend = backends.from_url("configmap://agents/ledger", options("http://127.0.0.1:9"))
    with pytest.raises(errors.BackendError, match="cannot reach the Kubernetes API"):
        await backend.cells()
    await backend.close()


async def test_outside_a_cluster_without_an_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = backends.from_url("configmap://agents/ledger")
    with pytest.raises(errors.BackendConfigError, match="not running in a cluster"):
        await backend.cells()


@pytest.mark.parametrize("url", ["configmap://agents", "configmap://a/b/c", "configmap:///x"])
def test_bad_configmap_urls(url: str) -> None:
    with pytest.raises(errors.BackendConfigError, match="must be configmap://NAMESPACE/NAME"):
        backends.from_url(url)


async def test_store_cells_writes_many_whole_cells_in_one_patch(kube: tuple[FakeKube, str]) -> None:
    """The operator's write: whole cells, many per merge patch, each chunked as an append
    would; storing a cell again with the same lines writes nothing, other lines are refused."""
    fake, api = kube
    backend = configmap.ConfigMapBackend("agents", "ledger", options(api), chunk_bytes=64)
    await backend.append("first", ["made-by-an-append"])  # creates the ConfigMap
    fake.methods.clear()
    cells = {f"c{n}": [f"c{n}-line-{i:02d}-" + "z" * 20 for i in range(6)] for n in range(3)}
    await backend.store_cells(cells)
    assert fake.methods == ["GET", "PATCH"]  # three cells, one write
    for cell, lines in cells.items():
        assert await backend.read(cell) == lines
        assert len(fake.cell_keys(cell)) > 1  # chunked at 64 bytes of whole lines
    fake.methods.clear()
    await backend.store_cells({"c1": cells["c1"]})  # again (an operator restarted): no write
    assert fake.methods == ["GET"]
    with pytest.raises(errors.BackendError, match="cell c1 already holds other records"):
        await backend.store_cells({"c1": ["other"], "c9": ["new"]})
    assert await backend.read("c9") == []  # nothing of a refused batch was written
    await backend.close()


async def test_store_cells_over_the_limit_writes_nothing(kube: tuple[FakeKube, str]) -> None:
    fake, api = kube
    backend = configmap.ConfigMapBackend("agents", "ledger", options(api))
    await backend.store_cells({"small": ["s"]})
    before = fake.version
    big = {f"big{n}": [os.urandom(300 * 1024).hex()] for n in range(4)}
    with pytest.raises(errors.LedgerTooLarge, match="over the ConfigMap limit"):
        await backend.store_cells(big)
    assert fake.version == before
    assert await backend.cells() == ["small"]
    await backend.close()
