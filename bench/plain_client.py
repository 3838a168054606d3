"""The baseline of the agent-call benchmarks: no harness at all, just a plain threaded client.

    python bench/plain_client.py URL N J

Sends N REST protocol v1 requests ("ping") to URL from J threads, each thread on its own
keep-alive ``http.client`` connection (the standard library, the leanest client a user could
write), checks every answer's output is "pong", and prints ``N passed``: what a script
without any harness costs for the same work as the agent-health suite it is compared with.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit


def main(argv: list[str]) -> int:
    url, n, j = argv[0], int(argv[1]), int(argv[2])
    parts = urlsplit(url)
    local = threading.local()

    def call(i: int) -> bool:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        body = json.dumps({"prompt": "ping", "context": [], "run_id": f"plain-{i}", "env": {}})
        conn.request("POST", parts.path, body, {"content-type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status == 200 and json.loads(data)["output"] == "pong"

    with ThreadPoolExecutor(j) as pool:
        passed = sum(pool.map(call, range(n)))
    print(f"{passed} passed")
    return 0 if passed == n else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
