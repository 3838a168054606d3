"""The baselines of the agent-call benchmarks: no harness at all, just a plain client.

    python bench/plain_client.py URL N J [--aiohttp [--imports]]

Sends N REST protocol v1 requests ("ping") to URL, J at a time, checks every answer's output
is "pong", and prints ``N passed in S s`` (S: the requests alone, after the imports): what a
script without any harness costs for the same work as the agent-health suite it is compared
with.

* By default J threads, each on its own keep-alive ``http.client`` connection (the standard
  library, the leanest client a user could write): the baseline.
* ``--aiohttp``: one asyncio loop and one aiohttp session, J requests in flight — the client
  the built-in connectors use, with nothing around it. A diagnostic, not a baseline: it shows
  what importing aiohttp and driving it from one event loop cost before any harness work.
* ``--aiohttp --imports``: the same, after importing what agent-health is built on and a
  bare script is not — pydantic's models and fields, and rich's console and tables — and
  nothing else: where any harness made of those two libraries starts, none of its own code
  run (the calls row of ``defaults.py`` prints it for reference).
"""

from __future__ import annotations

import json
import sys
import time
from urllib.parse import urlsplit


def _body(i: int) -> str:
    return json.dumps({"prompt": "ping", "context": [], "run_id": f"plain-{i}", "env": {}})


def threads(url: str, n: int, j: int) -> tuple[int, float]:
    import http.client
    import threading
    from concurrent.futures import ThreadPoolExecutor

    parts = urlsplit(url)
    local = threading.local()

    def call(i: int) -> bool:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("POST", parts.path, _body(i), {"content-type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status == 200 and json.loads(data)["output"] == "pong"

    started = time.perf_counter()
    with ThreadPoolExecutor(j) as pool:
        passed = sum(pool.map(call, range(n)))
    return passed, time.perf_counter() - started


def with_aiohttp(url: str, n: int, j: int) -> tuple[int, float]:
    import asyncio

    import aiohttp

    async def main() -> int:
        slots = asyncio.Semaphore(j)
        headers = {"content-type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def call(i: int) -> bool:
                async with slots, session.post(url, data=_body(i), headers=headers) as response:
                    data = await response.read()
                    return response.status == 200 and json.loads(data)["output"] == "pong"

            return sum(await asyncio.gather(*(call(i) for i in range(n))))

    started = time.perf_counter()
    passed = asyncio.run(main())
    return passed, time.perf_counter() - started


def main(argv: list[str]) -> int:
    url, n, j, flags = argv[0], int(argv[1]), int(argv[2]), set(argv[3:])
    if "--imports" in flags:
        # What a harness on pydantic and rich imports before its first call, and no more.
        from pydantic import BaseModel, Field  # noqa: F401
        from rich.console import Console  # noqa: F401
        from rich.table import Table  # noqa: F401
    client = with_aiohttp if "--aiohttp" in flags else threads
    passed, seconds = client(url, n, j)
    print(f"{passed} passed in {seconds:.3f} s")
    return 0 if passed == n else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
