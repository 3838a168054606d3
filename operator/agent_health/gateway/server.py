"""Start and stop every listener of a gateway: one per route, plus the admin listener.

>>> import asyncio
>>> async def demo() -> None:
...     settings = config.build({"routes": [config.parse_route(
...         "principal=controller,listen=127.0.0.1:0,upstream=http://127.0.0.1:9")]})
...     async with Gateway(settings) as gateway:
...         assert gateway.url("controller", "target").startswith("http://127.0.0.1:")
>>> asyncio.run(demo())

Shutdown is graceful: listeners stop accepting, exchanges in flight get ``grace`` seconds to
finish (then are cut and recorded as such), and the ledger is flushed before the backend closes.
A pooled cell's gateway takes its cell late (:meth:`Gateway.assign`, :mod:`.pooled`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import stat
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from agent_health import ledger
from agent_health.gateway import admin, config, errors, guard, otlp, pooled, proxy, recorder
from agent_health.ledger import assignment, backends, chain, podlog, records, spool, store

log = logging.getLogger("agent_health.gateway")


class Gateway:
    """Every listener of one gateway, started and stopped together.

    A recorder passed in stays open after :meth:`stop` (it is flushed; its owner closes it);
    one made by :meth:`from_settings` is closed with the gateway.
    """

    def __init__(
        self,
        settings: config.Settings,
        *,
        tokens: config.Tokens | None = None,
        record: recorder.Recorder | None = None,
        owns_recorder: bool = False,
        sandbox_key: bytes | None = None,
    ) -> None:
        """``sandbox_key``: a pooled gateway's, which unwraps the cell key :meth:`assign` gets."""
        self.settings = settings
        self.gate = pooled.Gate() if sandbox_key is not None else None
        self._sandbox_key = sandbox_key
        self.owns_recorder = owns_recorder
        self.tokens = tokens or config.Tokens({})
        self.recorder = record
        self.refusals = guard.Refusals(record, settings.max_refused_records)
        self.spans: otlp.Collector | None = None
        if settings.otlp_listen is not None:
            self.spans = otlp.Collector(
                otlp.Limits(
                    max_body_bytes=settings.otlp_max_bytes,
                    max_spans=settings.otlp_max_spans,
                    body_timeout=settings.body_timeout,
                ),
                on_kept=record.note if record is not None else None,
            )
        self.stopping = False
        self._listeners: list[guard.Listener] = []
        self._handed: list[tuple[guard.Listener, Callable[[], guard.Handler]]] = []
        self._runners: list[web.BaseRunner] = []
        self._urls: dict[tuple[str, str], str] = {}
        self._admin_url: str | None = None
        self._otlp_url: str | None = None
        self._health_url: str | None = None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def from_settings(cls, settings: config.Settings) -> Gateway:
        """Read the key and token files and open the ledger the settings name (a pooled
        gateway reads its sandbox's key; its cell's key and ledger come with its assignment)."""
        tokens = await asyncio.to_thread(config.Tokens.load, settings.token_files)
        if settings.assignment is not None:
            sandbox = pooled.sandbox_key(settings)
            return cls(settings, tokens=tokens, owns_recorder=True, sandbox_key=sandbox)
        record = None
        try:
            if settings.ledger_url is not None or settings.ledger_log:
                key = await asyncio.to_thread(chain.load_key, settings.key_file)
                record = _recorder(settings, await _backend(settings), key)
        except ledger.LedgerError as err:
            raise errors.GatewayConfigError(str(err)) from err
        return cls(settings, tokens=tokens, record=record, owns_recorder=True)

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the gateway's own cell (if any), then every listener."""
        s = self.settings
        await self._open_cell()
        self._session = upstream_session(s)
        try:
            for route in s.routes:
                name = f"{route.principal}→{route.to}"
                listener = self._gated(name, functools.partial(self._proxy, route))
                self._urls[(route.principal, route.to)] = await self._listen(listener, route.listen)
            if s.admin is not None:
                listener = self._gated("admin", lambda: admin.Admin(self), "admin")
                self._admin_url = await self._listen(listener, s.admin)
            if s.otlp_listen is not None and (spans := self.spans) is not None:
                listener = self._gated("otlp", lambda: otlp.Receiver(spans, self.tokens), "otlp")
                self._otlp_url = await self._listen(listener, s.otlp_listen)
            if s.health is not None:
                listener = guard.Listener(admin.Admin(self, records=False), s, "health")
                self._health_url = await self._listen(listener, s.health)
        except BaseException:
            await self.stop()
            raise

    def _proxy(self, route: config.Route) -> proxy.Proxy:
        assert self._session is not None
        s = self.settings
        return proxy.Proxy(
            route, s, self._session, self.tokens, self.recorder, self.refusals, self.spans
        )

    def _gated(
        self, name: str, make: Callable[[], guard.Handler], kind: str = "route"
    ) -> guard.Listener:
        """The listener ``name``: serving ``handler``, or, while a pooled gateway waits for its
        cell, its gate (the admin listener's ``/healthz`` still answered)."""
        options = otlp.SERVER_OPTIONS if kind == "otlp" else {}
        if kind == "route":
            # A proxy passes a request body as the caller sent it: never inflated (the
            # upstream would get inflated bytes still labelled gzip, and the record would hash
            # bytes nobody sent), never refused for an encoding aiohttp cannot inflate.
            options = {"auto_decompress": False}
        if self.gate is None:
            return guard.Listener(make(), self.settings, name, **options)
        health = make() if kind == "admin" else None
        gated = self.gate.handler(name, otlp=kind == "otlp", health=health)
        listener = guard.Listener(gated, self.settings, name, **options)
        self._handed.append((listener, make))
        return listener

    async def _open_cell(self) -> None:
        s = self.settings
        if self.recorder is None or s.cell is None:
            return
        meta = records.CellMeta(
            test_id=s.test_id or s.cell,
            repeat=s.repeat,
            run_id=s.run_id or s.cell,
            images=s.images,
            cell=s.cell,
            attempt=s.attempt,
            agent=s.agent,
        )
        try:
            await self.recorder.open_cell(s.cell, meta)
        except ledger.LedgerError as err:
            raise errors.RecordingError(f"cannot open ledger cell {s.cell}: {err}") from err

    async def assign(self, assigned: assignment.Assignment) -> None:
        """Take a pooled gateway's cell: its identity and ledger key, its cell-meta record,
        then every listener's real handler in place of the gate."""
        if self.gate is None or self._sandbox_key is None or self.gate.assigned:
            raise errors.GatewayConfigError("only a pooled gateway takes a cell, and only once")
        settings = pooled.cell_settings(self.settings, assigned)
        key = pooled.cell_key(self.settings, self._sandbox_key, assigned)
        try:
            stored = settings.ledger_url is not None or settings.ledger_log
            backend = await _backend(settings) if stored else None
        except ledger.LedgerError as err:
            raise errors.GatewayConfigError(f"{self.settings.assignment}: {err}") from err
        self.settings = settings
        if backend is not None:
            self.recorder = _recorder(settings, backend, key)
            self.refusals = guard.Refusals(self.recorder, settings.max_refused_records)
            if self.spans is not None:
                self.spans.on_kept = self.recorder.note
        await self._open_cell()
        for listener, make in self._handed:
            listener.serve(make())
        self.gate.assigned = True

    async def _listen(self, listener: guard.Listener, listen: str) -> str:
        """Start one listener; its URL (``unix:/PATH`` for a Unix socket)."""
        runner = web.ServerRunner(listener, shutdown_timeout=self.settings.grace)
        await runner.setup()
        self._listeners.append(listener)
        self._runners.append(runner)
        path = config.socket_path(listen)
        try:
            if path is not None:
                # A socket left by our previous instance (the kubelet restarted us): only the
                # containers that mount its directory could have made it, so replace it.
                await asyncio.to_thread(_remove_stale_socket, path)
                await web.UnixSite(runner, path).start()
                return listen
            host, port = config.split_listen(listen)
            await web.TCPSite(runner, host, port).start()
        except OSError as err:
            raise errors.GatewayConfigError(
                f"cannot listen on {listen}: {err.strerror or err}"
            ) from err
        bound: Any = runner.addresses[0]
        return f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}"

    def url(self, principal: str, to: str = "target") -> str:
        """The base URL of the listener for calls from ``principal`` to ``to``."""
        try:
            return self._urls[(principal, to)]
        except KeyError:
            raise errors.GatewayConfigError(
                f"no route from {principal} to {to}; routes: "
                + ", ".join(f"{p}→{t}" for p, t in self._urls)
            ) from None

    @property
    def listeners(self) -> dict[tuple[str, str], str]:
        """``(principal, to)`` → base URL of every route's listener."""
        return dict(self._urls)

    @property
    def admin_url(self) -> str | None:
        return self._admin_url

    @property
    def otlp_url(self) -> str | None:
        """The OTLP/HTTP receiver's base URL (the target's ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        return self._otlp_url

    @property
    def health_url(self) -> str | None:
        return self._health_url

    async def stop(self) -> None:
        """Stop accepting, let exchanges finish (``grace``), flush the ledger, close."""
        self.stopping = True
        runners, self._runners = self._runners, []
        # Stop every listener first, so no new call starts while others drain.
        for runner in runners:
            for site in list(runner.sites):
                await site.stop()
        await asyncio.gather(*(runner.cleanup() for runner in runners))
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.recorder is not None and self.owns_recorder:
            await self.recorder.close(wait=self.settings.grace)
        elif self.recorder is not None:
            await self.recorder.flush_all(wait=self.settings.grace)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the gateway is healthy, and what ``/healthz`` reports."""
        failures = self.recorder.failures if self.recorder is not None else []
        ok = not self.stopping and not failures
        return ok, {
            "ok": ok,
            "stopping": self.stopping,
            "routes": [{"principal": p, "to": t, "url": url} for (p, t), url in self._urls.items()],
            "ledger": self.recorder.backend.url if self.recorder is not None else None,
            "exchanges_recorded": self.recorder.recorded if self.recorder is not None else 0,
            "exchanges_unrouted": self.recorder.unrouted if self.recorder is not None else 0,
            "spans_after_cell_end": self.recorder.spans_late if self.recorder is not None else 0,
            "spans_past_cell_cap": (
                self.recorder.spans_unrecorded if self.recorder is not None else 0
            ),
            "exchanges_dropped": (
                sum(map(self.recorder.dropped, self.recorder.cells))
                if self.recorder is not None
                else 0
            ),
            **self.refusals.summary(),
            **(self.gate.summary() if self.gate is not None else {}),
            **(self.spans.summary() if self.spans is not None else {}),
            "refused_connections": {
                listener.name: listener.refused_connections for listener in self._listeners
            },
            "calls_closed_unhandled": {
                listener.name: listener.dropped_calls for listener in self._listeners
            },
            "ledger_failures": failures[-10:],
        }


def upstream_session(settings: config.Settings) -> aiohttp.ClientSession:
    """The client every listener forwards with: the settings' timeouts, and bytes, headers and
    cookies passed exactly as the caller and the upstream sent them."""
    s = settings
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60),
        timeout=aiohttp.ClientTimeout(
            total=s.total_timeout, connect=s.connect_timeout, sock_read=s.idle_timeout
        ),
        skip_auto_headers=proxy.SKIP_AUTO_HEADERS,  # forward exactly what the caller sent
        auto_decompress=False,  # bytes pass through as the upstream sent them
        cookie_jar=aiohttp.DummyCookieJar(),  # never carry one caller's cookies to another
        trust_env=False,
        read_bufsize=proxy.CHUNK_BYTES // 2,
    )


class RouteListener:
    """One route served on its own, into any :class:`~.recorder.Sink` (``None``: recorded
    nowhere): how a local run puts a peer — an MCP server of its config, a test's mock —
    behind the same proxy a cell's gateway runs, its calls recorded in the test's cell.

    ``route.listen`` is usually ``127.0.0.1:0`` (a free port); :attr:`url` is where it is.
    """

    def __init__(
        self,
        route: config.Route,
        sink: recorder.Sink | None = None,
        settings: config.Settings | None = None,
    ) -> None:
        self.route = route
        self.settings = settings or config.Settings(routes=(route,))
        self.sink = sink
        self.url: str | None = None
        self._runner: web.ServerRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        self._session = upstream_session(self.settings)
        handler = proxy.Proxy(
            self.route, self.settings, self._session, config.Tokens({}), self.sink
        )
        listener = guard.Listener(handler, self.settings, f"{self.route.principal}→{self.route.to}")
        self._runner = web.ServerRunner(listener, shutdown_timeout=self.settings.grace)
        await self._runner.setup()
        host, port = config.split_listen(self.route.listen)
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as err:
            await self.stop()
            raise errors.GatewayConfigError(
                f"cannot listen on {self.route.listen}: {err.strerror or err}"
            ) from err
        bound: Any = self._runner.addresses[0]
        self.url = f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> RouteListener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(settings: config.Settings, stop: asyncio.Event) -> None:
    """Run a gateway until ``stop`` is set (SIGTERM), then shut it down gracefully."""
    gateway = await Gateway.from_settings(settings)
    async with gateway:
        for (principal, to), url in gateway.listeners.items():
            log.info("gateway: %s → %s listening on %s", principal, to, url)
        if gateway.gate is not None:
            log.info("gateway: waiting for the sandbox's assignment in %s", settings.assignment)
            assigned = await pooled.wait(settings, stop)
            if assigned is not None:
                await gateway.assign(assigned)
                log.info(
                    "gateway: assigned cell %s (ledger cell %s, %s repeat %d); %d calls before "
                    "it were answered 503",
                    assigned.cell,
                    assigned.ledger_cell,
                    assigned.test_id,
                    assigned.repeat,
                    gateway.gate.refused,
                )
        await stop.wait()
        log.info("gateway: stopping (grace %ss)", settings.grace)


async def _backend(settings: config.Settings) -> store.Backend:
    """The ledger the settings name (it names one), spooled if asked."""
    backend: store.Backend
    if settings.ledger_log:  # to our log, for the operator to collect
        backend = podlog.LogBackend()
    else:
        assert settings.ledger_url is not None
        backend = await asyncio.to_thread(backends.from_url, settings.ledger_url)
        backends.require_client(settings.ledger_url)
    if settings.spool is not None:
        directory = await asyncio.to_thread(spool.check_directory, settings.spool)
        backend = spool.SpooledBackend(backend, directory, max_bytes=settings.spool_max_bytes)
    return backend


def _recorder(settings: config.Settings, backend: store.Backend, key: bytes) -> recorder.Recorder:
    caps = recorder.Caps(settings.max_cell_exchanges, settings.max_cell_bytes)
    return recorder.Recorder(backend, key, default_cell=settings.cell, caps=caps)


def _remove_stale_socket(path: str) -> None:
    """Remove a Unix socket at ``path``; anything else there is left, and listening fails."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        return
