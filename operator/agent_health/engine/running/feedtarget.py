"""Where a run's live feed goes: ``--serve URL``, else ``AGENT_HEALTH_SERVE``, checked before
anything runs (a URL it cannot stream to is a usage error).

Every run asks; only a run that streams loads the feed itself (:mod:`.livefeed`: its task
and the wire models the server reads, six pydantic models a run that streams nowhere never
makes).
"""

from __future__ import annotations

import os

ENV = "AGENT_HEALTH_SERVE"
TOKEN_ENV = "AGENT_HEALTH_SERVE_TOKEN"
"""A bearer token of the operate role, when the server is not on loopback (never a flag:
flags show in process lists)."""


class FeedError(ValueError):
    """A server URL a run cannot stream to (a usage error, said before the run starts)."""


def url_from(flag: str | None) -> str | None:
    """The server a run streams to: ``--serve URL``, else ``AGENT_HEALTH_SERVE``;
    :class:`FeedError` when it is not an http(s) URL of a host."""
    from urllib.parse import urlsplit

    given = flag or os.environ.get(ENV) or None
    if not given:
        return None
    where = "--serve" if flag else ENV
    try:
        parts = urlsplit(given)
    except ValueError as err:
        raise FeedError(f"{where} {given!r}: not a URL ({err})") from err
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FeedError(
            f"{where} {given!r}: give the server's http(s) URL, e.g. http://127.0.0.1:8340"
        )
    if parts.username or parts.password:
        raise FeedError(f"{where}: no credential in the URL; put a token in ${TOKEN_ENV}")
    return given.rstrip("/")
