"""TLS for httpx clients that may never speak it.

httpx makes a verifying context, loading its CA bundle, for each client or transport it
builds: 22 ms of CPU each on these machines, paid again by every cell that makes a client.
A client of a plain-http URL reached directly, or of a Unix socket, never uses it; it gets
:func:`unused` instead.
"""

from __future__ import annotations

import os
import ssl

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
"""For an http:// URL, httpx speaks TLS only to a proxy these name."""


def for_url(url: str) -> ssl.SSLContext | bool:
    """httpx's own TLS (its CA bundle, ``SSL_CERT_FILE``) where TLS may be spoken; else
    :func:`unused`."""
    if url.startswith("https:") or any(os.environ.get(v) for v in PROXY_VARIABLES):
        return True
    return unused()


def unused() -> ssl.SSLContext:
    """A context that verifies and trusts no CA: for connections that never speak TLS (it
    could accept no certificate, were one ever offered)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
