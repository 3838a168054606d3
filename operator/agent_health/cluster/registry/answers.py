"""What a registry's answers mean: the manifest types a node can run, the type a manifest
declares, how long a registry asks to be left alone, and its authentication challenge.

A node runs an image manifest, or an index (manifest list) of them, in the OCI or Docker v2
format; anything else — a schema 1 manifest, a chart or other artifact — would fail at
every pull, so pinning refuses it with the image's name. A ``Content-Type`` registries use
for anything (``application/json``) names no type: the manifest's own ``mediaType`` does.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import re

from agent_health.cluster import errors

MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MEDIA_TYPES)
SCHEMA_1 = "application/vnd.docker.distribution.manifest.v1+json"
_GENERIC = frozenset({"", "application/json", "application/octet-stream", "text/plain"})
_LONGEST_WAIT = 3600.0
_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)=(?:"([^"]*)"|([^,\s]*))')


def media_type(content_type: str | None) -> str | None:
    """A ``Content-Type`` that names a manifest type, or ``None`` for a generic one."""
    found = (content_type or "").split(";")[0].strip().lower()
    return None if found in _GENERIC else found


def declared(body: bytes) -> str | None:
    """The media type a manifest declares in its own bytes (schema 1 declares none)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    if document.get("schemaVersion") == 1:
        return SCHEMA_1
    found = document.get("mediaType")
    return found if isinstance(found, str) and found else None


def check_media_type(image: str, registry: str, found: str) -> None:
    """Refuse a manifest no node could run, naming the image and what to do."""
    if found not in MEDIA_TYPES:
        raise errors.PermanentRegistryError(
            f"image {image}: registry {registry} serves it as {found!r}, which is not a "
            f"container image a node can run (an OCI or Docker v2 image manifest or index); "
            f"push it as an image (e.g. with buildah, docker or skopeo) or name an image, not "
            f"another kind of artifact"
        )


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` value in seconds (a number, or an HTTP date), at most an hour."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), _LONGEST_WAIT)


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="..."`` → ``("bearer", {"realm": ..., "service": ...})``."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m[1].lower(): m[2] if m[2] is not None else m[3] for m in _PARAM.finditer(rest)}
    return scheme.lower(), params
